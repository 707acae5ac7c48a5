"""Run slots: where the admission limits (:mod:`.limits`) count active runs.

A store provides the slots that fit how widely its records are shared
(``ThreadStore.run_slots()``): :class:`LocalRunSlots` counts in this
process's memory, for the file store, whose state folder belongs to one
process; the Redis store counts for every replica together
(:mod:`.redis_limits`). This module depends on no store, so that the store
interface can name it.
"""

from __future__ import annotations

import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Collection, Sequence
from typing import Literal, Protocol

import attrs

#: What :meth:`RunSlots.take` answers: a slot, the server is full, or the user is.
Taken = Literal["taken", "server_full", "user_full"]


@attrs.frozen
class RunSlot:
    """One active run's place in the counts."""

    slot_id: str
    user: str


class RunSlots(Protocol):
    """Where a store counts active runs."""

    @property
    def lease_seconds(self) -> float | None:
        """How long a slot lives without renewal; ``None``: until released."""

    async def take(self, slot: RunSlot, max_total: int | None, max_per_user: int | None) -> Taken:
        """Count ``slot`` unless a limit is reached (atomically); ``StoreUnavailable`` if unreachable."""

    async def renew(self, slots: Collection[RunSlot]) -> None:
        """Extend the leases of slots still held (a lapsed one counts again)."""

    async def release(self, slot: RunSlot) -> None:
        """Stop counting ``slot`` (never raises)."""

    async def new_thread(self, user: str, limit: int, window_seconds: float) -> float:
        """Count a new thread of ``user`` unless ``limit`` were made in the
        window: 0, or the seconds until one may be made again."""

    async def held(self, users: Sequence[str]) -> list[int]:
        """The slots each of ``users`` holds now, in one read (the runtime pool's
        placement: its runtimes are its "users"); ``StoreUnavailable`` if unreachable."""


#: Users whose new-thread window is kept in memory at most (the oldest go first).
MAX_TRACKED_USERS = 100_000


class LocalRunSlots:
    """Counts in this process's memory (the file store: one process per state folder)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.total = 0
        self.per_user: Counter[str] = Counter()
        self.clock = clock
        #: user → when their recent new threads were made (oldest first).
        self.new_threads: OrderedDict[str, deque[float]] = OrderedDict()

    @property
    def lease_seconds(self) -> float | None:
        """Slots live until released."""
        return None

    async def take(self, slot: RunSlot, max_total: int | None, max_per_user: int | None) -> Taken:
        """Check and count in one step (no ``await`` in between)."""
        if max_per_user is not None and self.per_user[slot.user] >= max_per_user:
            return "user_full"
        if max_total is not None and self.total >= max_total:
            return "server_full"
        self.total += 1
        self.per_user[slot.user] += 1
        return "taken"

    async def renew(self, slots: Collection[RunSlot]) -> None:
        """Nothing lapses here."""

    async def release(self, slot: RunSlot) -> None:
        """Count the run out."""
        self.total -= 1
        self.per_user[slot.user] -= 1
        if self.per_user[slot.user] <= 0:
            del self.per_user[slot.user]

    async def held(self, users: Sequence[str]) -> list[int]:
        """From the counts in memory."""
        return [self.per_user[user] for user in users]

    async def new_thread(self, user: str, limit: int, window_seconds: float) -> float:
        """A sliding window per user, in memory."""
        now = self.clock()
        made = self.new_threads.pop(user, None) or deque()
        while made and made[0] <= now - window_seconds:
            made.popleft()
        self.new_threads[user] = made  # the most recent user last
        if len(made) >= limit:
            return made[0] + window_seconds - now
        made.append(now)
        while len(self.new_threads) > MAX_TRACKED_USERS:
            self.new_threads.popitem(last=False)
        return 0.0
