"""The thread service: admission, runs, cancellation and expiry.

This is the one place that knows every other layer: it reads a parsed
request, asks the store for the thread, drives the thread machine and hands
the run to a :class:`~aguiadapter.threads.driver.RunDriver`. Handlers call
:meth:`ThreadService.admit` (refusals are HTTP errors) and then
:meth:`ThreadService.run` (failures are ``RUN_ERROR`` events).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, Literal

import attrs

from ..a2a.client import A2AClient, A2AError, A2AHttpError
from ..a2a.messages import build_user_message
from ..errors import AdapterError, ErrorCode
from ..protocol.inputs import RunAgentInput, latest_user_message
from ..protocol.resume import Answer, check_resume
from ..metrics import Metrics
from .driver import RunDriver, StopReason
from .expiry import ExpiryScheduler
from .machine import EventSink, RunBinding, apply, restore_machine
from .record import ThreadRecord
from .store import Claim, CorruptRecord, PersistenceError, StoreUnavailable, ThreadStore

log = logging.getLogger(__name__)

CancelStatus = Literal["cancelled", "already_terminal", "not_found"]

#: How often each replica looks for deadlines that passed elsewhere.
SWEEP_SECONDS = 5.0
#: How long (0.1 s steps) the cancel route waits for another replica's run.
CANCEL_WAIT_STEPS = 50


@attrs.define
class Ticket:
    """An admitted request: the claimed thread and what the run will do."""

    run_input: RunAgentInput
    digest: str
    language: str
    record: ThreadRecord
    claim: Claim
    execution_id: str
    #: The user message of a new turn (``None`` for a resume).
    message: dict[str, Any] | None = None
    #: The checked answers of a resume (empty for a new turn).
    answers: list[Answer] = attrs.Factory(list)

    @property
    def run_execution_id(self) -> str:
        """The execution this run belongs to: a resume continues the
        interrupted one, a new turn starts its own."""
        if self.answers and self.record.execution_id is not None:
            return self.record.execution_id
        return self.execution_id


class ThreadService:
    """Admits runs, drives them, and keeps track of the active ones."""

    def __init__(self, store: ThreadStore, client: A2AClient, *, interrupt_ttl_seconds: float = 3600.0) -> None:
        self.store = store
        self.client = client
        self.interrupt_ttl_seconds = interrupt_ttl_seconds
        self.expiry = ExpiryScheduler(store, self.expire_thread)
        self.metrics = Metrics()
        #: Active runs by execution id, for the cancel route and shutdown.
        self.active: dict[str, RunDriver] = {}
        #: Set on server shutdown: active runs are cancelled and told so.
        self.closing = False
        #: Contexts whose runtime session this process already restored.
        self._restored: set[str] = set()
        self._sweeper: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Open the store, listen for cancels from other replicas, re-arm
        interrupt expiry from the stored deadlines and start the sweeper."""
        await self.store.start()
        self.store.on_cancel(lambda execution_id: self.stop_run(execution_id, "cancel"))
        await self.expiry.start()
        self._sweeper = asyncio.create_task(self._sweep_deadlines())

    async def _sweep_deadlines(self) -> None:
        """Expire what other replicas scheduled (local timers cover our own)."""
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            try:
                due = await self.store.due_deadlines(time.time())
            except StoreUnavailable as exc:
                log.warning("deadline sweep skipped: %s", exc)
                continue
            for thread_id in due:
                await self.expire_thread(thread_id)

    # ------------------------------------------------------------- admission
    async def admit(self, run_input: RunAgentInput, digest: str, language: str, cwd: str) -> Ticket:
        """Check a request against the thread; claim the thread for it."""
        thread_id = run_input.thread_id
        user_id = run_input.iac_code.user_id
        known = await self._load(thread_id)
        if known is not None:
            _check_idempotency(known, run_input.run_id, digest)
            _check_binding(known, cwd, user_id)
            if run_input.resume and known.state in ("idle", "terminal"):
                _refuse_resume_of_settled(run_input, known)
        claim = await self._claim(thread_id, run_input.run_id)
        if claim is None:
            raise AdapterError(ErrorCode.THREAD_BUSY)
        try:
            record = await self._load(thread_id) or _new_record(run_input, cwd)
            _check_idempotency(record, run_input.run_id, digest)
            _check_binding(record, cwd, user_id)
            await self._recover_lost_run(record, claim)
            ticket = Ticket(run_input, digest, language, record, claim, _new_id())
            if run_input.resume:
                ticket.answers = await self._check_resume(run_input, record, claim)
            elif record.state == "interrupted":
                raise AdapterError(ErrorCode.RESUME_REQUIRED)
            else:
                ticket.message = _new_turn_message(run_input, record)
        except BaseException:
            await self.store.release(claim)
            raise
        return ticket

    async def _load(self, thread_id: str) -> ThreadRecord | None:
        try:
            return await self.store.load(thread_id)
        except CorruptRecord as exc:
            log.error("thread %s: unreadable state: %s", thread_id, exc)
            raise AdapterError(ErrorCode.EXECUTION_LOST) from exc
        except StoreUnavailable as exc:
            raise AdapterError(ErrorCode.STATE_STORE_UNAVAILABLE) from exc

    async def _claim(self, thread_id: str, purpose: str) -> Claim | None:
        try:
            return await self.store.claim(thread_id, purpose)
        except StoreUnavailable as exc:
            raise AdapterError(ErrorCode.STATE_STORE_UNAVAILABLE) from exc

    async def _recover_lost_run(self, record: ThreadRecord, claim: Claim) -> None:
        """A record left ``running`` without a live claim: that run died with
        its process. Its task is cancelled and the thread moves on."""
        if record.state != "running":
            return
        async with self._renewing(claim):
            await self.cancel_task_quietly(record.task_id)
        machine = await restore_machine(record, self.store, claim=claim)
        await apply(machine, "lose", code=ErrorCode.EXECUTION_LOST, message="")

    async def _check_resume(self, run_input: RunAgentInput, record: ThreadRecord, claim: Claim) -> list[Answer]:
        assert run_input.resume is not None
        if record.state != "interrupted":
            _refuse_resume_of_settled(run_input, record)
        if run_input.iac_code.ros_invocation_id != record.ros_invocation_id:
            raise AdapterError(ErrorCode.EXECUTION_LOST, "resume_identity_mismatch")
        if any(item["expiresAt"] <= time.time() for item in record.pending_interrupts):
            await self._expire(record, claim)
            raise AdapterError(ErrorCode.EXECUTION_EXPIRED)
        return check_resume(run_input.resume, record.pending_interrupts, record.applied_answers)

    # ------------------------------------------------------------------ runs
    async def run(self, ticket: Ticket, sink: EventSink) -> None:
        """Start the run (pre-stream failures raise) and stream it to the end."""
        record, run_input = ticket.record, ticket.run_input
        machine = await restore_machine(record, self.store, claim=ticket.claim, sink=sink)
        resuming = bool(ticket.answers)
        binding = RunBinding(
            run_id=run_input.run_id,
            digest=ticket.digest,
            execution_id=ticket.execution_id,
            ros_invocation_id=run_input.iac_code.ros_invocation_id,
            parent_run_id=run_input.parent_run_id,
            user_message_id=None if ticket.message is None else ticket.message.get("messageId"),
        )
        try:
            await apply(machine, "resume" if resuming else "start_turn", binding=binding)
        except PersistenceError as exc:
            await self.store.release(ticket.claim)
            raise AdapterError(ErrorCode.STATE_PERSISTENCE_FAILED) from exc
        except BaseException:
            await self.store.release(ticket.claim)
            raise
        del machine  # transitions build their own; see RunDriver._end
        driver = RunDriver(self, ticket, sink)
        execution_id = ticket.run_execution_id
        self.active[execution_id] = driver
        keeper = driver.keeper = asyncio.create_task(self._keep_claim(ticket.claim, driver))
        try:
            await driver.drive()
        finally:
            keeper.cancel()
            self.active.pop(execution_id, None)
            await self.store.release(ticket.claim)

    async def _keep_claim(self, claim: Claim, driver: RunDriver | None = None) -> None:
        """Renew a lease while work holds it. A store that does not answer is
        retried until the lease would have run out; a run whose lease is lost
        stops (its writes would be refused anyway: the store checks the
        claim's fencing token)."""
        lease = self.store.lease_seconds
        renewed_at = time.monotonic()
        while True:
            await asyncio.sleep(lease / 3)
            try:
                kept = await self.store.renew(claim)
            except StoreUnavailable:
                if time.monotonic() - renewed_at < lease:
                    continue
                kept = False
            if kept:
                renewed_at = time.monotonic()
                continue
            log.error("thread %s: lease lost by %s", claim.thread_id, claim.run_id)
            if driver is not None:
                driver.stop("lease_lost")
            return

    @contextlib.asynccontextmanager
    async def _renewing(self, claim: Claim) -> AsyncIterator[None]:
        """Keep a claim's lease alive around slow calls (a runtime cancel)."""
        keeper = asyncio.create_task(self._keep_claim(claim))
        try:
            yield
        finally:
            keeper.cancel()

    def stop_run(self, execution_id: str, reason: StopReason) -> None:
        """Stop an active run (its client left, or the server stops)."""
        driver = self.active.get(execution_id)
        if driver is not None:
            driver.stop(reason)

    async def cancel_task_quietly(self, task_id: str | None) -> bool:
        """Ask the runtime to cancel a task; never raises."""
        if task_id is None:
            return False
        try:
            # Shielded: this often runs while the caller is being cancelled.
            await asyncio.shield(self.client.cancel_task(task_id))
        except (A2AError, asyncio.CancelledError) as exc:
            log.info("cancel of A2A task %s not confirmed: %s", task_id, type(exc).__name__)
            return False
        return True

    async def restore_session(self, record: ThreadRecord) -> None:
        """Once per process and session, before a resume: ask the runtime to
        restore the iac-code session (after a restart of either side). A
        session the runtime no longer has is lost; a runtime without the
        route, or a restore that fails for now, leaves the task check to
        decide."""
        if record.session_id is None or record.session_id in self._restored:
            return
        body: dict[str, Any] = {"cwd": record.cwd, "sessionId": record.session_id}
        if record.task_id is not None:
            body["taskId"] = record.task_id
        try:
            await self.client.post_json("/iac-code/session/ensure-restored", body)
        except A2AHttpError as exc:
            if exc.status == 404 and isinstance(exc.body, dict) and exc.body.get("status") == "not_found":
                raise AdapterError(ErrorCode.EXECUTION_LOST, "session_lost") from exc
            log.info("session restore for %s not confirmed: HTTP %s", record.thread_id, exc.status)
        except A2AError as exc:
            log.info("session restore for %s not confirmed: %s", record.thread_id, exc)
        self._restored.add(record.session_id)

    # ---------------------------------------------------------- cancellation
    async def cancel_execution(self, execution_id: str, thread_id: str, ros_invocation_id: str) -> CancelStatus:
        """The cancel extension: stop an execution and clear its interrupts."""
        record = await self._load(thread_id)
        if record is None or record.execution_id != execution_id or record.ros_invocation_id != ros_invocation_id:
            return "not_found"
        driver = self.active.get(execution_id)
        if driver is not None:
            driver.stop("cancel")
            await _wait_quietly(driver)
            return "cancelled"
        claim = await self._claim(thread_id, f"cancel-{execution_id}")
        if claim is None:
            # The run streams from another replica: it hears this and cancels.
            await self.store.publish_cancel(execution_id)
            return await self._await_cancelled(thread_id, execution_id)
        try:
            record = await self._load(thread_id)
            if record is None or record.state != "interrupted" or record.execution_id != execution_id:
                return "already_terminal"
            async with self._renewing(claim):
                await self.cancel_task_quietly(record.task_id)
            machine = await restore_machine(record, self.store, claim=claim)
            try:
                await apply(machine, "cancel", code=ErrorCode.CANCELLED, message="")
            except PersistenceError as exc:
                raise AdapterError(ErrorCode.STATE_PERSISTENCE_FAILED) from exc
        finally:
            await self.store.release(claim)
        await self.expiry.cancel(thread_id)
        return "cancelled"

    async def _await_cancelled(self, thread_id: str, execution_id: str) -> CancelStatus:
        for _ in range(CANCEL_WAIT_STEPS):
            record = await self._load(thread_id)
            if record is None or record.execution_id != execution_id or record.state != "running":
                return "cancelled"
            await asyncio.sleep(0.1)
        raise AdapterError(ErrorCode.THREAD_BUSY)

    # ---------------------------------------------------------------- expiry
    async def expire_thread(self, thread_id: str) -> None:
        """Timer callback: expire the thread's interrupts if they are due."""
        try:
            claim = await self.store.claim(thread_id, "expiry")
        except StoreUnavailable as exc:
            log.warning("thread %s: expiry postponed: %s", thread_id, exc)
            return
        if claim is None:
            return  # a run holds the thread: it is not waiting any more
        try:
            record = await self.store.load(thread_id)
            if record is None or record.state != "interrupted":
                await self.expiry.cancel(thread_id)
                return
            if all(item["expiresAt"] > time.time() for item in record.pending_interrupts):
                await self.expiry.schedule(thread_id, min(i["expiresAt"] for i in record.pending_interrupts))
                return
            await self._expire(record, claim)
        except (CorruptRecord, PersistenceError, StoreUnavailable, AdapterError) as exc:
            log.warning("thread %s: expiry not applied: %s", thread_id, exc)
        finally:
            await self.store.release(claim)

    async def _expire(self, record: ThreadRecord, claim: Claim) -> None:
        async with self._renewing(claim):
            await self.cancel_task_quietly(record.task_id)
        machine = await restore_machine(record, self.store, claim=claim)
        await apply(machine, "expire", code=ErrorCode.EXECUTION_EXPIRED, message="")
        await self.expiry.cancel(record.thread_id)
        log.info("thread %s: interrupts expired, task %s cancelled", record.thread_id, record.task_id)

    async def shutdown(self) -> None:
        """Cancel every active run (server shutdown)."""
        self.closing = True
        drivers = list(self.active.values())
        for driver in drivers:
            driver.stop("shutdown")
        await asyncio.gather(*(_wait_quietly(driver) for driver in drivers))
        await self.expiry.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
        await self.store.close()


