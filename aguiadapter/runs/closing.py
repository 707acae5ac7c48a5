"""Ending a run: the transition its outcome, its error or its stop calls for,
then the thread freed, then the terminal event (:class:`RunCloser`). What a
failure means is :mod:`.endings`' (pure rules); this is where it is done."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Final

import attrs

from ..a2a.client import A2AUnavailable
from ..errors import ErrorCode
from ..logs import scrub
from ..protocol import events as ev
from ..protocol.events import Event
from ..runtime.envelope import InputEnvelope
from ..store.contract import LostWrite
from ..threads import admission
from ..threads import machine as tm
from ..threads.record import PendingInterrupt, RunKind
from ..translate.mapper import RunTranslator, TurnOutcome
from .endings import End, Ending, Failure, ending_for, failure_of
from .handover import handed_off_streamed
from .phases import StopReason
from .relaying import RunOutput
from .step import RunStep
from .ticket import RunContext, Ticket

log = logging.getLogger(__name__)

_OUTCOME_ERRORS: Final = {"failed": ErrorCode.A2A_EXECUTION_FAILED, "canceled": ErrorCode.CANCELLED}


class RunCloser(RunStep):
    """Ends one run: takes its last transition, frees its thread, tells its
    client; :attr:`outcome` says how it ended (for the run's log line)."""

    def __init__(
        self, context: RunContext, ticket: Ticket, translator: RunTranslator, output: RunOutput,
        accepted: Callable[[], bool],
    ) -> None:
        super().__init__(context, ticket, translator, output)
        #: Whether the runtime took an answer of this run.
        self._accepted = accepted
        #: How the run ended, as its log line and its report name it.
        self.outcome = "unknown"

    @property
    def names(self) -> tuple[str, str]:
        """Thread and run, as warning lines name them (run ids repeat across threads)."""
        return self.output.names

    # ------------------------------------------------------------ outcomes
    async def conclude(self, outcome: TurnOutcome | None) -> None:
        """The turn ended or paused (``None``: the stream said neither)."""
        if outcome is None:
            await self.end_by_error(A2AUnavailable("the runtime's stream ended without an outcome"))
            return
        if outcome.kind in _OUTCOME_ERRORS:
            if outcome.detail:
                log.warning("thread %s run %s: the runtime ended the task %s: %s", *self.names, outcome.kind,
                            scrub(outcome.detail)[:500])
            await self._fail(_OUTCOME_ERRORS[outcome.kind], detail=outcome.detail)
            return
        self._close_spans()
        usage = self.translator.usage()
        self.outcome = outcome.kind
        if outcome.kind == "interrupt":
            await self._end(tm.Interrupt(self._pending(outcome.inputs), usage))
        else:
            await self._end(tm.Finish(usage))

    def _pending(self, inputs: Sequence[InputEnvelope]) -> list[PendingInterrupt]:
        """The interrupts to announce: the ones already pending keep their
        announcement and expiry, new ones get a fresh deadline."""
        known = {item.id: item for item in self.ticket.record.pending_interrupts}
        expires_at = self.context.clock() + self.context.interrupt_ttl_seconds
        cursor = self.translator.pipeline.last_sequence
        pending = []
        for envelope in inputs:
            kept = known.get(envelope.input_id)
            if kept is not None:
                pending.append(attrs.evolve(kept, envelope=envelope, sending=None))
            else:
                pending.append(tm.new_pending(envelope, expires_at=expires_at, raised_after=cursor))
        return pending

    # -------------------------------------------------------------- errors
    async def end_by_error(self, exc: BaseException) -> None:
        """The run failed: end it as :func:`.endings.ending_for` says."""
        failure = failure_of(
            exc, resuming=self.ticket.plan.kind is admission.PlanKind.RESUME, accepted=self._accepted(),
            turn=self._is_turn(),
        )
        log.warning("thread %s run %s: %s (%s)", *self.names, failure.code.name, exc)
        ending = ending_for(failure)
        if ending.end is End.LOST:
            await self.lost(ending)
            return
        if ending.cancel_task:
            await self.context.runtime.cancel_task(self.translator.identity.task_id)
        if ending.end is End.REJECT:
            await self._refuse_answer(ending.code, ending.message_id)
        elif ending.end is End.DETACH:
            self._note_error(ending.code)
            self._close_spans()
            await self._end(tm.Detach(ending.code, self.ticket.words(ending.code, ending.message_id)))
        else:
            await self._fail(ending.code, detail=ending.detail, message_id=ending.message_id)

    async def _fail(self, code: ErrorCode, detail: str | None = None, message_id: str | None = None) -> None:
        self._note_error(code)
        self._close_spans()
        message = self.ticket.words(code, message_id)
        if detail and code in (ErrorCode.A2A_EXECUTION_FAILED, ErrorCode.INVALID_INPUT):
            # The runtime's own words help the user more than the code alone
            # (never the request's own secrets, which a provider may quote).
            message = f"{message} {scrub(detail, self.ticket.run_input.iac_code.secret_values())[:300]}"
        if code is ErrorCode.CANCELLED:
            await self._end(tm.Cancel(message, profile=self.context.profile, usage=self.translator.usage()))
        else:
            await self._end(tm.Fail(code, message))

    async def _refuse_answer(self, code: ErrorCode, message_id: str | None = None) -> None:
        """The answer was not applied: the run ends with an error, the thread
        keeps waiting with the same pending interrupts."""
        self._note_error(code)
        self._close_spans()
        await self._end(tm.Reject(code, self.ticket.words(code, message_id)))

    # --------------------------------------------------------------- stops
    async def abandon(self, reason: StopReason | None, lost_write: str) -> None:
        """Stopped: cancel the runtime's task and end the execution. A client
        that left is not told; one whose run was cancelled or shut down is
        (``lost_write``: the transition whose write a stop for it lost)."""
        if reason == "disconnect":
            self.output.sink = None
        await asyncio.shield(self._end_abandoned(reason, lost_write))

    async def _end_abandoned(self, reason: StopReason | None, lost_write: str) -> None:
        if reason == "lost_write":
            await self.lost(ending_for(Failure(ErrorCode.STATE_PERSISTENCE_FAILED, lost_write=lost_write)))
            return
        lease_lost = reason == "lease_lost"
        code = ErrorCode.STATE_PERSISTENCE_FAILED if lease_lost else ErrorCode.CANCELLED
        self._note_error(code)
        if reason == "disconnect":
            self.outcome = "disconnected"
        if lease_lost:
            # Another replica owns the thread now: its record and the run's
            # log are not ours to write; only our own client is told.
            self.output.detach()
            self._close_spans()
            await self.output.emit([{"type": "RUN_ERROR", "message": self.ticket.words(code), "code": code.name}],
                                   last=True)
            return
        await self.context.runtime.cancel_task(self.translator.identity.task_id)
        self._close_spans()
        await self._end(tm.Cancel(self.ticket.words(code), profile=self.context.profile, usage=self.translator.usage()))

    async def let_go(self) -> None:
        """Shutdown handoff: close what this process opened (in the log),
        record that the run waits to be adopted, free the thread. The
        runtime's task goes on."""
        self.outcome = "handed_off"
        events, open_text = self.translator.hand_over()
        streamed = handed_off_streamed(self.translator, open_text)
        await self.output.emit_to_whoever_listens(events)
        until = self.context.clock() + self.context.grace_seconds
        try:
            await self.shell.apply(tm.HandOff(until, open_text, streamed))
        except LostWrite as exc:
            # Nobody would adopt it: it ends here, and its log says so to the
            # client that re-attaches elsewhere (who would wait for it forever).
            log.error("thread %s run %s: handoff not recorded, the run is cancelled: %s", *self.names, exc)
            await self.lost(ending_for(Failure(ErrorCode.STATE_PERSISTENCE_FAILED, lost_write=exc.transition)))
            return
        self.shell.stop_keeping()
        await self.shell.release()
        ident = self.translator.identity
        log.info("run %s handed off; task %s goes on", ident.run_id, ident.task_id)

    # ---------------------------------------------------------- the last step
    def _close_spans(self) -> None:
        # With the terminal event that always follows, in one write.
        self.output.hold(self.translator.finish())

    async def _end(self, transition: tm.Transition[list[Event]]) -> None:
        """Take the run's last transition, then free the thread, then send
        the terminal event: a client that answers RUN_FINISHED at once (a
        resume) finds the thread free, not THREAD_BUSY. A lost write ends
        the run as :func:`.endings.ending_for` says."""
        try:
            events = await self.shell.apply(transition)
        except LostWrite as exc:
            log.error("thread %s run %s: %s", *self.names, exc)
            await self.lost(ending_for(Failure(ErrorCode.STATE_PERSISTENCE_FAILED, lost_write=exc.transition)))
            return
        await self._let_the_thread_go(events)

    async def lost(self, ending: Ending) -> None:
        """The record cannot be written: end the run as a crash would (the
        record stays as last stored, and the next request that touches the
        thread recovers it from the runtime), with the task cancelled when
        ``ending`` says so; the client hears it was not saved."""
        self._note_error(ending.code)
        if ending.cancel_task:
            await self.context.runtime.cancel_task(self.translator.identity.task_id)
        self._close_spans()
        await self._let_the_thread_go([ev.run_error(self.ticket.words(ending.code), ending.code.name)])

    async def _let_the_thread_go(self, events: list[Event]) -> None:
        self.shell.stop_keeping()
        await self.shell.release()
        if not await self.output.emit_to_whoever_listens(events, last=True):
            log.info("run %s ended after its client left", self.names[1])

    def _is_turn(self) -> bool:
        """A new user turn (or an adopted one): nothing decided rides on it."""
        kind = self.ticket.plan.kind
        if kind is admission.PlanKind.ADOPT:
            return self.shell.record.active_run_kind in (RunKind.TURN, None)
        return kind is admission.PlanKind.TURN

    def _note_error(self, code: ErrorCode) -> None:
        self.outcome = code.name
