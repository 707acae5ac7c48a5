"""The thread service: admission, runs and cancellation.

This is the one place that knows every other layer: it reads a parsed
request, asks the store for the thread, drives the thread machine, feeds the
A2A stream through the translator and hands events to the sink. Handlers call
:meth:`ThreadService.admit` (refusals are HTTP errors) and then
:meth:`ThreadService.run` (failures are ``RUN_ERROR`` events).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any

import attrs

from ..a2a.client import A2AClient, A2AError, A2ARpcError, A2AUnavailable
from ..a2a.messages import build_user_message
from ..errors import AdapterError, ErrorCode
from ..i18n import render
from ..protocol.inputs import RunAgentInput, latest_user_message
from ..protocol.interrupts import build_interrupt
from ..translate.mapper import IdentityMismatch, RunIdentity, RunTranslator, TurnOutcome
from .machine import EventSink, RunBinding, SinkClosed, ThreadMachine, apply, restore_machine
from .record import ThreadRecord
from .store import Claim, CorruptRecord, PersistenceError, ThreadStore

log = logging.getLogger(__name__)

_OUTCOME_ERRORS = {
    "failed": ErrorCode.A2A_EXECUTION_FAILED,
    "canceled": ErrorCode.CANCELLED,
}


@attrs.define
class Ticket:
    """An admitted request: the claimed thread and what the run will do."""

    run_input: RunAgentInput
    digest: str
    language: str
    cwd: str
    record: ThreadRecord
    claim: Claim
    message: dict[str, Any]
    execution_id: str


@attrs.define
class ActiveRun:
    """A run that streams right now, so that it can be cancelled."""

    thread_id: str
    execution_id: str
    task: asyncio.Task[None]


class ThreadService:
    """Admits runs, drives them, and keeps track of the active ones."""

    def __init__(self, store: ThreadStore, client: A2AClient, *, interrupt_ttl_seconds: float = 3600.0) -> None:
        self.store = store
        self.client = client
        self.interrupt_ttl_seconds = interrupt_ttl_seconds
        #: Set on server shutdown: active runs are cancelled and told so.
        self.closing = False
        self.active: dict[str, ActiveRun] = {}

    # ------------------------------------------------------------- admission
    async def admit(self, run_input: RunAgentInput, digest: str, language: str, cwd: str) -> Ticket:
        """Check a request against the thread; claim the thread for it."""
        thread_id = run_input.thread_id
        known = await self._load(thread_id)
        if known is not None:
            _check_idempotency(known, run_input.run_id, digest)
            _check_binding(known, cwd, run_input.forwarded_props.iac_code.user_id)
        claim = await self.store.claim(thread_id, run_input.run_id)
        if claim is None:
            raise AdapterError(ErrorCode.THREAD_BUSY)
        try:
            record = await self._load(thread_id) or self._new_record(run_input, cwd)
            _check_idempotency(record, run_input.run_id, digest)
            await self._recover_lost_run(record, claim)
            if record.state == "interrupted":
                raise AdapterError(ErrorCode.RESUME_REQUIRED)
            if run_input.resume:
                raise AdapterError(ErrorCode.UNKNOWN_INTERRUPT)
            message = self._new_turn_message(run_input, record)
        except BaseException:
            await self.store.release(claim)
            raise
        return Ticket(run_input, digest, language, cwd, record, claim, message, _new_id())

    async def _load(self, thread_id: str) -> ThreadRecord | None:
        try:
            return await self.store.load(thread_id)
        except CorruptRecord as exc:
            log.error("thread %s: unreadable state: %s", thread_id, exc)
            raise AdapterError(ErrorCode.EXECUTION_LOST) from exc

    @staticmethod
    def _new_record(run_input: RunAgentInput, cwd: str) -> ThreadRecord:
        return ThreadRecord(
            thread_id=run_input.thread_id,
            context_id=f"ctx-{uuid.uuid4()}",
            cwd=cwd,
            user_id=run_input.forwarded_props.iac_code.user_id,
        )

    async def _recover_lost_run(self, record: ThreadRecord, claim: Claim) -> None:
        """A record left ``running`` without a live claim: that run died with
        its process. Its task is cancelled and the thread moves on."""
        if record.state != "running":
            return
        await self._cancel_task_quietly(record.task_id)
        machine = await restore_machine(record, self.store, claim=claim)
        await apply(machine, "lose", code=ErrorCode.EXECUTION_LOST, message="")

    def _new_turn_message(self, run_input: RunAgentInput, record: ThreadRecord) -> dict[str, Any]:
        user = latest_user_message(run_input)
        if user is None or user.id == record.last_user_message_id:
            raise AdapterError(ErrorCode.INVALID_INPUT, "new_run_requires_user_message")
        return build_user_message(
            context_id=record.context_id,
            message=user,
            props=run_input.forwarded_props.iac_code,
            cwd=record.cwd,
        )

    # ------------------------------------------------------------------ runs
    async def run(self, ticket: Ticket, sink: EventSink) -> None:
        """Start the run (pre-stream failures raise) and stream it to the end."""
        record, run_input = ticket.record, ticket.run_input
        machine = await restore_machine(record, self.store, claim=ticket.claim, sink=sink)
        binding = RunBinding(
            run_id=run_input.run_id,
            digest=ticket.digest,
            execution_id=ticket.execution_id,
            ros_invocation_id=run_input.forwarded_props.iac_code.ros_invocation_id,
            parent_run_id=run_input.parent_run_id,
            user_message_id=ticket.message.get("messageId"),
        )
        try:
            await apply(machine, "start_turn", binding=binding)
        except PersistenceError as exc:
            await self.store.release(ticket.claim)
            raise AdapterError(ErrorCode.STATE_PERSISTENCE_FAILED) from exc
        except BaseException:
            await self.store.release(ticket.claim)
            raise
        task = asyncio.current_task()
        assert task is not None
        self.active[ticket.execution_id] = ActiveRun(record.thread_id, ticket.execution_id, task)
        try:
            await RunDriver(self, ticket, machine).drive()
        finally:
            self.active.pop(ticket.execution_id, None)
            await self.store.release(ticket.claim)

    async def _cancel_task_quietly(self, task_id: str | None) -> bool:
        if task_id is None:
            return False
        try:
            # Shielded: this often runs while the caller is being cancelled.
            await asyncio.shield(self.client.cancel_task(task_id))
        except (A2AError, asyncio.CancelledError) as exc:
            log.info("cancel of A2A task %s not confirmed: %s", task_id, type(exc).__name__)
            return False
        return True

    async def shutdown(self) -> None:
        """Cancel every active run (server shutdown)."""
        self.closing = True
        runs = list(self.active.values())
        for active in runs:
            active.task.cancel()
        if runs:
            await asyncio.wait([active.task for active in runs], timeout=1.0)


class RunDriver:
    """Streams one admitted run from the runtime to the sink."""

    def __init__(self, service: ThreadService, ticket: Ticket, machine: ThreadMachine) -> None:
        self.service = service
        self.ticket = ticket
        self.machine = machine
        record = ticket.record
        self.identity = RunIdentity(
            thread_id=record.thread_id,
            run_id=ticket.run_input.run_id,
            execution_id=ticket.execution_id,
            context_id=record.context_id,
            ros_invocation_id=ticket.run_input.forwarded_props.iac_code.ros_invocation_id,
            session_id=record.session_id,
        )
        self.translator = RunTranslator(self.identity)
        self.started = time.monotonic()

    def message(self, code: ErrorCode) -> str:
        """The caller-language message of an error code."""
        return render(code.message_id, self.ticket.language)

    async def drive(self) -> None:
        """Relay the stream, then take the transition its outcome calls for."""
        try:
            outcome = await self._relay()
        except asyncio.CancelledError:
            await self._abandon()
            raise
        except (A2AUnavailable, A2ARpcError, IdentityMismatch, PersistenceError) as exc:
            await self._fail_from(exc)
            return
        except SinkClosed:
            await self._abandon()
            return
        await self._conclude(outcome)

    async def _relay(self) -> TurnOutcome | None:
        translator = self.translator
        emit = self.machine.sink.emit  # type: ignore[union-attr]
        async for result in self.service.client.stream_message(self.ticket.message):
            events = translator.feed(result)
            if translator.identity_changed:
                translator.identity_changed = False
                await self._persist_identity()
            if events:
                await emit(events)
            if translator.outcome is not None:
                return translator.outcome
        return None

    async def _persist_identity(self) -> None:
        record = self.ticket.record
        record.task_id = self.identity.task_id
        record.session_id = self.identity.session_id
        await self.service.store.save(record, self.ticket.claim)

    async def _close_spans(self) -> None:
        events = self.translator.finish()
        if events and self.machine.sink is not None:
            await self.machine.sink.emit(events)

    async def _conclude(self, outcome: TurnOutcome | None) -> None:
        if outcome is None:
            await self._fail(ErrorCode.A2A_UNAVAILABLE)
            return
        if outcome.kind in _OUTCOME_ERRORS:
            await self._fail(_OUTCOME_ERRORS[outcome.kind])
            return
        await self._close_spans()
        run_id = self.identity.run_id
        usage = self.translator.usage()
        try:
            if outcome.kind == "interrupt":
                pending = self._pending(outcome)
                await apply(self.machine, "interrupt", pending=pending, run_id=run_id, usage=usage)
            else:
                await apply(self.machine, "finish", run_id=run_id, usage=usage)
        except PersistenceError:
            await self.service._cancel_task_quietly(self.identity.task_id)
            await self._fail(ErrorCode.STATE_PERSISTENCE_FAILED)

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
        if code is not ErrorCode.A2A_UNAVAILABLE:
            await self.service._cancel_task_quietly(self.identity.task_id)
        await self._fail(code)

    async def _fail(self, code: ErrorCode) -> None:
        try:
            await self._close_spans()
        except SinkClosed:
            self.machine.sink = None
        event = "cancel" if code is ErrorCode.CANCELLED else "fail"
        await apply(self.machine, event, code=code, message=self.message(code))

    async def _abandon(self) -> None:
        """The client left, or the server stops: cancel the A2A task and end
        the execution. Only a server shutdown still has a stream to tell."""
        if not self.service.closing:
            self.machine.sink = None
        await self.service._cancel_task_quietly(self.identity.task_id)
        await asyncio.shield(self._end_abandoned())

    async def _end_abandoned(self) -> None:
        try:
            await self._close_spans()
        except SinkClosed:
            self.machine.sink = None
        try:
            await apply(self.machine, "cancel", code=ErrorCode.CANCELLED, message=self.message(ErrorCode.CANCELLED))
        except (AdapterError, PersistenceError, SinkClosed):
            log.info("run %s: abandoned run not fully recorded", self.identity.run_id)


def _check_idempotency(record: ThreadRecord, run_id: str, digest: str) -> None:
    entry = record.runs.get(run_id)
    if entry is not None:
        same = entry.digest == digest
        raise AdapterError(ErrorCode.DUPLICATE_RUN_ID if same else ErrorCode.RUN_ID_CONFLICT)


def _check_binding(record: ThreadRecord, cwd: str, user_id: str | None) -> None:
    if record.cwd != cwd or record.user_id != user_id:
        raise AdapterError(ErrorCode.THREAD_BINDING_CONFLICT)


def _new_id() -> str:
    return f"exec-{uuid.uuid4()}"
