"""The thread machine, without a socket, a store or a clock.

Every transition the machine declares has a row in ``SCENARIOS``: the state
it starts from, how it is taken, the state it reaches and what it announces.
The rows are looked up from the machine's own transition list, so a new
transition without a scenario fails here. Refusals are read from the same
module's table; recovery after a crash is a transition like the others.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from ag_ui.core import RunFinishedEvent

from aguiadapter.errors import AdapterError, ErrorCode
from aguiadapter.protocol.inputs import ResumeEntry
from aguiadapter.protocol.resume import answer_digest, check_resume
from aguiadapter.runtime.envelope import envelope_of
from aguiadapter.runtime.evidence import Findings, InputStatus, TaskFate
from aguiadapter.protocol.profile import Profile
from aguiadapter.threads import admission
from aguiadapter.threads import machine as tm
from aguiadapter.threads.diagram import render_all, render_footnotes
from aguiadapter.threads.record import PendingInterrupt, RunKind, RunPhase, ThreadRecord, ThreadState

DOCS = Path(__file__).resolve().parents[2] / "docs"
NOW = 1_800_000_000.0


def binding(run_id: str = "run-2") -> tm.RunBinding:
    return tm.RunBinding(run_id=run_id, digest=f"digest-{run_id}", execution_id="exec-1", ros_invocation_id="inv-1")


def permission(input_id: str = "permission-1", **fields: Any) -> PendingInterrupt:
    envelope = envelope_of({"kind": "permission", "inputId": input_id, "toolUseId": f"call-{input_id}",
                            "required": True, **fields})
    return tm.new_pending(envelope, expires_at=NOW + 600, raised_after=7)


def allow(item: PendingInterrupt, decision: str = "allow_once") -> ResumeEntry:
    return ResumeEntry(interrupt_id=item.id, status="resolved", payload={"decision": decision})


def answers_to(record: ThreadRecord, *entries: ResumeEntry) -> list[Any]:
    return check_resume(entries, [item.interrupt for item in record.pending_interrupts], {})


def record_in(state: ThreadState, **fields: Any) -> ThreadRecord:
    record = ThreadRecord(thread_id="thread-1", context_id="ctx-1", cwd="/w", state=state,
                          execution_id="exec-1", ros_invocation_id="inv-1", task_id="task-1", **fields)
    if state is ThreadState.RUNNING:
        record.remember_run("run-1", "digest-run-1")
        record.active_run_id = record.active_run_id or "run-1"
        record.active_run_kind = record.active_run_kind or RunKind.TURN
        record.run_phase = fields.get("run_phase", RunPhase.RELAYED)
    return record


def interrupted() -> ThreadRecord:
    return record_in(ThreadState.INTERRUPTED, pending_interrupts=[permission()])


def resuming() -> ThreadRecord:
    """A resume whose process died: its answer may or may not have arrived."""
    record = interrupted()
    tm.apply(record, tm.Resume(binding("run-1"), answers_to(record, allow(record.pending_interrupts[0]))))
    return record


def carrying_on() -> ThreadRecord:
    """After a crash: the runtime took the answer and works on, no stream follows it."""
    record = resuming()
    tm.apply(record, tm.Recover(found(TaskFate.WORKS, taken=True), expires_at=NOW))
    return record


def settled_unreported() -> ThreadRecord:
    record = resuming()
    tm.apply(record, tm.Recover(found(TaskFate.TURN_ENDED, taken=True), expires_at=NOW))
    return record


def parked() -> ThreadRecord:
    """A run whose client went away, within the disconnect grace."""
    record = record_in(ThreadState.RUNNING)
    tm.apply(record, tm.Park(NOW + 30))
    return record


def handed_off() -> ThreadRecord:
    """A run whose replica shut down and left the runtime's task running."""
    record = record_in(ThreadState.RUNNING)
    tm.apply(record, tm.HandOff(NOW + 30))
    return record


def found(fate: TaskFate, *, taken: bool = False, waiting: bool = False, asks: tuple[Any, ...] = ()) -> Findings:
    statuses = {}
    if taken:
        statuses["permission-1"] = InputStatus.TAKEN
    if waiting:
        statuses["permission-1"] = InputStatus.WAITS
    return Findings(statuses, fate, asks)


Scenario = tuple[Callable[[], ThreadRecord], Callable[[ThreadRecord], Any], ThreadState, list[str]]

