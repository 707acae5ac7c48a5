"""Following an iac-code task for one run: answering its inputs, relaying
its streams, and looking at it until it stops or asks for input.

The decisions are pure and come first (:func:`answer_taken`,
:func:`refusal`, :func:`next_move`): which evidence means that the runtime
took an answer, what a refused stream means, what a look at the task calls
for next. They are tested as tables, without a socket. :class:`Follower`
is the async edge that carries them out against :class:`IacCodeRuntime`;
what it learns goes to the run it serves (:class:`FollowedRun`): events to
emit, answers the runtime took, a task or session id to store.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final, Protocol

import attrs

from ..a2a.client import A2AError, A2ARpcError, A2AUnavailable, StreamEndedEarly
from ..errors import AdapterError, ErrorCode
from ..protocol.events import Event
from ..protocol.inputs import IacCodeProps
from ..protocol.resume import Answer
from ..translate.mapper import Chunk, IdentityLearned, RunIdentity, RunTranslator, TurnOutcome
from ..runtime.envelope import InputEnvelope
from ..runtime.evidence import TaskFate, TaskView, task_fate, waiting_inputs
from ..runtime.iac_code import AnswerRefused, Batches, IacCodeRuntime, TaskMismatch
from ..runtime.transcript import after_answers
from .looks import judge_with_unseen, view_task

log = logging.getLogger(__name__)

#: How iac-code's refusal of an answer it cannot resume from begins.
RESUME_INVALID: Final = "permission_resume_invalid"
#: How many times a run subscribes to its task again when a stream ends early.
FOLLOW_ROUNDS: Final = 5
#: How often a run looks at an execution it cannot subscribe to. A poll: the
#: runtime's execution-state route is remote and announces nothing.
FOLLOW_POLL_SECONDS: Final = 0.25


class LostTask(AdapterError):
    """The runtime no longer knows the run's task, or cannot go on with it
    (``cancel``: it may still wait for something nobody can answer)."""

    def __init__(self, *, cancel: bool = False) -> None:
        super().__init__(ErrorCode.EXECUTION_LOST)
        self.cancel = cancel


# ------------------------------------------------------------ the decisions
def answer_taken(translator: RunTranslator, outcome: TurnOutcome | None, interrupt_id: str) -> bool:
    """Positive evidence that the runtime took the answer to this input: its
    receipt (a duplicate too: taken before), a relayed tool result, or a
    turn that ended (``outcome``, the stream's so far) or paused without
    asking for it again."""
    if interrupt_id in translator.received or translator.relayed_results:
        return True
    if outcome is None or outcome.kind not in ("success", "interrupt"):
        return False
    return all(item.input_id != interrupt_id for item in outcome.inputs)


def refusal(error: A2ARpcError, *, answering: bool) -> Exception | None:
    """What the runtime's JSON-RPC error on a stream means (``answering``:
    the stream carries an answer it has not taken yet); ``None``: the error
    itself."""
    invalid = error.message.startswith(RESUME_INVALID)
    if answering and invalid:
        # Refused as an input it does not wait for (one it took would be
        # acknowledged as a duplicate): the runtime lost it.
        return LostTask(cancel=True)
    if answering:
        return AnswerRefused(str(error))
    if invalid:
        # It took the answer (a receipt came first) and cannot go on from
        # it: a restarted runtime whose turn ran past the answer.
        return LostTask()
    return None


class Move(enum.Enum):
    """What a run does after a look at its task."""

    #: The execution works and cannot be subscribed to: look again.
    LOOK_AGAIN = "look_again"
    #: The task works: relay its stream.
    SUBSCRIBE = "subscribe"
    #: The turn stopped (ended, failed, cancelled, or asks for input).
    STOP = "stop"
    #: It waits for an input no stream announced, whose ids nobody can read.
    CANCEL_UNSEEN = "cancel_unseen"
    #: The runtime lost the task.
    LOST = "lost"
    #: Whether the turn ended or waits is not known: never a success.
    UNKNOWN = "unknown"


_FATE_MOVES: Final = {
    TaskFate.UNSEEN: Move.CANCEL_UNSEEN,
    TaskFate.GONE: Move.LOST,
    TaskFate.ORPHANED: Move.LOST,
    TaskFate.UNKNOWN: Move.UNKNOWN,
}
_FATE_OUTCOMES: Final = {
    TaskFate.TURN_ENDED: "success",
    TaskFate.FAILED: "failed",
    TaskFate.CANCELED: "canceled",
}


def next_move(fate: TaskFate, *, polled: bool, subscribable: bool) -> Move:
    """The move a look at the task calls for (``polled``: the execution
    route says how the turn goes; ``subscribable``: the runtime streams the
    rest of the turn to a new subscriber)."""
    if fate is TaskFate.WORKS:
        return Move.LOOK_AGAIN if polled and not subscribable else Move.SUBSCRIBE
    return _FATE_MOVES.get(fate, Move.STOP)


def outcome_of(fate: TaskFate, asks: Sequence[InputEnvelope], detail: str | None) -> TurnOutcome:
    """How a turn that stopped ended, by its fate."""
    if fate is TaskFate.ASKS:
        return TurnOutcome("interrupt", inputs=tuple(asks))
    return TurnOutcome(_FATE_OUTCOMES[fate], detail=detail)  # type: ignore[arg-type]


# ---------------------------------------------------------------- the edge
class FollowedRun(Protocol):
    """What the follow protocol needs from the run it serves."""

    def applied_answers(self) -> Collection[str]:
        """The interrupts whose answers the thread records as applied."""

    def first_event(self) -> None:
        """The runtime's first result of the run arrived."""

    async def emit(self, events: list[Event]) -> None:
        """Write events to the run's log and client."""

    async def before_end(self, events: list[Event]) -> None:
        """What the turn's last chunk brought: written now, or kept for the
        end's write where that write is cheap (one write, not two)."""

    async def accept(self, interrupt_ids: list[str]) -> None:
        """Store that the runtime took these answers."""

    async def bind(self, learned: IdentityLearned) -> None:
        """Store the task and session ids the run learned."""


