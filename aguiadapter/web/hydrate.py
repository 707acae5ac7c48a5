"""The hydrate run of ``POST /connect``: what a reloaded page is told, as events.

Pure: from what the route gathered (the thread's record, a page of its
history or the news that it cannot be read, the pipeline's state) to the
events of one lawful AG-UI run::

    RUN_STARTED
    MESSAGES_SNAPSHOT            (or CUSTOM iac-code.history.v1: unavailable)
    ACTIVITY_SNAPSHOT            (a pipeline thread: where the pipeline stands)
    RUN_FINISHED                 (outcome: the pending interrupts, or success)

A client's reducer *replaces* its messages with a snapshot's, so a snapshot
never holds a message that a run streamed after it re-creates: on a thread
with a run in progress it stops where that run starts
(:func:`before_active_run`), and the route streams that run from its log.
When the history cannot be read there is no snapshot at all (an empty one
would be presented as the truth): the page keeps what it shows and is told
why (:data:`HISTORY_EVENT`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from ..threads.record import RunKind, ThreadRecord, ThreadState
from ..translate.pipeline import activity_snapshot
from ..protocol.events import Event, custom, run_finished, run_started

#: The ``CUSTOM`` event that says the hydrate run has no history to give.
HISTORY_EVENT: Final = "iac-code.history.v1"
#: The key of ``MESSAGES_SNAPSHOT.metadata`` this adapter writes.
METADATA_KEY: Final = "iacCode"

Message = Mapping[str, Any]


@attrs.frozen
class HistoryPage:
    """The newest turns of a thread (oldest first), and where older ones begin."""

    messages: Sequence[Message]
    #: The cursor of the turns before these (``?before=`` of the messages
    #: route); ``None`` when the page starts at the thread's first turn.
    before: str | None = None


@attrs.frozen
class HistoryMissing:
    """The history cannot be read now (the runtime does not serve it)."""

    #: The caller-language sentence the page may show.
    message: str
    #: When asking again may help, in seconds (``None``: not known).
    retry_after: int | None = None


@attrs.frozen
class Hydration:
    """Everything a hydrate run says."""

    thread_id: str
    run_id: str
    history: HistoryPage | HistoryMissing
    #: The AG-UI ``Interrupt`` objects still waiting for an answer.
    interrupts: Sequence[Mapping[str, Any]] = ()
    #: The pipeline's ``ACTIVITY_SNAPSHOT`` (a pipeline thread), else ``None``.
    activity: Event | None = None


def hydrate_events(hydration: Hydration) -> list[Event]:
    """The events of the hydrate run, in order."""
    events = [run_started(hydration.thread_id, hydration.run_id)]
    history = hydration.history
    if isinstance(history, HistoryPage):
        events.append(messages_snapshot(history))
    else:
        value: dict[str, Any] = {
            "schemaVersion": 1, "status": "unavailable", "code": "HISTORY_UNAVAILABLE", "message": history.message,
        }
        if history.retry_after is not None:
            value["retryAfterSeconds"] = history.retry_after
        events.append(custom(HISTORY_EVENT, value))
    if hydration.activity is not None:
        events.append(hydration.activity)
    interrupts = [dict(item) for item in hydration.interrupts]
    outcome = {"type": "interrupt", "interrupts": interrupts} if interrupts else {"type": "success"}
    events.append(run_finished(hydration.thread_id, hydration.run_id, outcome))
    return events


def messages_snapshot(page: HistoryPage) -> Event:
    """``MESSAGES_SNAPSHOT`` of a page; ``metadata.iacCode.before`` is the
    cursor of the older turns, absent when there are none."""
    meta: dict[str, Any] = {"schemaVersion": 1}
    if page.before is not None:
        meta["before"] = page.before
    return {"type": "MESSAGES_SNAPSHOT", "messages": [dict(item) for item in page.messages],
            "metadata": {METADATA_KEY: meta}}


def before_active_run(messages: Sequence[Message], record: ThreadRecord) -> list[Message]:
    """The history a snapshot may hold while ``record``'s run goes on: what
    precedes that run, whose own events are streamed from its log after it.

    A turn's run begins with the turn's user message, which its log does not
    repeat: the snapshot ends with that message (the newest user message).
    A run that answers interrupts goes on with a turn begun earlier, from the
    tool calls the answers let go on: the snapshot ends before the first
    result of one of them, which the run streams (before anything else the
    runtime did past the answer: it waited there). When the runtime has not
    written that result yet, nothing of the run is in the history.
    """
    if record.state is not ThreadState.RUNNING or record.active_run_id is None:
        return list(messages)
    last_user = max((i for i, item in enumerate(messages) if item.get("role") == "user"), default=-1)
    if (record.active_run_kind or RunKind.TURN) is RunKind.TURN:
        return list(messages[: last_user + 1])
    answered = resumed_tool_calls(record)
    for index in range(last_user + 1, len(messages)):
        item = messages[index]
        if item.get("role") == "tool" and item.get("toolCallId") in answered:
            return list(messages[:index])
    return list(messages)


def resumed_tool_calls(record: ThreadRecord) -> set[str]:
    """The tool calls whose results the active run reports: those its
    answers (still pending while they go out, or taken) let go on."""
    found = {item.envelope.tool_use_id for item in record.pending_interrupts}
    found.update(record.unreported_tools())
    return {item for item in found if item}


def announced_interrupts(record: ThreadRecord, now: float) -> list[dict[str, Any]]:
    """The interrupts a hydrate run restores: those an interrupted thread
    waits for and that have not expired (a running thread's are the active
    run's business: it ends with them if it must)."""
    if record.state is not ThreadState.INTERRUPTED:
        return []
    return [item.interrupt for item in record.pending_interrupts if item.expires_at > now]


def pipeline_activity(record: ThreadRecord, state: Mapping[str, Any] | None) -> Event | None:
    """The pipeline's ``ACTIVITY_SNAPSHOT`` from the runtime's pipeline state
    route (the same message id as a run's, so a client replaces its view)."""
    if state is None or record.pipeline is None:
        return None
    snapshot = state.get("snapshot")
    if not isinstance(snapshot, dict):
        return None
    run_id = snapshot.get("pipelineRunId") or record.pipeline.pipeline_run_id
    run_id = run_id if isinstance(run_id, str) else None
    return activity_snapshot(f"pipeline:{run_id or record.thread_id}", run_id, snapshot)


def hydrate_run_id(requested: str | None, record: ThreadRecord) -> str:
    """The hydrate run's id: the client's ``runId`` (so its run is the one it
    asked for), or a fresh one when it sent none or named one of the
    thread's runs (two runs of one stream never share an id)."""
    if requested and requested not in record.runs:
        return requested
    return f"connect-{uuid.uuid4()}"
