"""What a client sends to ``POST /``: the AG-UI ``RunAgentInput``, strictly.

The models are frozen ``attrs`` classes, structured by one ``cattrs``
converter built at import: camelCase on the wire, unknown keys refused, and
no silent coercion (``"1"`` is not an integer, ``5`` is not a string, ``true``
is not a number). Both AG-UI envelopes are accepted: 0.1 clients send every
field, 1.0 clients (``@ag-ui/client`` 1.x ``HttpAgent``) may leave out
``state``, ``tools`` and ``context`` and add ``protocolVersion`` and
``resume``. Message shapes follow the AG-UI 1.0 schema, so a whole
conversation as the client keeps it (assistant tool calls, tool results,
reasoning, activity) is accepted; only *user* content is checked in depth,
because only the latest user message is forwarded to the runtime.

Every refusal is ``AdapterError(ErrorCode.INVALID_INPUT, message_id,
path=...)`` naming the first offending field in document order by its JSON
path, for example ``messages[2].content[0].source.value``.
"""

from __future__ import annotations

import hashlib
import json
import os
import unicodedata
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final, Literal, NewType, get_args, get_origin

import attrs
import cattrs
from cattrs.errors import (
    AttributeValidationNote,
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
    IterableValidationNote,
)
from cattrs.gen import make_dict_structure_fn, override

from aguiadapter.errors import AdapterError, ErrorCode
from aguiadapter.protocol.content import (
    STRUCTURE_ERRORS,
    STRUCTURE_WITH,
    DataSource,
    ImagePart,
    InputRefusal,
    JsonObject,
    PathStep,
    Structure,
    TextPart,
    UserContent,
    structure_user_content,
)

__all__ = [
    "MAX_IDENTIFIER_LENGTH",
    "SECRET_FIELDS",
    "ActivityMessage",
    "AlibabaCloudCredentials",
    "AssistantMessage",
    "ContextItem",
    "DeveloperMessage",
    "ForwardedProps",
    "FunctionCall",
    "IacCodeProps",
    "Identifier",
    "Message",
    "NonEmptyStr",
    "PositiveInt",
    "ReasoningMessage",
    "ResumeEntry",
    "RunAgentInput",
    "SystemMessage",
    "ThinkingOptions",
    "ToolCall",
    "ToolMessage",
    "UserMessage",
    "canonical_digest",
    "check_cwd",
    "format_path",
    "latest_user_message",
    "parse_run_input",
    "peek_preferred_language",
]

MAX_IDENTIFIER_LENGTH: Final = 256
"""Longest ``threadId``, ``runId`` or ``rosInvocationId`` accepted."""

Identifier = NewType("Identifier", str)
"""A non-blank id of at most 256 characters without control characters."""

NonEmptyStr = NewType("NonEmptyStr", str)
"""A string that is not empty or blank."""

PositiveInt = NewType("PositiveInt", int)
"""An integer greater than zero (booleans are not integers here)."""

_CWD_PATH: Final = "forwardedProps.iacCode.cwd"


# --- forwardedProps.iacCode ------------------------------------------------


@attrs.frozen(kw_only=True)
class ThinkingOptions:
    """``forwardedProps.iacCode.thinking``: per-request thinking overrides."""

    enabled: bool | None = None
    effort: str | None = None
    budget: PositiveInt | None = None


@attrs.frozen(kw_only=True)
class AlibabaCloudCredentials:
    """``forwardedProps.iacCode.alibabaCloud``; secrets stay out of ``repr``."""

    access_key_id: str | None = attrs.field(default=None, repr=False)
    access_key_secret: str | None = attrs.field(default=None, repr=False)
    security_token: str | None = attrs.field(default=None, repr=False)
    region_id: str | None = None


