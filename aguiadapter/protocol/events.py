"""AG-UI 1.0 events as plain dicts, and their SSE encoding.

Events are dicts rather than model objects because every runtime event passes
through here: building a small dict and dumping it once is the cheapest thing
Python offers. Builders never put a ``None`` value in an event (AG-UI clients
refuse ``null`` for optional fields).
"""

from __future__ import annotations

from typing import Any, Final

from ..fastjson import dumps

Event = dict[str, Any]

PROTOCOL_VERSION: Final = "1.0"

SESSION_EVENT: Final = "iac-code.session.v1"
ARTIFACT_EVENT: Final = "iac-code.artifact.v1"
TOOL_PROGRESS_EVENT: Final = "iac-code.tool-progress.v1"
PIPELINE_EVENT: Final = "iac-code.pipeline.v1"
#: The thread's runtime left the pool: this turn starts a new conversation on another one.
RUNTIME_CHANGED_EVENT: Final = "iac-code.runtime.changed.v1"
#: Content parts of the user message the run left out (AG-UI 1.0 profile).
INPUT_SKIPPED_EVENT: Final = "iac-code.input.skipped.v1"

HEARTBEAT: Final = b": heartbeat\n\n"
_SEPARATOR: Final = b"\n\ndata: "


def encode_sse(events: list[Event]) -> bytes:
    """Encode events as SSE ``data:`` blocks, LF only, in one buffer."""
    if len(events) == 1:
        return b"data: " + dumps(events[0]) + b"\n\n"
    return b"data: " + _SEPARATOR.join([dumps(event) for event in events]) + b"\n\n"


def compact(value: dict[str, Any]) -> dict[str, Any]:
    """Drop keys whose value is ``None`` (AG-UI refuses ``null`` optionals)."""
    return {key: item for key, item in value.items() if item is not None}


def run_started(thread_id: str, run_id: str, parent_run_id: str | None = None) -> Event:
    """``RUN_STARTED`` carrying the protocol version."""
    event: Event = {
        "type": "RUN_STARTED",
        "threadId": thread_id,
        "runId": run_id,
        "protocolVersion": PROTOCOL_VERSION,
    }
    if parent_run_id is not None:
        event["parentRunId"] = parent_run_id
    return event


def run_finished(
    thread_id: str,
    run_id: str,
    outcome: dict[str, Any],
    usage: list[dict[str, Any]] | None = None,
) -> Event:
    """``RUN_FINISHED`` with an outcome (success or interrupt) and usage."""
    event: Event = {
        "type": "RUN_FINISHED",
        "threadId": thread_id,
        "runId": run_id,
        "outcome": outcome,
    }
    if usage:
        event["usage"] = usage
    return event


def run_cancelled(thread_id: str, run_id: str, usage: list[dict[str, Any]] | None = None) -> Event:
    """``RUN_FINISHED`` of a run stopped on purpose (AG-UI 1.0): the
    cancelled outcome, the usage accrued before the stop, never a ``result``."""
    return run_finished(thread_id, run_id, {"type": "cancelled"}, usage)


def run_error(message: str, code: str) -> Event:
    """``RUN_ERROR`` with a documented code."""
    return {"type": "RUN_ERROR", "message": message, "code": code}


def custom(name: str, value: Any) -> Event:
    """A namespaced ``CUSTOM`` event."""
    return {"type": "CUSTOM", "name": name, "value": value}
