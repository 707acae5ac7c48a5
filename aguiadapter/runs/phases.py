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
    #: A client reads its stream (the record's :attr:`RunPhase.RELAYED`).
    RELAYED = "relayed"
    #: Its client went away; it goes on, into its log, for the grace (:attr:`RunPhase.PARKED`).
    PARKED = "parked"
    #: Shutdown: its client was let go; it goes on until adopted (:attr:`RunPhase.HANDED_OFF`
    #: once another replica asks for it) or the end of the drain.
    HANDING_OFF = "handing_off"
    #: Asked to stop (:attr:`RunDriver.stop_reason` says why); it is being ended.
    STOPPING = "stopping"
    #: Ended in its opening (a report of how an earlier run ended).
    OVER = "over"
    ENDED = "ended"


#: The phases a run may move to from each phase; any other move raises
#: (a stop after the end, a second disconnect are asked with :meth:`RunDriver._may_enter` first).
PHASES: Final[dict[Phase, frozenset[Phase]]] = {
    # ENDED too: drive() ends whatever run it was handed, and the end must not raise.
    Phase.OPENING: frozenset({Phase.RELAYED, Phase.PARKED, Phase.HANDING_OFF, Phase.STOPPING, Phase.OVER, Phase.ENDED}),
    Phase.RELAYED: frozenset({Phase.PARKED, Phase.HANDING_OFF, Phase.STOPPING, Phase.ENDED}),
    Phase.PARKED: frozenset({Phase.HANDING_OFF, Phase.STOPPING, Phase.ENDED}),
    Phase.HANDING_OFF: frozenset({Phase.STOPPING, Phase.ENDED}),
    Phase.STOPPING: frozenset({Phase.ENDED}),
    Phase.OVER: frozenset({Phase.ENDED}),
    Phase.ENDED: frozenset(),
}
