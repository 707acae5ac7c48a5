"""Relaying a run: what it streams from the runtime until the turn ends or
pauses (one strategy per plan kind, :data:`.opening.OPENINGS` says which), and where what it relays goes: its
event log, then its client while it has one (:class:`RunOutput`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import attrs

from ..protocol.events import Event
from ..store.run_log import DetachedRun, LogBroken, RunLog, UnloggedRun
from ..translate.mapper import TurnOutcome
from .follow import Follower
from .shell import EventSink, SinkClosed
from .ticket import Ticket

log = logging.getLogger(__name__)

#: What a run streams until its turn ends or pauses (``None``: no outcome came).
Stream = Callable[[Follower, Ticket], Awaitable[TurnOutcome | None]]


async def relay_turn(follower: Follower, ticket: Ticket) -> TurnOutcome | None:
    """A new turn: relay the stream of its message; follow the task when
    the stream stopped without saying whether an input waits."""
    assert ticket.message is not None
    batches = follower.runtime.stream(ticket.message)
    # Sent once: the ticket does not keep it for as long as the stream stays open.
    ticket.message = None
    outcome = await follower.relay(batches)
    if outcome is None or not outcome.unconfirmed:
        return outcome
    return await follower.follow()


async def relay_answers(follower: Follower, ticket: Ticket) -> TurnOutcome | None:
    """Send the answers, then follow the task unless their stream ended the turn."""
    outcome = await follower.answer(ticket.plan.answers)
    if outcome is not None and not outcome.unconfirmed:
        return outcome
    return await follower.follow()


async def announce_asks(follower: Follower, ticket: Ticket) -> TurnOutcome | None:
    """The runtime asks for more than was answered: the run pauses on it all."""
    return TurnOutcome("interrupt", inputs=ticket.plan.asks)


async def follow_task(follower: Follower, ticket: Ticket) -> TurnOutcome | None:
    """Answers the runtime took (or a run adopted): follow its task."""
    return await follower.follow()


async def no_stream(follower: Follower, ticket: Ticket) -> TurnOutcome | None:
    """A report ends in its opening: nothing to stream."""
    return None


async def stream_to_pause(stream: Stream, follower: Follower, ticket: Ticket) -> TurnOutcome | None:
    """Relay the run until its turn ends or pauses; a pause announces every
    input the task waits for."""
    outcome = await stream(follower, ticket)
    if outcome is None or outcome.kind != "interrupt":
        return outcome
    return await follower.with_sibling_inputs(outcome)


@attrs.define
class RunOutput:
    """Where a run's events go: its event log (what a re-attached client
    reads), then its client while it has one."""

    #: The run's thread and run ids, as warning lines name them.
    names: tuple[str, str]
    #: Whether the run goes on without a client whose stream closed (it parks
    #: for a grace), rather than stop.
    goes_on_without_client: Callable[[], bool]
    #: Where the run's events go; ``None`` once the client is gone.
    sink: EventSink | None
    #: The same sink, kept after the client left: it counts what was written.
    written_to: EventSink | None = attrs.field(init=False)
    log: RunLog = attrs.field(factory=UnloggedRun)
    #: Ends the stream of a client let go at a shutdown.
    _ending: asyncio.Task[None] | None = attrs.field(init=False, default=None)
    #: Events kept for the next write (:meth:`hold`).
    _held: list[Event] | None = attrs.field(init=False, default=None)

    def __attrs_post_init__(self) -> None:
        self.written_to = self.sink

    def hold(self, events: list[Event]) -> None:
        """Keep ``events`` for the next :meth:`emit`, which writes them first:
        a turn's last events go out with its end, in one write (its end
        always writes: a terminal event, or an error)."""
        if events:
            self._held = events if self._held is None else self._held + events

    async def emit(self, events: list[Event], *, last: bool = False) -> None:
        """Write events (after any held ones) to the run's log, then what the
        log framed to the client (a client that vanished parks the run when
        there is a grace). ``last``: the run's terminal event is among them,
        and the client's stream ends with this write."""
        held = self._held
        if held is not None:
            self._held = None
            events = held + events
        if not events:
            return
        try:
            chunk = await self.log.append(events)
        except LogBroken as exc:
            # Re-attach is lost for this run, not the run: its client gets
            # these and the rest with ids that go on; whether the run can
            # go on is for its record's writes (and its lease) to say.
            log.error("thread %s run %s: event log not written, no re-attach from here: %s", *self.names, exc)
            self.detach()
            chunk = await self.log.append(events)
        sink = self.sink
        if sink is not None:
            try:
                await sink.send(chunk, len(events), last=last)
            except SinkClosed:
                if not self.goes_on_without_client():
                    raise

    async def emit_to_whoever_listens(self, events: list[Event], *, last: bool = False) -> bool:
        """:meth:`emit`; a client that went away is let go. Whether it still listened."""
        try:
            await self.emit(events, last=last)
        except SinkClosed:
            self.sink = None
            return False
        return True

    def let_client_go(self) -> EventSink | None:
        """The client is gone (or let go): the run writes only to its log. The sink it had."""
        sink, self.sink = self.sink, None
        return sink

    def end_client(self) -> bool:
        """Shutdown: end the client's stream (it re-attaches elsewhere with
        its last event id), and write only to the log. Whether it had one to end."""
        end = getattr(self.let_client_go(), "end", None)
        if end is None:
            return False
        self._ending = asyncio.create_task(end())
        return True

    def detach(self) -> None:
        """The log is no longer ours to write (another replica owns the
        thread, or the log broke): ids go on, nothing is written."""
        if not isinstance(self.log, (UnloggedRun, DetachedRun)):
            self.log = DetachedRun(self.log.last_id)

    @property
    def events_sent(self) -> int | None:
        """How many events the client was sent (``None``: its sink does not count)."""
        events = getattr(self.written_to, "events_sent", None)
        return events if isinstance(events, int) else None