@attrs.frozen(kw_only=True)
class IacCodeProps:
    """``forwardedProps.iacCode``: the iac-code extension, version 1."""

    schema_version: Literal[1]
    ros_invocation_id: Identifier
    cwd: str
    model: str | None = None
    llm_api_key: str | None = attrs.field(default=None, repr=False)
    thinking: ThinkingOptions | None = None
    user_id: str | None = None
    channel: str | None = None
    preferred_language: str | None = None
    candidate_presentation: Literal["standard", "rich"] | None = None
    run_mode: Literal["normal", "pipeline"] | None = None
    pipeline_name: str | None = None
    cleanup_only: bool | None = None
    alibaba_cloud: AlibabaCloudCredentials | None = None


@attrs.frozen(kw_only=True)
class ForwardedProps:
    """``forwardedProps``: must hold ``iacCode``; other members are ignored."""

    iac_code: IacCodeProps


# --- messages ----------------------------------------------------------------


@attrs.frozen(kw_only=True)
class FunctionCall:
    """The name and the JSON-encoded arguments of a tool call."""

    name: str
    arguments: str


@attrs.frozen(kw_only=True)
class ToolCall:
    """A tool call made by an assistant message."""

    id: NonEmptyStr
    type: Literal["function"] = "function"
    function: FunctionCall
    encrypted_value: str | None = None
    metadata: JsonObject | None = None


@attrs.frozen(kw_only=True)
class UserMessage:
    """A message from the user; its content is checked in depth."""

    id: NonEmptyStr
    role: Literal["user"] = "user"
    content: UserContent = attrs.field(metadata={STRUCTURE_WITH: structure_user_content})
    name: str | None = None
    encrypted_value: str | None = None
    metadata: JsonObject | None = None
    subagent_run_id: str | None = None

    @property
    def text(self) -> str:
        """The text of the message, parts joined by blank lines."""
        if isinstance(self.content, str):
            return self.content
        texts = [part.text for part in self.content if part.type == "text"]
        return "\n\n".join(texts)


@attrs.frozen(kw_only=True)
class AssistantMessage:
    """A message from the agent: text, tool calls, or both."""

    id: NonEmptyStr
    role: Literal["assistant"] = "assistant"
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] | None = None
    name: str | None = None
    encrypted_value: str | None = None
    metadata: JsonObject | None = None
    subagent_run_id: str | None = None


def _structure_tool_content(value: object, structure: Structure) -> str | tuple[JsonObject, ...]:
    """Tool results are history only: a string, or parts kept as objects."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise InputRefusal("input_expected_string_or_array")
    parts: tuple[JsonObject, ...] = structure(value, tuple[JsonObject, ...])
    return parts


@attrs.frozen(kw_only=True)
class ToolMessage:
    """The result of a tool call."""

    id: NonEmptyStr
    role: Literal["tool"] = "tool"
    content: str | tuple[JsonObject, ...] = attrs.field(
        metadata={STRUCTURE_WITH: _structure_tool_content}
    )
    tool_call_id: NonEmptyStr
    error: str | None = None
    encrypted_value: str | None = None
    metadata: JsonObject | None = None
    subagent_run_id: str | None = None


@attrs.frozen(kw_only=True)
class SystemMessage:
    """Instructions from the system."""

    id: NonEmptyStr
    role: Literal["system"] = "system"
    content: str
    name: str | None = None
    encrypted_value: str | None = None
    metadata: JsonObject | None = None
    subagent_run_id: str | None = None


@attrs.frozen(kw_only=True)
class DeveloperMessage:
    """Instructions from the application developer."""

    id: NonEmptyStr
    role: Literal["developer"] = "developer"
    content: str
    name: str | None = None
    encrypted_value: str | None = None
    metadata: JsonObject | None = None
    subagent_run_id: str | None = None


@attrs.frozen(kw_only=True)
class ReasoningMessage:
    """A span of the agent's reasoning, kept in the conversation."""

    id: NonEmptyStr
    role: Literal["reasoning"] = "reasoning"
    content: str
    encrypted_value: str | None = None
    metadata: JsonObject | None = None
    subagent_run_id: str | None = None


