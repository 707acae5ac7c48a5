"""Request bodies into models: checked against the input schema, then structured.

One pass decides what is valid: the compiled :mod:`.input_schema` (and, for
image bytes, :mod:`.content`). Only then does the ``cattrs`` converter build
the models of :mod:`.inputs`; it trusts what it is given, so it neither
coerces nor refuses anything (``1.0`` is the integer ``1`` in JSON Schema
and becomes ``1``).

Every refusal is ``AdapterError(ErrorCode.INVALID_INPUT, message_id,
path=...)`` naming the first offending field in document order by its JSON
path (:mod:`.refusals`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, Literal, get_args, get_origin

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, override

from .content import JsonObject, build_user_content
from .input_schema import (
    CANCEL_REQUEST,
    CONNECT_REQUEST,
    INPUT_SCHEMAS,
    NEW_USER_MESSAGE,
    NEW_USER_MESSAGE_COMPAT,
    RUN_AGENT_INPUT,
)
from .inputs import (
    NOT_ON_THE_WIRE,
    ActivityMessage,
    AssistantMessage,
    CancelRequest,
    ConnectRequest,
    DeveloperMessage,
    IacCodeProps,
    Message,
    NewUserMessage,
    PartsOrText,
    ReasoningMessage,
    RunAgentInput,
    SystemMessage,
    ToolMessage,
    UserMessage,
)
from .profile import DEFAULT_PROFILE, Profile
from .refusals import InputRefusal, first_refusal, refusal_error
from .schema_compiler import compile_schemas, json_equal

__all__ = ["parse_cancel_request", "parse_connect_request", "parse_run_input", "peek_preferred_language"]

_SCHEMAS: Final = compile_schemas(INPUT_SCHEMAS)
_RUN_AGENT_INPUT: Final = _SCHEMAS[RUN_AGENT_INPUT]
_NEW_USER_MESSAGE: Final = _SCHEMAS[NEW_USER_MESSAGE]
_NEW_USER_MESSAGE_COMPAT: Final = _SCHEMAS[NEW_USER_MESSAGE_COMPAT]
_CANCEL_REQUEST: Final = _SCHEMAS[CANCEL_REQUEST]
_CONNECT_REQUEST: Final = _SCHEMAS[CONNECT_REQUEST]

_MESSAGE_CLASSES: Final[Mapping[str, type[Any]]] = {
    "user": UserMessage,
    "assistant": AssistantMessage,
    "tool": ToolMessage,
    "system": SystemMessage,
    "developer": DeveloperMessage,
    "reasoning": ReasoningMessage,
    "activity": ActivityMessage,
}


def _wire_name(name: str) -> str:
    """``thread_id`` -> ``threadId``."""
    head, *rest = name.split("_")
    return head + "".join(word.capitalize() for word in rest)


def _is_literal(type_: object) -> bool:
    return get_origin(type_) is Literal


def _build_converter() -> cattrs.Converter:
    converter = cattrs.Converter(detailed_validation=False)

    def attrs_hook(cls: type[Any]) -> Callable[[Any, Any], Any]:
        overrides: dict[str, Any] = {
            field.name: override(omit=True) if field.metadata.get(NOT_ON_THE_WIRE) else override(
                rename=_wire_name(field.name)
            )
            for field in attrs.fields(cls)
            if field.init
        }
        return make_dict_structure_fn(cls, converter, _cattrs_detailed_validation=False, **overrides)

    def literal_hook(type_: Any) -> Callable[[Any, Any], Any]:
        options = get_args(type_)
        if all(isinstance(option, str) for option in options):
            return lambda value, _: value
        # The matching option itself: 1.0 passes "const": 1 and is stored as 1.
        return lambda value, _: next(option for option in options if json_equal(value, option))

    converter.register_structure_hook_factory(attrs.has, attrs_hook)
    converter.register_structure_hook_factory(_is_literal, literal_hook)
    converter.register_structure_hook(JsonObject, lambda value, _: value)
    converter.register_structure_hook_func(
        lambda type_: type_ == PartsOrText, lambda value, _: value if isinstance(value, str) else tuple(value)
    )
    by_role: dict[str, Callable[[Any, Any], Any]] = {}  # filled below, once every hook is registered
    converter.register_structure_hook_func(
        lambda type_: type_ == Message,
        lambda value, _: by_role[value["role"]](value, _MESSAGE_CLASSES[value["role"]]),
    )
    by_role.update({role: converter.get_structure_hook(cls) for role, cls in _MESSAGE_CLASSES.items()})
    # Generate the other hooks now rather than on the first request.
    for model in (RunAgentInput, CancelRequest):
        converter.get_structure_hook(model)
    return converter


_CONVERTER: Final = _build_converter()


def _new_user_message(payload: object) -> tuple[int, object] | None:
    """The message a new turn sends, and where it sits in ``messages``.

    ``None`` when there is none to check: a resume (non-empty ``resume``)
    sends no message.
    """
    if not isinstance(payload, dict):
        return None
    resume, messages = payload.get("resume"), payload.get("messages")
    if (isinstance(resume, list) and resume) or not isinstance(messages, list):
        return None
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, dict) and message.get("role") == "user":
            return index, message
    return None


def parse_run_input(payload: object, profile: Profile = DEFAULT_PROFILE) -> RunAgentInput:
    """Check a decoded JSON body and build its :class:`RunAgentInput`.

    Under AG-UI 1.0 a content part of the new user message the runtime
    cannot use is skipped (:attr:`NewUserMessage.skipped`); the
    ``iac-code-agui`` profile refuses it. Raises
    ``AdapterError(INVALID_INPUT)`` naming the first offending field in
    document order.
    """
    new = _new_user_message(payload)
    schema = _NEW_USER_MESSAGE_COMPAT if profile.refuses_unusable_parts else _NEW_USER_MESSAGE
    if not _RUN_AGENT_INPUT.is_valid(payload) or (new is not None and not schema.is_valid(new[1])):
        # The new message's findings first: of two at one place, its message says more.
        findings = [] if new is None else schema.findings(new[1], ("messages", new[0]))
        raise first_refusal([*findings, *_RUN_AGENT_INPUT.findings(payload)], payload)
    run_input: RunAgentInput = _CONVERTER.structure(payload, RunAgentInput)
    if new is None:
        return run_input
    index, message = new
    assert isinstance(message, dict)  # the schema says so
    try:
        content, skipped = build_user_content(message["content"], skip_unusable=not profile.refuses_unusable_parts)
    except InputRefusal as refusal:
        # from None: the raw values the chain may hold have no business in a log.
        raise refusal_error(refusal.within("messages", index, "content")) from None
    checked = NewUserMessage(id=message["id"], content=content, skipped=skipped)
    return attrs.evolve(run_input, new_user_message=checked)


def parse_cancel_request(payload: object) -> CancelRequest:
    """Check and build the body of the cancel route."""
    if not _CANCEL_REQUEST.is_valid(payload):
        raise first_refusal(_CANCEL_REQUEST.findings(payload), payload)
    request: CancelRequest = _CONVERTER.structure(payload, CancelRequest)
    return request


def parse_connect_request(payload: object) -> ConnectRequest:
    """Check and build the body of ``POST /connect`` (see ``ConnectRequest``
    in :mod:`.input_schema`: the members that mean something on a connect
    are checked as ``POST /`` checks them)."""
    if not _CONNECT_REQUEST.is_valid(payload):
        raise first_refusal(_CONNECT_REQUEST.findings(payload), payload)
    assert isinstance(payload, dict)  # the schema says so
    forwarded = payload.get("forwardedProps")
    raw = forwarded.get("iacCode") if isinstance(forwarded, dict) else None
    return ConnectRequest(
        thread_id=payload["threadId"],
        run_id=payload.get("runId"),
        iac_code=None if raw is None else _CONVERTER.structure(raw, IacCodeProps),
    )


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
