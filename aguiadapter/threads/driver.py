"""One run, from the runtime's stream to the client's: the run driver.

A :class:`RunDriver` relays an admitted run. A new turn sends the user's
message; a resume first checks the waiting task, then sends each answer in
the runtime's own form and follows the task. The stream is relayed in an
inner task, so that a disconnect, the cancel route or a shutdown can stop it
(:meth:`RunDriver.stop`) and the driver can still end the run cleanly.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Literal

from ..a2a import wire
from ..a2a.client import A2AError, A2ARpcError, A2AUnavailable
from ..a2a.messages import answer_message, permission_part
from ..errors import AdapterError, ErrorCode
from ..i18n import render
from ..protocol.interrupts import build_interrupt
from ..protocol.resume import Answer, answer_text
from ..translate.mapper import (
    IdentityMismatch,
    RunIdentity,
    RunTranslator,
    TurnOutcome,
    is_sideband,
    required_inputs,
)
from ..translate.pipeline import PipelineState
from .machine import EventSink, SinkClosed, apply, restore_machine
from .store import PersistenceError

if TYPE_CHECKING:
    from .service import ThreadService, Ticket

log = logging.getLogger(__name__)

StopReason = Literal["disconnect", "cancel", "shutdown", "lease_lost"]

_OUTCOME_ERRORS = {"failed": ErrorCode.A2A_EXECUTION_FAILED, "canceled": ErrorCode.CANCELLED}
_RELAY_ERRORS = (A2AUnavailable, A2ARpcError, IdentityMismatch, PersistenceError)


class _HeldEvents:
    """Keeps a transition's announcement until the thread is released."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    async def emit(self, events: list[Any]) -> None:
        self.events.extend(events)


class AnswerRefused(Exception):
    """The runtime did not accept an interrupt answer; it stays pending."""


