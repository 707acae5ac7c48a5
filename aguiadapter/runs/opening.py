"""Opening a run: by plan kind (:data:`OPENINGS`), its opening transition,
what it announces before it streams, and what it streams.

A failure here is still an HTTP error (:class:`AdapterError`): nothing was
announced yet, and the claim is released.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

import attrs

from ..errors import AdapterError, ErrorCode
from ..protocol import events as ev
from ..protocol.events import Event
from ..store.contract import LostWrite, PersistenceError, StoreUnavailable
from ..threads import admission
from ..threads import machine as tm
from ..translate.mapper import RunTranslator
from .endings import Ending, Failure, ending_for
from .follow import Follower
from .phases import Phase
from .relaying import RunOutput, Stream, announce_asks, follow_task, no_stream, relay_answers, relay_turn
from .step import RunStep
from .ticket import RunContext, Ticket


@attrs.frozen
class Opening:
    """How a run of one plan kind opens."""

    #: The opening transition; the events it announces.
    take: Callable[[Opener], Awaitable[list[Event]]]
    #: The phase the run is in once open.
    begins: Phase
    #: What the run announces after them.
    recap: Callable[[Opener], list[Event]]
    #: What the run then streams until its turn ends or pauses.
    stream: Stream


class Opener(RunStep):
    """Takes a run's opening transition and says what the run announces."""

    def __init__(
        self, context: RunContext, ticket: Ticket, translator: RunTranslator, follower: Follower, output: RunOutput,
        lost: Callable[[Ending], Awaitable[None]],
    ) -> None:
        super().__init__(context, ticket, translator, output)
        self.follower = follower
        #: Ends a run whose record cannot be written (an adoption's, which no response waits on).
        self._lost = lost

    @property
    def opening(self) -> Opening:
        """The opening of the run's plan kind."""
        return OPENINGS[self.ticket.plan.kind]

    async def open(self) -> list[Event]:
        """Open the run's log and take its opening transition; the events it
        announces. Raises :class:`AdapterError` (the claim released) when
        the transition cannot be taken."""
        opening, shell = self.opening, self.shell
        logs = self.context.logs
        try:
            if logs is not None:
                self.output.log = await logs.open(
                    self.ticket.record.key, self.translator.identity.run_id,
                    continuing=self.ticket.plan.kind is admission.PlanKind.ADOPT,
                )
            events = await opening.take(self)
        except PersistenceError as exc:
            if self.ticket.plan.kind is admission.PlanKind.ADOPT and isinstance(exc, LostWrite):
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
        return events + opening.recap(self)

    # ------------------------------------------------------- the transitions
    async def _turn(self) -> list[Event]:
        events = await self.shell.apply(tm.StartTurn(self._binding())) + self._skipped_parts() + self.ticket.notices
        self.translator.pipeline = self.ticket.record.pipeline or self.translator.pipeline
        return events

    async def _resume(self) -> list[Event]:
        plan = self.ticket.plan
        return await self.shell.apply(tm.Resume(self._binding(), plan.answers, plan.taken))

    async def _announce(self) -> list[Event]:
        return await self.shell.apply(tm.Announce(self._binding()))

    async def _follow(self) -> list[Event]:
        return await self.shell.apply(tm.Follow(self._binding(), self.ticket.plan.taken))

    async def _adopt(self) -> list[Event]:
        # The run's start is in its log already; its client reads it there.
        await self.shell.apply(tm.Adopt(self.context.clock()))
        return []

    async def _report(self) -> list[Event]:
        """How an earlier run ended, told again; the run is over with it."""
        record, translator = self.ticket.record, self.translator
        code = record.last_error
        message = self.ticket.words(ErrorCode[code]) if code and code in ErrorCode.__members__ else ""
        task_id = translator.identity.task_id
        # What a report repeats of the turn its answers let go on.
        missed = await self.follower.missed(task_id) if task_id else []
        events = await self.shell.apply(tm.Report(self._binding(), message, self.context.profile))
        await self.shell.release()
        return [events[0], *translator.opening(), *missed, *translator.finish(), *events[1:]]

    # ------------------------------------------------------------ the recaps
    def _nothing(self) -> list[Event]:
        return []

    def _reopened(self) -> list[Event]:
        """The pipeline steps an earlier relay of the run left open."""
        return self.translator.reopen_steps()

    def _continued(self) -> list[Event]:
        """A run that goes on with the thread's execution: its session, the
        steps left open, what the pipeline did meanwhile."""
        translator = self.translator
        events = translator.opening() + translator.reopen_steps()
        view = self.ticket.view
        if view is not None and view.pipeline is not None:
            events += self.follower.recovered(view.pipeline)
        return events

    # ----------------------------------------------------------------- parts
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


#: How a run of each plan kind opens, and what it streams.
OPENINGS: Final[dict[admission.PlanKind, Opening]] = {
    admission.PlanKind.TURN: Opening(Opener._turn, Phase.RELAYED, Opener._nothing, relay_turn),
    admission.PlanKind.RESUME: Opening(Opener._resume, Phase.RELAYED, Opener._continued, relay_answers),
    admission.PlanKind.ANNOUNCE: Opening(Opener._announce, Phase.RELAYED, Opener._continued, announce_asks),
    admission.PlanKind.FOLLOW: Opening(Opener._follow, Phase.RELAYED, Opener._continued, follow_task),
    admission.PlanKind.ADOPT: Opening(Opener._adopt, Phase.PARKED, Opener._reopened, follow_task),
    admission.PlanKind.REPORT: Opening(Opener._report, Phase.OVER, Opener._nothing, no_stream),
}
