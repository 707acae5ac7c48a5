"""JSON Schema (2020-12) turned into plain Python checks, for the keywords
:mod:`.input_schema` uses.

Why not ``jsonschema`` at run time: it walks the schema for every value and
costs 15 to 50 times what the structuring does (see
``benchmarks/validation.py``); a long conversation would keep the event loop
busy for tens of milliseconds per request. Here each (sub)schema becomes a
closure once, at import. The semantics are JSON Schema's, and the tests hold
this module against ``jsonschema`` on the same schemas and on many inputs.

A keyword this module does not know makes :func:`compile_schemas` raise, so
the definition cannot use one that would silently be ignored. Annotations
(``description``, ``examples``...) and ``x-`` members are ignored, as
validators do.

A check answers whether a value is valid. Given a list, it also appends one
:class:`Finding` per failed keyword, with the JSON path of the value that
failed it; without one it stops at the first failure (the fast path every
valid request takes).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import attrs

__all__ = ["MISSING", "CompiledSchema", "Finding", "PathStep", "compile_schemas", "json_equal"]

PathStep = str | int
"""One step of a JSON path: an object key or an array index."""

Path = tuple[PathStep, ...]
Report = list["Finding"] | None
Check = Callable[[Any, Report, Path], bool]

_REF_PREFIX: Final = "#/components/schemas/"

ANNOTATIONS: Final = frozenset(
    {"description", "title", "examples", "default", "writeOnly", "readOnly", "deprecated",
     "contentEncoding", "contentMediaType", "$comment"}
)
"""Keywords that describe a value and never change whether it is valid."""


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()
"""The value of a :class:`Finding` for a required member that is absent."""


@attrs.frozen
class Finding:
    """One keyword a value failed: where, which keyword, in which (sub)schema."""

    where: Path
    keyword: str
    schema: Mapping[str, Any] = attrs.field(repr=False)
    value: object = attrs.field(repr=False)


def json_equal(one: object, two: object) -> bool:
    """Equality as JSON Schema has it: ``1 == 1.0``, ``true != 1``."""
    if isinstance(one, bool) or isinstance(two, bool):
        return one is two
    if isinstance(one, list) and isinstance(two, list):
        return len(one) == len(two) and all(json_equal(a, b) for a, b in zip(one, two, strict=True))
    if isinstance(one, dict) and isinstance(two, dict):
        return one.keys() == two.keys() and all(json_equal(one[key], two[key]) for key in one)
    if isinstance(one, (list, dict)) or isinstance(two, (list, dict)):
        return False
    return bool(one == two)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_integer(value: object) -> bool:
    if isinstance(value, float):
        return value.is_integer()
    return isinstance(value, int) and not isinstance(value, bool)


_TYPES: Final[Mapping[str, Callable[[object], bool]]] = {
    "string": lambda value: isinstance(value, str),
    "integer": _is_integer,
    "number": _is_number,
    "boolean": lambda value: isinstance(value, bool),
    "object": lambda value: isinstance(value, dict),
    "array": lambda value: isinstance(value, list),
    "null": lambda value: value is None,
}
# The types one isinstance() can test (bool is a subclass of int, not of these).
_PLAIN_TYPES: Final[Mapping[str, type]] = {
    "string": str, "boolean": bool, "object": dict, "array": list, "null": type(None)
}


def _matcher(options: Sequence[object]) -> Callable[[object], bool]:
    """A test of JSON equality to any of ``options``, quick for strings."""
    strings = frozenset(option for option in options if isinstance(option, str))
    others = [option for option in options if not isinstance(option, str)]
    if not others:
        return lambda value: type(value) is str and value in strings
    return lambda value: (value in strings if type(value) is str else any(json_equal(value, o) for o in others))


class CompiledSchema:
    """One component of the definition, ready to check values."""

    def __init__(self, name: str, check: Check) -> None:
        self.name = name
        self._check = check

    def is_valid(self, value: object) -> bool:
        """Whether ``value`` is valid."""
        return self._check(value, None, ())

    def findings(self, value: object, where: Path = ()) -> list[Finding]:
        """Every failed keyword, for a value found at ``where``."""
        found: list[Finding] = []
        self._check(value, found, where)
        return found


class _Compiler:
    def __init__(self, components: Mapping[str, Mapping[str, Any]]) -> None:
        self.components = components
        self.compiled: dict[str, Check] = {}

    def component(self, name: str) -> Check:
        check = self.compiled.get(name)
        if check is None:
            if name not in self.components:
                raise ValueError(f"$ref to an unknown component: {name}")
            # A slot first, so that a component may refer to itself.
            slot: list[Check] = []
            self.compiled[name] = lambda value, report, where: slot[0](value, report, where)
            slot.append(self.schema(self.components[name]))
            check = self.compiled[name]
        return check

    def schema(self, schema: Mapping[str, Any]) -> Check:
        if not isinstance(schema, Mapping):
            raise TypeError(f"a schema must be an object, not {schema!r}")
        checks: list[Check] = []
        for keyword, argument in schema.items():
            if keyword in ANNOTATIONS or keyword.startswith("x-") or keyword in ("then", "else"):
                continue
            build = _KEYWORDS.get(keyword)
            if build is None:
                raise ValueError(f"unsupported JSON Schema keyword: {keyword}")
            checks.append(build(self, schema, argument))
        return _all(checks)


def _all(checks: Sequence[Check]) -> Check:
    if not checks:
        return lambda value, report, where: True
    if len(checks) == 1:
        return checks[0]

    def check(value: Any, report: Report, where: Path) -> bool:
        valid = True
        for each in checks:
            if not each(value, report, where):
                if report is None:
                    return False
                valid = False
        return valid

    return check


def _fail(report: Report, where: Path, keyword: str, schema: Mapping[str, Any], value: object) -> bool:
    if report is not None:
        report.append(Finding(where, keyword, schema, value))
    return False


Builder = Callable[[_Compiler, Mapping[str, Any], Any], Check]


def _type(compiler: _Compiler, schema: Mapping[str, Any], argument: Any) -> Check:
    names = [argument] if isinstance(argument, str) else list(argument)
    plain = tuple(_PLAIN_TYPES[name] for name in names if name in _PLAIN_TYPES)
    tests = [_TYPES[name] for name in names if name not in _PLAIN_TYPES]

    def check(value: Any, report: Report, where: Path) -> bool:
        if isinstance(value, plain) or any(test(value) for test in tests):
            return True
        return _fail(report, where, "type", schema, value)

    return check


def _enum(compiler: _Compiler, schema: Mapping[str, Any], argument: Any) -> Check:
    matches = _matcher(list(argument))

    def check(value: Any, report: Report, where: Path) -> bool:
        return matches(value) or _fail(report, where, "enum", schema, value)

    return check


def _const(compiler: _Compiler, schema: Mapping[str, Any], argument: Any) -> Check:
    matches = _matcher([argument])

    def check(value: Any, report: Report, where: Path) -> bool:
        return matches(value) or _fail(report, where, "const", schema, value)

    return check


def _required(compiler: _Compiler, schema: Mapping[str, Any], argument: Any) -> Check:
    keys = tuple(argument)
    every = frozenset(keys)

    def check(value: Any, report: Report, where: Path) -> bool:
        if not isinstance(value, dict) or value.keys() >= every:
            return True
        valid = True
        for key in keys:
            if key not in value:
                if report is None:
                    return False
                valid = _fail(report, (*where, key), "required", schema, MISSING)
        return valid

    return check


def _plain_type_only(schema: Mapping[str, Any]) -> tuple[type, ...] | None:
    """The Python types of a schema that says nothing but a plain ``type``."""
    keywords = {key for key in schema if key not in ANNOTATIONS and not key.startswith("x-")}
    if keywords != {"type"}:
        return None
    names = [schema["type"]] if isinstance(schema["type"], str) else list(schema["type"])
    if not all(name in _PLAIN_TYPES for name in names):
        return None
    return tuple(_PLAIN_TYPES[name] for name in names)


def _properties(compiler: _Compiler, schema: Mapping[str, Any], argument: Any) -> Check:
    members = {key: compiler.schema(sub) for key, sub in argument.items()}
    # Most members only say their type: on the fast path one isinstance() does.
    plain = {key: types for key, sub in argument.items() if (types := _plain_type_only(sub)) is not None}

    def check(value: Any, report: Report, where: Path) -> bool:
        if not isinstance(value, dict):
            return True
        if report is None:
            for key, item in value.items():
                types = plain.get(key)
                if types is not None:
                    if not isinstance(item, types):
                        return False
                elif key in members and not members[key](item, None, where):
                    return False
            return True
        valid = True
        for key, member in members.items():
            if key in value and not member(value[key], report, (*where, key)):
                valid = False
        return valid

    return check


def _additional_properties(compiler: _Compiler, schema: Mapping[str, Any], argument: Any) -> Check:
    if argument is True:
        return lambda value, report, where: True
    if argument is not False:
        raise ValueError("additionalProperties: only true or false is supported")
    known = frozenset(schema.get("properties", {}))
    if "patternProperties" in schema:
        raise ValueError("additionalProperties next to patternProperties is not supported")

    def check(value: Any, report: Report, where: Path) -> bool:
        if not isinstance(value, dict) or value.keys() <= known:
            return True
        for key in value:
            if key not in known:
                _fail(report, (*where, key), "additionalProperties", schema, value[key])
        return False

    return check


def _items(compiler: _Compiler, schema: Mapping[str, Any], argument: Any) -> Check:
    item = compiler.schema(argument)

    def check(value: Any, report: Report, where: Path) -> bool:
        if not isinstance(value, list):
            return True
        if report is None:
            return all(item(element, None, where) for element in value)
        results = [item(element, report, (*where, index)) for index, element in enumerate(value)]
        return all(results)

    return check


def _contains(compiler: _Compiler, schema: Mapping[str, Any], argument: Any) -> Check:
    wanted = compiler.schema(argument)

    def check(value: Any, report: Report, where: Path) -> bool:
        if not isinstance(value, list) or any(wanted(element, None, where) for element in value):
            return True
        return _fail(report, where, "contains", schema, value)

    return check


def _bound(keyword: str, applies: Callable[[object], bool], measure: Callable[[Any], Any],
           holds: Callable[[Any, Any], bool]) -> Builder:
    def build(compiler: _Compiler, schema: Mapping[str, Any], argument: Any) -> Check:
        def check(value: Any, report: Report, where: Path) -> bool:
            if not applies(value) or holds(measure(value), argument):
                return True
            return _fail(report, where, keyword, schema, value)

        return check

    return build


def _pattern(compiler: _Compiler, schema: Mapping[str, Any], argument: Any) -> Check:
    search = re.compile(argument).search

    def check(value: Any, report: Report, where: Path) -> bool:
        if not isinstance(value, str) or search(value) is not None:
            return True
        return _fail(report, where, "pattern", schema, value)

    return check


def _not(compiler: _Compiler, schema: Mapping[str, Any], argument: Any) -> Check:
    barred = compiler.schema(argument)

    def check(value: Any, report: Report, where: Path) -> bool:
        return not barred(value, None, where) or _fail(report, where, "not", schema, value)

    return check


def _any_of(compiler: _Compiler, schema: Mapping[str, Any], argument: Any) -> Check:
    branches = [compiler.schema(sub) for sub in argument]

    def check(value: Any, report: Report, where: Path) -> bool:
        return any(branch(value, None, where) for branch in branches) or _fail(report, where, "anyOf", schema, value)

    return check


def _all_of(compiler: _Compiler, schema: Mapping[str, Any], argument: Any) -> Check:
    switch = _discriminator(compiler, argument)
    return switch if switch is not None else _all([compiler.schema(sub) for sub in argument])


def _discriminator(compiler: _Compiler, branches: Sequence[Mapping[str, Any]]) -> Check | None:
    """``allOf`` of ``if {key: const} then X`` branches, as one lookup.

    Of such branches (one key, distinct string constants) only the one named
    by the object's value for the key applies; for a value that is not an
    object every ``if`` holds, so every ``then`` applies. Same result as
    trying each ``if`` in turn, without doing so.
    """
    table: dict[str, Check] = {}
    keys: set[str] = set()
    for branch in branches:
        condition = branch.get("if", {})
        members = condition.get("properties", {})
        if set(branch) != {"if", "then"} or set(condition) != {"properties", "required"} or len(members) != 1:
            return None
        ((key, test),) = members.items()
        if condition["required"] != [key] or set(test) != {"const"} or not isinstance(test["const"], str):
            return None
        keys.add(key)
        table[test["const"]] = compiler.schema(branch["then"])
    if len(keys) != 1 or len(table) != len(branches):
        return None
    (key,) = keys
    every = _all(list(table.values()))

    def check(value: Any, report: Report, where: Path) -> bool:
        if not isinstance(value, dict):
            return every(value, report, where)
        selector = value.get(key)
        branch = table.get(selector) if type(selector) is str else None
        return branch is None or branch(value, report, where)

    return check


def _if(compiler: _Compiler, schema: Mapping[str, Any], argument: Any) -> Check:
    condition = compiler.schema(argument)
    then = compiler.schema(schema["then"]) if "then" in schema else None
    otherwise = compiler.schema(schema["else"]) if "else" in schema else None

    def check(value: Any, report: Report, where: Path) -> bool:
        branch = then if condition(value, None, where) else otherwise
        return branch is None or branch(value, report, where)

    return check


def _ref(compiler: _Compiler, schema: Mapping[str, Any], argument: Any) -> Check:
    if not isinstance(argument, str) or not argument.startswith(_REF_PREFIX):
        raise ValueError(f"only {_REF_PREFIX}<name> references are supported, not {argument!r}")
    name = argument[len(_REF_PREFIX):]
    compiler.component(name)  # unknown names fail at compile time
    compiled = compiler.compiled

    def check(value: Any, report: Report, where: Path) -> bool:
        return compiled[name](value, report, where)

    return check


def _is_str(value: object) -> bool:
    return isinstance(value, str)


def _is_list(value: object) -> bool:
    return isinstance(value, list)


def _at_least(measured: Any, bound: Any) -> bool:
    return bool(measured >= bound)


def _at_most(measured: Any, bound: Any) -> bool:
    return bool(measured <= bound)


_KEYWORDS: Final[Mapping[str, Builder]] = {
    "type": _type,
    "enum": _enum,
    "const": _const,
    "required": _required,
    "properties": _properties,
    "additionalProperties": _additional_properties,
    "items": _items,
    "contains": _contains,
    "minItems": _bound("minItems", _is_list, len, _at_least),
    "maxItems": _bound("maxItems", _is_list, len, _at_most),
    "minLength": _bound("minLength", _is_str, len, _at_least),
    "maxLength": _bound("maxLength", _is_str, len, _at_most),
    "minimum": _bound("minimum", _is_number, lambda value: value, _at_least),
    "pattern": _pattern,
    "not": _not,
    "anyOf": _any_of,
    "allOf": _all_of,
    "if": _if,
    "$ref": _ref,
}


def compile_schemas(components: Mapping[str, Mapping[str, Any]]) -> dict[str, CompiledSchema]:
    """Compile every component; ``$ref`` is ``#/components/schemas/<name>``.

    Raises ``ValueError`` for a keyword or a reference this module does not
    support.
    """
    compiler = _Compiler(components)
    return {name: CompiledSchema(name, compiler.component(name)) for name in components}
