"""A flag that is set once and can be awaited, costing no waiter queue
until someone waits (a run that nobody waits for keeps only two slots)."""

from __future__ import annotations

import asyncio


class Latch:
    """Like :class:`asyncio.Event` without ``clear``: set once, stays set."""

    __slots__ = ("_done", "_waiter")

    def __init__(self) -> None:
        self._done = False
        self._waiter: asyncio.Future[None] | None = None

    def is_set(self) -> bool:
        """Whether :meth:`set` was called."""
        return self._done

    def set(self) -> None:
        """Set it, and wake everyone waiting."""
        self._done = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self) -> None:
        """Until it is set; cancelling one waiter leaves the others waiting."""
        if self._done:
            return
        if self._waiter is None:
            self._waiter = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._waiter)
