"""A2A messages the adapter sends, built from a parsed AG-UI request.

Request options travel under ``message.metadata.iac_code`` with the names the
runtime reads. Secrets are among them: they are forwarded here and nowhere
else, and this module never logs.
"""

from __future__ import annotations

from typing import Any

from typing import Final

from ..protocol.content import ImagePart, TextPart
from ..protocol.inputs import IacCodeProps, NewUserMessage
from . import wire

#: ``candidatePresentation`` as the protocol reference documents it → as
#: iac-code understands it (0.16.0 honours only ``rich-v1``, and silently
#: falls back to the standard presentation for anything else).
CANDIDATE_PRESENTATIONS: Final = {"standard": "standard", "rich": "rich-v1"}


def runtime_options(props: IacCodeProps, cwd: str) -> dict[str, Any]:
    """``metadata.iac_code`` of a user message: every option that is set."""
    options: dict[str, Any] = {"cwd": cwd, "rosInvocationId": props.ros_invocation_id}
    _put(options, "iac_code_model", props.model)
    _put(options, "iac_code_api_key", props.llm_api_key)
    if props.thinking is not None:
        thinking = props.thinking
        options["thinking"] = {
            key: value
            for key, value in (
                ("enabled", thinking.enabled),
                ("effort", thinking.effort),
                ("budget", thinking.budget),
            )
            if value is not None
        }
    _put(options, "user_id", props.user_id)
    _put(options, "channel", props.channel)
    _put(options, "preferredLanguage", props.preferred_language)
    if props.candidate_presentation is not None:
        options["candidatePresentation"] = CANDIDATE_PRESENTATIONS[props.candidate_presentation]
    _put(options, "run_mode", props.run_mode)
    _put(options, "pipeline_name", props.pipeline_name)
    _put(options, "cleanupOnly", props.cleanup_only)
    cloud = props.alibaba_cloud
    if cloud is not None:
        _put(options, "alibaba_cloud_access_key_id", cloud.access_key_id)
        _put(options, "alibaba_cloud_access_key_secret", cloud.access_key_secret)
        _put(options, "alibaba_cloud_security_token", cloud.security_token)
        _put(options, "alibaba_cloud_region_id", cloud.region_id)
    return options


def build_user_message(
    *,
    context_id: str,
    message: NewUserMessage,
    props: IacCodeProps,
    cwd: str,
    task_id: str | None = None,
) -> dict[str, Any]:
    """A ``ROLE_USER`` message carrying one AG-UI user message."""
    a2a_message: dict[str, Any] = {
        "messageId": message.id,
        "contextId": context_id,
        "role": wire.ROLE_USER,
        "parts": user_parts(message),
        "metadata": {wire.IAC_CODE_KEY: runtime_options(props, cwd)},
    }
    if task_id is not None:
        a2a_message["taskId"] = task_id
    return a2a_message


def user_parts(message: NewUserMessage) -> list[dict[str, Any]]:
    """A2A parts of a user message: text, and images as inline bytes."""
    content = message.content
    if isinstance(content, str):
        return [{"text": content}]
    parts: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, TextPart):
            parts.append({"text": part.text})
        elif isinstance(part, ImagePart):
            # The request's base64 is already what A2A's ``raw`` carries.
            parts.append({"raw": part.source.value, "mediaType": part.source.media_type})
    return parts


def _put(options: dict[str, Any], key: str, value: Any) -> None:
    if value is not None:
        options[key] = value


def permission_part(envelope: dict[str, Any], decision: str) -> dict[str, Any]:
    """The data part that answers a permission envelope, exactly as the
    runtime checks it (``requestTaskId`` is the task the message goes to)."""
    return {
        "data": {
            "schemaVersion": 1,
            "kind": "permission",
            "requestTaskId": envelope.get("requestTaskId"),
            "inputId": envelope.get("inputId"),
            "toolUseId": envelope.get("toolUseId"),
            "decision": decision,
        },
        "mediaType": "application/json",
    }


def answer_message(
    *,
    message_id: str,
    context_id: str,
    task_id: str,
    part: dict[str, Any],
    props: IacCodeProps,
    cwd: str,
) -> dict[str, Any]:
    """A ``ROLE_USER`` message to the waiting task carrying one answer."""
    return {
        "messageId": message_id,
        "contextId": context_id,
        "taskId": task_id,
        "role": wire.ROLE_USER,
        "parts": [part],
        "metadata": {wire.IAC_CODE_KEY: runtime_options(props, cwd)},
    }
