"""One run, from the runtime's stream to the client's: the run driver.

A :class:`RunDriver` carries out an admitted :class:`Ticket`: it takes the
run's opening transition (failures there are still HTTP errors), then has
its :class:`~aguiadapter.runs.follow.Follower` send the answers and
relay or follow the runtime's task (the iac-code follow protocol lives
there), writes what comes of it to the log and the sink, and ends the run
with the transition its outcome calls for. The stream is relayed in an
inner task, so that a disconnect, the cancel route or a shutdown can stop it
(:meth:`RunDriver.stop`) and the driver still ends the run cleanly;
:attr:`RunDriver.ended` is set once it has.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any, Concatenate, Final, Literal, ParamSpec

import attrs
from statemachine.exceptions import TransitionNotAllowed

from ..a2a.client import A2AError, A2AUnavailable
from ..errors import AdapterError, ErrorCode
from ..i18n import render
from ..logs import log_fields, scrub
from ..protocol import events as ev
from ..protocol.events import Event
from ..protocol.inputs import RunAgentInput
from ..protocol.profile import DEFAULT_PROFILE, Profile
from ..runtime.envelope import InputEnvelope
from ..runtime.evidence import TaskView
from .follow import Follower
from ..runtime.iac_code import AnswerRefused, IacCodeRuntime, TaskMismatch
from ..telemetry import QUIET, Telemetry
from ..translate.mapper import IdentityLearned, IdentityMismatch, RunIdentity, RunTranslator, TurnOutcome
from ..translate.pipeline import PipelineState
from ..threads import machine as tm
from .endings import End, Ending, Failure, ending_for, failure_of
from .latch import Latch
from ..threads.record import PendingInterrupt, RunKind, ThreadRecord
from ..store.run_log import DetachedRun, LogBroken, RunLog, RunLogs, UnloggedRun
from .shell import EventSink, SinkClosed, ThreadShell
from ..store.contract import LostWrite, PersistenceError, StoreUnavailable

#: How often a run without a client looks whether one re-attached. A poll:
#: the reader may be on another replica, whose presence key announces nothing.
GRACE_POLL_SECONDS: Final = 1.0

log = logging.getLogger(__name__)
_P = ParamSpec("_P")

StopReason = Literal["disconnect", "cancel", "shutdown", "lease_lost", "handoff", "lost_write"]

_OUTCOME_ERRORS: Final = {"failed": ErrorCode.A2A_EXECUTION_FAILED, "canceled": ErrorCode.CANCELLED}
_RUN_ERRORS: Final = (AnswerRefused, AdapterError, A2AError, IdentityMismatch, TaskMismatch, PersistenceError)


class Phase(enum.Enum):
    """Where a run is, as far as its client and its relaying go."""

    #: Being opened (its opening transition, its first events).
    OPENING = "opening"
    #: A client reads its stream.
    WATCHED = "watched"
    #: Its client went away; it goes on, into its log, for the grace.
    UNWATCHED = "unwatched"
    #: Shutdown: its client was let go; it goes on until adopted or the end of the drain.
    DRAINING = "draining"
    #: Asked to stop (:attr:`RunDriver.stop_reason` says why); it is being ended.
    STOPPING = "stopping"
    #: Ended in its opening (a report of how an earlier run ended).
    OVER = "over"
    ENDED = "ended"


#: The phases a run may move to from each phase; any other move is ignored
#: (a stop after the end, a second disconnect).
PHASES: Final[dict[Phase, frozenset[Phase]]] = {
    Phase.OPENING: frozenset({Phase.WATCHED, Phase.UNWATCHED, Phase.DRAINING, Phase.STOPPING, Phase.OVER}),
    Phase.WATCHED: frozenset({Phase.UNWATCHED, Phase.DRAINING, Phase.STOPPING, Phase.ENDED}),
    Phase.UNWATCHED: frozenset({Phase.DRAINING, Phase.STOPPING, Phase.ENDED}),
    Phase.DRAINING: frozenset({Phase.STOPPING, Phase.ENDED}),
    Phase.STOPPING: frozenset({Phase.ENDED}),
    Phase.OVER: frozenset({Phase.ENDED}),
    Phase.ENDED: frozenset(),
}


@attrs.define
class RunContext:
    """What a run needs from the server around it."""

    runtime: IacCodeRuntime
    interrupt_ttl_seconds: float
    clock: Callable[[], float] = time.time
    #: Where runs report their metrics and spans (nothing by default).
    telemetry: Telemetry = QUIET
    #: Where runs write their events (``None``: no re-attach, no ids).
    logs: RunLogs | None = None
    #: How long a run whose client vanished goes on (0: cancel at once).
    grace_seconds: float = 0.0
    #: The wire profile: how a run stopped on purpose ends.
    profile: Profile = DEFAULT_PROFILE


@attrs.define
class Ticket:
    """An admitted request: the claimed thread and what the run will do."""

    run_input: RunAgentInput
    digest: str
    language: str
    shell: ThreadShell
    plan: tm.Plan
    #: The execution a new turn starts (a resume continues the thread's).
    new_execution_id: str
    #: The A2A user message of a new turn.
    message: dict[str, Any] | None = None
    #: What the runtime said about the task when the request was admitted.
    view: TaskView | None = None
    #: Told right after ``RUN_STARTED`` of a new turn (the pool's notice of a new runtime).
    notices: list[Event] = attrs.Factory(list)

    @property
    def record(self) -> ThreadRecord:
        """The claimed thread's record."""
        return self.shell.record

    @property
    def execution_id(self) -> str:
        """The execution this run belongs to."""
        if self.plan.kind is tm.PlanKind.TURN or self.record.execution_id is None:
            return self.new_execution_id
        return self.record.execution_id


