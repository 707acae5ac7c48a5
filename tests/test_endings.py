"""How a run that went wrong ends (runs/endings.py), as a table, and the
shell's rule that a lost write changes nothing."""

from __future__ import annotations

import copy

import pytest

from aguiadapter.a2a import wire
from aguiadapter.a2a.client import A2ARpcError, A2AUnavailable
from aguiadapter.errors import AdapterError, ErrorCode
from aguiadapter.runtime.iac_code import AnswerRefused, TaskMismatch
from aguiadapter.threads import admission
from aguiadapter.threads import machine as tm
from aguiadapter.runs.follow import LostTask
from aguiadapter.runs.endings import End, Ending, Failure, ending_for, failure_of
from aguiadapter.store.contract import LostWrite
from aguiadapter.service.expiry import ExpiryScheduler
from aguiadapter.store.file.store import FileThreadStore
from aguiadapter.service.leases import LeaseKeeper
from aguiadapter.threads.record import ThreadRecord, ThreadState
from aguiadapter.runs.shell import ThreadShell
from aguiadapter.store.contract import PersistenceError

E = ErrorCode
LOST = E.STATE_PERSISTENCE_FAILED

#: (what went wrong, how the run ends)
TABLE = [
    # A lost write: as a crash; the task is cancelled when recovery needs the write.
    (Failure(LOST, lost_write="bind_task"), Ending(End.LOST, LOST, cancel_task=True)),
    (Failure(LOST, lost_write="interrupt"), Ending(End.LOST, LOST, cancel_task=True)),
    (Failure(LOST, lost_write="hand_off"), Ending(End.LOST, LOST, cancel_task=True)),
    (Failure(LOST, lost_write="adopt"), Ending(End.LOST, LOST, cancel_task=True)),
    (Failure(LOST, lost_write="park"), Ending(End.LOST, LOST, cancel_task=True)),
    # ... and never when it carried the person's answer, or the task is done with.
    (Failure(LOST, resuming=True, accepted=True, turn=False, lost_write="accept"), Ending(End.LOST, LOST)),
    (Failure(LOST, resuming=True, lost_write="accept"), Ending(End.LOST, LOST)),
    (Failure(LOST, lost_write="finish"), Ending(End.LOST, LOST)),
    (Failure(LOST, lost_write="reject"), Ending(End.LOST, LOST)),
    (Failure(LOST, lost_write="detach"), Ending(End.LOST, LOST)),
    (Failure(LOST, lost_write="fail"), Ending(End.LOST, LOST)),
    (Failure(LOST, lost_write="cancel"), Ending(End.LOST, LOST)),
    # A resume whose answers the runtime did not take: they stay pending.
    (Failure(E.A2A_UNAVAILABLE, resuming=True, turn=False), Ending(End.REJECT, E.A2A_UNAVAILABLE)),
    # ... unless the request may have reached it: looked at as a dead resume.
    (Failure(E.A2A_UNAVAILABLE, resuming=True, turn=False, sent=True), Ending(End.DETACH, E.A2A_UNAVAILABLE)),
    (Failure(E.A2A_EXECUTION_FAILED, resuming=True, turn=False, sent=False), Ending(End.REJECT, E.A2A_EXECUTION_FAILED)),
    (Failure(E.A2A_EXECUTION_FAILED, resuming=True, turn=False, answer_refused=True),
     Ending(End.REJECT, E.A2A_UNAVAILABLE)),
    (Failure(E.A2A_PROTOCOL_ERROR, resuming=True, turn=False, foreign=True),
     Ending(End.FAIL, E.A2A_PROTOCOL_ERROR, cancel_task=True)),
    (Failure(E.EXECUTION_LOST, resuming=True, turn=False, foreign=True), Ending(End.FAIL, E.EXECUTION_LOST)),
    # The runtime lost the answered input, or waits for one nobody can answer: cancel it.
    (Failure(E.EXECUTION_LOST, resuming=True, turn=False, foreign=True, stuck=True),
     Ending(End.FAIL, E.EXECUTION_LOST, cancel_task=True)),
    # The runtime may carry out answers it took: look again later.
    (Failure(E.A2A_UNAVAILABLE, resuming=True, accepted=True, turn=False), Ending(End.DETACH, E.A2A_UNAVAILABLE)),
    (Failure(E.A2A_UNAVAILABLE, turn=False), Ending(End.DETACH, E.A2A_UNAVAILABLE)),
    # A turn: the runtime is unreachable (nothing to cancel), or it failed.
    (Failure(E.A2A_UNAVAILABLE), Ending(End.FAIL, E.A2A_UNAVAILABLE)),
    (Failure(E.A2A_EXECUTION_FAILED), Ending(End.FAIL, E.A2A_EXECUTION_FAILED, cancel_task=True)),
    (Failure(E.A2A_PROTOCOL_ERROR, foreign=True), Ending(End.FAIL, E.A2A_PROTOCOL_ERROR, cancel_task=True)),
    (Failure(E.EXECUTION_LOST, foreign=True), Ending(End.FAIL, E.EXECUTION_LOST)),
    # The runtime refused the request itself: the caller's input, in its words.
    (Failure(E.A2A_EXECUTION_FAILED, invalid_params="no such pipeline"),
     Ending(End.FAIL, E.INVALID_INPUT, detail="no such pipeline")),
    (Failure(E.A2A_EXECUTION_FAILED, accepted=True, turn=False, invalid_params="x"),
     Ending(End.FAIL, E.A2A_EXECUTION_FAILED, cancel_task=True)),
]