#: (event, source, target, guard) → how to get there and what it announces (a place is a
#: state, or the phase of a running thread's run).
SCENARIOS: dict[tuple[str, str, str, str], Scenario] = {
    ("start_turn", "idle", "relayed", ""): (
        lambda: record_in(ThreadState.IDLE), lambda m: tm.apply(m, tm.StartTurn(binding())), ThreadState.RUNNING,
        ["RUN_STARTED"]),
    ("start_turn", "terminal", "relayed", ""): (
        lambda: record_in(ThreadState.TERMINAL), lambda m: tm.apply(m, tm.StartTurn(binding())), ThreadState.RUNNING,
        ["RUN_STARTED"]),
    ("resume", "interrupted", "relayed", ""): (
        interrupted, lambda m: tm.apply(m, tm.Resume(binding(), answers_to(m, allow(m.pending_interrupts[0])))),
        ThreadState.RUNNING, ["RUN_STARTED"]),
    ("announce", "interrupted", "relayed", ""): (
        interrupted, lambda m: tm.apply(m, tm.Announce(binding())), ThreadState.RUNNING, ["RUN_STARTED"]),
    ("follow", "carried", "relayed", "carries_taken_answers"): (
        carrying_on, lambda m: tm.apply(m, tm.Follow(binding("run-3"))), ThreadState.RUNNING, ["RUN_STARTED"]),
    ("follow", "interrupted", "relayed", ""): (
        interrupted, lambda m: tm.apply(m, tm.Follow(binding(), answers_to(m, allow(m.pending_interrupts[0])))),
        ThreadState.RUNNING, ["RUN_STARTED"]),
    ("report", "idle", "idle", ""): (
        settled_unreported, lambda m: tm.apply(m, tm.Report(binding("run-3"), "")), ThreadState.IDLE,
        ["RUN_STARTED", "RUN_FINISHED"]),
    ("report", "interrupted", "interrupted", ""): (
        interrupted, lambda m: tm.apply(m, tm.Report(binding("run-3"), "")), ThreadState.INTERRUPTED,
        ["RUN_STARTED", "RUN_FINISHED"]),
    ("report", "terminal", "terminal", ""): (
        lambda: record_in(ThreadState.TERMINAL, last_error="A2A_EXECUTION_FAILED"),
        lambda m: tm.apply(m, tm.Report(binding("run-3"), "failed")), ThreadState.TERMINAL, ["RUN_STARTED", "RUN_ERROR"]),
    ("bind_task", "relayed", "relayed", ""): (
        lambda: record_in(ThreadState.RUNNING), lambda m: tm.apply(m, tm.BindTask("task-9", "session-9")),
        ThreadState.RUNNING, []),
    ("accept", "relayed", "relayed", ""): (
        resuming, lambda m: tm.apply(m, tm.Accept(["permission-1"])), ThreadState.RUNNING, []),
    ("finish", "relayed", "idle", ""): (
        lambda: record_in(ThreadState.RUNNING), lambda m: tm.apply(m, tm.Finish([])), ThreadState.IDLE, ["RUN_FINISHED"]),
    ("interrupt", "relayed", "interrupted", ""): (
        lambda: record_in(ThreadState.RUNNING), lambda m: tm.apply(m, tm.Interrupt([permission()], [])),
        ThreadState.INTERRUPTED, ["RUN_FINISHED"]),
    ("reject", "relayed", "interrupted", ""): (
        resuming, lambda m: tm.apply(m, tm.Reject(ErrorCode.A2A_UNAVAILABLE, "m")), ThreadState.INTERRUPTED, ["RUN_ERROR"]),
    ("fail", "relayed", "terminal", ""): (
        lambda: record_in(ThreadState.RUNNING), lambda m: tm.apply(m, tm.Fail(ErrorCode.A2A_EXECUTION_FAILED, "m")),
        ThreadState.TERMINAL, ["RUN_ERROR"]),
    ("cancel", "relayed", "terminal", ""): (
        lambda: record_in(ThreadState.RUNNING), lambda m: tm.apply(m, tm.Cancel("m")), ThreadState.TERMINAL, ["RUN_FINISHED"]),
    ("cancel", "carried", "terminal", ""): (
        carrying_on, lambda m: tm.apply(m, tm.Cancel("m")), ThreadState.TERMINAL, ["RUN_ERROR"]),
    ("cancel", "interrupted", "terminal", ""): (
        interrupted, lambda m: tm.apply(m, tm.Cancel("m")), ThreadState.TERMINAL, ["RUN_ERROR"]),
    ("detach", "relayed", "carried", ""): (
        resuming, lambda m: tm.apply(m, tm.Detach(ErrorCode.A2A_UNAVAILABLE, "m")), ThreadState.RUNNING, ["RUN_ERROR"]),
    ("expire", "interrupted", "terminal", ""): (interrupted, lambda m: tm.apply(m, tm.Expire()), ThreadState.TERMINAL, []),
    ("lose", "interrupted", "terminal", ""): (interrupted, lambda m: tm.apply(m, tm.Lose()), ThreadState.TERMINAL, []),
    ("recover", "relayed", "interrupted", "waits_for_the_user"): (
        resuming, lambda m: tm.apply(m, tm.Recover(found(TaskFate.ASKS, waiting=True), expires_at=NOW)),
        ThreadState.INTERRUPTED, ["RUN_ERROR"]),
    ("recover", "relayed", "carried", "task_still_works"): (
        resuming, lambda m: tm.apply(m, tm.Recover(found(TaskFate.WORKS, taken=True), expires_at=NOW)),
        ThreadState.RUNNING, ["RUN_ERROR"]),
    ("recover", "relayed", "idle", "turn_ended"): (
        resuming, lambda m: tm.apply(m, tm.Recover(found(TaskFate.TURN_ENDED, taken=True), expires_at=NOW)),
        ThreadState.IDLE, ["RUN_ERROR"]),
    ("recover", "relayed", "terminal", ""): (
        lambda: record_in(ThreadState.RUNNING), lambda m: tm.apply(m, tm.Recover(found(TaskFate.GONE), expires_at=NOW)),
        ThreadState.TERMINAL, ["RUN_ERROR"]),
    ("park", "relayed", "parked", ""): (
        lambda: record_in(ThreadState.RUNNING), lambda m: tm.apply(m, tm.Park(NOW + 30)), ThreadState.RUNNING, []),
    ("rejoin", "parked", "relayed", ""): (parked, lambda m: tm.apply(m, tm.Rejoin()), ThreadState.RUNNING, []),
    ("hand_off", "relayed", "handed_off", ""): (
        lambda: record_in(ThreadState.RUNNING), lambda m: tm.apply(m, tm.HandOff(NOW + 30)), ThreadState.RUNNING, []),
    ("adopt", "handed_off", "relayed", "handed_over"): (
        handed_off, lambda m: tm.apply(m, tm.Adopt(NOW)), ThreadState.RUNNING, []),
}


