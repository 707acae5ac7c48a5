"""The thread machine: what a thread may do next, and what each step causes.

States:

- ``idle``: no run is active; a new user turn may start.
- ``running``: one run streams; nothing else may start on the thread.
- ``interrupted``: the runtime waits for the user; only a resume, a cancel or
  expiry moves the thread on. A resume whose answers the runtime refuses
  comes back here (``reject``) with the same interrupts pending.
- ``terminal``: the last execution ended abnormally (failed, cancelled,
  expired or lost); the next user turn starts a new execution.

Every transition writes the thread's record through the store before it
announces anything; a transition whose write fails raises
:class:`~aguiadapter.threads.store.PersistenceError` and announces nothing.
Entering ``terminal`` writes best effort, because the error that led there
must reach the client even when the disk is the problem.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

import attrs
from statemachine import State, StateMachine
from statemachine.exceptions import TransitionNotAllowed

from ..errors import AdapterError, ErrorCode
from ..protocol import events as ev
from .record import ThreadRecord
from .store import Claim, PersistenceError, ThreadStore

log = logging.getLogger(__name__)


@attrs.frozen
class RunBinding:
    """What a transition into ``running`` binds to the thread."""

    run_id: str
    digest: str
    execution_id: str
    ros_invocation_id: str
    parent_run_id: str | None = None
    user_message_id: str | None = None

    def started_event(self, thread_id: str) -> ev.Event:
        """The ``RUN_STARTED`` event of this run."""
        return ev.run_started(thread_id, self.run_id, self.parent_run_id)


class SinkClosed(Exception):
    """The sink cannot take events any more (the client went away)."""


class EventSink(Protocol):
    """Where a run's AG-UI events go (the SSE response)."""

    async def emit(self, events: list[ev.Event]) -> None:
        """Deliver events in order; raise :class:`SinkClosed` when closed."""