class RunDriver:
    """Streams one admitted run from the runtime to the sink."""

    def __init__(self, service: ThreadService, ticket: Ticket, sink: EventSink) -> None:
        self.service = service
        self.ticket = ticket
        #: Where the run's events go; ``None`` once the client is gone.
        self.sink: EventSink | None = sink
        record = ticket.record
        self.identity = RunIdentity(
            thread_id=record.thread_id,
            run_id=ticket.run_input.run_id,
            execution_id=ticket.run_execution_id,
            context_id=record.context_id,
            ros_invocation_id=ticket.run_input.iac_code.ros_invocation_id,
            task_id=record.task_id if ticket.answers else None,
            session_id=record.session_id,
        )
        if not ticket.answers or record.pipeline is None:
            # A new turn is a new task: its pipeline sequence starts over.
            record.pipeline = PipelineState()
        resumed_tools = {
            str(answer.pending["envelope"]["toolUseId"]): str(answer.pending["envelope"].get("toolName") or "tool")
            for answer in ticket.answers
            if answer.pending["envelope"].get("toolUseId")
        }
        self.translator = RunTranslator(
            self.identity, known_session=bool(ticket.answers), pipeline=record.pipeline, resumed_tools=resumed_tools
        )
        self.started = time.monotonic()
        self.stop_reason: StopReason | None = None
        self._inner: asyncio.Task[TurnOutcome | None] | None = None
        #: Whether the runtime accepted this resume's answers.
        self._accepted = False
        self._sink = sink
        self._ended = "unknown"
        #: Whether this run already sent the client an ACTIVITY_SNAPSHOT.
        self._view_restored = False
        #: The service's lease renewal for this run, stopped when the run ends.
        self.keeper: asyncio.Task[None] | None = None

    # ------------------------------------------------------------- control
    def stop(self, reason: StopReason) -> None:
        """Stop relaying; the run then ends as cancelled."""
        if self.stop_reason is None:
            self.stop_reason = reason
        if self._inner is not None:
            self._inner.cancel()

    def message(self, code: ErrorCode) -> str:
        """The caller-language message of an error code."""
        return render(code.message_id, self.ticket.language)

    async def drive(self) -> None:
        """Relay the run, end it, and log one line about it."""
        self.service.metrics.runs_started += 1
        try:
            await self._drive()
        finally:
            self._log_run()

    def _log_run(self) -> None:
        ident = self.identity
        events = getattr(self._sink, "events_sent", None)
        self.service.metrics.runs_ended[self._ended] += 1
        if isinstance(events, int):
            self.service.metrics.events_relayed += events
        fields = {
            "thread": ident.thread_id,
            "run": ident.run_id,
            "execution": ident.execution_id,
            "task": ident.task_id,
            "outcome": self._ended,
            "duration_ms": round((time.monotonic() - self.started) * 1000),
            "events": events,
            "resume": bool(self.ticket.answers),
        }
        log.info("run ended", extra={"fields": fields})

    async def _drive(self) -> None:
        self._inner = asyncio.create_task(self._stream())
        try:
            outcome = await self._inner
        except asyncio.CancelledError:
            if self.stop_reason is None:  # our own task was cancelled
                self.stop_reason = "disconnect"
                await self._abandon()
                raise
            await self._abandon()
            return
        except AnswerRefused:
            await self._refuse_answer(ErrorCode.A2A_UNAVAILABLE)
            return
        except AdapterError as exc:
            await self._fail(exc.code)
            return
        except _RELAY_ERRORS as exc:
            await self._fail_from(exc)
            return
        except SinkClosed:
            self.stop_reason = "disconnect"
            await self._abandon()
            return
        await self._conclude(outcome)

    # -------------------------------------------------------------- streams
    async def _stream(self) -> TurnOutcome | None:
        if not self.ticket.answers:
            assert self.ticket.message is not None
            return await self._relay(self.service.client.stream_message_batches(self.ticket.message))
        return await self._resume()

    async def _relay(
        self,
        batches: AsyncIterator[list[dict[str, Any]]],
        accepted: list[Answer] | None = None,
        recover_after_first: bool = False,
    ) -> TurnOutcome | None:
        """Translate the runtime's results and write them; what one network
        chunk brought goes out in one write."""
        translator = self.translator
        sink = self.sink
        assert sink is not None
        sent_at = time.monotonic()
        first = True
        try:
            async for batch in batches:
                if first:
                    first = False
                    self.service.metrics.observe_a2a_latency(time.monotonic() - sent_at)
                    if accepted:
                        await self._mark_applied(accepted)
                        accepted = None
                events: list[Any] = []
                for result in batch:
                    events += translator.feed(result)
                    if translator.identity_changed:
                        translator.identity_changed = False
                        await self._persist_identity()
                    if translator.outcome is not None:
                        break
                if events:
                    await sink.emit(events)
                if recover_after_first:
                    # Subscribed: what happened before is in the state route,
                    # what happens now arrives here (the cursor drops overlap).
                    recover_after_first = False
                    await self._recover_pipeline()
                if translator.outcome is not None:
                    return translator.outcome
        except A2ARpcError as exc:
            if accepted:
                raise AnswerRefused(str(exc)) from exc
            raise
        finally:
            await batches.aclose()  # type: ignore[attr-defined]
        return None

    async def _persist_identity(self) -> None:
        """Write the task and session ids before any event of theirs goes
        out: an adapter that dies right after must still find (and cancel)
        the runtime's task when the thread is next used."""
        record = self.ticket.record
        record.task_id = self.identity.task_id
        record.session_id = self.identity.session_id
        await self.service.store.save(record, self.ticket.claim)

    # --------------------------------------------------------------- resume
    async def _resume(self) -> TurnOutcome | None:
        answers = self.ticket.answers
        task = await self._waiting_task()
        if (task.get("status") or {}).get("state") in wire.TERMINAL_STATES:
            raise AdapterError(ErrorCode.EXECUTION_LOST)
        await self._emit(self.translator.opening() + self.translator.reopen_steps())
        if not _still_waits(task, answers):
            # The runtime took these answers before we could record it
            # (the adapter died in between): record them and follow the task.
            await self._mark_applied(answers)
            return await self._follow(task)
        waiting = required_inputs(_task_iac(task))
        answered = {answer.interrupt_id for answer in answers}
        if any(str(envelope.get("inputId")) not in answered for envelope in waiting):
            # The runtime asks for more than the client answered: announce
            # everything that waits now, before anything is sent.
            return TurnOutcome("interrupt", inputs=tuple(waiting))
        await self._recover_pipeline()
        for answer in answers:
            if answer.cancels_task:
                await self.service.cancel_task_quietly(self.identity.task_id)
                return TurnOutcome("canceled")
        streamed = [answer for answer in answers if not is_sideband(answer.pending["envelope"])]
        for answer in answers:
            if answer not in streamed[-1:]:
                await self._send_sideband(answer)
        if streamed:
            last = streamed[-1]
            stream = self.service.client.stream_message_batches(self._answer_message(last))
            return await self._relay(stream, accepted=[last])
        return await self._follow(await self.service.client.get_task(str(self.identity.task_id)))

    async def _send_sideband(self, answer: Answer) -> None:
        """An answer sent without a stream (``SendMessage``); the task keeps
        working and is followed afterwards."""
        try:
            await self.service.client.send_message(self._answer_message(answer))
        except A2ARpcError as exc:
            raise AnswerRefused(str(exc)) from exc
        await self._mark_applied([answer])

    async def _recover_pipeline(self) -> None:
        """Events the runtime's pipeline produced while no stream was open,
        after the stored cursor, with a snapshot that restores the view."""
        state = self.translator.pipeline
        if state.pipeline_run_id is None or self.identity.task_id is None:
            return
        params = {"taskId": self.identity.task_id, "afterSequence": str(state.last_sequence)}
        try:
            document = await self.service.client.get_json("/iac-code/pipeline/state", params)
        except A2AError as exc:
            log.info("run %s: pipeline state not recovered: %s", self.identity.run_id, exc)
            return
        await self._emit(self.translator.recover(document, snapshot_view=not self._view_restored))
        self._view_restored = True

    async def _emit(self, events: list[Any]) -> None:
        if events and self.sink is not None:
            await self.sink.emit(events)

    async def _waiting_task(self) -> dict[str, Any]:
        task_id = self.identity.task_id
        if task_id is None:
            raise AdapterError(ErrorCode.EXECUTION_LOST)
        await self.service.restore_session(self.ticket.record)
        try:
            task = await self.service.client.get_task(task_id)
        except A2ARpcError as exc:
            if exc.code == wire.TASK_NOT_FOUND:
                raise AdapterError(ErrorCode.EXECUTION_LOST) from exc
            raise
        if task.get("id") != task_id or task.get("contextId") != self.identity.context_id:
            raise IdentityMismatch("the waiting task does not match the thread")
        return task

    async def _follow(self, task: dict[str, Any]) -> TurnOutcome | None:
        """Relay a task that works on without a stream of ours."""
        state = (task.get("status") or {}).get("state")
        if state in wire.STREAM_END_STATES:
            await self._recover_pipeline()
            await self._emit(self.translator.feed({"task": task}))
            return self.translator.outcome
        return await self._relay(self.service.client.subscribe_batches(str(task["id"])), recover_after_first=True)

    def _answer_message(self, answer: Answer) -> dict[str, Any]:
        envelope = answer.pending["envelope"]
        if answer.kind == "permission":
            part = permission_part(envelope, answer.decision)
        else:
            part = {"text": answer_text(answer)}
        record = self.ticket.record
        task_id = str(envelope.get("requestTaskId") or self.identity.task_id)
        return answer_message(
            message_id=f"{self.identity.run_id}-{answer.interrupt_id}",
            context_id=record.context_id,
            task_id=task_id,
            part=part,
            props=self.ticket.run_input.iac_code,
            cwd=record.cwd,
        )

    async def _mark_applied(self, answers: list[Answer]) -> None:
        """The runtime accepted these answers: they are pending no more."""
        self._accepted = True
        record = self.ticket.record
        done = {answer.interrupt_id for answer in answers}
        record.pending_interrupts = [
            item for item in record.pending_interrupts if str(item["interrupt"]["id"]) not in done
        ]
        for answer in answers:
            record.remember_answer(answer.interrupt_id, answer.digest)
        await self.service.store.save(record, self.ticket.claim)
        if not record.pending_interrupts:
            await self.service.expiry.cancel(record.thread_id)

    # -------------------------------------------------------------- endings
    async def _close_spans(self) -> None:
        events = self.translator.finish()
        if events and self.sink is not None:
            await self.sink.emit(events)

    async def _conclude(self, outcome: TurnOutcome | None) -> None:
        if outcome is None:
            await self._fail(ErrorCode.A2A_UNAVAILABLE)
            return
        if outcome.kind in _OUTCOME_ERRORS:
            if outcome.detail:
                log.warning("run %s: the runtime ended the task %s: %s", self.identity.run_id, outcome.kind,
                            outcome.detail[:500])
            await self._fail(_OUTCOME_ERRORS[outcome.kind], detail=outcome.detail)
            return
        try:
            await self._close_spans()
        except SinkClosed:
            self.sink = None
        run_id = self.identity.run_id
        usage = self.translator.usage()
        try:
            self._ended = outcome.kind
            if outcome.kind == "interrupt":
                pending = self._pending(outcome)
                deadline = min(p["expiresAt"] for p in pending)
                await self._end("interrupt", deadline=deadline, pending=pending, run_id=run_id, usage=usage)
            else:
                await self._end("finish", run_id=run_id, usage=usage)
        except PersistenceError:
            await self.service.cancel_task_quietly(self.identity.task_id)
            await self._fail(ErrorCode.STATE_PERSISTENCE_FAILED)
        except SinkClosed:
            log.info("run %s ended after its client left", run_id)

    async def _end(
        self, event: str, *, deadline: float | None = None, keep_deadline: bool = False, **kwargs: Any
    ) -> None:
        """Take the run's last transition, then free the thread, then send
        the terminal event: a client that answers RUN_FINISHED at once (a
        resume) finds the thread free, not THREAD_BUSY."""
        sink, held = self.sink, _HeldEvents()
        # The machine lives only for its transition: a run may stream for
        # hours, and a machine instance costs tens of kilobytes.
        record, store = self.ticket.record, self.service.store
        machine = await restore_machine(record, store, claim=self.ticket.claim, sink=held if sink else None)
        await apply(machine, event, **kwargs)
        thread_id = self.identity.thread_id
        if deadline is not None:
            await self.service.expiry.schedule(thread_id, deadline)
        elif not keep_deadline:
            await self.service.expiry.cancel(thread_id)
        if self.keeper is not None:
            self.keeper.cancel()
        await self.service.store.release(self.ticket.claim)
        if sink is not None and held.events:
            await sink.emit(held.events)

    def _pending(self, outcome: TurnOutcome) -> list[dict[str, Any]]:
        expires_at = time.time() + self.service.interrupt_ttl_seconds
        return [
            {"interrupt": build_interrupt(envelope, expires_at=expires_at), "envelope": envelope,
             "expiresAt": expires_at}
            for envelope in outcome.inputs
        ]

    async def _fail_from(self, exc: Exception) -> None:
        if isinstance(exc, A2AUnavailable):
            code = ErrorCode.A2A_UNAVAILABLE
        elif isinstance(exc, A2ARpcError):
            code = ErrorCode.A2A_EXECUTION_FAILED
        elif isinstance(exc, IdentityMismatch):
            code = ErrorCode.A2A_PROTOCOL_ERROR
        else:
            code = ErrorCode.STATE_PERSISTENCE_FAILED
        log.warning("run %s: %s (%s)", self.identity.run_id, code.name, exc)
        if self.ticket.answers and not self._accepted and code is not ErrorCode.A2A_PROTOCOL_ERROR:
            # Nothing was applied: the interrupt stays pending and retryable.
            await self._refuse_answer(code)
            return
        if code is not ErrorCode.A2A_UNAVAILABLE:
            # Only a task whose identity was verified is ours to cancel.
            await self.service.cancel_task_quietly(self.identity.task_id)
        await self._fail(code)

    async def _fail(self, code: ErrorCode, detail: str | None = None) -> None:
        self._note_error(code)
        try:
            await self._close_spans()
        except SinkClosed:
            self.sink = None
        event = "cancel" if code is ErrorCode.CANCELLED else "lose" if code is ErrorCode.EXECUTION_LOST else "fail"
        message = self.message(code)
        if detail and code is ErrorCode.A2A_EXECUTION_FAILED:
            # The runtime's own words help the user more than the code alone.
            message = f"{message} {detail[:300]}"
        try:
            await self._end(event, code=code, message=message)
        except SinkClosed:
            log.info("run %s: %s after its client left", self.identity.run_id, code.name)

    def _note_error(self, code: ErrorCode) -> None:
        self._ended = code.name
        self.service.metrics.errors[code.name] += 1

    async def _refuse_answer(self, code: ErrorCode) -> None:
        """The answer was not applied: the run ends with an error, the thread
        keeps waiting with the same pending interrupts."""
        self._note_error(code)
        try:
            await self._close_spans()
            await self._end("reject", keep_deadline=True, code=code, message=self.message(code))
        except SinkClosed:
            log.info("run %s: answer refused after its client left", self.identity.run_id)

    async def _abandon(self) -> None:
        """Stopped: cancel the A2A task and end the execution. A client that
        left is not told; one whose run was cancelled or shut down is."""
        if self.stop_reason == "disconnect":
            self.sink = None
        await self.service.cancel_task_quietly(self.identity.task_id)
        await asyncio.shield(self._end_abandoned())

    async def _end_abandoned(self) -> None:
        try:
            await self._close_spans()
        except SinkClosed:
            self.sink = None
        code = ErrorCode.STATE_PERSISTENCE_FAILED if self.stop_reason == "lease_lost" else ErrorCode.CANCELLED
        self._note_error(code)
        if self.stop_reason == "disconnect":
            self._ended = "disconnected"
        event = "fail" if code is ErrorCode.STATE_PERSISTENCE_FAILED else "cancel"
        try:
            await self._end(event, code=code, message=self.message(code))
        except (AdapterError, PersistenceError, SinkClosed):
            log.info("run %s: abandoned run not fully recorded", self.identity.run_id)


def _task_iac(task: dict[str, Any]) -> dict[str, Any]:
    iac = (task.get("metadata") or {}).get(wire.IAC_CODE_KEY)
    return iac if isinstance(iac, dict) else {}


def _still_waits(task: dict[str, Any], answers: list[Answer]) -> bool:
    """Whether the task still waits for (one of) these answers."""
    waiting = {str(envelope.get("inputId")) for envelope in required_inputs(_task_iac(task))}
    return any(answer.interrupt_id in waiting for answer in answers)