def _then(make: Callable[[], ThreadRecord], *events: tm.Transition[Any]) -> Callable[[], ThreadRecord]:
    def made() -> ThreadRecord:
        record = make()
        for event in events:
            tm.apply(record, event)
        return record
    return made


def _from(source: str, key: tuple[str, str, str, str]) -> Scenario:
    """The relayed run's scenario of a row, from another phase of the run."""
    make, take, target, announced = SCENARIOS[key]
    if source == "parked":
        return _then(make, tm.Park(NOW + 30)), take, target, announced
    if source == "handed_off":
        return _then(make, tm.HandOff(NOW + 30)), take, target, announced
    return _then(make, tm.Detach(ErrorCode.A2A_UNAVAILABLE, "m")), take, target, announced


def _place(node: tm.Node) -> str:
    return str(node.value)


def declared_transitions() -> list[tuple[str, str, str, str]]:
    """Every transition of the machine, as (event, source, target, guard)."""
    return [
        (row.event.name, _place(row.source), _place(row.target), "" if row.guard is None else row.guard.__name__)
        for row in tm.TRANSITIONS
    ]


def scenario(row: tuple[str, str, str, str]) -> Scenario:
    """A row's scenario: its own, or the relayed run's from the row's phase
    (a run whose stream broke is ``carried``: its scenario detaches it first)."""
    if row in SCENARIOS:
        return SCENARIOS[row]
    event, source, target, guard = row
    relayed_target = "relayed" if target == source != "carried" else target
    return _from(source, (event, "relayed", relayed_target, guard))


@pytest.mark.parametrize("row", declared_transitions(), ids=lambda row: "-".join(part for part in row if part))
def test_each_transition_moves_the_record_and_announces_its_events(row: tuple[str, str, str, str]) -> None:
    make, take, target, announced = scenario(row)
    record = make()
    assert tm.where(record).value == row[1]
    events = take(record) or []
    assert record.state is target and tm.where(record).value == row[2]
    assert [event["type"] for event in events] == announced


@pytest.mark.parametrize("place", [*tm.PLACES, *RunPhase])
def test_the_allowed_events_table_is_what_the_declaration_lists(place: tm.Node) -> None:
    assert tm.ALLOWED[place] == {row.event for row in tm.TRANSITIONS if row.source is place}


#: Every (place, event) the declaration does not allow, and ``follow`` of a
#: carried run, which its guard refuses without taken answers.
REFUSED = [
    (place, event)
    for place in [*tm.PLACES, *RunPhase]
    for event in tm.EVENTS
    if event not in tm.ALLOWED[place]
] + [(RunPhase.CARRIED, tm.Follow)]


def record_at(place: tm.Node) -> ThreadRecord:
    if isinstance(place, ThreadState):
        return record_in(place)
    record = record_in(ThreadState.RUNNING)
    record.run_phase = place
    return record


def any_event(kind: type[tm.Transition[Any]]) -> tm.Transition[Any]:
    """An event of ``kind``, with arguments that do not matter here."""
    fields = {field.name: field.default for field in attrs.fields(kind)}
    values: dict[type[Any] | str, Any] = {"binding": binding(), "message": "m", "code": ErrorCode.A2A_UNAVAILABLE,
                                          "findings": found(TaskFate.GONE)}
    given = {name: values.get(name, [] if default is attrs.NOTHING else default) for name, default in fields.items()}
    for name in ("until", "now", "expires_at"):
        if name in given:
            given[name] = NOW
    return kind(**given)


@pytest.mark.parametrize(("place", "event"), REFUSED, ids=lambda value: getattr(value, "value", getattr(value, "name", value)))
def test_a_transition_the_place_refuses_raises_and_changes_nothing(place: tm.Node, event: type[tm.Transition[Any]]) -> None:
    record = record_at(place)
    before = attrs.evolve(record)
    with pytest.raises(tm.TransitionNotAllowed):
        tm.apply(record, any_event(event))
    assert record == before, "a refused transition changes nothing"
    assert not tm.may(record, event, any_event(event))