@attrs.frozen(kw_only=True)
class ActivityMessage:
    """Structured progress kept as a message (``@ag-ui/client`` strips these)."""

    id: NonEmptyStr
    role: Literal["activity"] = "activity"
    activity_type: str
    content: JsonObject
    metadata: JsonObject | None = None
    subagent_run_id: str | None = None


Message = (
    UserMessage
    | AssistantMessage
    | ToolMessage
    | SystemMessage
    | DeveloperMessage
    | ReasoningMessage
    | ActivityMessage
)
"""Any message of an AG-UI 1.0 conversation, selected by ``role``."""

_MESSAGE_ROLES: Final[Mapping[str, type[Any]]] = {
    "user": UserMessage,
    "assistant": AssistantMessage,
    "tool": ToolMessage,
    "system": SystemMessage,
    "developer": DeveloperMessage,
    "reasoning": ReasoningMessage,
    "activity": ActivityMessage,
}


# --- the envelope --------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ContextItem:
    """A named piece of ambient context (kept, not forwarded)."""

    description: str
    value: str


@attrs.frozen(kw_only=True)
class ResumeEntry:
    """The answer to one interrupt; ``payload`` is ``None`` when absent."""

    interrupt_id: NonEmptyStr
    status: Literal["resolved", "cancelled"]
    payload: Any = None
    metadata: JsonObject | None = None


def _refuse_tools(value: object, structure: Structure) -> tuple[JsonObject, ...]:
    """Client-side tools are not supported: only an empty list passes."""
    if not isinstance(value, list):
        raise InputRefusal("input_expected_array")
    if value:
        raise InputRefusal("input_tools_unsupported")
    return ()


@attrs.frozen(kw_only=True)
class RunAgentInput:
    """A request to run (or resume) the agent on a thread."""

    thread_id: Identifier
    run_id: Identifier
    parent_run_id: str | None = None
    state: Any = attrs.field(factory=dict)
    messages: tuple[Message, ...]
    tools: tuple[JsonObject, ...] = attrs.field(
        default=(), metadata={STRUCTURE_WITH: _refuse_tools}
    )
    context: tuple[ContextItem, ...] = ()
    forwarded_props: ForwardedProps
    resume: tuple[ResumeEntry, ...] | None = None
    protocol_version: str | None = None

    @property
    def iac_code(self) -> IacCodeProps:
        """Shortcut to ``forwardedProps.iacCode``."""
        return self.forwarded_props.iac_code

    @property
    def is_resume(self) -> bool:
        """Whether this run answers interrupts rather than starting a turn."""
        return bool(self.resume)


# --- strict scalar hooks -------------------------------------------------------


def _strict_str(value: object, _type: object) -> str:
    if not isinstance(value, str):
        raise InputRefusal("input_expected_string")
    return value


def _strict_bool(value: object, _type: object) -> bool:
    if not isinstance(value, bool):
        raise InputRefusal("input_expected_boolean")
    return value


def _strict_int(value: object, _type: object) -> int:
    # bool is a subclass of int in Python, but true is not a number on the wire.
    if not isinstance(value, int) or isinstance(value, bool):
        raise InputRefusal("input_expected_integer")
    return value


def _non_empty(value: object, _type: object) -> NonEmptyStr:
    text = _strict_str(value, str)
    if not text.strip():
        raise InputRefusal("input_string_empty")
    return NonEmptyStr(text)


def _identifier(value: object, _type: object) -> Identifier:
    text = _non_empty(value, str)
    if len(text) > MAX_IDENTIFIER_LENGTH:
        raise InputRefusal("input_string_too_long", max_length=MAX_IDENTIFIER_LENGTH)
    if any(unicodedata.category(char) == "Cc" for char in text):
        raise InputRefusal("input_string_control_chars")
    return Identifier(text)


def _positive_int(value: object, _type: object) -> PositiveInt:
    number = _strict_int(value, int)
    if number <= 0:
        raise InputRefusal("input_integer_not_positive")
    return PositiveInt(number)


