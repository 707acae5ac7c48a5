"""Admission: what a run request may do on a thread, or why it is refused.

The machine (:mod:`.machine`) says which transitions exist; admission asks
it (:func:`~.machine.allowed`, :func:`~.machine.may`) whether a request's
turn or resume may open a run and, if so, with which checked answers
(:class:`Plan`). :func:`preflight` gives the refusals that need no claim on
the thread, :func:`admit` decides once the thread is claimed, and
:func:`after_inspection` settles a resume once the runtime said what became
of each input it answers. Pure, like the machine: no I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import attrs

from ..errors import AdapterError, ErrorCode
from ..protocol.inputs import ResumeEntry
from ..protocol.resume import Answer, answer_digest, check_resume
from ..runtime.envelope import InputEnvelope
from ..runtime.evidence import InputStatus
from .access import check_owner
from .machine import Follow, Report, Resume, StartTurn, Transition, allowed, may
from .record import ThreadRecord, ThreadState

#: Why a request is refused, by (what it asks for, the thread's state).
REFUSALS: Final[dict[tuple[type[Transition[Any]], ThreadState], ErrorCode]] = {
    (StartTurn, ThreadState.RUNNING): ErrorCode.THREAD_BUSY,
    (StartTurn, ThreadState.INTERRUPTED): ErrorCode.RESUME_REQUIRED,
    (Resume, ThreadState.RUNNING): ErrorCode.THREAD_BUSY,
    (Resume, ThreadState.IDLE): ErrorCode.UNKNOWN_INTERRUPT,
    (Resume, ThreadState.TERMINAL): ErrorCode.UNKNOWN_INTERRUPT,
    # A retried answer whose run no process relays, and that no run follows:
    # its run was handed off at a shutdown and waits to be adopted.
    (Follow, ThreadState.RUNNING): ErrorCode.THREAD_BUSY,
}


def _answers_applied(record: ThreadRecord, entries: Sequence[ResumeEntry]) -> bool:
    return bool(entries) and all(entry.interrupt_id in record.applied_answers for entry in entries)


def _expired(record: ThreadRecord, entries: Sequence[ResumeEntry]) -> bool:
    return record.last_error == ErrorCode.EXECUTION_EXPIRED.name


def _lost(record: ThreadRecord, entries: Sequence[ResumeEntry]) -> bool:
    return record.last_error == ErrorCode.EXECUTION_LOST.name


#: Why a resume of a thread that waits for nothing is refused, before the
#: plain :data:`REFUSALS` row of its state: (state, what else holds, code),
#: the first row that holds wins.
SETTLED_RESUME_REFUSALS: Final[
    tuple[tuple[ThreadState | None, Callable[[ThreadRecord, Sequence[ResumeEntry]], bool], ErrorCode], ...]
] = (
    (ThreadState.RUNNING, lambda record, entries: True, ErrorCode.THREAD_BUSY),
    (None, _answers_applied, ErrorCode.RESUME_ALREADY_APPLIED),
    (ThreadState.TERMINAL, _expired, ErrorCode.EXECUTION_EXPIRED),
    # The retry of an answer whose execution was lost hears the same truth.
    (ThreadState.TERMINAL, _lost, ErrorCode.EXECUTION_LOST),
)


class PlanKind(enum.Enum):
    """What an admitted request will do."""

    TURN = "turn"
    RESUME = "resume"
    #: A resume whose runtime asks for more than was answered: announce it all.
    ANNOUNCE = "announce"
    FOLLOW = "follow"
    REPORT = "report"
    EXPIRE = "expire"
    #: The runtime no longer has the waiting task.
    LOST = "lost"
    #: Take over a run that another replica handed off (re-attach).
    ADOPT = "adopt"


@attrs.frozen
class Request:
    """What admission needs to know of a run request."""

    run_id: str
    digest: str
    cwd: str
    user_id: str | None
    ros_invocation_id: str
    resume: tuple[ResumeEntry, ...] | None = None
    user_message_id: str | None = None
    #: The verified caller (``None`` when the server names nobody).
    principal: str | None = None


@attrs.frozen
class Plan:
    """An admitted request: what the run does, with which checked answers."""

    kind: PlanKind
    #: The answers to send.
    answers: tuple[Answer, ...] = ()
    #: Answers the runtime took already (the task moved past their inputs).
    taken: tuple[Answer, ...] = ()
    #: What the runtime waits for (``ANNOUNCE``).
    asks: tuple[InputEnvelope, ...] = ()


def admit(record: ThreadRecord, request: Request, now: float) -> Plan:
    """Decide what a request may do on this thread, or raise its refusal.

    Someone else's thread is refused before anything else is looked at, so
    that the refusal tells nothing of its runs (a replayed request of the
    owner's gets no ``DUPLICATE_RUN_ID``)."""
    check_owner(record, request.principal)
    check_idempotency(record, request)
    check_binding(record, request)
    state = record.state
    if request.resume is None:
        if not allowed(record, StartTurn):
            raise AdapterError(REFUSALS[(StartTurn, state)])
        if request.user_message_id is None or request.user_message_id == record.last_user_message_id:
            raise AdapterError(ErrorCode.INVALID_INPUT, "new_run_requires_user_message")
        return Plan(PlanKind.TURN)
    entries = request.resume
    unreported = record.unreported_answers()
    if entries and all(entry.interrupt_id in unreported for entry in entries):
        return _retried_answers(record, entries, unreported)
    if allowed(record, Resume):
        if request.ros_invocation_id != record.ros_invocation_id:
            raise AdapterError(ErrorCode.EXECUTION_LOST, "resume_identity_mismatch")
        if any(item.expires_at <= now for item in record.pending_interrupts):
            return Plan(PlanKind.EXPIRE)
        fresh = [entry for entry in entries if unreported.get(entry.interrupt_id) != _digest(entry)]
        applied = {key: answer.digest for key, answer in record.applied_answers.items()}
        answers = check_resume(fresh, [item.interrupt for item in record.pending_interrupts], applied)
        return Plan(PlanKind.RESUME, tuple(answers))
    refuse_settled(record, entries)
    raise AssertionError("refuse_settled always raises")  # pragma: no cover


def after_inspection(
    plan: Plan, statuses: Mapping[str, InputStatus], asks: Sequence[InputEnvelope]
) -> Plan:
    """A resume, once the runtime said what became of each input it answers
    (``statuses``) and what it waits for now (``asks``): answers to inputs
    it moved past are not sent again; when it asks for more than was
    answered, the run announces all of it first."""
    if InputStatus.UNKNOWN in statuses.values():
        raise AdapterError(ErrorCode.A2A_UNAVAILABLE)
    if InputStatus.GONE in statuses.values():
        return Plan(PlanKind.LOST)
    taken = tuple(answer for answer in plan.answers if statuses[answer.interrupt_id] is InputStatus.TAKEN)
    waiting = tuple(answer for answer in plan.answers if statuses[answer.interrupt_id] is InputStatus.WAITS)
    if not waiting:
        return Plan(PlanKind.FOLLOW, taken=taken)
    answered = {answer.interrupt_id for answer in waiting}
    if any(envelope.input_id not in answered for envelope in asks):
        return Plan(PlanKind.ANNOUNCE, asks=tuple(asks))
    return Plan(PlanKind.RESUME, answers=waiting, taken=taken)


def _retried_answers(record: ThreadRecord, entries: Sequence[ResumeEntry], unreported: dict[str, str]) -> Plan:
    """A retry of answers the runtime took: follow their task, or report how
    it ended; a different answer to the same interrupt is refused."""
    if any(unreported[entry.interrupt_id] != _digest(entry) for entry in entries):
        raise AdapterError(ErrorCode.RESUME_ALREADY_APPLIED)
    answers = tuple(
        Answer(entry.interrupt_id, entry.status, entry.payload, {"id": entry.interrupt_id}, _digest(entry))
        for entry in entries
    )
    if may(record, Follow):
        return Plan(PlanKind.FOLLOW, answers)
    if allowed(record, Report):
        return Plan(PlanKind.REPORT, answers)
    raise AdapterError(REFUSALS[(Follow, record.state)])


def _digest(entry: ResumeEntry) -> str:
    return answer_digest(entry)


def refuse_settled(record: ThreadRecord, entries: Sequence[ResumeEntry]) -> None:
    """A resume of a thread that waits for nothing: why it is refused."""
    state = record.state
    for in_state, holds, code in SETTLED_RESUME_REFUSALS:
        if in_state in (None, state) and holds(record, entries):
            raise AdapterError(code)
    raise AdapterError(REFUSALS.get((Resume, state), ErrorCode.UNKNOWN_INTERRUPT))


def check_idempotency(record: ThreadRecord, request: Request) -> None:
    """A ``(threadId, runId)`` names one request, once."""
    entry = record.runs.get(request.run_id)
    if entry is None:
        return
    if entry.digest == request.digest:
        raise AdapterError(ErrorCode.DUPLICATE_RUN_ID)
    # A resume sent under the runId of the run it answers (CopilotKit up to
    # 1.74 does this): same code, a message that says how to fix it.
    if request.resume and entry.outcome == "interrupt":
        raise AdapterError(ErrorCode.RUN_ID_CONFLICT, "run_id_conflict_resume")
    raise AdapterError(ErrorCode.RUN_ID_CONFLICT)


def check_binding(record: ThreadRecord, request: Request) -> None:
    """A thread stays with the workspace and caller of its first run."""
    if record.cwd != request.cwd or record.user_id != request.user_id:
        raise AdapterError(ErrorCode.THREAD_BINDING_CONFLICT)


def preflight(record: ThreadRecord, request: Request) -> None:
    """The refusals that need no claim (checked again once claimed), the
    owner first as in :func:`admit`."""
    check_owner(record, request.principal)
    check_idempotency(record, request)
    check_binding(record, request)
    # Settled: a new turn may start (nothing runs, nothing waits).
    settled = allowed(record, StartTurn)
    if request.resume and settled and not set(record.unreported_answers()) >= {e.interrupt_id for e in request.resume}:
        refuse_settled(record, request.resume)