# -------------------------------------------------------------- refusals
@pytest.mark.parametrize(("asks", "state"), sorted(admission.REFUSALS, key=lambda key: (key[0].name, key[1].value)))
def test_admission_refuses_with_the_documented_code(asks: str, state: ThreadState) -> None:
    record = record_in(state, pending_interrupts=[permission()] if state is ThreadState.INTERRUPTED else [])
    resume = (allow(permission("permission-other")),) if asks is tm.Resume else None
    if asks is tm.Follow:
        # A retried answer the runtime took, whose run was handed off at a shutdown.
        answer = allow(permission("permission-taken"))
        record.remember_answer(answer.interrupt_id, answer_digest(answer), reported=False)
        record.active_run_id, record.run_phase, record.parked_until = "run-1", RunPhase.HANDED_OFF, NOW + 60
        resume = (answer,)
    request = admission.Request(run_id="run-9", digest="d", cwd="/w", user_id=None, ros_invocation_id="inv-1",
                         resume=resume, user_message_id="m-9")
    with pytest.raises(AdapterError) as raised:
        admission.admit(record, request, NOW)
    assert raised.value.code is admission.REFUSALS[(asks, state)]


def request(*entries: ResumeEntry, run_id: str = "run-9", ros: str = "inv-1") -> admission.Request:
    return admission.Request(run_id=run_id, digest="d", cwd="/w", user_id=None, ros_invocation_id=ros,
                      resume=tuple(entries) if entries else None, user_message_id=None if entries else "m-9")


def refusal(record: ThreadRecord, req: admission.Request) -> ErrorCode:
    with pytest.raises(AdapterError) as raised:
        admission.admit(record, req, NOW)
    return raised.value.code


def test_a_reused_run_id_is_a_duplicate_or_a_conflict() -> None:
    record = record_in(ThreadState.IDLE)
    record.remember_run("run-9", "d")
    assert refusal(record, request()) is ErrorCode.DUPLICATE_RUN_ID
    record.runs["run-9"] = attrs.evolve(record.runs["run-9"], digest="other")
    assert refusal(record, request()) is ErrorCode.RUN_ID_CONFLICT


def test_a_resume_under_the_interrupted_runs_id_is_a_conflict_that_says_so() -> None:
    record = interrupted()
    record.remember_run("run-1", "digest-run-1")
    record.runs["run-1"] = attrs.evolve(record.runs["run-1"], outcome="interrupt")
    record.remember_run("run-0", "digest-run-0")
    record.runs["run-0"] = attrs.evolve(record.runs["run-0"], outcome="success")
    answer = allow(record.pending_interrupts[0])
    with pytest.raises(AdapterError) as raised:
        admission.admit(record, request(answer, run_id="run-1"), NOW)
    assert (raised.value.code, raised.value.message_id) == (ErrorCode.RUN_ID_CONFLICT, "run_id_conflict_resume")
    # The id of a run that did not end in an interrupt: the plain conflict.
    with pytest.raises(AdapterError) as raised:
        admission.admit(record, request(answer, run_id="run-0"), NOW)
    assert (raised.value.code, raised.value.message_id) == (ErrorCode.RUN_ID_CONFLICT, "run_id_conflict")


def test_a_thread_stays_with_its_workspace_and_caller() -> None:
    record = record_in(ThreadState.IDLE)
    req = admission.Request(run_id="run-9", digest="d", cwd="/elsewhere", user_id=None, ros_invocation_id="inv-1",
                     user_message_id="m-9")
    assert refusal(record, req) is ErrorCode.THREAD_BINDING_CONFLICT


@pytest.mark.parametrize("check", [admission.admit, lambda record, req, now: admission.preflight(record, req)])
def test_someone_elses_thread_is_refused_before_anything_about_it_shows(check: Callable[..., Any]) -> None:
    record = record_in(ThreadState.IDLE, principal="alice")
    record.remember_run("run-9", "d")
    replayed = attrs.evolve(request(), principal="alice")
    with pytest.raises(AdapterError) as owner:
        check(record, replayed, NOW)
    assert owner.value.code is ErrorCode.DUPLICATE_RUN_ID
    for caller in ("bob", None):
        with pytest.raises(AdapterError) as other:
            check(record, attrs.evolve(replayed, principal=caller), NOW)
        assert other.value.code is ErrorCode.THREAD_BINDING_CONFLICT, caller
    unowned = record_in(ThreadState.IDLE)
    with pytest.raises(AdapterError) as taken_over:
        check(unowned, attrs.evolve(request(), principal="bob"), NOW)
    assert taken_over.value.code is ErrorCode.THREAD_BINDING_CONFLICT


def test_a_resume_answers_every_pending_interrupt_with_the_same_invocation() -> None:
    record = interrupted()
    item = record.pending_interrupts[0]
    assert admission.admit(record, request(allow(item)), NOW).kind is admission.PlanKind.RESUME
    assert refusal(record, request(allow(item), ros="inv-other")) is ErrorCode.EXECUTION_LOST
    assert refusal(record, request(allow(permission("permission-2")))) is ErrorCode.UNKNOWN_INTERRUPT


