"""The thread machine: transitions, refusals, and write-before-announce."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aguiadapter.errors import AdapterError, ErrorCode
from aguiadapter.threads.diagram import render_mermaid
from aguiadapter.threads.machine import REFUSALS, RunBinding, ThreadMachine, apply, restore_machine
from aguiadapter.threads.record import ThreadRecord
from aguiadapter.threads.file_store import FileThreadStore
from aguiadapter.threads.store import PersistenceError

DOCS = Path(__file__).resolve().parents[1] / "docs"


class Sink:
    """Collects what the machine announces."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    async def emit(self, events: list[dict[str, Any]]) -> None:
        self.events.extend(events)


class FailingStore(FileThreadStore):
    """A store whose disk is full."""

    async def save(self, record: ThreadRecord, claim: Any = None) -> None:
        raise PersistenceError("disk full")


def binding(run_id: str = "run-1") -> RunBinding:
    return RunBinding(run_id=run_id, digest="d", execution_id="exec-1", ros_invocation_id="inv-1")


async def machine_in(state: str, tmp_path: Path, store: FileThreadStore | None = None) -> tuple[ThreadMachine, Sink]:
    record = ThreadRecord(thread_id="thread-1", context_id="ctx-1", cwd="/w", state=state)
    sink = Sink()
    machine = await restore_machine(record, store or FileThreadStore(tmp_path), sink=sink)
    return machine, sink


TRANSITIONS = [
    ("idle", "start_turn", {"binding": binding()}, "running", "RUN_STARTED"),
    ("terminal", "start_turn", {"binding": binding()}, "running", "RUN_STARTED"),
    ("interrupted", "resume", {"binding": binding()}, "running", "RUN_STARTED"),
    ("running", "finish", {"run_id": "run-1"}, "idle", "RUN_FINISHED"),
    ("running", "interrupt", {"run_id": "run-1", "pending": [{"interrupt": {"id": "i", "reason": "input_required"}}]},
     "interrupted", "RUN_FINISHED"),
    ("running", "fail", {"code": ErrorCode.A2A_EXECUTION_FAILED, "message": "m"}, "terminal", "RUN_ERROR"),
    ("running", "cancel", {"code": ErrorCode.CANCELLED, "message": "m"}, "terminal", "RUN_ERROR"),
    ("interrupted", "cancel", {"code": ErrorCode.CANCELLED, "message": "m"}, "terminal", "RUN_ERROR"),
    ("interrupted", "expire", {"code": ErrorCode.EXECUTION_EXPIRED, "message": "m"}, "terminal", "RUN_ERROR"),
    ("running", "lose", {"code": ErrorCode.EXECUTION_LOST, "message": "m"}, "terminal", "RUN_ERROR"),
    ("interrupted", "lose", {"code": ErrorCode.EXECUTION_LOST, "message": "m"}, "terminal", "RUN_ERROR"),
    ("running", "reject", {"code": ErrorCode.A2A_UNAVAILABLE, "message": "m"}, "interrupted", "RUN_ERROR"),
]


def test_every_transition_of_the_machine_is_tested() -> None:
    declared = {
        (state.id, event)
        for state in ThreadMachine.states
        for transition in state.transitions
        for event in transition.event.split()
    }
    assert len(declared) == 12
    tested = {(source, event) for source, event, *_ in TRANSITIONS}
    assert declared == tested


async def test_a_refused_answer_keeps_the_interrupts_pending(tmp_path: Path) -> None:
    machine, _ = await machine_in("running", tmp_path)
    machine.record.pending_interrupts = [{"interrupt": {"id": "i"}}]
    await apply(machine, "reject", code=ErrorCode.A2A_UNAVAILABLE, message="m")
    assert machine.record.state == "interrupted" and machine.record.pending_interrupts == [{"interrupt": {"id": "i"}}]


@pytest.mark.parametrize(("source", "event", "kwargs", "target", "announced"), TRANSITIONS)
async def test_each_transition_moves_persists_and_announces(
    tmp_path: Path, source: str, event: str, kwargs: dict[str, Any], target: str, announced: str
) -> None:
    machine, sink = await machine_in(source, tmp_path)
    await apply(machine, event, **kwargs)
    assert machine.record.state == target
    assert [e["type"] for e in sink.events] == [announced]
    stored = await FileThreadStore(tmp_path).load("thread-1")
    assert stored is not None and stored.state == target


@pytest.mark.parametrize(("event", "state"), sorted(REFUSALS))
async def test_refused_transitions_raise_their_documented_code(tmp_path: Path, event: str, state: str) -> None:
    machine, sink = await machine_in(state, tmp_path)
    with pytest.raises(AdapterError) as caught:
        await apply(machine, event, binding=binding())
    assert caught.value.code is REFUSALS[(event, state)]
    assert machine.record.state == state and sink.events == []


@pytest.mark.parametrize("event", ["start_turn", "resume"])
async def test_a_thread_waiting_for_the_user_refuses_everything_but_resume_cancel_expiry(
    tmp_path: Path, event: str
) -> None:
    machine, _ = await machine_in("interrupted", tmp_path)
    if event == "start_turn":
        with pytest.raises(AdapterError) as caught:
            await apply(machine, event, binding=binding())
        assert caught.value.code is ErrorCode.RESUME_REQUIRED
    else:
        await apply(machine, event, binding=binding())
        assert machine.record.state == "running"


async def test_nothing_is_announced_when_the_record_cannot_be_written(tmp_path: Path) -> None:
    machine, sink = await machine_in("running", tmp_path, FailingStore(tmp_path))
    with pytest.raises(PersistenceError):
        await apply(machine, "interrupt", run_id="run-1", pending=[{"interrupt": {"id": "i", "reason": "input_required"}}])
    assert sink.events == []
    assert machine.record.state == "running"


async def test_an_error_still_reaches_the_client_when_the_disk_fails(tmp_path: Path) -> None:
    machine, sink = await machine_in("running", tmp_path, FailingStore(tmp_path))
    await apply(machine, "fail", code=ErrorCode.STATE_PERSISTENCE_FAILED, message="m")
    assert sink.events == [{"type": "RUN_ERROR", "message": "m", "code": "STATE_PERSISTENCE_FAILED"}]


async def test_restoring_a_stored_state_runs_no_entry_action(tmp_path: Path) -> None:
    store = FailingStore(tmp_path)
    machine, sink = await machine_in("interrupted", tmp_path, store)
    assert machine.record.state == "interrupted" and sink.events == []


async def test_start_turn_binds_the_run_and_a_new_execution(tmp_path: Path) -> None:
    machine, _ = await machine_in("idle", tmp_path)
    await apply(machine, "start_turn", binding=binding("run-7"))
    record = machine.record
    assert record.active_run_id == "run-7" and record.execution_id == "exec-1"
    assert "run-7" in record.runs
    await apply(machine, "finish", run_id="run-7")
    assert record.active_run_id is None and record.runs["run-7"].outcome == "success"


def test_the_state_diagram_in_the_docs_is_generated_from_the_machine() -> None:
    text = (DOCS / "thread-states.md").read_text()
    assert render_mermaid() in text, "docs/thread-states.md is stale: run `python -m aguiadapter diagram`"