@pytest.mark.parametrize(("failure", "ending"), TABLE)
def test_a_run_gone_wrong_ends_as_the_table_says(failure: Failure, ending: Ending) -> None:
    assert ending_for(failure) == ending


@pytest.mark.parametrize(
    ("exc", "failure"),
    [
        (A2AUnavailable("gone"), Failure(E.A2A_UNAVAILABLE, sent=True)),
        (A2AUnavailable("refused", sent=False), Failure(E.A2A_UNAVAILABLE)),
        (AnswerRefused("no"), Failure(E.A2A_UNAVAILABLE, answer_refused=True)),
        (A2ARpcError(wire.INVALID_PARAMS, "bad image"), Failure(E.A2A_EXECUTION_FAILED, invalid_params="bad image")),
        (TaskMismatch("other task"), Failure(E.A2A_PROTOCOL_ERROR, foreign=True)),
        (LostTask(), Failure(E.EXECUTION_LOST, foreign=True)),
        (LostTask(cancel=True), Failure(E.EXECUTION_LOST, foreign=True, stuck=True)),
        (AdapterError(E.CANCELLED), Failure(E.CANCELLED)),
        (LostWrite("accept", PersistenceError("disk full")), Failure(LOST, lost_write="accept")),
    ],
)
def test_what_stopped_a_run_is_read_as_a_failure(exc: BaseException, failure: Failure) -> None:
    assert failure_of(exc, resuming=False, accepted=False, turn=True) == failure


class FullDisk(FileThreadStore):
    async def save(self, record: ThreadRecord, claim: object = None, *, durable: bool = True) -> None:
        raise PersistenceError("no space left on device")


async def never_expires(thread_id: str) -> None:
    raise AssertionError("nothing expires here")


def running_record() -> ThreadRecord:
    record = ThreadRecord("t", "ctx", "/w", state=ThreadState.RUNNING, active_run_id="r1", task_id="task")
    record.remember_run("r1", "digest")
    return record


@pytest.mark.parametrize(
    "take",
    [
        lambda shell: shell.apply(tm.Finish([])),
        lambda shell: shell.apply(tm.Fail(E.A2A_EXECUTION_FAILED, "failed")),
        lambda shell: shell.apply(tm.Cancel("cancelled")),
        lambda shell: shell.apply(tm.Interrupt([], [])),
        lambda shell: shell.apply(tm.BindTask("task-2", "session-2")),
        lambda shell: shell.apply(tm.Detach(E.A2A_UNAVAILABLE, "gone")),
        lambda shell: shell.apply(tm.Park(10.0)),
    ],
    ids=["finish", "fail", "cancel", "interrupt", "bind_task", "detach", "park"],
)
async def test_a_lost_write_leaves_the_record_in_memory_as_it_was(take, tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = FullDisk(tmp_path)
    claim = await store.claim("t", "test")
    assert claim is not None
    record = running_record()
    before = copy.deepcopy(record)
    shell = ThreadShell(store, ExpiryScheduler(store, never_expires), claim, record, LeaseKeeper(store))
    with pytest.raises(LostWrite):
        await take(shell)
    assert shell.record is record and record == before
    # The run's fallback ending is still allowed (it raised TransitionNotAllowed when the record had moved).
    assert tm.allowed(record, tm.Fail)
    await store.release(claim)


# ------------------------------------------------------------ the run's phase
def test_a_run_moves_through_its_phases_as_the_table_says() -> None:
    from aguiadapter.runs.driver import PHASES, Phase

    assert set(PHASES) == set(Phase), "every phase has its row"
    # Every phase but the end can end (the opening, through a stop or a report).
    for phase in set(Phase) - {Phase.ENDED, Phase.OPENING}:
        assert Phase.ENDED in PHASES[phase], phase
    assert PHASES[Phase.ENDED] == frozenset(), "nothing follows the end"
    # A stopped run never goes back to streaming, with or without a client.
    assert PHASES[Phase.STOPPING] == {Phase.ENDED}
    # A run whose client left never has that client again (a re-attach reads its log).
    assert Phase.RELAYED not in PHASES[Phase.PARKED] | PHASES[Phase.HANDING_OFF]
    # Every phase is reachable from the opening.
    seen, todo = {Phase.OPENING}, [Phase.OPENING]
    while todo:
        for nxt in PHASES[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    assert seen == set(Phase)


def test_every_plan_kind_a_run_carries_out_has_its_opening_and_its_stream() -> None:
    from aguiadapter.runs.opening import OPENINGS
    from aguiadapter.runs.phases import Phase

    # Admission settles an expired or lost thread itself: no run opens for those.
    assert set(OPENINGS) == set(admission.PlanKind) - {admission.PlanKind.EXPIRE, admission.PlanKind.LOST}
    # A run opens to a client, except an adoption (its client reads the log) and a report (over at once).
    begins = {kind: opening.begins for kind, opening in OPENINGS.items()}
    assert begins.pop(admission.PlanKind.ADOPT) is Phase.PARKED and begins.pop(admission.PlanKind.REPORT) is Phase.OVER
    assert set(begins.values()) == {Phase.RELAYED}