def test_an_expired_interrupt_is_expired_by_the_resume_that_finds_it() -> None:
    record = interrupted()
    item = record.pending_interrupts[0]
    assert admission.admit(record, request(allow(item)), item.expires_at).kind is admission.PlanKind.EXPIRE


def test_a_resume_of_a_settled_thread_says_why() -> None:
    record = record_in(ThreadState.IDLE)
    record.remember_answer("permission-1", "digest", reported=True)
    assert refusal(record, request(allow(permission()))) is ErrorCode.RESUME_ALREADY_APPLIED
    expired = record_in(ThreadState.TERMINAL, last_error="EXECUTION_EXPIRED")
    assert refusal(expired, request(allow(permission()))) is ErrorCode.EXECUTION_EXPIRED
    lost = record_in(ThreadState.TERMINAL, last_error="EXECUTION_LOST")
    assert refusal(lost, request(allow(permission()))) is ErrorCode.EXECUTION_LOST
    assert refusal(record_in(ThreadState.IDLE), request(allow(permission()))) is ErrorCode.UNKNOWN_INTERRUPT


# -------------------------------------------------------------- recovery
def test_a_dead_resume_whose_answer_never_arrived_waits_again_with_the_same_interrupt() -> None:
    record = resuming()
    before = record.pending_interrupts[0].interrupt
    tm.apply(record, tm.Recover(found(TaskFate.ASKS, waiting=True), expires_at=NOW + 9999))
    assert record.state is ThreadState.INTERRUPTED
    (item,) = record.pending_interrupts
    assert item.interrupt == before and item.expires_at == NOW + 600, "same interrupt, same expiresAt"
    assert item.sending is None and record.applied_answers == {}
    # The retried answer is then an ordinary resume.
    assert admission.admit(record, request(allow(item)), NOW).kind is admission.PlanKind.RESUME


def test_a_dead_resume_whose_answer_was_taken_is_not_cancelled_and_the_retry_follows_it() -> None:
    record = carrying_on()
    assert record.state is ThreadState.RUNNING and record.active_run_id is None
    assert record.pending_interrupts == [] and record.unreported_answers() == {
        "permission-1": answer_digest(allow(permission()))}
    assert admission.admit(record, request(allow(permission())), NOW).kind is admission.PlanKind.FOLLOW
    # A new user turn waits for nothing, but the task still works on.
    assert refusal(record, request()) is ErrorCode.THREAD_BUSY
    # A different answer to the same interrupt is no retry.
    assert refusal(record, request(allow(permission(), "deny"))) is ErrorCode.RESUME_ALREADY_APPLIED


def test_once_the_followed_run_reports_its_end_a_retry_is_already_applied() -> None:
    record = carrying_on()
    tm.apply(record, tm.Follow(binding("run-3")))
    tm.apply(record, tm.Finish([]))
    assert record.state is ThreadState.IDLE and record.unreported_answers() == {}
    assert refusal(record, request(allow(permission()), run_id="run-4")) is ErrorCode.RESUME_ALREADY_APPLIED


def test_a_dead_resume_whose_task_ended_reports_that_end_to_the_retry_only_once() -> None:
    record = settled_unreported()
    assert record.state is ThreadState.IDLE
    assert admission.admit(record, request(allow(permission())), NOW).kind is admission.PlanKind.REPORT
    events = tm.apply(record, tm.Report(binding("run-3"), ""))
    assert events[-1]["outcome"] == {"type": "success"}
    assert refusal(record, request(allow(permission()), run_id="run-4")) is ErrorCode.RESUME_ALREADY_APPLIED


def test_a_new_turn_settles_a_finished_execution_whose_end_nobody_heard() -> None:
    record = settled_unreported()
    assert admission.admit(record, request(), NOW).kind is admission.PlanKind.TURN
    tm.apply(record, tm.StartTurn(binding("run-3")))
    assert record.unreported_answers() == {}


@pytest.mark.parametrize(("fate", "code"), [(TaskFate.FAILED, "A2A_EXECUTION_FAILED"), (TaskFate.CANCELED, "CANCELLED"),
                                            (TaskFate.GONE, "EXECUTION_LOST")])
def test_a_dead_resume_whose_task_ended_badly_reports_the_task_own_failure(fate: TaskFate, code: str) -> None:
    record = resuming()
    tm.apply(record, tm.Recover(found(fate, taken=True), expires_at=NOW))
    assert record.state is ThreadState.TERMINAL and record.last_error == code
    events = tm.apply(record, tm.Report(binding("run-3"), "the task failed", Profile.IAC_CODE_AGUI))
    assert events[-1] == {"type": "RUN_ERROR", "message": "the task failed", "code": code}
    # AG-UI 1.0 reports a cancelled execution as a stop, not a failure.
    record = resuming()
    tm.apply(record, tm.Recover(found(fate, taken=True), expires_at=NOW))
    events = tm.apply(record, tm.Report(binding("run-3"), "the task failed"))
    if fate is TaskFate.CANCELED:
        assert events[-1] == {"type": "RUN_FINISHED", "threadId": record.thread_id, "runId": "run-3",
                              "outcome": {"type": "cancelled"}}
    else:
        assert events[-1] == {"type": "RUN_ERROR", "message": "the task failed", "code": code}


