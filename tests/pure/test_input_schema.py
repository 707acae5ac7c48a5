"""The input schema, compiled, judges requests exactly as ``jsonschema`` does.

The server checks requests with :mod:`aguiadapter.protocol.schema_compiler`
(fast closures); the OpenAPI document carries the same schema for everyone
else's validators. These tests hold the two readings together: on valid
requests, on requests broken one way or several, and on arbitrary JSON, both
accept the same values and find the same problems at the same places.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from aguiadapter.protocol.input_schema import (
    CANCEL_REQUEST,
    INPUT_SCHEMAS,
    MAX_IDENTIFIER_LENGTH,
    NEW_USER_MESSAGE,
    RUN_AGENT_INPUT,
)
from aguiadapter.protocol.schema_compiler import CompiledSchema, Finding, compile_schemas, json_equal
from tests.support.envelopes import (
    envelope_0_1,
    envelope_1_0,
    envelope_client_1_0,
    envelope_client_1_0_resume,
    image_part,
)

URI = "urn:aguiadapter:inputs"
COMPILED = compile_schemas(INPUT_SCHEMAS)
REGISTRY: Registry[Any] = Registry().with_resource(
    URI, Resource(contents={"components": {"schemas": INPUT_SCHEMAS}}, specification=DRAFT202012)
)
EXAMPLES = settings(max_examples=400, deadline=None, database=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))


def oracle(name: str) -> Draft202012Validator:
    return Draft202012Validator({"$ref": f"{URI}#/components/schemas/{name}"}, registry=REGISTRY)


def jsonschema_problems(validator: Draft202012Validator, value: object) -> set[tuple[tuple[Any, ...], str]]:
    """(path, keyword) of every error, as jsonschema reports them."""
    return {(tuple(error.absolute_path), str(error.validator)) for error in validator.iter_errors(value)}


def compiled_problems(findings: list[Finding]) -> set[tuple[tuple[Any, ...], str]]:
    """The same, from our findings: a missing or an unknown member is its object's problem there."""
    return {
        (finding.where[:-1] if finding.keyword in ("required", "additionalProperties") else finding.where,
         finding.keyword)
        for finding in findings
    }


def assert_same_judgement(name: str, value: object) -> None:
    compiled, validator = COMPILED[name], oracle(name)
    expected = jsonschema_problems(validator, value)
    assert compiled.is_valid(value) is (not expected), (name, value)
    assert compiled_problems(compiled.findings(value)) == expected, (name, value)


# --- inputs to judge ------------------------------------------------------------------

JSON_SCALARS = (
    st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from([0.5, 1.0, 2.0, -1.0, 1e300])
    | st.sampled_from(["", " ", "\n", "x", "user", "image", "text", "data", "url", "audio", "image/png",
                       "sk-été", "a\x7f", "resolved", "function", "pipeline", "iVBORw0KGgo="])
    | st.text(max_size=5)
)
MEMBER_NAMES = sorted(
    {key for schema in INPUT_SCHEMAS.values() for key in schema.get("properties", {})}
    | {"role", "type", "content", "source", "extra"}
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.sampled_from(MEMBER_NAMES) | st.text(max_size=4), children, max_size=3),
    max_leaves=8,
)


def envelope_with_every_option() -> dict[str, Any]:
    payload = envelope_0_1()
    payload["forwardedProps"]["iacCode"].update(
        model="qwen-max", llmApiKey="sk-1", thinking={"enabled": True, "effort": "high", "budget": 2048},
        userId="u-1", channel="console", preferredLanguage="zh-CN", candidatePresentation="rich",
        runMode="pipeline", pipelineName="selling", cleanupOnly=False,
        alibabaCloud={"accessKeyId": "id", "accessKeySecret": "s", "securityToken": "t", "regionId": "cn-hangzhou"},
    )
    payload.update(parentRunId="run-0", context=[{"description": "tz", "value": "UTC+8"}], protocolVersion="1.0")
    return payload


RUN_BASES: list[Callable[[], dict[str, Any]]] = [
    envelope_0_1,
    envelope_1_0,
    envelope_client_1_0,
    envelope_client_1_0_resume,
    envelope_with_every_option,
]


def near(value: object) -> st.SearchStrategy[Any]:
    """Values a client gets wrong in place of ``value``: the edges of its type."""
    if isinstance(value, bool):
        return st.sampled_from([int(value), not value, str(value).lower(), None])
    if isinstance(value, int):
        return st.sampled_from([float(value), value + 0.5, 0, -value, True, str(value), None])
    if isinstance(value, float):
        return st.sampled_from([int(value), value + 0.5, None])
    if isinstance(value, str):
        return st.sampled_from(
            ["", " ", value + "\n", " " + value, value.upper(), value + "é", value + "\x7f", "x" * 300, 1, None]
        )
    if value is None:
        return st.sampled_from([0, "", False, {}, []])
    if isinstance(value, list):
        return st.sampled_from([[], value + value, {}, [None], "x"])
    assert isinstance(value, dict)
    return st.sampled_from([{}, [], {**value, "extra": 1}, None])