def _json_object(value: object, _type: object) -> JsonObject:
    if not isinstance(value, dict):
        raise InputRefusal("input_expected_object")
    return JsonObject(value)


def _is_literal(type_: object) -> bool:
    return get_origin(type_) is Literal


def _strict_literal(value: object, type_: object) -> object:
    # Compare type as well as value: 1 == 1.0 == True in Python.
    allowed = get_args(type_)
    if any(type(value) is type(option) and value == option for option in allowed):
        return value
    raise InputRefusal("input_bad_value", allowed=", ".join(json.dumps(a) for a in allowed))


# --- container hooks ------------------------------------------------------------

Hook = Callable[[Any, Any], Any]


def _is_homogeneous_tuple(type_: object) -> bool:
    args = get_args(type_)
    return get_origin(type_) is tuple and len(args) == 2 and args[1] is Ellipsis


def _make_tuple_hook(type_: Any, converter: cattrs.Converter) -> Hook:
    """Arrays only (a string or an object is not a list of anything)."""
    element_type = get_args(type_)[0]
    structure_element = converter.get_structure_hook(element_type)

    def structure_tuple(value: object, _type: object) -> tuple[Any, ...]:
        if not isinstance(value, list):
            raise InputRefusal("input_expected_array")
        items: list[Any] = []
        errors: list[Exception] = []
        for index, item in enumerate(value):
            try:
                items.append(structure_element(item, element_type))
            except STRUCTURE_ERRORS as exc:
                note = IterableValidationNote(f"Structuring @ index {index}", index, element_type)
                exc.__notes__ = [*getattr(exc, "__notes__", []), note]
                errors.append(exc)
        if errors:
            raise IterableValidationError("While structuring an array", errors, type_)
        return tuple(items)

    return structure_tuple


def _wire_name(name: str) -> str:
    """``thread_id`` -> ``threadId``."""
    head, *rest = name.split("_")
    return head + "".join(word.capitalize() for word in rest)


# forwardedProps is the one object other applications also write into.
_OPEN_OBJECTS: Final = frozenset({ForwardedProps})


def _field_override(field: attrs.Attribute[Any], converter: cattrs.Converter) -> Any:
    custom = field.metadata.get(STRUCTURE_WITH)
    if custom is None:
        return override(rename=_wire_name(field.name))

    def structure_field(value: object, _type: object) -> Any:
        return custom(value, converter.structure)

    return override(rename=_wire_name(field.name), struct_hook=structure_field)


def _make_attrs_hook(cls: type[Any], converter: cattrs.Converter) -> Hook:
    overrides = {
        field.name: _field_override(field, converter) for field in attrs.fields(cls) if field.init
    }
    structure = make_dict_structure_fn(
        cls, converter, _cattrs_forbid_extra_keys=cls not in _OPEN_OBJECTS, **overrides
    )

    def structure_object(value: object, _type: object) -> Any:
        if not isinstance(value, dict):
            raise InputRefusal("input_expected_object")
        return structure(value, cls)

    return structure_object


def _make_message_hook(converter: cattrs.Converter) -> Hook:
    def structure_message(value: object, _type: object) -> Any:
        if not isinstance(value, dict):
            raise InputRefusal("input_expected_object")
        if "role" not in value:
            raise InputRefusal("input_field_missing", ("role",))
        role = value["role"]
        if not isinstance(role, str):
            raise InputRefusal("input_expected_string", ("role",))
        message_type = _MESSAGE_ROLES.get(role)
        if message_type is None:
            allowed = ", ".join(json.dumps(known) for known in _MESSAGE_ROLES)
            raise InputRefusal("input_bad_value", ("role",), allowed=allowed)
        return converter.structure(value, message_type)

    return structure_message


