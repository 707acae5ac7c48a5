"""The durable record of one AG-UI thread.

A :class:`ThreadRecord` is the thread machine's model: the machine keeps its
state in ``record.state`` and the store writes the whole record on every
transition. It holds identifiers and idempotency data only; it has no field a
secret could go into (request secrets are forwarded to A2A and forgotten).
"""

from __future__ import annotations

import json
from typing import Any

import attrs
import cattrs

from ..translate.pipeline import PipelineState

RECORD_SCHEMA_VERSION = 1
#: How many (runId → digest) entries a thread keeps for idempotency checks.
RUN_HISTORY_LIMIT = 1000


@attrs.define
class RunEntry:
    """One admitted run: the digest of its request and how it ended."""

    digest: str
    outcome: str | None = None


@attrs.define
class ThreadRecord:
    """Everything the adapter must remember about a thread between runs."""

    thread_id: str
    context_id: str
    cwd: str
    user_id: str | None = None
    state: str = "idle"
    session_id: str | None = None
    execution_id: str | None = None
    ros_invocation_id: str | None = None
    task_id: str | None = None
    active_run_id: str | None = None
    #: The id of the newest user message already sent to the runtime.
    last_user_message_id: str | None = None
    last_error: str | None = None
    runs: dict[str, RunEntry] = attrs.Factory(dict)
    pending_interrupts: list[dict[str, Any]] = attrs.Factory(list)
    #: interruptId → digest of the answer the runtime accepted.
    applied_answers: dict[str, str] = attrs.Factory(dict)
    #: The current execution's pipeline cursor (sequence, open steps).
    pipeline: PipelineState | None = None
    updated_at: float = 0.0
    version: int = 0
    schema_version: int = RECORD_SCHEMA_VERSION

    def remember_run(self, run_id: str, digest: str) -> None:
        """Record an admitted run, forgetting the oldest beyond the limit."""
        self.runs[run_id] = RunEntry(digest)
        while len(self.runs) > RUN_HISTORY_LIMIT:
            del self.runs[next(iter(self.runs))]

    def remember_answer(self, interrupt_id: str, digest: str) -> None:
        """Record an applied answer, forgetting the oldest beyond the limit."""
        self.applied_answers[interrupt_id] = digest
        while len(self.applied_answers) > RUN_HISTORY_LIMIT:
            del self.applied_answers[next(iter(self.applied_answers))]


_converter = cattrs.Converter(forbid_extra_keys=False)


def record_to_json(record: ThreadRecord) -> bytes:
    """Serialize a record (stable key order, UTF-8)."""
    return json.dumps(_converter.unstructure(record), ensure_ascii=False, indent=1).encode()


def record_from_json(data: bytes) -> ThreadRecord:
    """Parse a stored record; raises ``ValueError`` when it is not one."""
    try:
        return _converter.structure(json.loads(data), ThreadRecord)
    except (ValueError, TypeError, KeyError, cattrs.BaseValidationError) as exc:
        raise ValueError(f"not a thread record: {exc}") from exc
