"""Where a run is, as far as its client and its relaying go: the driver's phases
and the moves between them (:class:`Phase`, :data:`PHASES`), and why a run
was asked to stop (:data:`StopReason`)."""

from __future__ import annotations

import enum
from typing import Final, Literal

StopReason = Literal["disconnect", "cancel", "shutdown", "lease_lost", "handoff", "lost_write"]


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
