"""The thread machine: what a thread may do next, and what each step causes.

This module is the one place that says where a thread stands, which
transitions exist (recovery after a crash included); why a request is
refused is :mod:`.admission`'s, which asks it. It is synchronous and does no I/O: :func:`apply` takes a typed
event (:class:`StartTurn`, :class:`Park`...), changes the
:class:`~aguiadapter.threads.record.ThreadRecord` and returns the AG-UI
events the transition announces; time comes in as a field of the event.
The async shell (:mod:`aguiadapter.runs.shell`) loads the record, applies an
event, saves the record and only then emits the events.

Where a thread stands (:func:`where`): one of its states, or, while it is
``running``, the phase of its run (``record.run_phase``, a
:class:`~aguiadapter.threads.record.RunPhase`):

- ``idle``: no run is active; a new user turn may start.
- ``running``, in one of four phases: ``relayed`` (a process of ours
  streams the run), ``parked`` (its client went away; it goes on, into its
  event log, for the disconnect grace), ``handed_off`` (its replica shut
  down; no process relays it until a re-attach on any replica adopts it),
  ``carried`` (after a broken stream or a crash: the runtime's task carries
  out answers it took, and no stream of ours follows it).
- ``interrupted``: the runtime waits for the user; only a resume, a cancel
  or expiry moves the thread on.
- ``terminal``: the last execution ended abnormally (failed, cancelled,
  expired or lost); the next user turn starts a new execution.

:data:`TRANSITIONS` is the one declaration: :func:`apply` and :func:`may`
take its rows, :mod:`.admission` asks :func:`allowed` of it, and
:mod:`.diagram` draws it (through python-statemachine). An event is a
class, written once (its fields are its arguments, its ``act`` what it does
to the record): a misspelt event or argument is a type error.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Final, Generic, TypeVar

import attrs

from ..errors import ErrorCode
from ..protocol import events as ev
from ..protocol.interrupts import build_interrupt
from ..protocol.profile import DEFAULT_PROFILE, Profile
from ..protocol.resume import Answer
from ..runtime.envelope import InputEnvelope
from ..runtime.evidence import Findings, TaskFate
from ..translate.pipeline import PipelineState
from .record import PendingInterrupt, RunKind, RunPhase, ThreadRecord, ThreadState

_R = TypeVar("_R", covariant=True)

#: Where a thread stands: its state, or (``running``) the phase of its run.
Node = ThreadState | RunPhase
#: What a transition announces.
Announced = list[ev.Event]


class TransitionNotAllowed(Exception):
    """The event is not allowed where the thread stands, or its guards refuse it."""

    def __init__(self, event: str, where: Node) -> None:
        super().__init__(f"{event} is not allowed in {where.value}")
        self.event = event
        self.where = where


def where(record: ThreadRecord) -> Node:
    """Where the record's thread stands: its run's phase while it runs."""
    if record.state is ThreadState.RUNNING:
        assert record.run_phase is not None, "a running record has a run phase"
        return record.run_phase
    return record.state


def _move(record: ThreadRecord, target: Node) -> None:
    if isinstance(target, RunPhase):
        record.state, record.run_phase = ThreadState.RUNNING, target
    else:
        record.state, record.run_phase = target, None


@attrs.frozen
class RunBinding:
    """What a transition that opens a run binds to the thread."""

    run_id: str
    digest: str
    execution_id: str
    ros_invocation_id: str
    parent_run_id: str | None = None
    user_message_id: str | None = None


class Transition(abc.ABC, Generic[_R]):
    """An event of the machine: its fields are the event's arguments, its
    :meth:`act` what it does to the record (in the source state; the record
    then moves to the target :func:`apply` chose), returning what it
    announces."""

    __slots__ = ()
    #: The event's name (in the diagram, in logs, in the lost-write policy).
    name: ClassVar[str]

    @abc.abstractmethod
    def act(self, record: ThreadRecord, target: Node) -> _R:
        """What the event does to ``record`` (every event class has its own)."""


# ------------------------------------------------------------ opening a run
@attrs.frozen
class StartTurn(Transition[Announced]):
    """A new user turn opens (a new execution)."""

    name: ClassVar[str] = "start_turn"
    binding: RunBinding

    def act(self, record: ThreadRecord, target: Node) -> Announced:
        binding = self.binding
        _open_run(record, binding, RunKind.TURN)
        record.execution_id = binding.execution_id
        record.ros_invocation_id = binding.ros_invocation_id
        record.task_id = None
        record.last_error = None
        record.pipeline = PipelineState()
        record.applied_answers = {key: attrs.evolve(a, reported=True) for key, a in record.applied_answers.items()}
        if binding.user_message_id is not None:
            record.last_user_message_id = binding.user_message_id
        return [_started(record, binding)]


@attrs.frozen
class Resume(Transition[Announced]):
    """A resume opens; its answers are marked as on their way (``taken``:
    answers to inputs the runtime already moved past)."""

    name: ClassVar[str] = "resume"
    binding: RunBinding
    answers: Sequence[Answer]
    taken: Sequence[Answer] = ()

    def act(self, record: ThreadRecord, target: Node) -> Announced:
        _take(record, self.taken)
        _open_run(record, self.binding, RunKind.RESUME)
        digests = {answer.interrupt_id: answer.digest for answer in self.answers}
        for item in record.pending_interrupts:
            item.sending = digests.get(item.id)
        return [_started(record, self.binding)]


@attrs.frozen
class Announce(Transition[Announced]):
    """A resume opens that only announces what the runtime waits for."""

    name: ClassVar[str] = "announce"
    binding: RunBinding

    def act(self, record: ThreadRecord, target: Node) -> Announced:
        _open_run(record, self.binding, RunKind.ANNOUNCE)
        return [_started(record, self.binding)]


@attrs.frozen
class Follow(Transition[Announced]):
    """A run opens that follows a task carrying out answers it took."""

    name: ClassVar[str] = "follow"
    binding: RunBinding
    taken: Sequence[Answer] = ()

    def act(self, record: ThreadRecord, target: Node) -> Announced:
        _take(record, self.taken)
        _open_run(record, self.binding, RunKind.FOLLOW)
        return [_started(record, self.binding)]


@attrs.frozen
class Report(Transition[Announced]):
    """A retried answer's run: opens and closes with the recorded outcome
    (it learns how the run that carried its answer ended; a cancelled one in
    the ``profile``'s form)."""

    name: ClassVar[str] = "report"
    binding: RunBinding
    message: str
    profile: Profile = DEFAULT_PROFILE

    def act(self, record: ThreadRecord, target: Node) -> Announced:
        binding = self.binding
        started = _started(record, binding)
        record.remember_run(binding.run_id, binding.digest)
        _mark_reported(record)
        stopped = record.last_error == ErrorCode.CANCELLED.name and not self.profile.stops_as_errors
        if record.state is ThreadState.TERMINAL and stopped:
            closing = ev.run_cancelled(record.thread_id, binding.run_id)
            outcome = record.last_error
        elif record.state is ThreadState.TERMINAL:
            closing = ev.run_error(self.message, record.last_error or ErrorCode.EXECUTION_LOST.name)
            outcome = record.last_error
        elif record.state is ThreadState.INTERRUPTED:
            interrupts = [item.interrupt for item in record.pending_interrupts]
            closing = ev.run_finished(record.thread_id, binding.run_id, {"type": "interrupt", "interrupts": interrupts})
            outcome = "interrupt"
        else:
            closing = ev.run_finished(record.thread_id, binding.run_id, {"type": "success"})
            outcome = "success"
        _note_outcome(record, binding.run_id, outcome)
        return [started, closing]


# --------------------------------------------------------- while it streams
@attrs.frozen
class BindTask(Transition[None]):
    """The run learned its task and session ids."""

    name: ClassVar[str] = "bind_task"
    task_id: str | None
    session_id: str | None

    def act(self, record: ThreadRecord, target: Node) -> None:
        record.task_id = self.task_id
        record.session_id = self.session_id


@attrs.frozen
class Accept(Transition[None]):
    """The runtime took these answers: they are pending no more."""

    name: ClassVar[str] = "accept"
    interrupt_ids: Sequence[str]

    def act(self, record: ThreadRecord, target: Node) -> None:
        done = set(self.interrupt_ids)
        for item in record.pending_interrupts:
            if item.id in done:
                record.remember_answer(item.id, item.sending or "", reported=False,
                                       tool_use_id=item.envelope.tool_use_id)
        record.pending_interrupts = [item for item in record.pending_interrupts if item.id not in done]


# ------------------------------------------------------ a run without a client
@attrs.frozen
class Park(Transition[None]):
    """The client went away; the run goes on for the grace (until ``until``)."""

    name: ClassVar[str] = "park"
    until: float

    def act(self, record: ThreadRecord, target: Node) -> None:
        record.parked_until = self.until


@attrs.frozen
class Rejoin(Transition[None]):
    """A client re-attached to the parked run."""

    name: ClassVar[str] = "rejoin"

    def act(self, record: ThreadRecord, target: Node) -> None:
        record.parked_until = None


@attrs.frozen
class HandOff(Transition[None]):
    """The relaying process stops (shutdown); the runtime's task goes on and
    any replica may adopt the run until ``until`` (and go on with the
    assistant message ``open_text``, left open in the run's log)."""

    name: ClassVar[str] = "hand_off"
    until: float
    open_text: str | None = None
    #: The reply's text relayed before the handover, which the adopter lines
    #: its subscription up with.
    streamed: str | None = None

    def act(self, record: ThreadRecord, target: Node) -> None:
        record.parked_until = self.until
        record.handed_off_text = self.open_text
        record.handed_off_streamed = self.streamed


@attrs.frozen
class Adopt(Transition[None]):
    """This process relays the handed-off run from ``now`` on."""

    name: ClassVar[str] = "adopt"
    now: float

    def act(self, record: ThreadRecord, target: Node) -> None:
        record.parked_until = None
        record.adoptions += 1
        # The adopting driver took the open message into its translator.
        record.handed_off_text = None
        record.handed_off_streamed = None


# ------------------------------------------------------------- a run ends
@attrs.frozen
class Finish(Transition[Announced]):
    """The run ended normally."""

    name: ClassVar[str] = "finish"
    usage: list[dict[str, Any]]

    def act(self, record: ThreadRecord, target: Node) -> Announced:
        run_id = _end_run(record, "success")
        return [ev.run_finished(record.thread_id, run_id, {"type": "success"}, self.usage)]


@attrs.frozen
class Interrupt(Transition[Announced]):
    """The run ended waiting for the user."""

    name: ClassVar[str] = "interrupt"
    pending: Sequence[PendingInterrupt]
    usage: list[dict[str, Any]]

    def act(self, record: ThreadRecord, target: Node) -> Announced:
        record.pending_interrupts = list(self.pending)
        run_id = _end_run(record, "interrupt")
        outcome = {"type": "interrupt", "interrupts": [item.interrupt for item in self.pending]}
        return [ev.run_finished(record.thread_id, run_id, outcome, self.usage)]


@attrs.frozen
class _Erring(Transition[Announced]):
    """An event that tells the client of an error (``RUN_ERROR``): its code
    and the message in the caller's language."""

    code: ErrorCode
    message: str


@attrs.frozen
class Reject(_Erring):
    """The runtime did not take the answers: they stay pending."""

    name: ClassVar[str] = "reject"

    def act(self, record: ThreadRecord, target: Node) -> Announced:
        for item in record.pending_interrupts:
            item.sending = None
        record.last_error = self.code.name
        _end_run(record, self.code.name)
        return [ev.run_error(self.message, self.code.name)]


@attrs.frozen
class Detach(_Erring):
    """The stream of a run broke after the runtime took its answers, or after
    an answer went out that it may have taken (still pending, marked as
    sent): the client is told, the task may carry them out; the next request
    that touches the thread asks the runtime what became of them, as after a
    crash."""

    name: ClassVar[str] = "detach"

    def act(self, record: ThreadRecord, target: Node) -> Announced:
        _note_outcome(record, record.active_run_id or "", self.code.name)
        in_doubt = any(item.sending is not None for item in record.pending_interrupts)
        _stop_following(record, RunKind.RESUME if in_doubt else RunKind.FOLLOW)
        return [ev.run_error(self.message, self.code.name)]


@attrs.frozen
class Fail(_Erring):
    """The run ended with an error."""

    name: ClassVar[str] = "fail"

    def act(self, record: ThreadRecord, target: Node) -> Announced:
        return _end_with_error(record, self.code, self.message)


@attrs.frozen
class Cancel(Transition[Announced]):
    """The execution was cancelled (the cancel route, a ``cancelled`` answer
    that ends the turn, a disconnect, shutdown). The thread ends the same way
    in every profile; the run's closing event is the profile's: AG-UI 1.0
    closes a stop with ``RUN_FINISHED`` and the cancelled outcome (with the
    ``usage`` accrued before it; the caller has closed everything the run
    opened), the reference with ``RUN_ERROR CANCELLED``."""

    name: ClassVar[str] = "cancel"
    message: str
    code: ErrorCode = ErrorCode.CANCELLED
    profile: Profile = DEFAULT_PROFILE
    usage: list[dict[str, Any]] | None = None

    def act(self, record: ThreadRecord, target: Node) -> Announced:
        run_id = record.active_run_id
        events = _end_with_error(record, self.code, self.message)
        if self.code is ErrorCode.CANCELLED and run_id is not None and not self.profile.stops_as_errors:
            return [ev.run_cancelled(record.thread_id, run_id, self.usage)]
        return events


# ---------------------------------------------- no run: time passes, or the task is gone
@attrs.frozen
class Expire(Transition[None]):
    """The pending interrupts expired."""

    name: ClassVar[str] = "expire"

    def act(self, record: ThreadRecord, target: Node) -> None:
        _end_with_error(record, ErrorCode.EXECUTION_EXPIRED, "")


@attrs.frozen
class Lose(Transition[None]):
    """The runtime no longer has the waiting task."""

    name: ClassVar[str] = "lose"

    def act(self, record: ThreadRecord, target: Node) -> None:
        _end_with_error(record, ErrorCode.EXECUTION_LOST, "")


# ------------------------------------------ a run died with its process
def _describe_nothing(code: ErrorCode) -> str:
    return ""


@attrs.frozen
class Recover(Transition[Announced]):
    """Settle a run that died with its process, the way the runtime says it
    went (``findings``); ``expires_at`` is the deadline of interrupts the
    runtime raised meanwhile. Announces the ``RUN_ERROR`` that ends the dead
    run's event log (``describe`` words it; no client listens to a dead
    run)."""

    name: ClassVar[str] = "recover"
    findings: Findings
    expires_at: float
    describe: Callable[[ErrorCode], str] = _describe_nothing

    def act(self, record: ThreadRecord, target: Node) -> Announced:
        _settle_dead(record, self.findings, target, self.expires_at)
        code = ErrorCode.EXECUTION_LOST
        if target is ThreadState.TERMINAL and record.last_error in ErrorCode.__members__:
            code = ErrorCode[str(record.last_error)]
        return [ev.run_error(self.describe(code), code.name)]


# ------------------------------------------------------------------ guards
def carries_taken_answers(record: ThreadRecord, event: Transition[Any] | None) -> bool:
    """The task carries answers it took, of which no client heard the end."""
    return bool(record.unreported_answers())


def handed_over(record: ThreadRecord, event: Transition[Any] | None) -> bool:
    """The handed-off run's grace has not ended."""
    assert isinstance(event, Adopt)
    until = record.parked_until
    return until is not None and event.now < until


def waits_for_the_user(record: ThreadRecord, event: Transition[Any] | None) -> bool:
    """An answer of the dead run never reached the runtime, or the runtime
    took them all and asks for more."""
    assert isinstance(event, Recover)
    if event.findings.waiting():
        return True
    return event.findings.fate is TaskFate.ASKS and record.active_run_kind is not RunKind.TURN


def task_still_works(record: ThreadRecord, event: Transition[Any] | None) -> bool:
    """The runtime works on, carrying out what it was told."""
    assert isinstance(event, Recover)
    return event.findings.fate is TaskFate.WORKS and record.active_run_kind is not RunKind.TURN


def turn_ended(record: ThreadRecord, event: Transition[Any] | None) -> bool:
    """The runtime finished the turn after taking the answers."""
    assert isinstance(event, Recover)
    return event.findings.fate is TaskFate.TURN_ENDED and record.active_run_kind is not RunKind.TURN


Guard = Callable[[ThreadRecord, "Transition[Any] | None"], bool]


# ----------------------------------------------------------- the declaration
@attrs.frozen
class Row:
    """One transition: ``event`` moves a thread from ``source`` to
    ``target`` when ``guard`` (if any) holds; the first row that holds wins."""

    event: type[Transition[Any]]
    source: Node
    target: Node
    guard: Guard | None = None


IDLE, INTERRUPTED, TERMINAL = ThreadState.IDLE, ThreadState.INTERRUPTED, ThreadState.TERMINAL
RELAYED, PARKED, HANDED_OFF, CARRIED = RunPhase.RELAYED, RunPhase.PARKED, RunPhase.HANDED_OFF, RunPhase.CARRIED
#: The states a thread stands in outside a run (``running`` stands in its run's phases).
PLACES: Final = (IDLE, INTERRUPTED, TERMINAL)
#: The phases of a run that a process of ours streams (with or without a client).
STREAMED: Final = (RELAYED, PARKED)


def _rows(event: type[Transition[Any]], sources: Sequence[Node], target: Node, guard: Guard | None = None) -> list[Row]:
    return [Row(event, source, target, guard) for source in sources]


#: Every transition of a thread, in the order they are tried.
TRANSITIONS: Final[tuple[Row, ...]] = tuple([
    # A run opens.
    *_rows(StartTurn, (IDLE, TERMINAL), RELAYED),
    Row(Resume, INTERRUPTED, RELAYED),
    Row(Announce, INTERRUPTED, RELAYED),
    Row(Follow, CARRIED, RELAYED, carries_taken_answers),
    Row(Follow, INTERRUPTED, RELAYED),
    # A retried answer hears how its run ended; the thread stays where it is.
    *(Row(Report, state, state) for state in (IDLE, INTERRUPTED, TERMINAL)),
    # While a run streams.
    *(Row(BindTask, phase, phase) for phase in STREAMED),
    *(Row(Accept, phase, phase) for phase in STREAMED),
    # A run without a client (disconnect grace, handoff at shutdown).
    Row(Park, RELAYED, PARKED),
    Row(Rejoin, PARKED, RELAYED),
    *_rows(HandOff, STREAMED, HANDED_OFF),
    Row(Adopt, HANDED_OFF, RELAYED, handed_over),
    # A run ends.
    *_rows(Finish, STREAMED, IDLE),
    *_rows(Interrupt, STREAMED, INTERRUPTED),
    *_rows(Reject, STREAMED, INTERRUPTED),
    *_rows(Fail, STREAMED, TERMINAL),
    *_rows(Detach, STREAMED, CARRIED),
    *_rows(Cancel, (RELAYED, PARKED, HANDED_OFF, CARRIED, INTERRUPTED), TERMINAL),
    # No run: time passes, or the runtime lost the waiting task.
    Row(Expire, INTERRUPTED, TERMINAL),
    Row(Lose, INTERRUPTED, TERMINAL),
    # A run that no process relays any more (it died with its process, or
    # its stream broke): what the runtime says happened instead.
    *(
        row
        for source in (RELAYED, PARKED, CARRIED)
        for row in (
            Row(Recover, source, INTERRUPTED, waits_for_the_user),
            Row(Recover, source, CARRIED, task_still_works),
            Row(Recover, source, IDLE, turn_ended),
            Row(Recover, source, TERMINAL),
        )
    ),
])

#: (event, source) -> its rows, in order: what :func:`apply` looks up.
_BY_SOURCE: Final[dict[tuple[type[Transition[Any]], Node], tuple[Row, ...]]] = {}
for _declared in TRANSITIONS:
    _key = (_declared.event, _declared.source)
    _BY_SOURCE[_key] = (*_BY_SOURCE.get(_key, ()), _declared)

#: The events, in declaration order.
EVENTS: Final[tuple[type[Transition[Any]], ...]] = tuple(dict.fromkeys(row.event for row in TRANSITIONS))


def _first_row(record: ThreadRecord, kind: type[Transition[Any]], event: Transition[Any] | None) -> Row | None:
    for row in _BY_SOURCE.get((kind, where(record)), ()):
        if row.guard is None or row.guard(record, event):
            return row
    return None


def apply(record: ThreadRecord, event: Transition[_R]) -> _R:
    """Take ``event`` where the record stands: the first row whose guard
    holds; its action runs in the source state, then the record moves to
    the row's target. A move the declaration does not allow raises
    :class:`TransitionNotAllowed` and changes nothing."""
    row = _first_row(record, type(event), event)
    if row is None:
        raise TransitionNotAllowed(event.name, where(record))
    result = event.act(record, row.target)
    _move(record, row.target)
    return result


def may(record: ThreadRecord, kind: type[Transition[Any]], event: Transition[Any] | None = None) -> bool:
    """Whether an event of ``kind`` would be taken now, guards included
    (guards that read the event are given ``event``); nothing changes."""
    return _first_row(record, kind, event) is not None


#: The events each place allows (guards aside): what admission asks.
ALLOWED: Final[dict[Node, frozenset[type[Transition[Any]]]]] = {
    node: frozenset(row.event for row in TRANSITIONS if row.source is node) for node in (*PLACES, *RunPhase)
}


def allowed(record: ThreadRecord, kind: type[Transition[Any]]) -> bool:
    """Whether an event of ``kind`` may happen where the record stands (guards aside)."""
    return kind in ALLOWED[where(record)]


# --------------------------------------------------- what the actions share
def _open_run(record: ThreadRecord, binding: RunBinding, kind: RunKind) -> None:
    record.remember_run(binding.run_id, binding.digest)
    record.active_run_id = binding.run_id
    record.active_run_kind = kind


def _started(record: ThreadRecord, binding: RunBinding) -> ev.Event:
    return ev.run_started(record.thread_id, binding.run_id, binding.parent_run_id)


def _take(record: ThreadRecord, taken: Sequence[Answer]) -> None:
    """The runtime moved past these inputs: their answers count as taken."""
    tools = {item.id: item.envelope.tool_use_id for item in record.pending_interrupts}
    for answer in taken:
        record.remember_answer(answer.interrupt_id, answer.digest, reported=False,
                               tool_use_id=tools.get(answer.interrupt_id))
    done = {answer.interrupt_id for answer in taken}
    record.pending_interrupts = [item for item in record.pending_interrupts if item.id not in done]


def _stop_following(record: ThreadRecord, kind: RunKind | None) -> None:
    """No stream of ours follows the run any more (``carried``)."""
    record.active_run_id = None
    record.active_run_kind = kind
    record.parked_until = None
    record.adoptions = 0
    record.handed_off_text = None
    record.handed_off_streamed = None


def _settle_dead(record: ThreadRecord, findings: Findings, target: Node, expires_at: float) -> None:
    kind = record.active_run_kind
    carried = {item.id: item for item in record.pending_interrupts} if kind is RunKind.RESUME else {}
    taken = findings.taken()
    for interrupt_id in taken:
        item = carried.get(interrupt_id)
        if item is not None:
            record.remember_answer(interrupt_id, item.sending or "", reported=False,
                                   tool_use_id=item.envelope.tool_use_id)
    record.pending_interrupts = [item for item in record.pending_interrupts if item.id not in taken]
    unreported = set(record.unreported_answers())
    if target is CARRIED:
        # The task carries the answers on; no stream follows it.
        _stop_following(record, kind)
        return
    if target is INTERRUPTED:
        kept = {item.id for item in record.pending_interrupts}
        record.pending_interrupts += [
            new_pending(envelope, expires_at=expires_at)
            for envelope in findings.asks
            if envelope.input_id not in kept
        ]
        for item in record.pending_interrupts:
            item.sending = None
        _end_run(record, "interrupt")
    elif target is TERMINAL:
        code = ErrorCode.EXECUTION_LOST
        if kind is not RunKind.TURN:
            code = _DEAD_RUN_ERRORS.get(findings.fate, code)
        _end_with_error(record, code, "")
    else:
        _end_run(record, "success")
    if findings.fate is TaskFate.ORPHANED and kind is RunKind.FOLLOW:
        # A run that followed answers the runtime took told its client
        # how its stream broke; the runtime restarted since and runs
        # nothing more of the turn: a retry is told the answers applied.
        return
    # No client heard how the dead run ended: its answers stay unreported.
    for interrupt_id in unreported:
        record.applied_answers[interrupt_id] = attrs.evolve(record.applied_answers[interrupt_id], reported=False)


def _end_with_error(record: ThreadRecord, code: ErrorCode, message: str) -> Announced:
    record.pending_interrupts = []
    record.last_error = code.name
    _end_run(record, code.name)
    return [ev.run_error(message, code.name)]


def _end_run(record: ThreadRecord, outcome: str) -> str:
    run_id = record.active_run_id or ""
    _note_outcome(record, run_id, outcome)
    _stop_following(record, None)
    _mark_reported(record)
    return run_id


def _mark_reported(record: ThreadRecord) -> None:
    for key, answer in record.applied_answers.items():
        if not answer.reported:
            record.applied_answers[key] = attrs.evolve(answer, reported=True)


def _note_outcome(record: ThreadRecord, run_id: str, outcome: str | None) -> None:
    """How a run ended; the entry is replaced, never changed in place (a
    transition works on a copy of the record that shares the entries)."""
    entry = record.runs.get(run_id)
    if entry is not None:
        record.runs[run_id] = attrs.evolve(entry, outcome=outcome)


#: The error a dead run's thread ends with, by what became of its task.
_DEAD_RUN_ERRORS: Final = {
    TaskFate.FAILED: ErrorCode.A2A_EXECUTION_FAILED,
    TaskFate.CANCELED: ErrorCode.CANCELLED,
}

class Due(enum.Enum):
    """What a thread's expiry timer does when it fires."""

    #: Nothing is due: forget the timer.
    NOTHING = "nothing"
    #: Look again at the returned time.
    LATER = "later"
    #: The pending interrupts expired: take ``expire``.
    EXPIRE = "expire"


def expiry_due(record: ThreadRecord, now: float) -> tuple[Due, float | None]:
    """What the expiry timer does for ``record`` at ``now`` (after a dead
    run was recovered), and when it looks again."""
    deadline = record.deadline
    if deadline is None:
        return Due.NOTHING, None
    if deadline > now:
        return Due.LATER, deadline
    if allowed(record, Expire):
        return Due.EXPIRE, None
    if record.run_phase is RunPhase.HANDED_OFF and record.parked_until is not None:
        # Interrupts that a resume carries expire with it, not before; a
        # handed-off run's grace is looked at when it ends.
        return Due.LATER, record.parked_until
    return Due.NOTHING, None


class Recovery(enum.Enum):
    """What a request does about the run of a thread it claimed (nobody
    else holds it, so no process of ours relays that run)."""

    #: No run: nothing to settle.
    NOTHING = "nothing"
    #: Handed off at a shutdown, within its grace: alive, waiting to be adopted.
    ADOPTABLE = "adoptable"
    #: Handed off and nobody adopted it within the grace: cancelled, as a client that left.
    NOT_ADOPTED = "not_adopted"
    #: A turn that died with its process: cancelled (nothing the person decided rides on it).
    DEAD_TURN = "dead_turn"
    #: A run that carried answers died: the runtime says what became of them (``recover``).
    DEAD_ANSWERS = "dead_answers"


def recovery(record: ThreadRecord, now: float) -> Recovery:
    """What a request that claimed the thread does about its run at ``now``."""
    if record.state is not ThreadState.RUNNING:
        return Recovery.NOTHING
    if record.run_phase is RunPhase.HANDED_OFF:
        return Recovery.ADOPTABLE if may(record, Adopt, Adopt(now)) else Recovery.NOT_ADOPTED
    if (record.active_run_kind or RunKind.TURN) is RunKind.TURN:
        return Recovery.DEAD_TURN
    return Recovery.DEAD_ANSWERS


def holds_a_run(record: ThreadRecord) -> bool:
    """Whether the thread has a run (relayed, parked, handed off, or dead
    with its process): the state a request may have to settle first."""
    return record.state is ThreadState.RUNNING


def runs(record: ThreadRecord, run_id: str) -> bool:
    """Whether ``run_id`` is the thread's run, and it has not ended."""
    return holds_a_run(record) and record.active_run_id == run_id


def new_pending(envelope: InputEnvelope, *, expires_at: float, raised_after: int = 0) -> PendingInterrupt:
    """A pending interrupt for a runtime input envelope."""
    interrupt = build_interrupt(envelope.fields, expires_at=expires_at)
    return PendingInterrupt(interrupt, envelope, expires_at, raised_after)