async def _wait_quietly(driver: RunDriver) -> None:
    inner = driver._inner
    if inner is not None:
        await asyncio.wait([inner], timeout=1.0)
    # The driver ends the run right after its inner task; give it that turn.
    for _ in range(20):
        if driver.ticket.record.active_run_id is None:
            return
        await asyncio.sleep(0.05)


def _new_record(run_input: RunAgentInput, cwd: str) -> ThreadRecord:
    return ThreadRecord(
        thread_id=run_input.thread_id,
        context_id=f"ctx-{uuid.uuid4()}",
        cwd=cwd,
        user_id=run_input.iac_code.user_id,
    )


def _new_turn_message(run_input: RunAgentInput, record: ThreadRecord) -> dict[str, Any]:
    user = latest_user_message(run_input)
    if user is None or user.id == record.last_user_message_id:
        raise AdapterError(ErrorCode.INVALID_INPUT, "new_run_requires_user_message")
    return build_user_message(context_id=record.context_id, message=user, props=run_input.iac_code, cwd=record.cwd)


def _refuse_resume_of_settled(run_input: RunAgentInput, record: ThreadRecord) -> None:
    """A resume of a thread that waits for nothing: why it is refused."""
    assert run_input.resume is not None
    if all(entry.interrupt_id in record.applied_answers for entry in run_input.resume):
        raise AdapterError(ErrorCode.RESUME_ALREADY_APPLIED)
    if record.state == "terminal" and record.last_error == ErrorCode.EXECUTION_EXPIRED.name:
        raise AdapterError(ErrorCode.EXECUTION_EXPIRED)
    raise AdapterError(ErrorCode.UNKNOWN_INTERRUPT)


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
