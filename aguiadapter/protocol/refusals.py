"""From what a request got wrong to one ``AdapterError`` that names the field.

Every refusal is ``AdapterError(ErrorCode.INVALID_INPUT, message_id,
path=...)``: the catalog message of the rule the value broke, with the JSON
path of the value (``messages[2].content[0].source.value``). Of several
problems the first in document order is reported: keys in the order the
request wrote them, a missing key after the keys present in its object, and
a value's own problems after those of its members (the deeper one says
more).

The message id of a schema keyword is the schema's ``x-refusal`` for it, or
the default of the keyword below. Values are echoed only where that helps
(the name of an unsupported part type) and never from a ``writeOnly``
(secret) field.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from ..errors import AdapterError, ErrorCode
from .schema_compiler import Finding, PathStep

__all__ = ["InputRefusal", "first_refusal", "format_path", "refusal_error"]

_ECHO_LIMIT: Final = 64

_EXPECTED: Final[Mapping[frozenset[str], str]] = {
    frozenset({"string"}): "input_expected_string",
    frozenset({"integer"}): "input_expected_integer",
    frozenset({"boolean"}): "input_expected_boolean",
    frozenset({"object"}): "input_expected_object",
    frozenset({"array"}): "input_expected_array",
    frozenset({"string", "array"}): "input_expected_string_or_array",
}

_DEFAULTS: Final[Mapping[str, str]] = {
    "required": "input_field_missing",
    "additionalProperties": "input_unknown_field",
    "enum": "input_bad_value",
    "const": "input_bad_value",
    "maxLength": "input_string_too_long",
}


class InputRefusal(ValueError):
    """A value refused by a rule written in code (image bytes, a workspace).

    ``where`` is the path below the value the rule was given; whoever knows
    where that value sits adds the steps above it with :meth:`within`.
    """

    def __init__(self, message_id: str, where: tuple[PathStep, ...] = (), **params: object) -> None:
        self.message_id = message_id
        self.where = where
        self.params = params
        super().__init__(message_id, where)

    def within(self, *steps: PathStep) -> InputRefusal:
        """The same refusal, for a value found at ``steps`` above."""
        return InputRefusal(self.message_id, (*steps, *self.where), **self.params)


def format_path(where: Sequence[PathStep]) -> str:
    """Render a JSON path: ``messages[2].content[0].source.value``."""
    text = ""
    for step in where:
        if isinstance(step, int):
            text += f"[{step}]"
        elif step.isidentifier():
            text += f".{step}" if text else step
        else:
            text += f"[{json.dumps(step, ensure_ascii=False)}]"
    return text or "$"


def refusal_error(refusal: InputRefusal) -> AdapterError:
    """The ``AdapterError`` answering a refusal made in code."""
    return AdapterError(ErrorCode.INVALID_INPUT, refusal.message_id, path=format_path(refusal.where), **refusal.params)


def first_refusal(findings: Iterable[Finding], payload: object) -> AdapterError:
    """The ``AdapterError`` for the first finding in document order."""
    ordered = min(findings, key=lambda finding: _document_position(payload, finding.where))
    message_id, params = _message_of(ordered)
    return AdapterError(ErrorCode.INVALID_INPUT, message_id, path=format_path(ordered.where), **params)


def _message_of(finding: Finding) -> tuple[str, dict[str, object]]:
    schema, keyword = finding.schema, finding.keyword
    params: dict[str, object] = {}
    if keyword in ("enum", "const"):
        options = schema["enum"] if keyword == "enum" else [schema["const"]]
        shown = (json.dumps(option, ensure_ascii=False) for option in options if option is not None)
        params["allowed"] = ", ".join(shown)
    elif keyword == "maxLength":
        params["max_length"] = schema["maxLength"]
    value = finding.value
    if (
        keyword in ("enum", "const", "not")
        and isinstance(value, str)
        and len(value) <= _ECHO_LIMIT
        and not schema.get("writeOnly")
    ):
        params["value"] = value
    custom: Mapping[str, str] = schema.get("x-refusal", {})
    return custom.get(keyword) or _default_message(schema, keyword), params


def _default_message(schema: Mapping[str, Any], keyword: str) -> str:
    if keyword == "type":
        declared = schema["type"]
        kinds = frozenset([declared] if isinstance(declared, str) else declared) - {"null"}
        return _EXPECTED.get(kinds, "input_invalid_value")
    if keyword == "minLength" and schema["minLength"] == 1:
        return "input_string_empty"
    return _DEFAULTS.get(keyword, "input_invalid_value")


def _document_position(payload: object, where: Sequence[PathStep]) -> tuple[float, ...]:
    """Where a path sits in the request as written.

    Each step is the index of its key among the keys of its object as they
    were written (an absent key comes after them) or its array index; a
    closing ``inf`` puts a value after its own members.
    """
    position: list[float] = []
    node: object = payload
    for step in where:
        if isinstance(node, dict):
            keys = list(node)
            position.append(keys.index(step) if step in node else len(keys))
            node = node.get(step)
        elif isinstance(node, list) and isinstance(step, int) and 0 <= step < len(node):
            position.append(step)
            node = node[step]
        else:
            position.append(0)
            node = None
    position.append(float("inf"))
    return tuple(position)