def test_a_dead_resume_whose_task_asks_for_more_announces_the_new_interrupt_to_the_retry() -> None:
    record = resuming()
    second = envelope_of({"kind": "permission", "inputId": "permission-2", "required": True})
    tm.apply(record, tm.Recover(found(TaskFate.ASKS, taken=True, asks=(second,)), expires_at=NOW + 60))
    assert record.state is ThreadState.INTERRUPTED
    assert [(item.id, item.expires_at) for item in record.pending_interrupts] == [("permission-2", NOW + 60)]
    events = tm.apply(record, tm.Report(binding("run-3"), ""))
    assert [i["id"] for i in events[-1]["outcome"]["interrupts"]] == ["permission-2"]


def test_a_dead_turn_is_lost_and_the_thread_usable_again() -> None:
    record = record_in(ThreadState.RUNNING)
    tm.apply(record, tm.Recover(found(TaskFate.WORKS), expires_at=NOW))
    assert record.state is ThreadState.TERMINAL and record.last_error == "EXECUTION_LOST"
    assert admission.admit(record, request(), NOW).kind is admission.PlanKind.TURN


def test_a_refused_answer_keeps_the_interrupts_pending() -> None:
    record = resuming()
    tm.apply(record, tm.Reject(ErrorCode.A2A_UNAVAILABLE, "m"))
    assert [item.id for item in record.pending_interrupts] == ["permission-1"]
    assert record.pending_interrupts[0].sending is None


def test_an_answer_that_may_have_arrived_is_looked_at_as_a_dead_resume() -> None:
    record = resuming()
    sent = record.pending_interrupts[0].sending
    tm.apply(record, tm.Detach(ErrorCode.A2A_UNAVAILABLE, "m"))
    (item,) = record.pending_interrupts
    assert sent is not None and item.sending == sent, "still pending, marked as sent"
    assert tm.recovery(record, NOW) is tm.Recovery.DEAD_ANSWERS, "the next request asks the runtime"
    # A runtime that restarted since: whether it took the answer is unknown.
    tm.apply(record, tm.Recover(found(TaskFate.ORPHANED), expires_at=NOW))
    assert record.state is ThreadState.TERMINAL and record.last_error == "EXECUTION_LOST"
    assert refusal(record, request(allow(item))) is ErrorCode.EXECUTION_LOST


def test_an_answer_that_may_have_arrived_and_still_waits_is_answered_again() -> None:
    record = resuming()
    tm.apply(record, tm.Detach(ErrorCode.A2A_UNAVAILABLE, "m"))
    tm.apply(record, tm.Recover(found(TaskFate.ASKS, waiting=True), expires_at=NOW + 9999))
    (item,) = record.pending_interrupts
    assert record.state is ThreadState.INTERRUPTED and item.sending is None
    assert admission.admit(record, request(allow(item)), NOW).kind is admission.PlanKind.RESUME


def test_start_turn_binds_the_run_and_a_new_execution() -> None:
    record = record_in(ThreadState.IDLE)
    tm.apply(record, tm.StartTurn(tm.RunBinding("run-7", "d", "exec-2", "inv-2", user_message_id="m-7")))
    assert record.active_run_id == "run-7" and record.execution_id == "exec-2" and record.task_id is None
    assert record.last_user_message_id == "m-7" and "run-7" in record.runs
    tm.apply(record, tm.Finish([]))
    assert record.active_run_id is None and record.runs["run-7"].outcome == "success"


def test_the_state_diagrams_in_the_docs_are_generated_from_the_machine() -> None:
    text = (DOCS / "thread-states.md").read_text()
    for diagram in render_all():
        assert diagram in text, "docs/thread-states.md is stale: run `python -m aguiadapter diagram --write ...`"
    assert render_footnotes() in text, "the client view's footnotes are stale: run `... diagram --write ...`"


def test_a_dead_follow_run_keeps_its_answers_unreported_for_the_retry() -> None:
    record = carrying_on()
    tm.apply(record, tm.Follow(binding("run-3")))
    tm.apply(record, tm.Recover(found(TaskFate.TURN_ENDED), expires_at=NOW))
    assert record.state is ThreadState.IDLE and record.runs["run-3"].outcome == "success"
    assert admission.admit(record, request(allow(permission()), run_id="run-4"), NOW).kind is admission.PlanKind.REPORT


def test_a_dead_turn_records_how_its_run_ended() -> None:
    record = record_in(ThreadState.RUNNING)
    tm.apply(record, tm.Recover(found(TaskFate.GONE), expires_at=NOW))
    assert record.runs["run-1"].outcome == "EXECUTION_LOST"