class Follower:
    """The iac-code side of one run: sends its answers, relays its streams,
    follows its task."""

    def __init__(
        self,
        runtime: IacCodeRuntime,
        translator: RunTranslator,
        run: FollowedRun,
        *,
        envelopes: Mapping[str, InputEnvelope],
        answered_tools: Sequence[str],
        props: IacCodeProps,
        cwd: str,
        subscribable: bool = False,
    ) -> None:
        self.runtime = runtime
        self.translator = translator
        self.run = run
        #: The envelopes of the interrupts the run answers, by interrupt id.
        self.envelopes = envelopes
        #: The tool calls the answers the run carries (or follows) let run.
        self.answered_tools = answered_tools
        self.props = props
        self.cwd = cwd
        #: A run adopted from a replica that shut down streams the rest of
        #: the turn where the runtime lets it subscribe; elsewhere the
        #: execution route is looked at until the turn stops.
        self.subscribable = subscribable
        #: Answers of this run the runtime took.
        self.accepted: frozenset[str] = frozenset()  # the empty one is shared: most runs answer nothing
        self._view_restored = False

    @property
    def identity(self) -> RunIdentity:
        """The run's ids: the translator's, which learns them from the streams."""
        return self.translator.identity

    def _names(self) -> tuple[str, str]:
        return self.identity.thread_id, self.identity.run_id

    # ------------------------------------------------------------ answers
    async def answer(self, answers: Sequence[Answer]) -> TurnOutcome | None:
        """Send each answer in the runtime's own form; the outcome of the
        streamed one's stream, if it brought one."""
        runtime = self.runtime
        for answer in answers:
            if answer.cancels_task:
                await runtime.cancel_task(self.identity.task_id)
                return TurnOutcome("canceled")
        streamed = [answer for answer in answers if not self.envelopes[answer.interrupt_id].sideband]
        last = streamed[-1:]
        for answer in answers:
            if answer not in last:
                await runtime.send_sideband(self._message(answer))
                await self.accept([answer.interrupt_id])
        if not last:
            return None
        return await self.relay(runtime.stream(self._message(last[0])), accepting=last[0].interrupt_id)

    def _message(self, answer: Answer) -> dict[str, Any]:
        return self.runtime.answer(
            answer,
            self.envelopes[answer.interrupt_id],
            run_id=self.identity.run_id,
            context_id=self.identity.context_id,
            task_id=str(self.identity.task_id),
            props=self.props,
            cwd=self.cwd,
        )

    async def accept(self, interrupt_ids: list[str]) -> None:
        self.accepted |= frozenset(interrupt_ids)
        await self.run.accept(interrupt_ids)

    # ------------------------------------------------------------ streams
    async def relay(
        self, batches: Batches, *, accepting: str | None = None, recover_after_first: bool = False,
        skip_snapshot: bool = False,
    ) -> TurnOutcome | None:
        """Translate the runtime's results and write them; what one network
        chunk brought goes out in one write. ``accepting``: the answer this
        stream carries, taken once the runtime shows it took it."""
        translator = self.translator
        first = True
        try:
            async for batch in batches:
                aligned: list[Event] | None = None
                if first:
                    first = False
                    self.run.first_event()
                    # A subscription opens with the Task: the text a handover left unsent is there.
                    aligned = [event for result in batch if "task" in result
                               for event in translator.align(result["task"])]
                    if skip_snapshot:
                        batch[:] = [result for result in batch if "task" not in result]
                try:
                    chunk = translator.take(batch, tentative=accepting is not None)
                except BaseException:
                    await self._bind_learned()
                    raise
                if (accepting is not None or not chunk.bare) and await self._commit(chunk, accepting):
                    accepting = None
                events = aligned + chunk.events if aligned else chunk.events
                outcome = chunk.outcome
                if outcome is not None and outcome.kind == "success" and not outcome.unconfirmed:
                    # The turn ended: what its last chunk brought goes out with RUN_FINISHED,
                    # right after the end's write, where that write is cheap (RunDriver.before_end).
                    await self.run.before_end(events)
                else:
                    await self.run.emit(events)
                if recover_after_first:
                    recover_after_first = False
                    await self.recover_pipeline()
                if outcome is not None:
                    return outcome
                # Written: its results, events and spans' snapshot do not wait with an idle stream.
                del batch, chunk, aligned, events
        except A2ARpcError as exc:
            meant = refusal(exc, answering=accepting is not None)
            if meant is not None:
                raise meant from exc
            raise
        except StreamEndedEarly:
            if accepting is not None or not any(translator.received.get(key) for key in self.accepted):
                raise
            # The receipt called the answer a duplicate (taken before) and the
            # runtime closed the stream: where the turn is, only a look tells.
            return None
        finally:
            await batches.aclose()  # type: ignore[attr-defined]
        if accepting is not None:
            raise AnswerRefused("the runtime closed the answer's stream without taking it")
        return None

    async def _bind_learned(self) -> None:
        """A result the translator cannot read: the ids named before it are
        stored all the same (the task they name can be cancelled)."""
        learned = self.translator.learned()
        if learned is not None:
            await self.run.bind(learned)

    async def _commit(self, chunk: Chunk, accepting: str | None) -> bool:
        """Store what a chunk's events depend on before any of them goes out:
        the task and session ids it named (one write where iac-code names the
        task and its session one result apart: an adapter that dies right
        after still finds its task), then the acceptance of the answer it
        shows taken (whether it did). A chunk whose writes fail is forgotten."""
        try:
            if chunk.learned is not None:
                await self.run.bind(chunk.learned)
            if chunk.error is not None:
                raise chunk.error
            if accepting is not None and answer_taken(self.translator, chunk.outcome, accepting):
                await self.accept([accepting])
                return True
        except BaseException:
            self.translator.forget(chunk)
            raise
        return False

    # ------------------------------------------------------------ following
    async def follow(self) -> TurnOutcome | None:
        """Follow the task until it stops or asks for input: look at it, and
        while it works subscribe to it, or, where the runtime says how its
        execution goes (iac-code does not stream a turn whose stream lost its
        client), look again until it stops."""
        task_id = self.identity.task_id
        if task_id is None:
            raise LostTask()
        subscriptions = 0
        subscribable = self.subscribable
        while True:
            view = await self._view(task_id)
            if view.pipeline is not None:
                await self.run.emit(self.recovered(view.pipeline))
            fate, asks = await self._fate(view)
            polled = view.execution_status is not None
            move = next_move(fate, polled=polled, subscribable=subscribable)
            if move is Move.LOOK_AGAIN:
                await asyncio.sleep(FOLLOW_POLL_SECONDS)
                continue
            if move is Move.SUBSCRIBE:
                subscriptions += 1
                if subscriptions > FOLLOW_ROUNDS:
                    return None
                try:
                    # With the execution route telling the turn works, the
                    # subscription's opening snapshot (GetTask's) says nothing.
                    outcome = await self.relay(self.runtime.subscribe(task_id), recover_after_first=view.is_pipeline,
                                               skip_snapshot=polled)
                except (A2ARpcError, StreamEndedEarly):
                    if not polled:
                        raise
                    subscribable = False  # iac-code streams no turn whose stream lost its client
                    continue
                if outcome is not None and not outcome.unconfirmed:
                    return outcome
                continue
            if polled:
                await self.run.emit(await self.missed(task_id))
            return self._stopped(move, fate, asks, view, task_id)

    async def _fate(self, view: TaskView) -> tuple[TaskFate, list[InputEnvelope]]:
        """What the task's view says, with the inputs no stream announced
        read from where the runtime keeps them when it says one waits."""
        answered = self.run.applied_answers()
        return await judge_with_unseen(
            self.runtime, view, self.identity.session_id, list(self.envelopes.values()),
            lambda known: task_fate(view, known, answered), lambda judged: judged[0],
        )

    def _stopped(
        self, move: Move, fate: TaskFate, asks: Sequence[InputEnvelope], view: TaskView, task_id: str
    ) -> TurnOutcome:
        if move is Move.CANCEL_UNSEEN:
            log.warning("thread %s run %s: task %s waits for an input no stream announced; it is cancelled",
                        *self._names(), task_id)
            raise LostTask(cancel=True)
        if move is Move.LOST:
            raise LostTask()
        if move is Move.UNKNOWN:
            # The next request looks again.
            raise A2AUnavailable("the runtime's transcript or pipeline state, which says whether the turn "
                                 "ended, was not read")
        return outcome_of(fate, asks, view.detail)

    async def with_sibling_inputs(self, outcome: TurnOutcome) -> TurnOutcome:
        """Parallel candidates ask one after the other while the task works:
        the task lists every sub-pipeline input it waits for, so one pause
        announces them all instead of one run each."""
        task_id = self.identity.task_id
        if task_id is None or not any(item.sideband for item in outcome.inputs):
            return outcome
        try:
            view = await self.runtime.view(
                task_id, self.identity.context_id, pipeline_after=self.translator.pipeline.last_sequence
            )
        except (A2AError, TaskMismatch) as exc:
            log.info("run %s: waiting inputs not listed: %s", self.identity.run_id, exc)
            return outcome
        seen = {item.input_id for item in outcome.inputs}
        listed = [
            item for item in waiting_inputs(view, outcome.inputs, self.run.applied_answers())
            if item.input_id not in seen
        ]
        return attrs.evolve(outcome, inputs=outcome.inputs + tuple(listed))

    async def missed(self, task_id: str) -> list[Event]:
        """The resumed tools' results and the reply, from the transcript, for
        a run that saw nothing of the turn its answers let go on."""
        if self.translator.relayed_results or not self.answered_tools:
            return []
        try:
            view = await self.runtime.view(task_id, self.identity.context_id, pipeline_after=None, transcript=True)
        except (A2AError, TaskMismatch) as exc:
            log.info("run %s: transcript not read: %s", self.identity.run_id, exc)
            return []
        if view.transcript is None:
            return []
        return self.translator.missed(after_answers(view.transcript, self.answered_tools))

    async def _view(self, task_id: str) -> TaskView:
        """The task now; outside a pipeline with the transcript once its
        execution waits (only the transcript tells a turn that ended from
        one that waits for an input)."""
        runtime, context_id = self.runtime, self.identity.context_id
        view = await view_task(runtime, task_id, context_id, self.translator.pipeline)
        if not view.is_pipeline and view.execution_status == "input-required":
            view = await runtime.view(task_id, context_id, pipeline_after=None, transcript=True)
        return view

    async def recover_pipeline(self) -> None:
        """The pipeline events this run's stream missed, from the state route."""
        task_id = self.identity.task_id
        pipeline = self.translator.pipeline
        if task_id is None or pipeline.pipeline_run_id is None:
            return
        document = await self.runtime.pipeline_state(task_id, pipeline.last_sequence)
        if document is not None:
            await self.run.emit(self.recovered(document))

    def recovered(self, document: Any) -> list[Event]:
        """Events the pipeline produced while no stream of ours was open,
        with a snapshot of its view the first time in this run."""
        events = self.translator.recover(document, snapshot_view=not self._view_restored)
        self._view_restored = True
        return events