class ThreadMachine(StateMachine):
    """One thread's lifecycle; the record is its model."""

    idle = State(initial=True)
    running = State()
    interrupted = State()
    terminal = State()

    start_turn = idle.to(running) | terminal.to(running)
    resume = interrupted.to(running)
    finish = running.to(idle)
    interrupt = running.to(interrupted)
    fail = running.to(terminal)
    cancel = running.to(terminal) | interrupted.to(terminal)
    expire = interrupted.to(terminal)
    lose = running.to(terminal) | interrupted.to(terminal)
    reject = running.to(interrupted)

    def __init__(
        self,
        record: ThreadRecord,
        store: ThreadStore,
        *,
        claim: Claim | None = None,
        sink: EventSink | None = None,
    ) -> None:
        self.record = record
        self.store = store
        self.claim = claim
        self.sink = sink
        super().__init__(model=record, state_field="state")

    # ---------------------------------------------------------- persistence
    async def on_enter_state(self, target: State) -> None:
        """Write the record; only ``terminal`` tolerates a failed write."""
        if target.id != "terminal":
            await self.store.save(self.record, self.claim)
            return
        try:
            await self.store.save(self.record, self.claim)
        except PersistenceError:
            log.warning("thread %s: terminal state not persisted", self.record.thread_id)

    # -------------------------------------------------------------- actions
    def on_start_turn(self, binding: RunBinding) -> None:
        """Bind the new run and its new execution to the record."""
        record = self.record
        self._bind_run(binding)
        record.execution_id = binding.execution_id
        record.ros_invocation_id = binding.ros_invocation_id
        record.task_id = None
        record.last_error = None
        if binding.user_message_id is not None:
            record.last_user_message_id = binding.user_message_id

    def on_resume(self, binding: RunBinding) -> None:
        """Bind the resuming run to the record (same execution)."""
        self._bind_run(binding)

    def _bind_run(self, binding: RunBinding) -> None:
        record = self.record
        record.remember_run(binding.run_id, binding.digest)
        record.active_run_id = binding.run_id

    def on_finish(self) -> None:
        """The run ended normally."""
        self._end_run("success")

    def on_interrupt(self, pending: list[dict[str, Any]]) -> None:
        """Remember what the runtime waits for (each entry holds its
        AG-UI ``interrupt`` and the runtime's ``envelope``)."""
        self.record.pending_interrupts = pending
        self._end_run("interrupt")

    def on_fail(self, code: ErrorCode, message: str) -> None:
        """The run ended with an error."""
        self._end_with_error(code)

    def on_cancel(self, code: ErrorCode = ErrorCode.CANCELLED, message: str = "") -> None:
        """The execution was cancelled."""
        self._end_with_error(code)

    def on_expire(self, code: ErrorCode = ErrorCode.EXECUTION_EXPIRED, message: str = "") -> None:
        """The pending interrupts expired."""
        self._end_with_error(code)

    def on_lose(self, code: ErrorCode = ErrorCode.EXECUTION_LOST, message: str = "") -> None:
        """The execution cannot be recovered."""
        self._end_with_error(code)

    def on_reject(self, code: ErrorCode = ErrorCode.A2A_UNAVAILABLE, message: str = "") -> None:
        """The runtime did not take the answers: they stay pending."""
        self.record.last_error = code.name
        self._end_run(code.name)

    def _end_with_error(self, code: ErrorCode) -> None:
        self.record.pending_interrupts = []
        self.record.last_error = code.name
        self._end_run(code.name)

    def _end_run(self, outcome: str) -> None:
        record = self.record
        run_id = record.active_run_id
        if run_id is not None and run_id in record.runs:
            record.runs[run_id].outcome = outcome
        record.active_run_id = None

    # --------------------------------------------------------- announcements
    async def after_start_turn(self, binding: RunBinding) -> None:
        """Open the AG-UI run."""
        await self._emit([binding.started_event(self.record.thread_id)])

    async def after_resume(self, binding: RunBinding) -> None:
        """Open the resuming AG-UI run."""
        await self._emit([binding.started_event(self.record.thread_id)])

    async def after_finish(self, run_id: str, usage: list[dict[str, Any]] | None = None) -> None:
        """Close the run with a success outcome."""
        thread_id = self.record.thread_id
        await self._emit([ev.run_finished(thread_id, run_id, {"type": "success"}, usage)])

    async def after_interrupt(
        self,
        pending: list[dict[str, Any]],
        run_id: str,
        usage: list[dict[str, Any]] | None = None,
    ) -> None:
        """Close the run with the interrupts the client must answer."""
        outcome = {"type": "interrupt", "interrupts": [entry["interrupt"] for entry in pending]}
        await self._emit([ev.run_finished(self.record.thread_id, run_id, outcome, usage)])

    async def after_transition(self, event: str, code: ErrorCode | None = None, message: str = "") -> None:
        """Every error transition ends an active stream with ``RUN_ERROR``."""
        if code is not None and event in _ERROR_EVENTS:
            await self._emit([ev.run_error(message, code.name)])

    async def _emit(self, events: list[ev.Event]) -> None:
        if self.sink is not None:
            await self.sink.emit(events)


_ERROR_EVENTS = frozenset({"fail", "cancel", "expire", "lose", "reject"})

#: Why a transition is refused, by (event, current state).
REFUSALS: dict[tuple[str, str], ErrorCode] = {
    ("start_turn", "running"): ErrorCode.THREAD_BUSY,
    ("start_turn", "interrupted"): ErrorCode.RESUME_REQUIRED,
    ("resume", "running"): ErrorCode.THREAD_BUSY,
    ("resume", "idle"): ErrorCode.UNKNOWN_INTERRUPT,
    ("resume", "terminal"): ErrorCode.UNKNOWN_INTERRUPT,
}


async def restore_machine(
    record: ThreadRecord,
    store: ThreadStore,
    *,
    claim: Claim | None = None,
    sink: EventSink | None = None,
) -> ThreadMachine:
    """A machine in the record's stored state (no entry actions run)."""

    async def build() -> ThreadMachine:
        machine = ThreadMachine(record, store, claim=claim, sink=sink)
        await machine.activate_initial_state()
        return machine

    # Built in a task of its own: the engine keeps itself in a context
    # variable, which would otherwise pin the machine to the caller's task.
    return await asyncio.get_running_loop().create_task(build())


async def apply(machine: ThreadMachine, event: str, **kwargs: Any) -> None:
    """Send an event; a refused transition becomes its documented error."""
    state = machine.record.state
    try:
        # In a task of its own, like restore_machine, for the same reason.
        await asyncio.get_running_loop().create_task(machine.send(event, **kwargs))
    except TransitionNotAllowed as exc:
        code = REFUSALS.get((event, state), ErrorCode.INTERNAL_ERROR)
        raise AdapterError(code) from exc