def _build_converter() -> cattrs.Converter:
    converter = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
    converter.register_structure_hook(str, _strict_str)
    converter.register_structure_hook(bool, _strict_bool)
    converter.register_structure_hook(int, _strict_int)
    converter.register_structure_hook(NonEmptyStr, _non_empty)
    converter.register_structure_hook(Identifier, _identifier)
    converter.register_structure_hook(PositiveInt, _positive_int)
    converter.register_structure_hook(JsonObject, _json_object)
    converter.register_structure_hook_func(_is_literal, _strict_literal)
    converter.register_structure_hook_func(
        lambda type_: type_ == Message, _make_message_hook(converter)
    )
    converter.register_structure_hook_factory(_is_homogeneous_tuple, _make_tuple_hook)
    converter.register_structure_hook_factory(attrs.has, _make_attrs_hook)
    # Generate every hook now rather than on the first request: message and
    # part classes are reached through discriminators, so name them too.
    for model in (RunAgentInput, *_MESSAGE_ROLES.values(), TextPart, ImagePart, DataSource):
        converter.get_structure_hook(model)
    return converter


_CONVERTER: Final = _build_converter()


# --- from cattrs' errors to one AdapterError -------------------------------------

_Finding = tuple[tuple[PathStep, ...], str, dict[str, object]]


def _findings(exc: BaseException, where: tuple[PathStep, ...]) -> Iterator[_Finding]:
    """Every refusal in a structuring error, with its absolute path."""
    if isinstance(exc, InputRefusal):
        yield (*where, *exc.where), exc.message_id, exc.params
    elif isinstance(exc, ForbiddenExtraKeysError):
        for key in exc.extra_fields:
            yield (*where, key), "input_unknown_field", {}
    elif isinstance(exc, (ClassValidationError, IterableValidationError)):
        yield from _group_findings(exc, where)
    elif isinstance(exc, KeyError):
        # The generated structure functions read required keys with o[key].
        yield where, "input_field_missing", {}
    else:
        yield where, "input_invalid_value", {}


def _group_findings(
    group: ClassValidationError | IterableValidationError, where: tuple[PathStep, ...]
) -> Iterator[_Finding]:
    for sub in group.exceptions:
        step = _note_step(sub)
        yield from _findings(sub, where if step is None else (*where, step))


def _note_step(exc: BaseException) -> PathStep | None:
    # The first position note is the one added by the innermost container.
    for note in getattr(exc, "__notes__", ()):
        if isinstance(note, AttributeValidationNote):
            return _wire_name(note.name)
        if isinstance(note, IterableValidationNote):
            return note.index
    return None


def _document_position(payload: object, where: tuple[PathStep, ...]) -> tuple[int, ...]:
    """Where a path sits in the request as written: keys in their JSON order.

    A missing key sorts after the keys present in its object.
    """
    position: list[int] = []
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
    return tuple(position)


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


def _first_refusal(exc: BaseException, payload: object) -> AdapterError:
    findings = list(_findings(exc, ()))
    where, message_id, params = min(
        findings, key=lambda finding: _document_position(payload, finding[0])
    )
    return AdapterError(ErrorCode.INVALID_INPUT, message_id, path=format_path(where), **params)


# --- public entry points ------------------------------------------------------------


def parse_run_input(payload: object) -> RunAgentInput:
    """Structure a decoded JSON body into a :class:`RunAgentInput`.

    Raises ``AdapterError(INVALID_INPUT)`` naming the first offending field in
    document order.
    """
    if not isinstance(payload, dict):
        raise AdapterError(ErrorCode.INVALID_INPUT, "input_not_object", path="$")
    try:
        run_input: RunAgentInput = _CONVERTER.structure(payload, RunAgentInput)
    except (ClassValidationError, IterableValidationError, InputRefusal) as exc:
        # from None: the cattrs tree adds nothing the path does not say, and
        # the raw values it may hold have no business in a log.
        raise _first_refusal(exc, payload) from None
    return run_input


@attrs.frozen(kw_only=True)
class CancelRequest:
    """The body of the cancel extension route."""

    thread_id: Identifier
    ros_invocation_id: Identifier