# ------------------------------------------------ before answers go out
def inspected(*statuses: InputStatus, asks: tuple[str, ...] = ()) -> admission.Plan:
    record = record_in(ThreadState.INTERRUPTED,
                       pending_interrupts=[permission(f"permission-{n}") for n in range(1, len(statuses) + 1)])
    answers = answers_to(record, *(allow(item) for item in record.pending_interrupts))
    plan = admission.Plan(admission.PlanKind.RESUME, tuple(answers))
    by_id = {answer.interrupt_id: status for answer, status in zip(answers, statuses, strict=True)}
    envelopes = [envelope_of({"kind": "permission", "inputId": input_id, "required": True}) for input_id in asks]
    return admission.after_inspection(plan, by_id, envelopes)


@pytest.mark.parametrize(("statuses", "asks", "kind", "sent", "taken"), [
    ((InputStatus.WAITS,), ("permission-1",), admission.PlanKind.RESUME, 1, 0),
    # The runtime moved past the input already: nothing is sent again, the task is followed.
    ((InputStatus.TAKEN,), (), admission.PlanKind.FOLLOW, 0, 1),
    ((InputStatus.TAKEN, InputStatus.WAITS), ("permission-2",), admission.PlanKind.RESUME, 1, 1),
    # It asks for more than was answered: announce it all before sending anything.
    ((InputStatus.WAITS,), ("permission-1", "permission-9"), admission.PlanKind.ANNOUNCE, 0, 0),
    ((InputStatus.GONE,), (), admission.PlanKind.LOST, 0, 0),
])
def test_a_resume_sends_only_answers_whose_input_still_waits(
    statuses: tuple[InputStatus, ...], asks: tuple[str, ...], kind: admission.PlanKind, sent: int, taken: int
) -> None:
    plan = inspected(*statuses, asks=asks)
    assert (plan.kind, len(plan.answers), len(plan.taken)) == (kind, sent, taken)


def test_a_resume_the_runtime_cannot_decide_is_refused_and_changes_nothing() -> None:
    with pytest.raises(AdapterError) as raised:
        inspected(InputStatus.UNKNOWN)
    assert raised.value.code is ErrorCode.A2A_UNAVAILABLE


# ------------------------------------------------- runs without a client
def test_a_parked_run_stays_running_and_a_rejoin_forgets_the_grace() -> None:
    record = parked()
    assert record.state is ThreadState.RUNNING and record.parked_until == NOW + 30
    assert record.deadline is None, "the relaying process keeps the grace, no timer elsewhere"
    tm.apply(record, tm.Rejoin())
    assert record.parked_until is None and record.active_run_id == "run-1"


def test_a_handed_off_run_is_busy_for_new_requests_and_has_a_deadline() -> None:
    record = handed_off()
    assert record.deadline == NOW + 30, "the expiry timers of any replica end its grace"
    assert refusal(record, request()) is ErrorCode.THREAD_BUSY
    assert refusal(record, request(allow(permission()))) is ErrorCode.THREAD_BUSY


def test_a_handed_off_run_is_adopted_within_its_grace_only() -> None:
    late = handed_off()
    with pytest.raises(tm.TransitionNotAllowed):
        tm.apply(late, tm.Adopt(NOW + 30))
    record = handed_off()
    tm.apply(record, tm.Adopt(NOW + 29))
    assert record.run_phase is RunPhase.RELAYED and record.parked_until is None and record.adoptions == 1
    assert record.deadline is None
    # An adopted run can be handed off again (another rolling restart), not adopted twice.
    with pytest.raises(tm.TransitionNotAllowed):
        tm.apply(record, tm.Adopt(NOW))
    tm.apply(record, tm.HandOff(NOW + 60))
    assert record.run_phase is RunPhase.HANDED_OFF


@pytest.mark.parametrize("profile", list(Profile))
def test_a_handed_off_run_nobody_adopted_is_cancelled_like_a_client_that_left(profile: Profile) -> None:
    record = handed_off()
    run_id = record.active_run_id
    events = tm.apply(record, tm.Cancel("m", profile=profile))
    if profile is Profile.IAC_CODE_AGUI:
        assert events == [{"type": "RUN_ERROR", "message": "m", "code": "CANCELLED"}]
    else:
        assert events == [{"type": "RUN_FINISHED", "threadId": record.thread_id, "runId": run_id,
                           "outcome": {"type": "cancelled"}}]
    assert record.state is ThreadState.TERMINAL and record.run_phase is None and record.parked_until is None
    assert record.last_error == "CANCELLED"


@pytest.mark.parametrize("profile", list(Profile))
def test_a_stopped_run_ends_in_the_profiles_form_and_the_thread_the_same_way(profile: Profile) -> None:
    record = record_in(ThreadState.RUNNING)
    run_id = record.active_run_id
    usage = [{"provider": "demo", "model": "m", "inputTokens": 3, "outputTokens": 2, "totalTokens": 5}]
    events = tm.apply(record, tm.Cancel("stopped", profile=profile, usage=usage))
    if profile is Profile.IAC_CODE_AGUI:
        assert events == [{"type": "RUN_ERROR", "message": "stopped", "code": "CANCELLED"}]
    else:
        # RUN_FINISHED with the cancelled outcome, the usage accrued, and no result (AG-UI 1.0).
        assert events == [{"type": "RUN_FINISHED", "threadId": record.thread_id, "runId": run_id,
                           "outcome": {"type": "cancelled"}, "usage": usage}]
        RunFinishedEvent.model_validate(events[0])
    assert (record.state, record.last_error, record.active_run_id) == (ThreadState.TERMINAL, "CANCELLED", None)
    assert record.runs[run_id].outcome == "CANCELLED"


