"""One run, from the runtime's stream to the client's: the run driver.

A :class:`RunDriver` carries out an admitted :class:`Ticket` by phase: it
opens the run (:mod:`.opening`: the opening transition of its plan kind;
failures there are still HTTP errors), relays it (:mod:`.relaying`: its
:class:`~aguiadapter.runs.follow.Follower` sends the answers and relays or
follows the runtime's task), watches it while it has no client
(:mod:`.grace`), and ends it with the transition its outcome calls for
(:mod:`.closing`). The stream is relayed in an inner task, so that a
disconnect, the cancel route or a shutdown can stop it (:meth:`RunDriver.stop`)
and the driver still ends the run cleanly; :attr:`RunDriver.ended` is set
once it has.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection, Mapping
from typing import Final

from ..a2a.client import A2AError
from ..errors import AdapterError
from ..logs import log_fields
from ..protocol.events import Event
from ..runtime.envelope import InputEnvelope
from ..runtime.iac_code import AnswerRefused, TaskMismatch
from ..store.contract import PersistenceError
from ..threads import admission
from ..threads import machine as tm
from ..translate.mapper import IdentityLearned, IdentityMismatch, RunIdentity, RunTranslator, TurnOutcome
from ..translate.pipeline import PipelineState
from .closing import RunCloser
from .follow import Follower
from .grace import GraceWatcher
from .handover import continue_reply
from .latch import Latch
from .opening import OPENINGS, Opener
from .phases import PHASES, Phase, StopReason
from .relaying import RunOutput, stream_to_pause
from .shell import EventSink, SinkClosed, needs_sync
from .ticket import RunContext, Ticket

__all__ = ["PHASES", "Phase", "RunContext", "RunDriver", "StopReason", "Ticket"]

log = logging.getLogger(__name__)

_RUN_ERRORS: Final = (AnswerRefused, AdapterError, A2AError, IdentityMismatch, TaskMismatch, PersistenceError)


def _translator(ticket: Ticket, envelopes: Mapping[str, InputEnvelope]) -> RunTranslator:
    """The run's translator, which holds the run's ids (the one copy of them)."""
    record = ticket.record
    continuing = ticket.plan.kind is not admission.PlanKind.TURN
    if continuing and record.pipeline is None:
        record.pipeline = PipelineState()
    identity = RunIdentity(
        thread_id=record.thread_id,
        run_id=ticket.run_input.run_id,
        execution_id=ticket.execution_id,
        context_id=record.context_id,
        ros_invocation_id=ticket.run_input.iac_code.ros_invocation_id,
        task_id=record.task_id if continuing else None,
        session_id=record.session_id,
    )
    adopting = ticket.plan.kind is admission.PlanKind.ADOPT
    translator = RunTranslator(
        identity,
        known_session=continuing,
        pipeline=record.pipeline if continuing else None,
        resumed_tools=_resumed_tools(envelopes),
        known_inputs=tuple(envelopes.values()),
        span_prefix=f"{identity.run_id}.{record.adoptions + 1}" if adopting else None,
    )
    if adopting and record.handed_off_text is not None:
        continue_reply(translator, record)
    return translator


def _resumed_tools(envelopes: Mapping[str, InputEnvelope]) -> dict[str, str]:
    """toolCallId → tool name of the calls whose interrupts the thread waits on."""
    return {
        envelope.tool_use_id: envelope.tool_name or "tool" for envelope in envelopes.values() if envelope.tool_use_id
    }


class RunDriver:
    """Carries one admitted run from its opening to its last event: keeps
    its phase, and hands each phase to the piece that does it."""

    def __init__(self, context: RunContext, ticket: Ticket, sink: EventSink | None) -> None:
        self.context = context
        self.ticket = ticket
        record = ticket.record
        envelopes = {item.id: item.envelope for item in record.pending_interrupts}
        self.translator = _translator(ticket, envelopes)
        self.follower = Follower(
            context.runtime,
            self.translator,
            self,
            envelopes=envelopes,
            # The tool calls the answers this run carries (or follows) let run.
            answered_tools=[*_resumed_tools(envelopes), *record.unreported_tools()],
            props=ticket.run_input.iac_code,
            cwd=record.cwd,
            subscribable=ticket.plan.kind is admission.PlanKind.ADOPT,
        )
        names = (record.thread_id, ticket.run_input.run_id)
        self.output = RunOutput(names, self._goes_on_without_client, sink)
        # Bound methods, not lambdas, here and below: a third of the size, kept all the run long.
        self.closer = RunCloser(context, ticket, self.translator, self.output, self._answers_taken)
        self.ended = Latch()
        #: Made when the run first goes on without its client (most never do).
        self._grace: GraceWatcher | None = None
        self.phase = Phase.OPENING
        self.stop_reason: StopReason | None = None
        #: The transition whose write the grace watcher lost.
        self._lost_transition = "park"
        self.started = time.monotonic()
        identity = self.identity
        self.report = context.telemetry.run(
            thread_id=identity.thread_id, run_id=identity.run_id, execution_id=identity.execution_id,
            resume=ticket.plan.kind is not admission.PlanKind.TURN,
        )
        self._inner: asyncio.Task[TurnOutcome | None] | None = None

    @property
    def identity(self) -> RunIdentity:
        """The run's ids as far as it learned them (the translator's)."""
        return self.translator.identity

    # ------------------------------------------------------------- control
    def stop(self, reason: StopReason) -> None:
        """Stop relaying; the run then ends as cancelled (``handoff``: it is
        left to another replica). A client that went away while there is a
        disconnect grace only parks the run."""
        relayed = self.phase in (Phase.OPENING, Phase.RELAYED, Phase.PARKED)
        if reason == "disconnect" and self.context.grace_seconds > 0 and relayed:
            self._client_left()
            return
        if self._may_enter(Phase.STOPPING):
            self._enter(Phase.STOPPING)
            self.stop_reason = reason
        if self._inner is not None:
            self._inner.cancel()

    @property
    def grace(self) -> GraceWatcher:
        """The run's grace watcher, made on first use."""
        if self._grace is None:
            self._grace = GraceWatcher(
                self.context, self.ticket.shell, self.output.names, self.ended,
                gone=self._stop_without_client, lost_write=self._lost_write, drained=self._drained,
            )
        return self._grace

    def _answers_taken(self) -> bool:
        """Whether the runtime took this run's answers."""
        return bool(self.follower.accepted)

    def _drained(self) -> None:
        """The drain ended without another replica adopting the run."""
        self.stop("shutdown")

    def _lease_lost(self) -> None:
        """The thread's lease is no longer this process's."""
        self.stop("lease_lost")

    def _may_enter(self, phase: Phase) -> bool:
        """Whether :data:`PHASES` allows a move to ``phase`` now."""
        return phase in PHASES[self.phase]

    def _enter(self, phase: Phase) -> None:
        """Move to ``phase``; a move :data:`PHASES` does not allow raises."""
        if not self._may_enter(phase):
            raise RuntimeError(f"run {self.identity.run_id}: no move from {self.phase.value} to {phase.value}")
        self.phase = phase

    @property
    def draining(self) -> bool:
        """Shutdown let the client go; the run waits to be adopted."""
        return self.phase is Phase.HANDING_OFF

    def _client_left(self) -> None:
        """The client vanished: go on without it for the grace."""
        self.output.let_client_go()
        if self._may_enter(Phase.PARKED):
            self._enter(Phase.PARKED)
            self.grace.watch()

    def _goes_on_without_client(self) -> bool:
        """A client's stream closed: the run parks for the grace (whether it does)."""
        if self.context.grace_seconds <= 0 or self.draining:
            return False
        self._client_left()
        return True

    def drain(self, until: float) -> None:
        """Shutdown: let the client go (it re-attaches elsewhere with its
        last event id) and go on relaying into the log until another replica
        adopts the run (:meth:`hand_off`) or ``until``."""
        if not self._may_enter(Phase.HANDING_OFF):
            return
        self._enter(Phase.HANDING_OFF)
        if self.output.end_client():
            log.info("run %s: client let go (shutdown)", self.identity.run_id)
        self.grace.drain(until)

    def hand_off(self) -> bool:
        """Another replica asks for this draining run: stop relaying it;
        whether this asked the relay to stop. Asked again before the run let
        go, the relay is stopped again: a cancel that lands as an awaited
        call completes is lost (``asyncio.wait_for`` of Python 3.11 returns
        the call's result instead), and the asker asks every second."""
        if self.draining or self.handing_off:
            self.stop("handoff")
            return True
        return False

    @property
    def handing_off(self) -> bool:
        """Asked to hand the run over, and still relaying or letting go."""
        return self.phase is Phase.STOPPING and self.stop_reason == "handoff"

    def reader_came(self) -> None:
        """A client of this process re-attached (see :meth:`GraceWatcher.reader_came`)."""
        if self._grace is not None:  # none made: the run never went on without a client
            self._grace.reader_came()

    def _lost_write(self, transition: str) -> None:
        """A write the run did not wait for (the grace watcher's, a turn's
        binding written on its own) was lost: the run ends."""
        self._lost_transition = transition
        self.stop("lost_write")

    def _stop_without_client(self) -> None:
        """The client is gone for good: the run ends as one that left."""
        if self._may_enter(Phase.STOPPING):
            self._enter(Phase.STOPPING)
            self.stop_reason = "disconnect"
        if self._inner is not None:
            self._inner.cancel()

    # ------------------------------------------------------------ opening
    async def open(self) -> None:
        """Take the opening transition and announce the run (a report is
        over then). Raises :class:`AdapterError` before anything was
        announced."""
        opener = Opener(self.context, self.ticket, self.translator, self.follower, self.output, self.closer.lost)
        events = await opener.open()
        # The run is open: it counts from here, under its own span, until
        # drive() has logged its end.
        self.report.begin()
        begins = opener.opening.begins
        if begins is Phase.OVER:
            self.closer.outcome = "report"
            if self._may_enter(Phase.OVER):  # not when stopped while it opened
                self._enter(Phase.OVER)
        else:
            self.ticket.shell.keep_claim(self._lease_lost)
            if begins is Phase.PARKED:
                self._client_left()
            elif self._may_enter(begins):  # not when stopped while it opened
                self._enter(begins)
        try:
            await self.output.emit(events)
        except SinkClosed:
            # Gone before the run streamed (without a grace): it ends as one that left.
            self.output.let_client_go()
            self._stop_without_client()

    # ------------------------------------------------------------- driving
    async def drive(self) -> None:
        """Relay the run, end it, log one line about it."""
        shell = self.ticket.shell
        try:
            await self._drive()
        finally:
            shell.stop_keeping()
            if self._grace is not None:
                self._grace.cancel()
            await shell.release()
            self._log_run()
            # The run's report (begun by open(), which drive() follows) ends after its log line.
            self.report.leave()
            self._enter(Phase.ENDED)
        self.ended.set()

    async def _drive(self) -> None:
        closer = self.closer
        if self.phase is Phase.OVER:
            return
        if self.phase is Phase.STOPPING:
            await closer.abandon(self.stop_reason, self._lost_transition)
            return
        stream = OPENINGS[self.ticket.plan.kind].stream
        self._inner = asyncio.create_task(stream_to_pause(stream, self.follower, self.ticket))
        try:
            outcome = await self._inner
        except asyncio.CancelledError:
            if self.stop_reason is None:  # our own task was cancelled, not the run stopped
                self._stop_without_client()
                await closer.abandon(self.stop_reason, self._lost_transition)
                raise
            if self.stop_reason == "handoff":
                await asyncio.shield(closer.let_go())
                return
            await closer.abandon(self.stop_reason, self._lost_transition)
            return
        except SinkClosed:
            self._stop_without_client()
            await closer.abandon(self.stop_reason, self._lost_transition)
            return
        except _RUN_ERRORS as exc:
            await closer.end_by_error(exc)
            return
        await closer.conclude(outcome)

    # ---------------------------------------------- what the follower asks of the run
    def applied_answers(self) -> Collection[str]:
        """The interrupts whose answers the thread records as applied."""
        return self.ticket.record.applied_answers.keys()

    def first_event(self) -> None:
        """The runtime's first result of the run arrived."""
        self.report.first_event()

    async def accept(self, interrupt_ids: list[str]) -> None:
        """Store that the runtime took these answers."""
        await self.ticket.shell.apply(tm.Accept(interrupt_ids))

    async def bind(self, learned: IdentityLearned) -> None:
        """Store the task and session ids the run learned (the translator
        holds them already: a lost write of them still cancels the task).
        A turn's binding goes with the run's next write, or on its own a
        moment later if the turn still runs (runs/shell.py ``needs_sync``)."""
        shell = self.ticket.shell
        event = tm.BindTask(learned.task_id, learned.session_id)
        if needs_sync(event, shell.record):
            await shell.apply(event)
        else:
            await shell.defer(event, self._lost_write)

    async def emit(self, events: list[Event]) -> None:
        """Write events to the run's log, then to its client."""
        await self.output.emit(events)

    async def before_end(self, events: list[Event]) -> None:
        """What the turn's last chunk brought (its end's record write comes
        next). Where that write is cheap (``--durability process``: page
        cache; Redis) the events wait for it and go out with the end, in one
        write to the client; where it waits for the disk (``fsync``: two
        syncs, a millisecond or more) they go out now: the person's text
        does not wait for the disk, for one write more."""
        if self.ticket.shell.store.durability == "fsync":
            await self.output.emit(events)
        else:
            self.output.hold(events)

    def _log_run(self) -> None:
        ident = self.identity
        events = self.output.events_sent
        outcome = self.closer.outcome
        # Before the log line: the line still names the run's span.
        self.report.ended(outcome, task_id=ident.task_id, events=events)
        fields = {
            "thread": ident.thread_id,
            "run": ident.run_id,
            "execution": ident.execution_id,
            "task": ident.task_id,
            "outcome": outcome,
            "duration_ms": round((time.monotonic() - self.started) * 1000),
            "events": events,
            "kind": self.ticket.plan.kind.value,
        }
        log_fields(log, logging.INFO, "run ended", fields)
