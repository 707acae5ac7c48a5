"""What a client sends, as the adapter holds it once accepted: frozen models.

These classes say nothing about what is valid: that is the input schema's
(:mod:`.input_schema`), and :mod:`.parsing` builds these models only from
requests it accepts. Field names are the wire's in snake case
(``threadId`` -> ``thread_id``). Members of the AG-UI envelope that a newer
client may add are not kept.

A conversation is kept as the client sent it, structured by role. The one
message the adapter forwards, the latest user message of a run that starts
a turn, is also held checked in depth, with its images decoded:
:attr:`RunAgentInput.new_user_message`.
"""

from __future__ import annotations

from typing import Any, Final, Literal

import attrs

from .content import JsonObject, SkippedPart, TextPart, UserContent

__all__ = [
    "NOT_ON_THE_WIRE",
    "ActivityMessage",
    "AlibabaCloudCredentials",
    "AssistantMessage",
    "CancelRequest",
    "ConnectRequest",
    "ContextItem",
    "DeveloperMessage",
    "ForwardedProps",
    "FunctionCall",
    "IacCodeProps",
    "Message",
    "NewUserMessage",
    "ReasoningMessage",
    "ResumeEntry",
    "RunAgentInput",
    "SystemMessage",
    "ThinkingOptions",
    "ToolCall",
    "ToolMessage",
    "UserMessage",
    "latest_user_message",
]

NOT_ON_THE_WIRE: Final = "aguiadapter.not_on_the_wire"
"""``attrs`` field metadata: the field is computed, never read from a request."""


# --- forwardedProps.iacCode ------------------------------------------------


@attrs.frozen(kw_only=True)
class ThinkingOptions:
    """``forwardedProps.iacCode.thinking``: per-request thinking overrides."""

    enabled: bool | None = None
    effort: str | None = None
    budget: int | None = None


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
    ros_invocation_id: str
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

    def secret_values(self) -> tuple[str, ...]:
        """The credentials this request forwards: never to be logged or shown back."""
        cloud = self.alibaba_cloud
        values = (self.llm_api_key,) if cloud is None else (
            self.llm_api_key, cloud.access_key_id, cloud.access_key_secret, cloud.security_token
        )
        return tuple(value for value in values if value)


@attrs.frozen(kw_only=True)
class ForwardedProps:
    """``forwardedProps``: must hold ``iacCode``; other members are ignored."""

    iac_code: IacCodeProps


# --- messages ----------------------------------------------------------------

PartsOrText = str | tuple[JsonObject, ...]
"""The content of a history message: text, or parts kept as objects."""


@attrs.frozen(kw_only=True)
class FunctionCall:
    """The name and the JSON-encoded arguments of a tool call."""

    name: str
    arguments: str


@attrs.frozen(kw_only=True)
class ToolCall:
    """A tool call made by an assistant message."""

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall
    encrypted_value: str | None = None
    metadata: JsonObject | None = None


@attrs.frozen(kw_only=True)
class _Message:
    """What every message of the conversation carries (AG-UI 1.0's ``BaseMessage``)."""

    id: str
    encrypted_value: str | None = None
    metadata: JsonObject | None = None
    subagent_run_id: str | None = None


@attrs.frozen(kw_only=True)
class UserMessage(_Message):
    """A user message of the conversation, as the client sent it."""

    role: Literal["user"] = "user"
    content: PartsOrText = attrs.field(repr=False)
    name: str | None = None


@attrs.frozen(kw_only=True)
class NewUserMessage:
    """The user message a new turn sends to the runtime, checked in depth."""

    id: str
    content: UserContent
    #: Parts the run leaves out because the runtime cannot use them (AG-UI 1.0 profile).
    skipped: tuple[SkippedPart, ...] = ()

    @property
    def text(self) -> str:
        """The text of the message, parts joined by blank lines."""
        if isinstance(self.content, str):
            return self.content
        return "\n\n".join(part.text for part in self.content if isinstance(part, TextPart))


@attrs.frozen(kw_only=True)
class AssistantMessage(_Message):
    """A message from the agent: text, tool calls, or both."""

    role: Literal["assistant"] = "assistant"
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] | None = None
    name: str | None = None


@attrs.frozen(kw_only=True)
class ToolMessage(_Message):
    """The result of a tool call."""

    role: Literal["tool"] = "tool"
    content: PartsOrText
    tool_call_id: str
    error: str | None = None


@attrs.frozen(kw_only=True)
class SystemMessage(_Message):
    """Instructions from the system."""

    role: Literal["system"] = "system"
    content: str
    name: str | None = None


@attrs.frozen(kw_only=True)
class DeveloperMessage(_Message):
    """Instructions from the application developer."""

    role: Literal["developer"] = "developer"
    content: str
    name: str | None = None


@attrs.frozen(kw_only=True)
class ReasoningMessage(_Message):
    """A span of the agent's reasoning, kept in the conversation."""

    role: Literal["reasoning"] = "reasoning"
    content: str


@attrs.frozen(kw_only=True)
class ActivityMessage:
    """Structured progress kept as a message (``@ag-ui/client`` strips these; AG-UI 1.0 gives it
    no ``encryptedValue``)."""

    id: str
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


# --- the envelope --------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ContextItem:
    """A named piece of ambient context (kept, not forwarded)."""

    description: str
    value: str


@attrs.frozen(kw_only=True)
class ResumeEntry:
    """The answer to one interrupt; ``payload`` is ``None`` when absent."""

    interrupt_id: str
    status: Literal["resolved", "cancelled"]
    payload: Any = None
    metadata: JsonObject | None = None


@attrs.frozen(kw_only=True)
class RunAgentInput:
    """A request to run (or resume) the agent on a thread."""

    thread_id: str
    run_id: str
    parent_run_id: str | None = None
    state: Any = attrs.field(factory=dict)
    messages: tuple[Message, ...]
    tools: tuple[JsonObject, ...] = ()
    context: tuple[ContextItem, ...] = ()
    forwarded_props: ForwardedProps
    resume: tuple[ResumeEntry, ...] | None = None
    protocol_version: str | None = None
    new_user_message: NewUserMessage | None = attrs.field(default=None, metadata={NOT_ON_THE_WIRE: True})

    @property
    def iac_code(self) -> IacCodeProps:
        """Shortcut to ``forwardedProps.iacCode``."""
        return self.forwarded_props.iac_code

    @property
    def is_resume(self) -> bool:
        """Whether this run answers interrupts rather than starting a turn."""
        return bool(self.resume)


@attrs.frozen(kw_only=True)
class CancelRequest:
    """The body of the cancel extension route."""

    thread_id: str
    ros_invocation_id: str


def latest_user_message(run_input: RunAgentInput) -> NewUserMessage | None:
    """The latest user message of a run that starts a turn, checked in depth.

    ``None`` for a resume: it sends no message, so its history is not
    checked beyond AG-UI's own shape.
    """
    return run_input.new_user_message


@attrs.frozen(kw_only=True)
class ConnectRequest:
    """The body of ``POST /connect``: which thread, the hydrate run's id, and
    the iac-code extension when the client sent it (for its ``userId``)."""

    thread_id: str
    run_id: str | None = None
    iac_code: IacCodeProps | None = None