def test_the_message_a_handed_off_run_left_open_is_remembered_until_the_run_is_adopted_or_ends() -> None:
    record = record_in(ThreadState.RUNNING)
    tm.apply(record, tm.HandOff(NOW + 30, "run-1-m1"))
    assert record.handed_off_text == "run-1-m1"
    tm.apply(record, tm.Adopt(NOW))
    assert record.handed_off_text is None, "the adopter took it into its translator"
    record = record_in(ThreadState.RUNNING)
    tm.apply(record, tm.HandOff(NOW + 30, "run-1-m1"))
    tm.apply(record, tm.Cancel("m"))
    assert record.handed_off_text is None

def test_a_crash_during_the_grace_of_a_turn_is_a_dead_turn() -> None:
    record = parked()
    events = tm.apply(record, tm.Recover(found(TaskFate.GONE), expires_at=NOW, describe=lambda code: code.name))
    assert events == [{"type": "RUN_ERROR", "message": "EXECUTION_LOST", "code": "EXECUTION_LOST"}]
    assert record.state is ThreadState.TERMINAL and record.parked_until is None


def test_a_crash_during_the_grace_of_a_resume_is_settled_on_evidence_never_blindly() -> None:
    record = resuming()
    tm.apply(record, tm.Park(NOW + 30))
    events = tm.apply(record, tm.Recover(found(TaskFate.WORKS, taken=True), expires_at=NOW))
    assert record.state is ThreadState.RUNNING and record.parked_until is None
    assert [e["code"] for e in events] == ["EXECUTION_LOST"]
    # The retried answer follows the task that carries it.
    assert admission.admit(record, request(allow(permission())), NOW).kind is admission.PlanKind.FOLLOW


# ---------------------------------------------------------------- expiry
@pytest.mark.parametrize(
    ("make", "due"),
    [
        (lambda: record_in(ThreadState.IDLE), (tm.Due.NOTHING, None)),
        (lambda: record_in(ThreadState.INTERRUPTED, pending_interrupts=[permission()]), (tm.Due.LATER, NOW + 600)),
        (lambda: record_in(ThreadState.INTERRUPTED, pending_interrupts=[attrs.evolve(permission(), expires_at=NOW)]),
         (tm.Due.EXPIRE, None)),
        # A resume carries the answers: they expire with its run, not by the timer.
        (lambda: record_in(ThreadState.RUNNING, active_run_id="run-1",
                           pending_interrupts=[attrs.evolve(permission(), expires_at=NOW)]), (tm.Due.NOTHING, None)),
        (lambda: record_in(ThreadState.RUNNING, active_run_id="run-1", run_phase=RunPhase.HANDED_OFF, parked_until=NOW - 1,
                           pending_interrupts=[attrs.evolve(permission(), expires_at=NOW)]),
         (tm.Due.LATER, NOW - 1)),
    ],
    ids=["idle", "waiting", "expired", "carried by a resume", "handed off"],
)
def test_the_expiry_timer_does_what_the_machine_says(make: Callable[[], ThreadRecord], due: Any) -> None:
    assert tm.expiry_due(make(), NOW) == due


# ------------------------------------------------------ a run nobody holds
@pytest.mark.parametrize(
    ("make", "at", "expected"),
    [
        # Nothing runs: nothing to settle.
        (lambda: record_in(ThreadState.IDLE), NOW, tm.Recovery.NOTHING),
        (interrupted, NOW, tm.Recovery.NOTHING),
        (settled_unreported, NOW, tm.Recovery.NOTHING),
        # Handed off: alive until its grace ends, then cancelled as a client that left.
        (handed_off, NOW, tm.Recovery.ADOPTABLE),
        (handed_off, NOW + 30, tm.Recovery.NOT_ADOPTED),
        # A dead turn is cancelled; a dead run that carried answers asks the runtime.
        (lambda: record_in(ThreadState.RUNNING), NOW, tm.Recovery.DEAD_TURN),
        (parked, NOW, tm.Recovery.DEAD_TURN),
        (resuming, NOW, tm.Recovery.DEAD_ANSWERS),
        (carrying_on, NOW, tm.Recovery.DEAD_ANSWERS),
    ],
)
def test_what_a_request_does_about_a_run_nobody_holds(
    make: Callable[[], ThreadRecord], at: float, expected: tm.Recovery
) -> None:
    record = make()
    assert tm.recovery(record, at) is expected
    assert tm.holds_a_run(record) is (expected is not tm.Recovery.NOTHING)


def test_a_run_is_the_threads_own_until_it_ends() -> None:
    record = record_in(ThreadState.RUNNING)
    assert tm.runs(record, "run-1") and not tm.runs(record, "run-0")
    tm.apply(record, tm.Finish([]))
    assert not tm.runs(record, "run-1")