class RunDriver:
    """Carries one admitted run from its opening to its last event."""

    def __init__(self, context: RunContext, ticket: Ticket, sink: EventSink | None) -> None:
        self.context = context
        self.ticket = ticket
        self.shell = ticket.shell
        #: Where the run's events go; ``None`` once the client is gone.
        self.sink: EventSink | None = sink
        #: The same sink, kept after the client left: it counts what was written.
        self._written_to = sink
        record = ticket.record
        continuing = ticket.plan.kind is not tm.PlanKind.TURN
        if continuing and record.pipeline is None:
            record.pipeline = PipelineState()
        self.identity = RunIdentity(
            thread_id=record.thread_id,
            run_id=ticket.run_input.run_id,
            execution_id=ticket.execution_id,
            context_id=record.context_id,
            ros_invocation_id=ticket.run_input.iac_code.ros_invocation_id,
            task_id=record.task_id if continuing else None,
            session_id=record.session_id,
        )
        envelopes = {item.id: item.envelope for item in record.pending_interrupts}
        resumed_tools = {
            envelope.tool_use_id: envelope.tool_name or "tool"
            for envelope in envelopes.values()
            if envelope.tool_use_id
        }
        adopting = ticket.plan.kind is tm.PlanKind.ADOPT
        self.translator = RunTranslator(
            self.identity,
            known_session=continuing,
            pipeline=record.pipeline if continuing else None,
            resumed_tools=resumed_tools,
            known_inputs=tuple(envelopes.values()),
            span_prefix=f"{self.identity.run_id}.{record.adoptions + 1}" if adopting else None,
        )
        if adopting and record.handed_off_text is not None:
            self.translator.continue_text(record.handed_off_text)
        self.follower = Follower(
            context.runtime,
            self.translator,
            self,
            envelopes=envelopes,
            # The tool calls the answers this run carries (or follows) let run.
            answered_tools=[*resumed_tools, *record.unreported_tools()],
            props=ticket.run_input.iac_code,
            cwd=record.cwd,
            subscribable=adopting,
        )
        #: The run's event log (what a re-attached client reads).
        self.log: RunLog = UnloggedRun()
        self.phase = Phase.OPENING
        #: Watches for a re-attach while the run has no client (or the end of a drain).
        self._grace: asyncio.Task[None] | None = None
        #: Wakes the grace watcher when a client of this process re-attaches
        #: (made with the watcher: most runs never need it).
        self._reader_came: asyncio.Event | None = None
        self._ending: asyncio.Task[None] | None = None
        self.started = time.monotonic()
        self.report = context.telemetry.run(
            thread_id=record.thread_id, run_id=self.identity.run_id, execution_id=self.identity.execution_id,
            resume=continuing,
        )
        self.stop_reason: StopReason | None = None
        self.ended = Latch()
        self._inner: asyncio.Task[TurnOutcome | None] | None = None
        self._outcome_name = "unknown"
        #: The transition whose write the grace watcher lost.
        self._lost_write = "park"

    # ------------------------------------------------------------- control
    def stop(self, reason: StopReason) -> None:
        """Stop relaying; the run then ends as cancelled (``handoff``: it is
        left to another replica). A client that went away while there is a
        disconnect grace only parks the run."""
        watched = self.phase in (Phase.OPENING, Phase.WATCHED, Phase.UNWATCHED)
        if reason == "disconnect" and self.context.grace_seconds > 0 and watched:
            self._client_left()
            return
        if self._enter(Phase.STOPPING):
            self.stop_reason = reason
        if self._inner is not None:
            self._inner.cancel()

    def _enter(self, phase: Phase) -> bool:
        """Move to ``phase`` if :data:`PHASES` allows it; whether it did."""
        if phase not in PHASES[self.phase]:
            return False
        self.phase = phase
        return True

    @property
    def draining(self) -> bool:
        """Shutdown let the client go; the run waits to be adopted."""
        return self.phase is Phase.DRAINING

    def _client_left(self) -> None:
        """The client vanished: go on without it for the grace."""
        self.sink = None
        if self._enter(Phase.UNWATCHED):
            self._reader_came = asyncio.Event()
            self._grace = asyncio.create_task(self._mind_the_grace())

    def drain(self, until: float) -> None:
        """Shutdown: let the client go (it re-attaches elsewhere with its
        last event id) and go on relaying into the log until another replica
        adopts the run (:meth:`hand_off`) or ``until``."""
        if not self._enter(Phase.DRAINING):
            return
        sink, self.sink = self.sink, None
        end = getattr(sink, "end", None)
        if end is not None:
            self._ending = asyncio.create_task(end())
            log.info("run %s: client let go (shutdown)", self.identity.run_id)
        if self._grace is not None:
            self._grace.cancel()
        self._grace = asyncio.create_task(self._drain_until(until))

    def hand_off(self) -> None:
        """Another replica asks for this draining run: stop relaying it."""
        if self.draining:
            self.stop("handoff")

    async def _drain_until(self, until: float) -> None:
        await asyncio.sleep(max(until - self.context.clock(), 0.0))
        self.stop("shutdown")

    async def _mind_the_grace(self) -> None:
        """Park the run; rejoin while a client reads its log; cancel it when
        nobody did for the whole grace."""
        logs, shell, clock = self.context.logs, self.shell, self.context.clock
        record, ident = shell.record, self.identity
        try:
            while not self.ended.is_set():
                watched = logs is not None and await logs.watched(self.ticket.record.key, ident.run_id)
                if watched:
                    if record.parked_until is not None:
                        await self._rejoin()
                    await self._until_next_look(GRACE_POLL_SECONDS)
                    continue
                if record.parked_until is None:
                    await shell.apply(tm.park, clock() + self.context.grace_seconds)
                remaining = (record.parked_until or 0.0) - clock()
                if remaining <= 0:
                    log.info("run %s: no client came back within the grace", ident.run_id)
                    self._grace = None
                    self._stop_without_client()
                    return
                await self._until_next_look(min(GRACE_POLL_SECONDS, remaining))
        except LostWrite as exc:
            # The grace cannot be kept (nor a rejoin told) without its
            # record: the run ends, as a client that left without a grace.
            log.error("thread %s run %s: disconnect grace not kept: %s", ident.thread_id, ident.run_id, exc)
            self._grace = None
            self._lost_write = exc.transition
            self.stop("lost_write")
        except (PersistenceError, TransitionNotAllowed, LogBroken) as exc:
            # The run ended meanwhile, or the store failed: the run reports that itself.
            log.warning("thread %s run %s: disconnect grace not kept: %r", ident.thread_id, ident.run_id, exc)

    def reader_came(self) -> None:
        """A client of this process re-attached: the grace watcher looks at
        once (a reader on another replica is seen at its next look)."""
        if self._reader_came is not None:
            self._reader_came.set()

    async def _until_next_look(self, seconds: float) -> None:
        """``seconds``, or until a client of this process re-attaches."""
        came = self._reader_came
        assert came is not None  # made with the watcher
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(came.wait(), seconds)
        came.clear()

    async def _rejoin(self) -> None:
        """A client reads the parked run again. A lost write of that changes
        nothing the run needs (it goes on, to that client; a process that
        dies meanwhile leaves a dead run, which recovery settles without
        the grace): the record says parked until the store takes the rejoin,
        asked again at the next look."""
        try:
            await self.shell.apply(tm.rejoin)
        except LostWrite as exc:
            log.warning("thread %s run %s: rejoin not recorded yet: %s", *self._names(), exc)

    def _stop_without_client(self) -> None:
        """The client is gone for good: the run ends as one that left."""
        if self._enter(Phase.STOPPING):
            self.stop_reason = "disconnect"
        if self._inner is not None:
            self._inner.cancel()

    def message(self, code: ErrorCode, message_id: str | None = None) -> str:
        """The caller-language message of an error code (or of a more precise id)."""
        return render(message_id or code.message_id, self.ticket.language)

    # ------------------------------------------------------------ opening
    async def open(self) -> None:
        """Take the opening transition and announce the run (a report is
        over then). Raises :class:`AdapterError` before anything was
        announced."""
        plan, binding = self.ticket.plan, self._binding()
        shell = self.shell
        # What a report repeats of the turn its answers let go on.
        missed: list[Event] = []
        logs = self.context.logs
        try:
            if logs is not None:
                self.log = await logs.open(
                    self.ticket.record.key, self.identity.run_id, continuing=plan.kind is tm.PlanKind.ADOPT
                )
            if plan.kind is tm.PlanKind.ADOPT:
                events = []
                await shell.apply(tm.adopt, self.context.clock())
            elif plan.kind is tm.PlanKind.REPORT:
                code = self.ticket.record.last_error
                message = self.message(ErrorCode[code]) if code and code in ErrorCode.__members__ else ""
                missed = await self.follower.missed(self.identity.task_id) if self.identity.task_id else []
                events = await shell.apply(tm.report, binding, message, self.context.profile)
                await shell.release()
            elif plan.kind is tm.PlanKind.TURN:
                events = await shell.apply(tm.start_turn, binding) + self._skipped_parts() + self.ticket.notices
                self.translator.pipeline = self.ticket.record.pipeline or self.translator.pipeline
            elif plan.kind is tm.PlanKind.RESUME:
                events = await shell.apply(tm.resume, binding, plan.answers, plan.taken)
            elif plan.kind is tm.PlanKind.ANNOUNCE:
                events = await shell.apply(tm.announce, binding)
            else:
                events = await shell.apply(tm.follow, binding, plan.taken)
        except PersistenceError as exc:
            if plan.kind is tm.PlanKind.ADOPT and isinstance(exc, LostWrite):
                # No response waits on an adoption: the client that re-attached
                # reads the run's log, which must end (nobody relays the run).
                await self._lost(ending_for(Failure(ErrorCode.STATE_PERSISTENCE_FAILED, lost_write=exc.transition)))
            await shell.release()
            raise AdapterError(ErrorCode.STATE_PERSISTENCE_FAILED) from exc
        except StoreUnavailable as exc:
            await shell.release()
            raise AdapterError(ErrorCode.STATE_STORE_UNAVAILABLE) from exc
        except BaseException:
            await shell.release()
            raise
        # The run is open: it counts from here, under its own span, until
        # drive() has logged its end.
        self.report.begin()
        if plan.kind is tm.PlanKind.REPORT:
            self._outcome_name = "report"
            self._enter(Phase.OVER)
            events = [events[0], *self.translator.opening(), *missed, *self.translator.finish(), *events[1:]]
        else:
            shell.keep_claim(lambda: self.stop("lease_lost"))
            if plan.kind is tm.PlanKind.ADOPT:
                # The run's start is in its log already; its client reads it there.
                events += self.translator.reopen_steps()
                self._client_left()
            else:
                self._enter(Phase.WATCHED)
                if plan.kind is not tm.PlanKind.TURN:
                    events += self.translator.opening() + self.translator.reopen_steps()
                    view = self.ticket.view
                    if view is not None and view.pipeline is not None:
                        events += self.follower.recovered(view.pipeline)
        try:
            await self.emit(events)
        except SinkClosed:
            # Gone before the run streamed (without a grace): it ends as one that left.
            self.sink = None
            self._stop_without_client()

    def _skipped_parts(self) -> list[Event]:
        """What the new user message carried that the run leaves out (AG-UI
        1.0 skips a part it cannot use and goes on): told right after
        ``RUN_STARTED``, before any text, so that a UI can tell the person."""
        message = self.ticket.run_input.new_user_message
        if message is None or not message.skipped:
            return []
        value = {"schemaVersion": 1, "messageId": message.id, "parts": [part.describe() for part in message.skipped]}
        return [ev.custom(ev.INPUT_SKIPPED_EVENT, value)]

    def _binding(self) -> tm.RunBinding:
        run_input, message = self.ticket.run_input, self.ticket.message
        return tm.RunBinding(
            run_id=run_input.run_id,
            digest=self.ticket.digest,
            execution_id=self.ticket.new_execution_id,
            ros_invocation_id=run_input.iac_code.ros_invocation_id,
            parent_run_id=run_input.parent_run_id,
            user_message_id=None if message is None else message.get("messageId"),
        )

    # ------------------------------------------------------------- driving
    async def drive(self) -> None:
        """Relay the run, end it, log one line about it."""
        try:
            await self._drive()
        finally:
            self.shell.stop_keeping()
            if self._grace is not None:
                self._grace.cancel()
            await self.shell.release()
            self._log_run()
            # The run's report (begun by open(), which drive() follows) ends after its log line.
            self.report.leave()
            self._enter(Phase.ENDED)
        self.ended.set()

    async def _drive(self) -> None:
        if self.phase is Phase.OVER:
            return
        if self.phase is Phase.STOPPING:
            await self._abandon()
            return
        self._inner = asyncio.create_task(self._stream_to_pause())
        try:
            outcome = await self._inner
        except asyncio.CancelledError:
            if self.stop_reason is None:  # our own task was cancelled, not the run stopped
                self._stop_without_client()
                await self._abandon()
                raise
            if self.stop_reason == "handoff":
                await asyncio.shield(self._let_go())
                return
            await self._abandon()
            return
        except SinkClosed:
            self._stop_without_client()
            await self._abandon()
            return
        except _RUN_ERRORS as exc:
            await self._end_by_error(exc)
            return
        await self._conclude(outcome)

    async def _stream_to_pause(self) -> TurnOutcome | None:
        outcome = await self._stream()
        if outcome is None or outcome.kind != "interrupt":
            return outcome
        return await self.follower.with_sibling_inputs(outcome)

    async def _stream(self) -> TurnOutcome | None:
        plan = self.ticket.plan
        if plan.kind is tm.PlanKind.TURN:
            assert self.ticket.message is not None
            outcome = await self.follower.relay(self.context.runtime.stream(self.ticket.message))
            if outcome is None or not outcome.unconfirmed:
                return outcome
            return await self.follower.follow()
        if plan.kind is tm.PlanKind.ANNOUNCE:
            return TurnOutcome("interrupt", inputs=plan.asks)
        if plan.kind is tm.PlanKind.ADOPT:
            return await self.follower.follow()
        if plan.kind is tm.PlanKind.RESUME:
            outcome = await self.follower.answer(plan.answers)
            if outcome is not None and not outcome.unconfirmed:
                return outcome
        return await self.follower.follow()

    # ---------------------------------------------- what the follower asks of the run
    def applied_answers(self) -> Collection[str]:
        """The interrupts whose answers the thread records as applied."""
        return self.ticket.record.applied_answers.keys()

    def first_event(self) -> None:
        """The runtime's first result of the run arrived."""
        self.report.first_event()

    async def accept(self, interrupt_ids: list[str]) -> None:
        """Store that the runtime took these answers."""
        await self.shell.apply(tm.accept, interrupt_ids)

    async def bind(self, learned: IdentityLearned) -> None:
        """Take the task and session ids the run learned (a lost write of
        them still cancels the task it names), and store them."""
        self.identity = attrs.evolve(self.identity, task_id=learned.task_id, session_id=learned.session_id)
        await self.shell.apply(tm.bind_task, learned.task_id, learned.session_id)

    async def emit(self, events: list[Event]) -> None:
        """Write events to the run's log, then what the log framed to the
        client (a client that vanished parks the run when there is a grace)."""
        if not events:
            return
        try:
            chunk = await self.log.append(events)
        except LogBroken as exc:
            # Re-attach is lost for this run, not the run: its client gets
            # these and the rest with ids that go on; whether the run can
            # go on is for its record's writes (and its lease) to say.
            log.error("thread %s run %s: event log not written, no re-attach from here: %s", *self._names(), exc)
            self.log = self._detached()
            chunk = await self.log.append(events)
        await self._send(chunk, len(events))

    async def _send(self, chunk: bytes, count: int) -> None:
        sink = self.sink
        if sink is not None:
            try:
                await sink.send(chunk, count)
            except SinkClosed:
                if self.context.grace_seconds <= 0 or self.draining:
                    raise
                self._client_left()

    # -------------------------------------------------------------- endings
    async def _conclude(self, outcome: TurnOutcome | None) -> None:
        if outcome is None:
            await self._end_by_error(A2AUnavailable("the runtime's stream ended without an outcome"))
            return
        if outcome.kind in _OUTCOME_ERRORS:
            if outcome.detail:
                log.warning("thread %s run %s: the runtime ended the task %s: %s", *self._names(), outcome.kind,
                            scrub(outcome.detail)[:500])
            await self._fail(_OUTCOME_ERRORS[outcome.kind], detail=outcome.detail)
            return
        await self._close_spans()
        usage = self.translator.usage()
        self._outcome_name = outcome.kind
        if outcome.kind == "interrupt":
            await self._end(tm.interrupt, self._pending(outcome.inputs), usage)
        else:
            await self._end(tm.finish, usage)

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

    async def _end_by_error(self, exc: BaseException) -> None:
        failure = failure_of(
            exc, resuming=self.ticket.plan.kind is tm.PlanKind.RESUME, accepted=bool(self.follower.accepted),
            turn=self._is_turn(),
        )
        log.warning("thread %s run %s: %s (%s)", *self._names(), failure.code.name, exc)
        ending = ending_for(failure)
        if ending.end is End.LOST:
            await self._lost(ending)
            return
        if ending.cancel_task:
            await self.context.runtime.cancel_task(self.identity.task_id)
        if ending.end is End.REJECT:
            await self._refuse_answer(ending.code, ending.message_id)
        elif ending.end is End.DETACH:
            self._note_error(ending.code)
            await self._close_spans()
            await self._end(tm.detach, ending.code, self.message(ending.code, ending.message_id))
        else:
            await self._fail(ending.code, detail=ending.detail, message_id=ending.message_id)

    async def _fail(self, code: ErrorCode, detail: str | None = None, message_id: str | None = None) -> None:
        self._note_error(code)
        await self._close_spans()
        message = self.message(code, message_id)
        if detail and code in (ErrorCode.A2A_EXECUTION_FAILED, ErrorCode.INVALID_INPUT):
            # The runtime's own words help the user more than the code alone
            # (never the request's own secrets, which a provider may quote).
            message = f"{message} {scrub(detail, self.ticket.run_input.iac_code.secret_values())[:300]}"
        if code is ErrorCode.CANCELLED:
            await self._end(tm.cancel, message, profile=self.context.profile, usage=self.translator.usage())
        else:
            await self._end(tm.fail, code, message)

    async def _refuse_answer(self, code: ErrorCode, message_id: str | None = None) -> None:
        """The answer was not applied: the run ends with an error, the thread
        keeps waiting with the same pending interrupts."""
        self._note_error(code)
        await self._close_spans()
        await self._end(tm.reject, code, self.message(code, message_id))

    async def _abandon(self) -> None:
        """Stopped: cancel the runtime's task and end the execution. A client
        that left is not told; one whose run was cancelled or shut down is."""
        if self.stop_reason == "disconnect":
            self.sink = None
        await asyncio.shield(self._end_abandoned())

    async def _end_abandoned(self) -> None:
        if self.stop_reason == "lost_write":
            await self._lost(ending_for(Failure(ErrorCode.STATE_PERSISTENCE_FAILED, lost_write=self._lost_write)))
            return
        lease_lost = self.stop_reason == "lease_lost"
        code = ErrorCode.STATE_PERSISTENCE_FAILED if lease_lost else ErrorCode.CANCELLED
        self._note_error(code)
        if self.stop_reason == "disconnect":
            self._outcome_name = "disconnected"
        if lease_lost:
            # Another replica owns the thread now: its record and the run's
            # log are not ours to write; only our own client is told.
            self.log = self._detached()
            await self._close_spans()
            await self.emit([{"type": "RUN_ERROR", "message": self.message(code), "code": code.name}])
            return
        await self.context.runtime.cancel_task(self.identity.task_id)
        await self._close_spans()
        await self._end(tm.cancel, self.message(code), profile=self.context.profile, usage=self.translator.usage())

    async def _let_go(self) -> None:
        """Shutdown handoff: close what this process opened (in the log),
        record that the run waits to be adopted, free the thread. The
        runtime's task goes on."""
        self._outcome_name = "handed_off"
        events, open_text = self.translator.hand_over()
        try:
            await self.emit(events)
        except SinkClosed:
            self.sink = None
        until = self.context.clock() + self.context.grace_seconds
        try:
            await self.shell.apply(tm.hand_off, until, open_text)
        except LostWrite as exc:
            # Nobody would adopt it: it ends here, and its log says so to the
            # client that re-attaches elsewhere (who would wait for it forever).
            log.error("thread %s run %s: handoff not recorded, the run is cancelled: %s", *self._names(), exc)
            await self._lost(ending_for(Failure(ErrorCode.STATE_PERSISTENCE_FAILED, lost_write=exc.transition)))
            return
        self.shell.stop_keeping()
        await self.shell.release()
        log.info("run %s handed off; task %s goes on", self.identity.run_id, self.identity.task_id)

    async def _close_spans(self) -> None:
        try:
            await self.emit(self.translator.finish())
        except SinkClosed:
            self.sink = None

    async def _end(
        self, transition: Callable[Concatenate[tm.Machine, _P], list[Event]], *args: _P.args, **kwargs: _P.kwargs
    ) -> None:
        """Take the run's last transition, then free the thread, then send
        the terminal event: a client that answers RUN_FINISHED at once (a
        resume) finds the thread free, not THREAD_BUSY. A lost write ends
        the run as :func:`.endings.ending_for` says."""
        try:
            events = await self.shell.apply(transition, *args, **kwargs)
        except LostWrite as exc:
            log.error("thread %s run %s: %s", *self._names(), exc)
            await self._lost(ending_for(Failure(ErrorCode.STATE_PERSISTENCE_FAILED, lost_write=exc.transition)))
            return
        await self._let_the_thread_go(events)

    async def _lost(self, ending: Ending) -> None:
        """The record cannot be written: end the run as a crash would (the
        record stays as last stored, and the next request that touches the
        thread recovers it from the runtime), with the task cancelled when
        ``ending`` says so; the client hears it was not saved."""
        self._note_error(ending.code)
        if ending.cancel_task:
            await self.context.runtime.cancel_task(self.identity.task_id)
        await self._close_spans()
        await self._let_the_thread_go([ev.run_error(self.message(ending.code), ending.code.name)])

    async def _let_the_thread_go(self, events: list[Event]) -> None:
        self.shell.stop_keeping()
        await self.shell.release()
        try:
            await self.emit(events)
        except SinkClosed:
            log.info("run %s ended after its client left", self.identity.run_id)

    def _detached(self) -> RunLog:
        """The log from now on, for a run whose log is no longer ours to write."""
        if isinstance(self.log, (UnloggedRun, DetachedRun)):
            return self.log
        return DetachedRun(self.log.last_id)

    def _is_turn(self) -> bool:
        """A new user turn (or an adopted one): nothing decided rides on it."""
        kind = self.ticket.plan.kind
        if kind is tm.PlanKind.ADOPT:
            return self.shell.record.active_run_kind in (RunKind.TURN, None)
        return kind is tm.PlanKind.TURN

    def _note_error(self, code: ErrorCode) -> None:
        self._outcome_name = code.name

    def _names(self) -> tuple[str, str]:
        """Thread and run, as warning lines name them (run ids repeat across threads)."""
        return self.identity.thread_id, self.identity.run_id

    def _log_run(self) -> None:
        ident = self.identity
        events = getattr(self._written_to, "events_sent", None)
        # Before the log line: the line still names the run's span.
        self.report.ended(self._outcome_name, task_id=ident.task_id, events=events if isinstance(events, int) else None)
        fields = {
            "thread": ident.thread_id,
            "run": ident.run_id,
            "execution": ident.execution_id,
            "task": ident.task_id,
            "outcome": self._outcome_name,
            "duration_ms": round((time.monotonic() - self.started) * 1000),
            "events": events,
            "kind": self.ticket.plan.kind.value,
        }
        log_fields(log, logging.INFO, "run ended", fields)

