"""iac-code pipeline events: what goes out, under which names, and only once.

Pure helpers for :class:`~aguiadapter.translate.mapper.RunTranslator`. A
pipeline spans many AG-UI runs, so its cursor (the last sequence seen, the
steps still open, the newest event ids) lives in the thread record as a
:class:`PipelineState` and comes back with the next run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs

from ..a2a import wire

PIPELINE_ACTIVITY: Final = "iac-code.pipeline.v1"

#: Pipeline event types relayed as ``CUSTOM iac-code.pipeline.v1``, and only these.
CUSTOM_TYPES: Final = frozenset(
    {
        "pipeline_started", "pipeline_resumed", "pipeline_completed", "pipeline_error",
        "pipeline_warning", "backup_blocked",
        "candidate_started", "candidate_completed", "candidate_failed", "candidate_interrupted",
        "candidate_restart_requested", "candidate_selected", "candidate_detail_shown",
        "candidate_step_failed",
        "sub_pipeline_started", "sub_pipeline_completed", "sub_step_failed", "step_failed",
        "stack_progress", "stack_instances_progress", "stack_current_changed",
        "cleanup_started", "cleanup_progress", "cleanup_completed", "cleanup_failed",
        "rollback_triggered", "rollback_completed",
        "context_compaction_started", "context_compacted", "context_compaction_failed",
        "fields_marked_stale",
        "diagram_shown", "mcp_status", "tool_progress",
    }
)
STEP_OPENERS: Final = frozenset({"step_started", "candidate_step_started"})
STEP_CLOSERS: Final = frozenset({"step_completed", "step_failed", "candidate_step_completed", "candidate_step_failed"})
#: Events that are work done inside their step (they open it when it is not open).
STEP_CONTENT: Final = frozenset({"text_delta", "thinking_delta", "tool_started", "tool_result"})
#: How many recent event ids a thread remembers for replay detection.
EVENT_ID_WINDOW: Final = 256


@attrs.define
class PipelineState:
    """The durable cursor of a thread's pipeline."""

    pipeline_run_id: str | None = None
    last_sequence: int = 0
    #: Step keys opened and not yet finished, in opening order.
    open_steps: list[str] = attrs.Factory(list)
    recent_event_ids: list[str] = attrs.Factory(list)

    def is_replay(self, envelope: Mapping[str, Any]) -> bool:
        """Seen before (same event id) or behind the sequence cursor."""
        event_id = envelope.get("eventId")
        if isinstance(event_id, str) and event_id in self.recent_event_ids:
            return True
        sequence = wire.as_int(envelope.get("sequence"))
        return sequence is not None and sequence <= self.last_sequence

    def remember(self, envelope: Mapping[str, Any]) -> None:
        """Advance the cursor past this event."""
        event_id = envelope.get("eventId")
        if isinstance(event_id, str) and event_id:
            self.recent_event_ids.append(event_id)
            del self.recent_event_ids[:-EVENT_ID_WINDOW]
        sequence = wire.as_int(envelope.get("sequence"))
        if sequence is not None and sequence > self.last_sequence:
            self.last_sequence = sequence
        run_id = envelope.get("pipelineRunId")
        if isinstance(run_id, str) and run_id:
            self.pipeline_run_id = run_id


def without_nulls(value: Any) -> Any:
    """``value`` with every ``null`` object member left out, at any depth."""
    if isinstance(value, dict):
        return {key: without_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [without_nulls(item) for item in value]
    return value



def _coordinate_id(value: Any) -> str | None:
    if not isinstance(value, Mapping):
        return None
    for key in ("id", "subPipelineId", "runId"):
        found = value.get(key)
        if isinstance(found, str) and found:
            return found
    return None


def step_key(envelope: Mapping[str, Any]) -> str | None:
    """A key for the envelope's step, distinct across parallel candidates."""
    step_id = _coordinate_id(envelope.get("candidateStep")) or _coordinate_id(envelope.get("step"))
    if step_id is None:
        return None
    candidate_id = _coordinate_id(envelope.get("candidate"))
    return f"candidate:{candidate_id}:{step_id}" if candidate_id else f"step:{step_id}"


def step_name(key: str) -> str:
    """The AG-UI step name of a key: the plain step id for pipeline steps,
    the candidate-qualified key for candidate steps (unique in parallel)."""
    return key[len("step:"):] if key.startswith("step:") else key


def text_key(envelope: Mapping[str, Any]) -> str:
    """Which text stream a delta belongs to: one per candidate and step."""
    parts = [str(envelope.get("scope") or "pipeline")]
    for coordinate in ("candidate", "candidateStep", "step"):
        found = _coordinate_id(envelope.get(coordinate))
        if found is not None and found not in parts:
            parts.append(found)
    return ":".join(parts)


def envelopes_of(iac: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The pipeline envelopes of one status update (single or batch)."""
    found: list[dict[str, Any]] = []
    single = iac.get("pipeline")
    if isinstance(single, dict):
        found.append(single)
    batch = iac.get("pipelineBatch")
    if isinstance(batch, dict):
        found.extend(item for item in batch.get("events") or () if isinstance(item, dict))
    return found


def activity_snapshot(message_id: str, pipeline_run_id: str | None, snapshot: dict[str, Any]) -> dict[str, Any]:
    """``ACTIVITY_SNAPSHOT`` that restores a client's pipeline view (keys
    the runtime sent as ``null`` are left out, as AG-UI wants of absent values)."""
    content: dict[str, Any] = {"schemaVersion": 1, "snapshot": without_nulls(snapshot)}
    if pipeline_run_id is not None:
        content["pipelineRunId"] = pipeline_run_id
    return {
        "type": "ACTIVITY_SNAPSHOT",
        "messageId": message_id,
        "activityType": PIPELINE_ACTIVITY,
        "content": content,
        "replace": True,
    }