def parse_cancel_request(payload: object) -> CancelRequest:
    """Structure a cancel body strictly (unknown keys refused)."""
    if not isinstance(payload, dict):
        raise AdapterError(ErrorCode.INVALID_INPUT, "input_not_object", path="$")
    try:
        request: CancelRequest = _CONVERTER.structure(payload, CancelRequest)
    except (ClassValidationError, IterableValidationError, InputRefusal) as exc:
        raise _first_refusal(exc, payload) from None
    return request


def peek_preferred_language(payload: object) -> str | None:
    """``forwardedProps.iacCode.preferredLanguage`` if readable, else ``None``.

    Best effort and never raises: it picks the language of the error that
    answers a body which may be invalid.
    """
    node: object = payload
    for key in ("forwardedProps", "iacCode", "preferredLanguage"):
        if not isinstance(node, dict):
            return None
        # dict.get, not node.get: a dict subclass cannot run its own code here.
        node = dict.get(node, key)
    return node if isinstance(node, str) and 0 < len(node) <= 64 else None


def latest_user_message(run_input: RunAgentInput) -> UserMessage | None:
    """The last user message of the conversation, if any."""
    for message in reversed(run_input.messages):
        if isinstance(message, UserMessage):
            return message
    return None


SECRET_FIELDS: Final[tuple[tuple[str, ...], ...]] = (
    ("forwardedProps", "iacCode", "llmApiKey"),
    ("forwardedProps", "iacCode", "alibabaCloud", "accessKeyId"),
    ("forwardedProps", "iacCode", "alibabaCloud", "accessKeySecret"),
    ("forwardedProps", "iacCode", "alibabaCloud", "securityToken"),
)
"""Request members whose values never reach a digest, a record or a log."""

_REDACTED: Final = "\u2063redacted\u2063"


def _redacted(node: object, path: tuple[str, ...]) -> object:
    """A copy of ``node`` with the member at ``path`` replaced, if present."""
    if not isinstance(node, dict) or path[0] not in node:
        return node
    head, rest = path[0], path[1:]
    replaced = _REDACTED if not rest else _redacted(node[head], rest)
    return {**node, head: replaced}


def canonical_digest(payload: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the request's canonical JSON, secrets masked.

    Canonical: sorted keys, no whitespace, UTF-8. Two bodies that differ only
    in key order, spacing or secret values digest the same (a retry with a
    refreshed STS token is the same request); any other change differs.
    """
    redacted: object = dict(payload)
    for path in SECRET_FIELDS:
        redacted = _redacted(redacted, path)
    text = json.dumps(redacted, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# --- the working directory ----------------------------------------------------------


def _is_within(path: str, root: str) -> bool:
    """Component-aware containment: ``/a/bc`` is not inside ``/a/b``."""
    if path == root:
        return True
    prefix = root if root.endswith(os.sep) else root + os.sep
    return path.startswith(prefix)


def _refuse_cwd(message_id: str) -> AdapterError:
    return AdapterError(ErrorCode.INVALID_INPUT, message_id, path=_CWD_PATH)


def check_cwd(cwd: str, allowed_roots: Sequence[str]) -> str:
    """Resolve ``forwardedProps.iacCode.cwd`` and check it may be used.

    It must be absolute and free of ``..`` segments; symlinks are resolved;
    with ``allowed_roots`` (each resolved too) it must lie inside one of them;
    if it exists it must be a directory. Returns the resolved path. Roots are
    checked before existence so nothing is revealed about paths outside them.
    """
    if not cwd or "\x00" in cwd or not os.path.isabs(cwd):
        raise _refuse_cwd("input_cwd_not_absolute")
    if ".." in cwd.split(os.sep):
        raise _refuse_cwd("input_cwd_not_absolute")
    resolved = os.path.realpath(cwd)
    roots = [os.path.realpath(root) for root in allowed_roots]
    if roots and not any(_is_within(resolved, root) for root in roots):
        raise _refuse_cwd("input_cwd_outside_roots")
    if os.path.exists(resolved) and not os.path.isdir(resolved):
        raise _refuse_cwd("input_cwd_not_directory")
    return resolved