def paths_of(node: object, where: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [where]
    if isinstance(node, dict):
        for key, value in node.items():
            found += paths_of(value, (*where, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += paths_of(value, (*where, index))
    return found


@st.composite
def mutated_document(draw: st.DrawFn, bases: list[Callable[[], Any]]) -> Any:
    """A valid document with one to three things changed, anywhere in it."""
    document = draw(st.sampled_from(bases))()
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(paths_of(document)))
        if not where:
            continue
        parent: Any = document
        for step in where[:-1]:
            parent = parent[step]
        action = draw(st.sampled_from(["near", "near", "replace", "delete", "add"]))
        if action == "near":
            parent[where[-1]] = draw(near(parent[where[-1]]))
        elif action == "replace":
            parent[where[-1]] = draw(JSON_VALUES)
        elif action == "delete":
            del parent[where[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.sampled_from(MEMBER_NAMES))] = draw(JSON_VALUES)
        else:
            parent.insert(where[-1], draw(JSON_VALUES))
    return document


def new_user_messages() -> list[Callable[[], Any]]:
    def with_parts() -> Any:
        message = copy.deepcopy(envelope_client_1_0()["messages"][-1])
        message["content"].append({"type": "text", "text": "and this", "id": "p-2", "metadata": {}})
        message["content"].append(image_part())
        return message

    return [lambda: envelope_0_1()["messages"][0], with_parts]


def cancel_bodies() -> list[Callable[[], Any]]:
    return [lambda: {"threadId": "thread-1", "rosInvocationId": "invocation-1"}]


# --- the tests --------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(INPUT_SCHEMAS))
def test_every_component_is_valid_json_schema_2020_12(name: str) -> None:
    Draft202012Validator.check_schema(INPUT_SCHEMAS[name])


@pytest.mark.parametrize("make", [*RUN_BASES], ids=lambda make: make.__name__)
def test_the_reference_envelopes_are_valid_for_both(make: Callable[[], Any]) -> None:
    value = make()
    assert COMPILED[RUN_AGENT_INPUT].is_valid(value)
    assert oracle(RUN_AGENT_INPUT).is_valid(value)


@EXAMPLES
@given(value=mutated_document(RUN_BASES))
def test_run_inputs_are_judged_alike(value: Any) -> None:
    assert_same_judgement(RUN_AGENT_INPUT, value)


@EXAMPLES
@given(value=mutated_document(new_user_messages()))
def test_new_user_messages_are_judged_alike(value: Any) -> None:
    assert_same_judgement(NEW_USER_MESSAGE, value)


@EXAMPLES
@given(value=mutated_document(cancel_bodies()))
def test_cancel_bodies_are_judged_alike(value: Any) -> None:
    assert_same_judgement(CANCEL_REQUEST, value)


@EXAMPLES
@given(name=st.sampled_from(sorted(INPUT_SCHEMAS)), value=JSON_VALUES)
def test_any_json_is_judged_alike_by_every_component(name: str, value: Any) -> None:
    assert_same_judgement(name, value)


@pytest.mark.parametrize(
    "value",
    [
        {"threadId": "t" * MAX_IDENTIFIER_LENGTH, "rosInvocationId": "i"},
        {"threadId": "t" * (MAX_IDENTIFIER_LENGTH + 1), "rosInvocationId": "i" * 257},
        {"threadId": "", "rosInvocationId": 1.0},
        [],
    ],
)
def test_lengths_are_judged_alike(value: Any) -> None:
    assert_same_judgement(CANCEL_REQUEST, value)


@pytest.mark.parametrize(
    ("one", "two", "equal"),
    [(1, 1.0, True), (True, 1, False), (False, 0, False), (None, None, True), ("1", 1, False),
     ([1, True], [1.0, True], True), ({"a": 1}, {"a": 1.0}, True), ([1], {"0": 1}, False)],
)
def test_values_compare_as_json_schema_compares_them(one: object, two: object, equal: bool) -> None:
    assert json_equal(one, two) is equal
    assert oracle_const(one).is_valid(two) is equal


def oracle_const(value: object) -> Draft202012Validator:
    return Draft202012Validator({"const": value})


@pytest.mark.parametrize(
    "schema",
    [{"format": "uri"}, {"patternProperties": {"x": {}}}, {"additionalProperties": {"type": "string"}},
     {"$ref": "#/$defs/x"}, {"$ref": "#/components/schemas/Nowhere"}],
)
def test_a_keyword_the_compiler_does_not_know_is_refused_when_compiling(schema: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        compile_schemas({"Root": schema})


def test_a_component_may_refer_to_itself() -> None:
    tree: CompiledSchema = compile_schemas(
        {"Tree": {"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#/components/schemas/Tree"}}}}}
    )["Tree"]
    assert tree.is_valid({"children": [{"children": []}]})
    assert not tree.is_valid({"children": [{"children": 1}]})
    (finding,) = tree.findings({"children": [{"children": 1}]})
    assert finding.where == ("children", 0, "children") and finding.keyword == "type"
