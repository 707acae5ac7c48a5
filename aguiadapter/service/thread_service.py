"""The thread service: admission, runs, recovery, cancellation and expiry.

The service wires the other layers together; it decides nothing itself.
What a thread may do is the machine's (:mod:`.machine`); what the runtime's
task says about an answer is :mod:`aguiadapter.runtime.evidence`'s; the
async work around a transition is the shell's (:mod:`.shell`). Handlers
call :meth:`ThreadService.admit` (refusals are HTTP errors) and then
:meth:`ThreadService.run` (failures are ``RUN_ERROR`` events).

Every request that touches a thread first settles a run that died with its
process (a record left ``running`` that nobody holds): the runtime is asked
what became of it, and the machine's ``recover`` transition follows the
answer. A dead resume whose answer never arrived waits again; one whose
answer was taken is not cancelled: its task carries the person's decision.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, Final, Literal

import attrs

from ..a2a.client import A2AClient, A2AError, A2AUnavailable
from ..a2a.messages import build_user_message
from ..errors import AdapterError, ErrorCode
from ..i18n import render
from ..pool.pool import RuntimeGone, RuntimePool, RuntimeUnavailable
from ..pool.settings import DEFAULT_RUNTIME
from ..store.slots import RunSlot
from ..protocol.events import RUNTIME_CHANGED_EVENT, Event, custom
from ..protocol.inputs import ForwardedProps, IacCodeProps, RunAgentInput, latest_user_message
from ..protocol.profile import DEFAULT_PROFILE, Profile
from ..runtime.evidence import Findings, TaskView, assess, input_status, waiting_inputs
from ..runtime.iac_code import IacCodeRuntime, TaskMismatch
from ..telemetry import QUIET, Telemetry
from ..threads import admission
from ..threads import machine as tm
from ..threads.access import is_legacy_of, legacy_key, may_read
from ..runs.driver import RunContext, RunDriver, StopReason, Ticket
from ..runs.looks import judge_with_unseen, view_task
from .expiry import ExpiryScheduler
from .leases import LeaseKeeper
from ..threads.listing import owner_of
from ..threads.record import EarlierConversation, RunKind, ThreadRecord, thread_key
from ..store.run_log import LogBounds, LogBroken, RunLogs, Truncated
from ..runs.shell import EventSink, ThreadShell
from ..store.contract import Claim, CorruptRecord, PersistenceError, StoreUnavailable, ThreadStore
from ..store.probe import AbsenceProbe, ProbingStore
from ..store.run_history import with_earlier_run

log = logging.getLogger(__name__)

CancelStatus = Literal["cancelled", "already_terminal", "not_found"]

#: How often each replica looks for deadlines that passed elsewhere.
SWEEP_SECONDS: Final = 5.0
#: How long the cancel route waits for another replica to end its run.
CANCEL_WAIT_SECONDS: Final = 5.0
#: How long shutdown waits for each run to end.
SHUTDOWN_WAIT_SECONDS: Final = 1.0
#: How often a re-attach asks the replica holding a run to hand it over. A
#: poll: the claim it waits for is another replica's, in the shared store.
HANDOVER_POLL_SECONDS: Final = 0.1
#: How often the cancel route looks whether another replica ended its run.
#: A poll: the record it waits for is written by that replica.
CANCELLED_POLL_SECONDS: Final = 0.1


class Draining(AdapterError):
    """``SERVER_DRAINING``: this replica shuts down; another one serves at once."""

    def __init__(self) -> None:
        super().__init__(ErrorCode.SERVER_DRAINING)

    def response_headers(self) -> dict[str, str]:
        """``Retry-After: 1``: a load balancer has another replica by then."""
        return {"Retry-After": "1"}


class ThreadService:
    """Admits runs, drives them, and keeps track of the active ones."""

    def __init__(
        self,
        store: ThreadStore,
        client: A2AClient | RuntimePool,
        *,
        interrupt_ttl_seconds: float = 3600.0,
        clock: Callable[[], float] = time.time,
        telemetry: Telemetry = QUIET,
        grace_seconds: float = 0.0,
        log_bounds: LogBounds | None = None,
        runtime_config_dir: Path | None = None,
        profile: Profile = DEFAULT_PROFILE,
    ) -> None:
        self.store = store
        #: The store, when it can look for a record on a trip the request makes anyway.
        self._probing = store if isinstance(store, ProbingStore) else None
        #: The runtimes threads are pinned to (one lent client: a pool of one, ``default``).
        self.pool = client if isinstance(client, RuntimePool) else RuntimePool.single(client, runtime_config_dir)
        first = next(iter(self.pool.members.values()))
        self.client = first.client
        #: The runtime of a pool of one (a run's own is :meth:`runtime_of` its record).
        self.runtime = first.runtime
        #: Each pooled runtime's run context (the same but for the runtime).
        self._contexts: dict[IacCodeRuntime, RunContext] = {}
        #: The pool slot each admitted run holds on its runtime, by the ticket's execution id.
        self._seats: dict[str, RunSlot] = {}
        self.clock = clock
        #: The runs' event logs (``None``: no ids, no re-attach).
        self.logs: RunLogs | None = store.run_logs(log_bounds) if log_bounds is not None else None
        self.context = RunContext(
            self.runtime, interrupt_ttl_seconds, clock, telemetry, logs=self.logs, grace_seconds=grace_seconds,
            profile=profile,
        )
        self.expiry = ExpiryScheduler(store, self.expire_thread, clock=clock)
        #: Renews the leases of every claim this process holds, from one loop.
        self.leases = LeaseKeeper(store)
        #: Active runs by execution id, for the cancel route and shutdown.
        self.active: dict[str, RunDriver] = {}
        #: Set on server shutdown: active runs are cancelled and told so.
        self.closing = False
        #: Set on the first SIGTERM with a handoff possible: no new run is
        #: admitted, active runs wait for another replica to adopt them.
        self.draining = False
        self._sweeper: asyncio.Task[None] | None = None
        #: Re-attaches that look for the run's holder, and adopted runs.
        self._background: set[asyncio.Task[None]] = set()
        #: Asked before a new thread is made, with the owner of the list it
        #: joins (the app's cap on new threads per user); raises to refuse.
        self.new_thread_gate: Callable[[str], Awaitable[None]] | None = None

    @property
    def resumable(self) -> bool:
        """Whether clients can re-attach to runs (the event logs are on)."""
        return self.logs is not None

    @property
    def can_hand_off(self) -> bool:
        """Whether a shutdown can leave runs to other replicas."""
        return self.logs is not None and self.context.grace_seconds > 0 and self.store.shared

    @property
    def interrupt_ttl_seconds(self) -> float:
        """How long an interrupt waits for its answer."""
        return self.context.interrupt_ttl_seconds

    async def start(self) -> None:
        """Open the store, listen for cancels from other replicas, re-arm
        interrupt expiry from the stored deadlines and start the sweeper."""
        await self.store.start()
        signals = self.store.signals
        if signals is not None:
            signals.on_cancel(lambda execution_id: self.stop_run(execution_id, "cancel"))
            signals.on_attach(self._asked_for)
        await self.expiry.start()
        self._sweeper = asyncio.create_task(self._sweep_deadlines())

    async def _sweep_deadlines(self) -> None:
        """Expire what other replicas scheduled (local timers cover our own)."""
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            try:
                due = await self.store.due_deadlines(self.clock())
            except StoreUnavailable as exc:
                log.warning("deadline sweep skipped: %s", exc)
                continue
            for thread_id in due:
                await self.expire_thread(thread_id)

    # ------------------------------------------------------------- admission
    async def admit(
        self,
        run_input: RunAgentInput,
        digest: str,
        language: str,
        cwd: str,
        principal: str | None = None,
        prepare: Callable[[RunAgentInput], Awaitable[RunAgentInput]] | None = None,
        early: AbsenceProbe | None = None,
    ) -> Ticket:
        """Check a request against the thread and claim the thread for it
        (``principal``: the verified caller, who owns the threads they start).

        ``prepare`` (the images' fitting) makes a new turn's input ready once
        the turn is admitted, new-thread gate included, and before anything of
        the thread is written or the runtime asked: costly work a refused
        request never gets, and a refusal of its own that leaves nothing behind.

        ``early``: a look for the thread's record file that the request took
        on its way (:meth:`absence_probe`); trusted only when the store says
        no write began since, otherwise the record is read as usual."""
        if self.draining:
            raise Draining()
        key = await self._key_of(run_input.thread_id, principal)
        request = _request_of(run_input, digest, cwd, principal)
        # Claimed first, so that the record is read once: under the claim it
        # cannot change. The refusals that need no claim are checked on it
        # all the same, before anything else happens to the thread.
        claim = await self._claim(key, run_input.run_id)
        if claim is None:
            known = await self._load(key)
            if known is not None:
                admission.preflight(await self._with_earlier_run(known, request.run_id), request)
            raise AdapterError(ErrorCode.THREAD_BUSY)
        seat: RunSlot | None = None
        notices: list[Event] = []
        try:
            known = None if self._still_absent(early, key) else await self._load(key)
            if known is not None:
                admission.preflight(await self._with_earlier_run(known, request.run_id), request)
            record = known or _new_record(run_input, cwd, principal, namespaced=key != run_input.thread_id)
            shell = ThreadShell(self.store, self.expiry, claim, record, self.leases)
            await self._recover(shell)
            plan = admission.admit(record, request, self.clock())
            if known is None and plan.kind is admission.PlanKind.TURN and self.new_thread_gate is not None:
                # Before anything of the thread is written.
                await self.new_thread_gate(owner_of(record))
            if plan.kind in (admission.PlanKind.TURN, admission.PlanKind.RESUME):
                # Its runtime counts it (a new thread is pinned here, in the
                # record its first run's admitting write saves); refused
                # before anything is written when no runtime can take it.
                seat, notices = await self._seat(shell, plan, new=known is None)
            if plan.kind is admission.PlanKind.TURN and prepare is not None:
                run_input = await prepare(run_input)
            view: TaskView | None = None
            if plan.kind is admission.PlanKind.EXPIRE:
                await self._expire(shell)
                raise AdapterError(ErrorCode.EXECUTION_EXPIRED)
            if plan.kind is admission.PlanKind.RESUME:
                plan, view = await self._inspect(shell, plan)
            message = _new_turn_message(run_input, record) if plan.kind is admission.PlanKind.TURN else None
            ticket = Ticket(run_input, digest, language, shell, plan, _new_id(), message, view, notices)
            if seat is not None:
                self._seats[ticket.new_execution_id] = seat
            return ticket
        except BaseException:
            await self.pool.leave(seat)
            await self.store.release(claim)
            raise

    async def _with_earlier_run(self, record: ThreadRecord, run_id: str) -> ThreadRecord:
        """The record to judge a request with: with its run id's entry when
        that run moved out of the record (any earlier run id counts)."""
        try:
            return await with_earlier_run(self.store, record, run_id)
        except StoreUnavailable as exc:
            raise AdapterError(ErrorCode.STATE_STORE_UNAVAILABLE) from exc

    async def _seat(self, shell: ThreadShell, plan: admission.Plan, *, new: bool) -> tuple[RunSlot, list[Event]]:
        """The pool slot of an admitted run, and what the run tells first: a
        new thread is placed (and pinned); a known one goes to its runtime,
        refused retryably while that one is down or full. A thread whose
        runtime left the pool (its operator removed it) loses what it waited
        for; without a pending answer, its new turn is pinned again and
        starts a new conversation there, which the run says first."""
        record = shell.record
        if new:
            record.runtime, slot = await self.pool.place()
            return slot, []
        try:
            return await self.pool.enter(record.runtime), []
        except RuntimeGone:
            log.warning("thread %s: its runtime %s left the pool", record.thread_id, record.runtime or "default")
            if plan.kind is not admission.PlanKind.TURN or record.pending_interrupts:
                await self._settle(shell, tm.Lose())
                raise AdapterError(ErrorCode.EXECUTION_LOST) from None
        left = record.runtime or DEFAULT_RUNTIME
        record.runtime, slot = await self.pool.place()
        # The old runtime keeps the conversation so far; the new one starts afresh.
        # Remembered, so that history says that conversation is not shown.
        if record.task_id is not None or record.session_id is not None:
            record.earlier.append(EarlierConversation(left, record.context_id))
        record.context_id, record.session_id, record.task_id = f"ctx-{uuid.uuid4()}", None, None
        log.info("thread %s: pinned again, from runtime %s to %s", record.thread_id, left, record.runtime)
        notice = {"schemaVersion": 1, "from": left, "to": record.runtime, "history": "unavailable"}
        return slot, [custom(RUNTIME_CHANGED_EVENT, notice)]

    def earlier_of(self, record: ThreadRecord) -> list[dict[str, str]]:
        """The thread's earlier conversations that history cannot show (it was
        pinned again), each with its runtime and why: ``removed`` (not in the
        pool now), ``down`` (its last probe found nothing listening) or
        ``not_merged`` (it answers, but only the thread's own runtime is read)."""
        listed = []
        for earlier in record.earlier:
            member = self.pool.members.get(earlier.runtime)
            reason = "removed" if member is None else "not_merged" if member.reachable else "down"
            listed.append({"runtime": earlier.runtime, "history": "unavailable", "reason": reason})
        return listed

    def runtime_of(self, record: ThreadRecord) -> IacCodeRuntime:
        """The runtime the thread is pinned to; ``EXECUTION_LOST`` when the pool no longer has it."""
        try:
            return self.pool.member(record.runtime).runtime
        except RuntimeGone:
            raise AdapterError(ErrorCode.EXECUTION_LOST) from None

    def context_of(self, record: ThreadRecord) -> RunContext:
        """The run context for the thread's runtime (its runs' spans name it, in a pool of several)."""
        runtime = self.runtime_of(record)
        if len(self.pool.members) == 1 and runtime is self.context.runtime:
            return self.context
        context = self._contexts.get(runtime)
        if context is None:
            name = record.runtime or DEFAULT_RUNTIME
            context = self._contexts[runtime] = attrs.evolve(
                self.context, runtime=runtime, telemetry=self.context.telemetry.for_runtime(name))
        return context

    async def _cancel_task(self, record: ThreadRecord) -> None:
        """Cancel the thread's task on its runtime (nothing to cancel on one the pool no longer has)."""
        try:
            runtime = self.pool.member(record.runtime).runtime
        except RuntimeGone:
            log.info("thread %s: task %s not cancelled: runtime %s left the pool", record.thread_id,
                     record.task_id, record.runtime)
            return
        await runtime.cancel_task(record.task_id)

    async def _find_turn_task(self, shell: ThreadShell) -> None:
        """A dead turn without a stored task id: its binding may have died
        with the machine (it is written unsynced: runs/shell.py
        ``needs_sync``), or with the process before it was written. The
        context's current task, while it still runs, is the turn's: bind it
        (with the session the history reads), so that it is cancelled like
        any dead turn's task."""
        record = shell.record
        try:
            runtime = self.pool.member(record.runtime).runtime
        except RuntimeGone:
            return
        found = await runtime.current_task(record.context_id)
        # A finished task is the turn's only on a thread's first turn (an
        # earlier turn's otherwise, when the runtime never got this one's
        # message); bound then all the same for its session, which the
        # history reads.
        if found is None or not (found.running or record.session_id is None):
            return
        log.info("thread %s: the dead turn's task %s found on its runtime", record.thread_id, found.task_id)
        try:
            await shell.apply(tm.BindTask(found.task_id, found.session_id or record.session_id))
        except PersistenceError as exc:
            raise AdapterError(ErrorCode.STATE_PERSISTENCE_FAILED) from exc

    def absence_probe(self, thread_id: str, principal: str | None = None) -> AbsenceProbe | None:
        """A look for the caller's record file of ``thread_id``, for a
        worker thread the request visits anyway (its workspace check):
        admission then needs no trip of its own to find a new thread has no
        record. ``None`` when the store offers none (Redis), or when the
        thread may be kept under an earlier version's key."""
        if self._probing is None or legacy_key(thread_id, principal) is not None:
            return None
        return self._probing.absence_probe(thread_key(thread_id, principal))

    def _still_absent(self, probe: AbsenceProbe | None, key: str) -> bool:
        """Whether ``probe`` proves that ``key`` has no record (:mod:`..store.probe`)."""
        if probe is None or probe.key != key or self._probing is None:
            return False
        return self._probing.still_absent(probe)

    async def _key_of(self, thread_id: str, principal: str | None) -> str:
        """Where the caller's thread ``thread_id`` is kept (:func:`thread_key`)."""
        if legacy_key(thread_id, principal) is None:
            return thread_key(thread_id, principal)  # one place only: nothing to read to find it
        return (await self._locate(thread_id, principal))[0]

    async def _locate(self, thread_id: str, principal: str | None) -> tuple[str, ThreadRecord | None]:
        """Where the caller's thread ``thread_id`` is kept, and its record there.

        The caller's own key is read first, and only it when it holds a
        record: a request never reads another namespace's record to find its
        own (see threads/access.py). A thread an earlier version kept
        elsewhere (:func:`~.access.legacy_key`: a verified user's under its
        bare id) is looked for only when the own key holds nothing, and taken
        only when it is the caller's; any other record there is none of their
        business, an unreadable one included.
        """
        key = thread_key(thread_id, principal)
        record = await self._load(key)
        earlier_key = legacy_key(thread_id, principal)
        if record is not None or earlier_key is None:
            return key, record
        try:
            # Another owner's record there is not even parsed (threads/access.py).
            earlier = await self.store.load_owned(earlier_key, principal)
        except CorruptRecord:
            earlier = None
        except StoreUnavailable as exc:
            raise AdapterError(ErrorCode.STATE_STORE_UNAVAILABLE) from exc
        if earlier is not None and is_legacy_of(earlier, thread_id, principal):
            return earlier_key, earlier
        return key, None

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

    async def _inspect(self, shell: ThreadShell, plan: admission.Plan) -> tuple[admission.Plan, TaskView]:
        """Before answers go out: ask the runtime whether each input still
        waits. Answers to inputs it moved past are not sent again; when it
        asks for more than was answered, the run announces all of it."""
        record = shell.record
        try:
            view = await self._look(shell, restore=True)
        except AdapterError as exc:
            if exc.code is ErrorCode.EXECUTION_LOST:
                await self._settle(shell, tm.Lose())
            raise
        pending = {item.id: item for item in record.pending_interrupts}
        statuses = {
            answer.interrupt_id: input_status(pending[answer.interrupt_id].envelope,
                                              pending[answer.interrupt_id].raised_after, view)
            for answer in plan.answers
        }
        known = [item.envelope for item in record.pending_interrupts]
        # Outside a pipeline GetTask names the task's first input for good:
        # only a pipeline lists what else it waits for.
        asks = waiting_inputs(view, known, record.applied_answers.keys()) if view.is_pipeline else []
        plan = admission.after_inspection(plan, statuses, asks)
        if plan.kind is admission.PlanKind.LOST:
            await self._settle(shell, tm.Lose())
            raise AdapterError(ErrorCode.EXECUTION_LOST)
        return plan, view

    async def _look(self, shell: ThreadShell, *, restore: bool, transcript: bool = False) -> TaskView:
        """The thread's task as the runtime sees it now (``restore``: ask it
        to restore the session first, as before any resume; ``transcript``:
        with the session's transcript, which settles a dead run's answers)."""
        record = shell.record
        if record.task_id is None:
            return TaskView(None)
        try:
            async with shell.renewing():
                runtime = self.runtime_of(record)
                if restore:
                    await runtime.restore_session(record.cwd, record.session_id, record.task_id)
                return await view_task(
                    runtime, record.task_id, record.context_id, record.pipeline,
                    waiting=[item.raised_after for item in record.pending_interrupts], transcript=transcript,
                )
        except TaskMismatch as exc:
            log.error("thread %s: %s", record.thread_id, exc)
            raise AdapterError(ErrorCode.A2A_PROTOCOL_ERROR) from exc
        except A2AError as exc:
            log.warning("thread %s: the runtime cannot be asked about its task: %s", record.thread_id, exc)
            if isinstance(exc, A2AUnavailable) and not exc.sent:
                self.pool.saw_unreachable(record.runtime)  # no new thread goes there until a probe says so
            raise RuntimeUnavailable(str(exc)) from exc  # retryable: the answer stays pending

    async def _recover(self, shell: ThreadShell) -> None:
        """A record left ``running`` without a live claim: its run died with
        its process (or its stream broke after the runtime took answers).
        Ask the runtime what became of it, and settle the thread that way."""
        record = shell.record
        recovery = tm.recovery(record, self.clock())
        if recovery in (tm.Recovery.NOTHING, tm.Recovery.ADOPTABLE):
            return
        if recovery is tm.Recovery.NOT_ADOPTED:
            log.info("thread %s: handed-off run %s not adopted in time", record.thread_id, record.active_run_id)
            async with shell.renewing():
                await self._cancel_task(record)
            await self._settle(
                shell, tm.Cancel(render(ErrorCode.CANCELLED.message_id, "en"), profile=self.context.profile)
            )
            return
        if recovery is tm.Recovery.DEAD_TURN:
            # A client that is gone is a cancel (the protocol reference's
            # rule); nothing the person decided rides on a turn: it is lost.
            async with shell.renewing():
                if record.task_id is None:
                    await self._find_turn_task(shell)
                await self._cancel_task(record)
            log.info("thread %s: a dead turn run: task %s cancelled", record.thread_id, record.task_id)
            await self._settle(shell, tm.Fail(ErrorCode.EXECUTION_LOST, _describe(ErrorCode.EXECUTION_LOST)))
            return
        findings = await self._findings(shell)
        if findings.unanswerable:
            async with shell.renewing():
                await self._cancel_task(record)
        kind = record.active_run_kind or RunKind.TURN
        log.info(
            "thread %s: recovered a dead %s run: task %s %s, inputs %s",
            record.thread_id, kind.value, record.task_id, findings.fate.value,
            {key: value.value for key, value in findings.statuses.items()},
        )
        await self._settle(
            shell, tm.Recover(findings, expires_at=self.clock() + self.interrupt_ttl_seconds, describe=_describe)
        )

    async def _findings(self, shell: ThreadShell) -> Findings:
        """What the runtime says became of the answers a dead run carried,
        and of its task (the evidence rules judge its view)."""
        record = shell.record
        try:
            view = await self._look(shell, restore=True, transcript=True)
        except AdapterError as exc:
            if exc.code is not ErrorCode.EXECUTION_LOST:
                raise
            view = TaskView(None)
        carried = [(item.envelope, item.raised_after) for item in record.pending_interrupts]
        answered = record.applied_answers.keys()
        sent = {item.id for item in record.pending_interrupts if item.sending is not None}
        try:
            runtime = self.runtime_of(record)
        except AdapterError:
            # Its runtime left the pool: the view says the task is gone, and
            # no unseen input is read (only a task that waits asks for them).
            runtime = self.runtime
        findings = await judge_with_unseen(
            runtime, view, record.session_id, [item.envelope for item in record.pending_interrupts],
            lambda known: assess(carried, view, known, answered, sent), lambda found: found.fate,
        )
        if not findings.decided:
            raise AdapterError(ErrorCode.A2A_UNAVAILABLE)
        return findings

    async def _settle(
        self,
        shell: ThreadShell,
        transition: tm.Transition[list[Event] | None],
    ) -> None:
        """Take a transition outside any run; what it announces ends the
        event log of the run it settled (no client listens to that run)."""
        run_id, open_text = shell.record.active_run_id, shell.record.handed_off_text
        try:
            events = await shell.apply(transition)
        except PersistenceError as exc:
            raise AdapterError(ErrorCode.STATE_PERSISTENCE_FAILED) from exc
        if run_id is not None and events and self.logs is not None:
            if open_text is not None:
                # A handed-off run nobody adopted: its reply ends where its log stopped.
                events = [{"type": "TEXT_MESSAGE_END", "messageId": open_text}, *events]
            await self._close_log(shell.record.key, run_id, events)

    async def _close_log(self, thread_id: str, run_id: str, events: list[Event]) -> None:
        assert self.logs is not None
        try:
            await self.logs.append_once(thread_id, run_id, events)
        except (LogBroken, StoreUnavailable, PersistenceError, OSError) as exc:  # the record is settled
            log.warning("thread %s run %s: end not written to its event log: %s", thread_id, run_id, exc)

    # ------------------------------------------------------------------ runs
    async def run(self, ticket: Ticket, sink: EventSink) -> None:
        """Open the run (failures before the stream raise) and drive it to the end."""
        try:
            try:
                context = self.context_of(ticket.record)
            except AdapterError:  # its runtime left the pool since admission
                await self.store.release(ticket.shell.claim)
                raise
            driver = RunDriver(context, ticket, sink)
            await driver.open()
            await self._drive(driver)
        finally:
            await self.pool.leave(self._seats.pop(ticket.new_execution_id, None))

    # ------------------------------------------------------------ re-attach
    async def thread(
        self, thread_id: str, principal: str | None = None, user_id: str | None = None
    ) -> ThreadRecord | None:
        """A thread's record (``None`` for an unknown thread and for someone
        else's alike, another ``user_id``'s included), once a run that died
        with its process is settled."""
        _, record = await self._locate(thread_id, principal)
        if record is None or not may_read(record, principal, user_id):
            return None
        if tm.holds_a_run(record) and record.execution_id not in self.active:
            return await self._settled(record)
        return record

    async def _settled(self, record: ThreadRecord) -> ThreadRecord:
        """A running thread that no run of this process streams: a replica
        that holds it says so by its claim; otherwise its run died with its
        process, and it is settled first, as any request settles it, so that
        a reloaded page sees the interrupt again rather than a dead run."""
        claim = await self._claim(record.key, "status")
        if claim is None:
            return record
        try:
            current = await self._load(record.key) or record
            try:
                await self._recover(ThreadShell(self.store, self.expiry, claim, current, self.leases))
            except AdapterError as exc:
                log.warning("thread %s: its dead run not settled yet: %s", record.thread_id, exc)
            return current
        finally:
            await self.store.release(claim)

    async def knows_run(self, record: ThreadRecord, run_id: str) -> bool:
        """Whether ``run_id`` is one of the thread's runs, those that left
        the record for its history included (``STATE_STORE_UNAVAILABLE``
        when the store cannot say)."""
        return run_id in (await self._with_earlier_run(record, run_id)).runs

    async def attach(
        self, thread_id: str, run_id: str, cursor: int, principal: str | None = None, user_id: str | None = None
    ) -> AsyncIterator[bytes]:
        """A client re-attaches to a run: its events after ``cursor``, then
        live until its end. Refusals raise before anything is read (someone
        else's thread is ``THREAD_NOT_FOUND``, as an unknown one); a run
        that no process relays is adopted (handed off) or settled (dead)."""
        if self.draining:
            raise Draining()
        record = await self.thread(thread_id, principal, user_id)
        if record is None:
            raise AdapterError(ErrorCode.THREAD_NOT_FOUND)
        logs = self.logs
        try:
            # A run that left the record (its history) may still have a log.
            known = await self.knows_run(record, run_id)
            if logs is None or not known or not await logs.exists(record.key, run_id):
                raise AdapterError(ErrorCode.RUN_NOT_FOUND)
            reader = logs.read(record.key, run_id, cursor)
            first = await anext(reader)
        except Truncated as exc:
            raise AdapterError(ErrorCode.EVENTS_TRUNCATED) from exc
        except StopAsyncIteration:
            first = b""
        except StoreUnavailable as exc:
            raise AdapterError(ErrorCode.STATE_STORE_UNAVAILABLE) from exc
        if tm.runs(record, run_id) and record.execution_id:
            self._in_background(self._see_relayed(record.key, run_id, record.execution_id))
        return _prepend(first, reader)

    async def _see_relayed(self, thread_id: str, run_id: str, execution_id: str) -> None:
        """Make sure a process relays the re-attached run: the one that
        holds it does (a draining one is asked to let go); a handed-off run
        is adopted here; a dead one is settled, which ends its log."""
        driver = self.active.get(execution_id)
        if driver is not None:
            driver.reader_came()
            return
        deadline = time.monotonic() + self.store.lease_seconds + 1.0
        asked_at = 0.0
        while time.monotonic() < deadline:
            claim = await self._claim(thread_id, f"attach-{run_id}")
            if claim is not None:
                await self._take_over(claim, run_id)
                return
            signals = self.store.signals
            if signals is not None and time.monotonic() - asked_at >= 1.0:
                asked_at = time.monotonic()
                log.info("run %s: asking its holder to hand it over", run_id)
                await signals.publish_attach(execution_id)
            await asyncio.sleep(HANDOVER_POLL_SECONDS)
            record = await self._load(thread_id)
            if record is None or not tm.runs(record, run_id):
                return

    async def _take_over(self, claim: Claim, run_id: str) -> None:
        adopted = False
        try:
            record = await self._load(claim.thread_id)
            if record is None or not tm.runs(record, run_id):
                return
            shell = ThreadShell(self.store, self.expiry, claim, record, self.leases)
            if tm.recovery(record, self.clock()) is tm.Recovery.ADOPTABLE:
                adopt = admission.Plan(admission.PlanKind.ADOPT)
                ticket = Ticket(_adopted_input(record), "", "en", shell, adopt, _new_id())
                driver = RunDriver(self.context_of(record), ticket, None)
                try:
                    await driver.open()  # releases the claim if it fails
                except AdapterError as exc:
                    log.warning("thread %s: run %s not adopted: %s", record.thread_id, run_id, exc)
                    return
                adopted = True
                # Its runtime counts it as the process that handed it off did, until it ends.
                seat = await self.pool.adopt(record.runtime)
                self._in_background(self._drive(driver, seat))
                log.info("thread %s: run %s adopted", record.thread_id, run_id)
                return
            await self._recover(shell)
        finally:
            if not adopted:
                await self.store.release(claim)

    async def _drive(self, driver: RunDriver, seat: RunSlot | None = None) -> None:
        execution_id = driver.ticket.execution_id
        self.active[execution_id] = driver
        try:
            await driver.drive()
        finally:
            if self.active.get(execution_id) is driver:
                del self.active[execution_id]
            await self.pool.leave(seat)

    def _asked_for(self, execution_id: str) -> None:
        """Another replica has a client for this run: a draining holder lets go."""
        driver = self.active.get(execution_id)
        if driver is not None and driver.hand_off():
            log.info("run %s: a client re-attached elsewhere; handing it over", driver.identity.run_id)

    def _in_background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background_done)

    def _background_done(self, task: asyncio.Task[None]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("re-attach work failed: %r", task.exception(), exc_info=task.exception())

    async def drain(self, stop: asyncio.Event) -> None:
        """First SIGTERM: admit nothing more, let every client go with the id
        of its last event, and keep relaying until each run is adopted by
        another replica, ends, or the grace runs out (``stop``: a second
        signal; the remaining runs are then cancelled by :meth:`shutdown`)."""
        self.draining = True
        until = self.clock() + self.context.grace_seconds
        drivers = list(self.active.values())
        for driver in drivers:
            driver.drain(until)
        if not drivers:
            return
        ended: asyncio.Future[Any] = asyncio.gather(*(driver.ended.wait() for driver in drivers))
        stopping: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({ended, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            ended.cancel()

    def stop_run(self, execution_id: str, reason: StopReason) -> None:
        """Stop an active run (its client left, or the server stops)."""
        driver = self.active.get(execution_id)
        if driver is not None:
            driver.stop(reason)

    # ---------------------------------------------------------- cancellation
    async def cancel_execution(
        self, execution_id: str, thread_id: str, ros_invocation_id: str, principal: str | None = None,
        user_id: str | None = None,
    ) -> CancelStatus:
        """The cancel extension: stop an execution and clear its interrupts."""
        key, record = await self._locate(thread_id, principal)
        if (
            record is None
            or not may_read(record, principal, user_id)
            or record.execution_id != execution_id
            or record.ros_invocation_id != ros_invocation_id
        ):
            return "not_found"
        driver = self.active.get(execution_id)
        if driver is not None:
            driver.stop("cancel")
            await _ended(driver, CANCEL_WAIT_SECONDS)
            return "cancelled"
        claim = await self._claim(key, f"cancel-{execution_id}")
        if claim is None:
            # The run streams from another replica: it hears this and cancels.
            signals = self.store.signals
            if signals is not None:
                await signals.publish_cancel(execution_id)
            return await self._await_cancelled(key, execution_id)
        try:
            record = await self._load(key)
            if record is None or record.execution_id != execution_id:
                return "already_terminal"
            shell = ThreadShell(self.store, self.expiry, claim, record, self.leases)
            await self._recover(shell)
            if not tm.allowed(record, tm.Cancel):
                return "already_terminal"
            async with shell.renewing():
                await self._cancel_task(record)
            await self._settle(shell, tm.Cancel("", profile=self.context.profile))
        finally:
            await self.store.release(claim)
        return "cancelled"

    async def _await_cancelled(self, thread_id: str, execution_id: str) -> CancelStatus:
        deadline = time.monotonic() + CANCEL_WAIT_SECONDS
        while time.monotonic() < deadline:
            record = await self._load(thread_id)
            if record is None or record.execution_id != execution_id or not tm.holds_a_run(record):
                return "cancelled"
            await asyncio.sleep(CANCELLED_POLL_SECONDS)
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
            if record is None:
                await self.expiry.cancel(thread_id)
                return
            shell = ThreadShell(self.store, self.expiry, claim, record, self.leases)
            await self._recover(shell)
            due, at = tm.expiry_due(record, self.clock())
            if due is tm.Due.EXPIRE:
                await self._expire(shell)
            elif at is not None:
                await self.expiry.schedule(thread_id, at)
            else:
                await self.expiry.cancel(thread_id)
        except (CorruptRecord, PersistenceError, StoreUnavailable, AdapterError) as exc:
            log.warning("thread %s: expiry not applied: %s", thread_id, exc)
        finally:
            await self.store.release(claim)

    async def _expire(self, shell: ThreadShell) -> None:
        record = shell.record
        async with shell.renewing():
            await self._cancel_task(record)
        await self._settle(shell, tm.Expire())
        log.info("thread %s: interrupts expired, task %s cancelled", record.thread_id, record.task_id)

    async def shutdown(self) -> None:
        """Cancel every active run (server shutdown)."""
        self.closing = True
        drivers = list(self.active.values())
        for driver in drivers:
            driver.stop("shutdown")
        await asyncio.gather(*(_ended(driver, SHUTDOWN_WAIT_SECONDS) for driver in drivers))
        await self.expiry.close()
        await self.leases.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
        for task in list(self._background):
            task.cancel()
        if self.logs is not None:
            await self.logs.close()
        await self.store.close()


async def _ended(driver: RunDriver, timeout: float) -> None:
    try:
        await asyncio.wait_for(driver.ended.wait(), timeout)
    except asyncio.TimeoutError:
        ident = driver.identity
        log.warning("thread %s run %s did not end within %.1f s", ident.thread_id, ident.run_id, timeout)


def _request_of(run_input: RunAgentInput, digest: str, cwd: str, principal: str | None) -> admission.Request:
    user = latest_user_message(run_input)
    return admission.Request(
        run_id=run_input.run_id,
        digest=digest,
        cwd=cwd,
        principal=principal,
        user_id=run_input.iac_code.user_id,
        ros_invocation_id=run_input.iac_code.ros_invocation_id,
        resume=tuple(run_input.resume) if run_input.resume else None,
        user_message_id=None if user is None else user.id,
    )


def _new_record(run_input: RunAgentInput, cwd: str, principal: str | None, *, namespaced: bool) -> ThreadRecord:
    return ThreadRecord(
        thread_id=run_input.thread_id,
        context_id=f"ctx-{uuid.uuid4()}",
        cwd=cwd,
        user_id=run_input.iac_code.user_id,
        principal=principal,
        namespaced=namespaced,
    )


def _new_turn_message(run_input: RunAgentInput, record: ThreadRecord) -> dict[str, Any]:
    user = latest_user_message(run_input)
    assert user is not None  # admission checked it
    return build_user_message(context_id=record.context_id, message=user, props=run_input.iac_code, cwd=record.cwd)


def _new_id() -> str:
    return f"exec-{uuid.uuid4()}"


def _describe(code: ErrorCode) -> str:
    """The words of a RUN_ERROR that only an event log hears."""
    return render(code.message_id, "en")


def _adopted_input(record: ThreadRecord) -> RunAgentInput:
    """The identity of a handed-off run, as the driver takes it: the run's
    ids and workspace, no message (an adopted run only follows its task)."""
    props = IacCodeProps(
        schema_version=1, ros_invocation_id=record.ros_invocation_id or "", cwd=record.cwd, user_id=record.user_id,
    )
    return RunAgentInput(
        thread_id=record.thread_id, run_id=record.active_run_id or "", messages=(),
        forwarded_props=ForwardedProps(iac_code=props),
    )


async def _prepend(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    if first:
        yield first
    async for chunk in rest:
        yield chunk
