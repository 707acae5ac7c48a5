"""The thread machine: what a thread may do next, and what each step causes.

This module is the one place that says which state a thread is in, which
transitions exist (recovery after a crash included), and why a request is
refused. It is synchronous and does no I/O: a transition changes the
:class:`~aguiadapter.threads.record.ThreadRecord` and returns the AG-UI
events it announces; time comes in as an argument. The async shell
(:mod:`aguiadapter.runs.shell`) loads the record, applies a transition,
saves the record and only then emits the events.

States:

- ``idle``: no run is active; a new user turn may start.
- ``running``: a run streams, or (after a crash) the runtime's task carries
  out answers it took while no stream of ours follows it. A run whose
  client went away may be *parked* for the disconnect grace (it goes on,
  into its event log, until a client re-attaches or the grace ends), and a
  parked run whose replica shut down is *handed off*: no process relays it
  until a re-attach on any replica *adopts* it.
- ``interrupted``: the runtime waits for the user; only a resume, a cancel
  or expiry moves the thread on.
- ``terminal``: the last execution ended abnormally (failed, cancelled,
  expired or lost); the next user turn starts a new execution.

Transitions are taken through the typed functions at the end of the module
(``start_turn(machine, binding)``...), never by event name, so that a
misspelt argument is a type error.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Concatenate, Final, ParamSpec, Protocol, TypeVar, cast

import attrs
from statemachine import State, StateMachine
from statemachine.exceptions import TransitionNotAllowed

from ..errors import AdapterError, ErrorCode
from ..protocol import events as ev
from ..protocol.inputs import ResumeEntry
from ..protocol.interrupts import build_interrupt
from ..protocol.profile import DEFAULT_PROFILE, Profile
from ..protocol.resume import Answer, answer_digest, check_resume
from ..runtime.envelope import InputEnvelope
from ..runtime.evidence import Findings, InputStatus, TaskFate
from ..translate.pipeline import PipelineState
from .access import check_owner
from .record import PendingInterrupt, RunKind, ThreadRecord, ThreadState

_P = ParamSpec("_P")
_R = TypeVar("_R")


@attrs.frozen
class RunBinding:
    """What a transition that opens a run binds to the thread."""

    run_id: str
    digest: str
    execution_id: str
    ros_invocation_id: str
    parent_run_id: str | None = None
    user_message_id: str | None = None


class ThreadRules:
    """What each transition does to the record (its ``on_<event>`` action)
    and the guards that choose between transitions. The machine below says
    which transitions exist; :class:`ThreadRun` carries them out."""

    def __init__(self, record: ThreadRecord) -> None:
        self.record = record

    # ------------------------------------------------------------ guards
    def relayed(self) -> bool:
        """A run that a process of ours relays."""
        return self.record.active_run_id is not None and not self.record.handed_off

    def parked(self) -> bool:
        """A relayed run that waits for a client to re-attach."""
        return self.record.parked_until is not None and not self.record.handed_off

    def handed_over(self, now: float) -> bool:
        """A handed-off run whose grace has not ended."""
        until = self.record.parked_until
        return self.record.handed_off and until is not None and now < until

    def carries_taken_answers(self) -> bool:
        """No stream follows the task, which carries answers it took."""
        return self.record.active_run_id is None and bool(self.record.unreported_answers())

    def waits_for_the_user(self, findings: Findings) -> bool:
        """An answer of the dead run never reached the runtime, or the
        runtime took them all and asks for more."""
        if findings.waiting():
            return True
        return findings.fate is TaskFate.ASKS and self.record.active_run_kind is not RunKind.TURN

    def task_still_works(self, findings: Findings) -> bool:
        """The runtime works on, carrying out what it was told."""
        return findings.fate is TaskFate.WORKS and self.record.active_run_kind is not RunKind.TURN

    def turn_ended(self, findings: Findings) -> bool:
        """The runtime finished the turn after taking the answers."""
        return findings.fate is TaskFate.TURN_ENDED and self.record.active_run_kind is not RunKind.TURN

    # ------------------------------------------------------- opening a run
    def on_start_turn(self, binding: RunBinding) -> list[ev.Event]:
        """A new user turn opens (a new execution)."""
        record = self.record
        self._open_run(binding, RunKind.TURN)
        record.execution_id = binding.execution_id
        record.ros_invocation_id = binding.ros_invocation_id
        record.task_id = None
        record.last_error = None
        record.pipeline = PipelineState()
        record.applied_answers = {key: attrs.evolve(a, reported=True) for key, a in record.applied_answers.items()}
        if binding.user_message_id is not None:
            record.last_user_message_id = binding.user_message_id
        return [self._started(binding)]

    def on_resume(
        self, binding: RunBinding, answers: Sequence[Answer], taken: Sequence[Answer] = ()
    ) -> list[ev.Event]:
        """A resume opens; its answers are marked as on their way (``taken``:
        answers to inputs the runtime already moved past)."""
        record = self.record
        self._take(taken)
        self._open_run(binding, RunKind.RESUME)
        digests = {answer.interrupt_id: answer.digest for answer in answers}
        for item in record.pending_interrupts:
            item.sending = digests.get(item.id)
        return [self._started(binding)]

    def on_announce(self, binding: RunBinding) -> list[ev.Event]:
        """A resume opens that only announces what the runtime waits for."""
        self._open_run(binding, RunKind.ANNOUNCE)
        return [self._started(binding)]

    def on_follow(self, binding: RunBinding, taken: Sequence[Answer] = ()) -> list[ev.Event]:
        """A run opens that follows a task carrying out answers it took."""
        self._take(taken)
        self._open_run(binding, RunKind.FOLLOW)
        return [self._started(binding)]

    def _take(self, taken: Sequence[Answer]) -> None:
        """The runtime moved past these inputs: their answers count as taken."""
        record = self.record
        tools = {item.id: item.envelope.tool_use_id for item in record.pending_interrupts}
        for answer in taken:
            record.remember_answer(answer.interrupt_id, answer.digest, reported=False,
                                   tool_use_id=tools.get(answer.interrupt_id))
        done = {answer.interrupt_id for answer in taken}
        record.pending_interrupts = [item for item in record.pending_interrupts if item.id not in done]

    def on_report(self, binding: RunBinding, message: str, profile: Profile = DEFAULT_PROFILE) -> list[ev.Event]:
        """A retried answer's run: opens and closes with the recorded outcome
        (it learns how the run that carried its answer ended; a cancelled
        one in the ``profile``'s form)."""
        record = self.record
        started = self._started(binding)
        record.remember_run(binding.run_id, binding.digest)
        self._mark_reported()
        stopped = record.last_error == ErrorCode.CANCELLED.name and not profile.stops_as_errors
        if record.state is ThreadState.TERMINAL and stopped:
            closing = ev.run_cancelled(record.thread_id, binding.run_id)
            outcome = record.last_error
        elif record.state is ThreadState.TERMINAL:
            closing = ev.run_error(message, record.last_error or ErrorCode.EXECUTION_LOST.name)
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

    def _open_run(self, binding: RunBinding, kind: RunKind) -> None:
        record = self.record
        record.remember_run(binding.run_id, binding.digest)
        record.active_run_id = binding.run_id
        record.active_run_kind = kind

    def _started(self, binding: RunBinding) -> ev.Event:
        return ev.run_started(self.record.thread_id, binding.run_id, binding.parent_run_id)

    # ---------------------------------------------------- while it streams
    def on_bind_task(self, task_id: str | None, session_id: str | None) -> None:
        """The run learned its task and session ids."""
        self.record.task_id = task_id
        self.record.session_id = session_id

    def on_accept(self, interrupt_ids: Sequence[str]) -> None:
        """The runtime took these answers: they are pending no more."""
        record = self.record
        done = set(interrupt_ids)
        for item in record.pending_interrupts:
            if item.id in done:
                record.remember_answer(item.id, item.sending or "", reported=False,
                                       tool_use_id=item.envelope.tool_use_id)
        record.pending_interrupts = [item for item in record.pending_interrupts if item.id not in done]

    # ------------------------------------------------------ a run ends
    def on_finish(self, usage: list[dict[str, Any]]) -> list[ev.Event]:
        """The run ended normally."""
        run_id = self._end_run("success")
        return [ev.run_finished(self.record.thread_id, run_id, {"type": "success"}, usage)]

    def on_interrupt(self, pending: Sequence[PendingInterrupt], usage: list[dict[str, Any]]) -> list[ev.Event]:
        """The run ended waiting for the user."""
        self.record.pending_interrupts = list(pending)
        run_id = self._end_run("interrupt")
        outcome = {"type": "interrupt", "interrupts": [item.interrupt for item in pending]}
        return [ev.run_finished(self.record.thread_id, run_id, outcome, usage)]

    def on_reject(self, code: ErrorCode, message: str) -> list[ev.Event]:
        """The runtime did not take the answers: they stay pending."""
        for item in self.record.pending_interrupts:
            item.sending = None
        self.record.last_error = code.name
        self._end_run(code.name)
        return [ev.run_error(message, code.name)]

    def on_detach(self, code: ErrorCode, message: str) -> list[ev.Event]:
        """The stream of a run broke after the runtime took its answers, or
        after an answer went out that it may have taken (still pending,
        marked as sent): the client is told, the task may carry them out;
        the next request that touches the thread asks the runtime what
        became of them, as after a crash."""
        record = self.record
        run_id = record.active_run_id or ""
        _note_outcome(record, run_id, code.name)
        record.active_run_id = None
        in_doubt = any(item.sending is not None for item in record.pending_interrupts)
        record.active_run_kind = RunKind.RESUME if in_doubt else RunKind.FOLLOW
        record.parked_until = None
        record.adoptions = 0
        record.handed_off_text = None
        return [ev.run_error(message, code.name)]

    def on_park(self, until: float) -> None:
        """The client went away; the run goes on for the grace."""
        self.record.parked_until = until

    def on_rejoin(self) -> None:
        """A client re-attached to the parked run."""
        self.record.parked_until = None

    def on_hand_off(self, until: float, open_text: str | None = None) -> None:
        """The relaying process stops (shutdown); the runtime's task goes on
        and any replica may adopt the run until ``until`` (and go on with
        the assistant message ``open_text``, left open in the run's log)."""
        self.record.handed_off = True
        self.record.parked_until = until
        self.record.handed_off_text = open_text

    def on_adopt(self, now: float) -> None:
        """This process relays the handed-off run from now on."""
        record = self.record
        record.handed_off = False
        record.parked_until = None
        record.adoptions += 1
        # The adopting driver took the open message into its translator.
        record.handed_off_text = None

    def on_fail(self, code: ErrorCode, message: str) -> list[ev.Event]:
        """The run ended with an error."""
        return self._end_with_error(code, message)

    def on_cancel(
        self,
        message: str,
        code: ErrorCode = ErrorCode.CANCELLED,
        profile: Profile = DEFAULT_PROFILE,
        usage: list[dict[str, Any]] | None = None,
    ) -> list[ev.Event]:
        """The execution was cancelled (the cancel route, a ``cancelled``
        answer that ends the turn, a disconnect, shutdown). The thread ends
        the same way in every profile; the run's closing event is the
        profile's: AG-UI 1.0 closes a stop with ``RUN_FINISHED`` and the
        cancelled outcome (with the ``usage`` accrued before it; the caller
        has closed everything the run opened), the reference with
        ``RUN_ERROR CANCELLED``."""
        run_id = self.record.active_run_id
        events = self._end_with_error(code, message)
        if code is ErrorCode.CANCELLED and run_id is not None and not profile.stops_as_errors:
            return [ev.run_cancelled(self.record.thread_id, run_id, usage)]
        return events

    def on_expire(self) -> None:
        """The pending interrupts expired."""
        self._end_with_error(ErrorCode.EXECUTION_EXPIRED, "")

    def on_lose(self) -> None:
        """The runtime no longer has the waiting task."""
        self._end_with_error(ErrorCode.EXECUTION_LOST, "")

    def on_recover(
        self,
        findings: Findings,
        *,
        expires_at: float,
        describe: Callable[[ErrorCode], str] = lambda code: "",
        target: State | None = None,
    ) -> list[ev.Event]:
        """Settle a run that died with its process, the way the runtime says
        it went; ``expires_at`` is the deadline of interrupts the runtime
        raised meanwhile. Announces the ``RUN_ERROR`` that ends the dead
        run's event log (``describe`` words it; no client listens to a dead
        run). ``target`` is the state the machine moves to (both engines
        pass it; callers do not)."""
        assert target is not None
        record = self.record
        self._settle_dead(findings, target, expires_at)
        code = ErrorCode.EXECUTION_LOST
        if target.value is ThreadState.TERMINAL and record.last_error in ErrorCode.__members__:
            code = ErrorCode[str(record.last_error)]
        return [ev.run_error(describe(code), code.name)]

    def _settle_dead(self, findings: Findings, target: State, expires_at: float) -> None:
        record = self.record
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
        if target.value is ThreadState.RUNNING:
            # The task carries the answers on; no stream follows it.
            record.active_run_id = None
            record.parked_until = None
            record.adoptions = 0
            record.handed_off_text = None
            return
        if target.value is ThreadState.INTERRUPTED:
            kept = {item.id for item in record.pending_interrupts}
            record.pending_interrupts += [
                new_pending(envelope, expires_at=expires_at)
                for envelope in findings.asks
                if envelope.input_id not in kept
            ]
            for item in record.pending_interrupts:
                item.sending = None
            self._end_run("interrupt")
        elif target.value is ThreadState.TERMINAL:
            code = ErrorCode.EXECUTION_LOST
            if kind is not RunKind.TURN:
                code = _DEAD_RUN_ERRORS.get(findings.fate, code)
            self._end_with_error(code, "")
        else:
            self._end_run("success")
        if findings.fate is TaskFate.ORPHANED and kind is RunKind.FOLLOW:
            # A run that followed answers the runtime took told its client
            # how its stream broke; the runtime restarted since and runs
            # nothing more of the turn: a retry is told the answers applied.
            return
        # No client heard how the dead run ended: its answers stay unreported.
        for interrupt_id in unreported:
            record.applied_answers[interrupt_id] = attrs.evolve(record.applied_answers[interrupt_id], reported=False)

    def _end_with_error(self, code: ErrorCode, message: str) -> list[ev.Event]:
        self.record.pending_interrupts = []
        self.record.last_error = code.name
        self._end_run(code.name)
        return [ev.run_error(message, code.name)]

    def _end_run(self, outcome: str) -> str:
        record = self.record
        run_id = record.active_run_id or ""
        _note_outcome(record, run_id, outcome)
        record.active_run_id = None
        record.active_run_kind = None
        record.parked_until = None
        record.handed_off = False
        record.adoptions = 0
        record.handed_off_text = None
        self._mark_reported()
        return run_id

    def _mark_reported(self) -> None:
        for key, answer in self.record.applied_answers.items():
            if not answer.reported:
                self.record.applied_answers[key] = attrs.evolve(answer, reported=True)



def _note_outcome(record: ThreadRecord, run_id: str, outcome: str | None) -> None:
    """How a run ended; the entry is replaced, never changed in place (a
    transition works on a copy of the record that shares the entries)."""
    entry = record.runs.get(run_id)
    if entry is not None:
        record.runs[run_id] = attrs.evolve(entry, outcome=outcome)


class ThreadMachine(ThreadRules, StateMachine):
    """One thread's lifecycle, as python-statemachine declares it; the record
    is its model. The declaration is the one source of which transitions
    exist (and of the diagram); runs take them through :class:`ThreadRun`,
    which compiles this declaration once (:func:`_compile`) instead of
    building a machine per transition: measured here, a build and one
    transition cost about 0.9 ms and 69 KiB against 7 µs for ThreadRun, and
    a machine cannot be kept per thread since each transition works on a
    fresh copy of the record. The compiled table reads fields of the
    library's transition and callback objects that are not its public API,
    so setup.cfg pins the library to the range whose every transition
    ``tests/pure/test_thread_machine.py`` checks ThreadRun against the library's
    own engine (python-statemachine 3.2.x); widen it only with that test green."""

    idle = State(value=ThreadState.IDLE, initial=True)
    running = State(value=ThreadState.RUNNING)
    interrupted = State(value=ThreadState.INTERRUPTED)
    terminal = State(value=ThreadState.TERMINAL)

    # A run opens.
    start_turn = idle.to(running) | terminal.to(running)
    resume = interrupted.to(running)
    announce = interrupted.to(running)
    follow = running.to(running, cond="carries_taken_answers") | interrupted.to(running)
    report = idle.to(idle) | interrupted.to(interrupted) | terminal.to(terminal)
    # While a run streams.
    bind_task = running.to(running)
    accept = running.to(running)
    # A run ends.
    finish = running.to(idle)
    interrupt = running.to(interrupted)
    reject = running.to(interrupted)
    fail = running.to(terminal)
    cancel = running.to(terminal) | interrupted.to(terminal)
    detach = running.to(running)
    # A run without a client (disconnect grace, handoff at shutdown).
    park = running.to(running, cond="relayed")
    rejoin = running.to(running, cond="parked")
    hand_off = running.to(running, cond="relayed")
    adopt = running.to(running, cond="handed_over")
    # No run: time passes, or the runtime lost the waiting task.
    expire = interrupted.to(terminal)
    lose = interrupted.to(terminal)
    # A run died with its process: what the runtime says happened instead.
    recover = (
        running.to(interrupted, cond="waits_for_the_user")
        | running.to(running, cond="task_still_works")
        | running.to(idle, cond="turn_ended")
        | running.to(terminal)
    )

    def __init__(self, record: ThreadRecord) -> None:
        self.record = record
        StateMachine.__init__(self, model=record, state_field="state")

    def allows(self, event: str) -> bool:
        """Whether ``event`` may happen in the current state (guards aside)."""
        return any(allowed.id == event for allowed in self.allowed_events)

#: ``running``'s inner phases, as the guards above tell them apart, and the
#: transitions that stay in ``running`` between them: (event, from, to).
#: ``relayed``: a process of ours streams the run; ``parked``: its client
#: went away and it goes on for the grace; ``handed_off``: its replica shut
#: down and any replica may adopt it; ``carried``: no stream follows the task,
#: which carries out answers it took. (The diagram's composite state.)
RUNNING_PHASES: Final = (
    ("bind_task", "relayed", "relayed"),
    ("accept", "relayed", "relayed"),
    ("park", "relayed", "parked"),
    ("rejoin", "parked", "relayed"),
    ("hand_off", "relayed", "handed_off"),
    ("hand_off", "parked", "handed_off"),
    ("adopt", "handed_off", "relayed"),
    ("detach", "relayed", "carried"),
    ("recover", "relayed", "carried"),
    ("follow", "carried", "relayed"),
)

#: What a front end sees of each state.
CLIENT_VIEW: Final = {
    ThreadState.IDLE: "idle",
    ThreadState.RUNNING: "running",
    ThreadState.INTERRUPTED: "waiting_for_the_user",
    ThreadState.TERMINAL: "ended",
}

#: What a front end sees of a transition that moves it between those views
#: (the others move nothing it sees).
CLIENT_EVENTS: Final = {
    "start_turn": "POST / (RUN_STARTED)",
    "resume": "POST / with resume (RUN_STARTED)",
    "announce": "POST / with resume (RUN_STARTED)",
    "follow": "POST / with resume (RUN_STARTED)",
    "finish": "RUN_FINISHED success",
    "interrupt": "RUN_FINISHED interrupt",
    "reject": "RUN_ERROR, the answer not taken",
    "fail": "RUN_ERROR",
    "cancel": "RUN_FINISHED cancelled (compat: RUN_ERROR CANCELLED), or the cancel route",
    "expire": "EXECUTION_EXPIRED on the next request",
    "lose": "EXECUTION_LOST on the next request",
    "recover": "after a crash, the next request",
}


class Machine(Protocol):
    """What a transition function needs: the record and ``send``. Both the
    declared :class:`ThreadMachine` and :class:`ThreadRun` are one."""

    record: ThreadRecord

    def send(self, event: str, **kwargs: Any) -> Any:
        """Take the transition ``event`` from the record's state."""


@attrs.frozen
class _Step:
    """One declared transition, as :class:`ThreadRun` takes it."""

    target: State
    guards: tuple[str, ...]
    action: Callable[..., Any] | None
    #: The parameters the guards and the action take (by name, as the library passes them).
    wants: dict[str, frozenset[str]]


#: Names python-statemachine hands to any callback besides the event's own arguments.
_INJECTED = ("source", "target")


def _parameters(function: Callable[..., Any]) -> frozenset[str]:
    return frozenset(name for name in inspect.signature(function).parameters if name != "self")


def _compile(declared: type[ThreadMachine]) -> dict[tuple[ThreadState, str], tuple[_Step, ...]]:
    """(state, event) -> the transitions to try, in declaration order. Only
    what the declaration uses is supported (named guards, ``on_<event>``
    actions); anything else fails here, at import, not at run time."""
    callbacks = ("before_", "after_", "on_enter_", "on_exit_", "enter_", "exit_", "on_transition", "on_invoke")
    stray = [name for holder in (ThreadRules, ThreadRecord) for name in dir(holder) if name.startswith(callbacks)]
    if stray:
        raise TypeError(f"ThreadRun does not run these callbacks: {stray}")
    table: dict[tuple[ThreadState, str], list[_Step]] = {}
    for state in declared.states:
        for transition in state.transitions:
            specs = list(transition.cond)
            # Callbacks named by convention are checked above; declared ones are not supported.
            declared_callbacks = [*transition.validators, *transition.before, *transition.on, *transition.after]
            if any(not spec.is_convention for spec in declared_callbacks) or transition.internal or any(
                not isinstance(spec.func, str) or spec.expected_value is not True for spec in specs
            ):
                raise TypeError(f"ThreadRun supports named guards and on_<event> actions only: {transition}")
            guards = tuple(str(spec.func) for spec in specs)
            for event in transition.events:
                action = getattr(ThreadRules, f"on_{event.id}", None)
                wants = {name: _parameters(getattr(ThreadRules, name)) for name in guards}
                if action is not None:
                    wants[action.__name__] = _parameters(action)
                step = _Step(transition.target, guards, action, wants)
                table.setdefault((state.value, event.id), []).append(step)
    return {key: tuple(steps) for key, steps in table.items()}


class ThreadRun(ThreadRules):
    """Takes the declared transitions on one record, as python-statemachine
    would: the first transition from the record's state whose guards all
    hold; its ``on_<event>`` action runs in the source state; then the
    record moves to the target. Nothing else runs (:func:`_compile` checks
    that nothing else is declared)."""

    __slots__ = ()

    def send(self, event: str, **kwargs: Any) -> Any:
        """Take ``event``; the action's result. A transition the state does
        not allow, or whose guards all fail, raises ``TransitionNotAllowed``."""
        source = self.record.state
        taken = self._step(event, kwargs)
        if taken is None:
            raise TransitionNotAllowed(getattr(ThreadMachine, event, None), {ThreadMachine.states_map[source]})
        step, offered = taken
        result = None
        if step.action is not None:
            result = step.action(self, **_given(offered, step.wants[step.action.__name__]))
        self.record.state = step.target.value
        return result

    def may(self, event: str, **kwargs: Any) -> bool:
        """Whether ``event`` would be taken now, guards included (nothing changes)."""
        return self._step(event, kwargs) is not None

    def _step(self, event: str, kwargs: dict[str, Any]) -> tuple[_Step, dict[str, Any]] | None:
        """The first declared transition of ``event`` whose guards hold."""
        source = self.record.state
        for step in _TRANSITIONS.get((source, event), ()):
            offered = {**kwargs, "source": ThreadMachine.states_map[source], "target": step.target}
            if all(getattr(self, guard)(**_given(offered, step.wants[guard])) for guard in step.guards):
                return step, offered
        return None

    def allows(self, event: str) -> bool:
        """Whether ``event`` may happen in the current state (guards aside)."""
        return allowed(self.record, event)


def _given(offered: dict[str, Any], wanted: frozenset[str]) -> dict[str, Any]:
    return {name: value for name, value in offered.items() if name in wanted}


_TRANSITIONS: Final = _compile(ThreadMachine)


#: The events each state allows (guards aside), read once from the machine's
#: definition: admission asks this without building a machine per request.
ALLOWED: Final[dict[ThreadState, frozenset[str]]] = {
    state.value: frozenset(event.id for transition in state.transitions for event in transition.events)
    for state in ThreadMachine.states
}


def allowed(record: ThreadRecord, event: str) -> bool:
    """Whether ``event`` may happen in the record's state (guards aside)."""
    return event in ALLOWED[record.state]


#: The error a dead run's thread ends with, by what became of its task.
_DEAD_RUN_ERRORS: Final = {
    TaskFate.FAILED: ErrorCode.A2A_EXECUTION_FAILED,
    TaskFate.CANCELED: ErrorCode.CANCELLED,
}

#: Why a request is refused, by (what it asks for, the thread's state).
REFUSALS: Final[dict[tuple[str, ThreadState], ErrorCode]] = {
    ("start_turn", ThreadState.RUNNING): ErrorCode.THREAD_BUSY,
    ("start_turn", ThreadState.INTERRUPTED): ErrorCode.RESUME_REQUIRED,
    ("resume", ThreadState.RUNNING): ErrorCode.THREAD_BUSY,
    ("resume", ThreadState.IDLE): ErrorCode.UNKNOWN_INTERRUPT,
    ("resume", ThreadState.TERMINAL): ErrorCode.UNKNOWN_INTERRUPT,
    # A retried answer whose run no process relays, and that no run follows:
    # its run was handed off at a shutdown and waits to be adopted.
    ("follow", ThreadState.RUNNING): ErrorCode.THREAD_BUSY,
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
    if allowed(record, "expire"):
        return Due.EXPIRE, None
    if record.handed_off and record.parked_until is not None:
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
    if record.handed_off:
        return Recovery.ADOPTABLE if restore(record).may("adopt", now=now) else Recovery.NOT_ADOPTED
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


# ---------------------------------------------------------------- admission
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
        if not allowed(record, "start_turn"):
            raise AdapterError(REFUSALS[("start_turn", state)])
        if request.user_message_id is None or request.user_message_id == record.last_user_message_id:
            raise AdapterError(ErrorCode.INVALID_INPUT, "new_run_requires_user_message")
        return Plan(PlanKind.TURN)
    entries = request.resume
    unreported = record.unreported_answers()
    if entries and all(entry.interrupt_id in unreported for entry in entries):
        return _retried_answers(record, entries, unreported)
    if allowed(record, "resume"):
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
    if restore(record).may("follow", taken=answers):
        return Plan(PlanKind.FOLLOW, answers)
    if allowed(record, "report"):
        return Plan(PlanKind.REPORT, answers)
    raise AdapterError(REFUSALS[("follow", record.state)])


def _digest(entry: ResumeEntry) -> str:
    return answer_digest(entry)


def refuse_settled(record: ThreadRecord, entries: Sequence[ResumeEntry]) -> None:
    """A resume of a thread that waits for nothing: why it is refused."""
    state = record.state
    for in_state, holds, code in SETTLED_RESUME_REFUSALS:
        if in_state in (None, state) and holds(record, entries):
            raise AdapterError(code)
    raise AdapterError(REFUSALS.get(("resume", state), ErrorCode.UNKNOWN_INTERRUPT))


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
    settled = allowed(record, "start_turn")
    if request.resume and settled and not set(record.unreported_answers()) >= {e.interrupt_id for e in request.resume}:
        refuse_settled(record, request.resume)


# ------------------------------------------------------- typed transitions
def restore(record: ThreadRecord) -> ThreadRun:
    """The record's transitions, from its stored state (no entry action runs)."""
    return ThreadRun(record)


def _event(action: Callable[Concatenate[ThreadRules, _P], _R]) -> Callable[Concatenate[Machine, _P], _R]:
    """The transition whose ``on_<event>`` action is ``action``, as a
    function of a machine with the action's own signature: each event is
    declared once (in :class:`ThreadMachine`) and written once (its action),
    and a misspelt argument is still a type error where it is taken."""
    event = action.__name__.removeprefix("on_")
    # Both engines hand the action its arguments by name: positional ones
    # are named here (mypy has checked them against the action already).
    names = tuple(name for name in inspect.signature(action).parameters if name != "self")

    def take(machine: Machine, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return cast(_R, machine.send(event, **dict(zip(names, args, strict=False)), **kwargs))

    take.__name__ = take.__qualname__ = event
    take.__doc__ = action.__doc__
    return take


start_turn = _event(ThreadRules.on_start_turn)
resume = _event(ThreadRules.on_resume)
announce = _event(ThreadRules.on_announce)
follow = _event(ThreadRules.on_follow)
report = _event(ThreadRules.on_report)
bind_task = _event(ThreadRules.on_bind_task)
accept = _event(ThreadRules.on_accept)
finish = _event(ThreadRules.on_finish)
interrupt = _event(ThreadRules.on_interrupt)
reject = _event(ThreadRules.on_reject)
detach = _event(ThreadRules.on_detach)
fail = _event(ThreadRules.on_fail)
cancel = _event(ThreadRules.on_cancel)
expire = _event(ThreadRules.on_expire)
lose = _event(ThreadRules.on_lose)
recover = _event(ThreadRules.on_recover)
park = _event(ThreadRules.on_park)
rejoin = _event(ThreadRules.on_rejoin)
hand_off = _event(ThreadRules.on_hand_off)
adopt = _event(ThreadRules.on_adopt)
