"""Large request bodies take turns between being read and being admitted.

A run's body may be 12 MiB (two images of up to 10 MiB in base64). Decoding
it, checking it (base64, image headers), hashing it and fitting its images
cost memory (~20 MB held per body once decoded) and event-loop time (a
fraction of a second each). Sixteen such bodies arriving at once, each
decoded as soon as it was read, held all of that together and kept every
other user's events waiting behind all sixteen.

So a body over :data:`LARGE_BODY_BYTES` waits, once read, for its turn: one
(:data:`LARGE_BODIES_AT_ONCE`) is decoded (in a worker thread, so that other
users' events go on), admitted and has its images fitted at a time, first
come first served; the others hold only their raw bytes meanwhile. The turn
starts after the body is whole, so a client that sends slowly never holds it.
Ordinary requests do not take turns.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Final

__all__ = ["LARGE_BODIES_AT_ONCE", "LARGE_BODY_BYTES", "LargeBodies"]

LARGE_BODY_BYTES: Final = 1024 * 1024
"""A body larger than this (inflated) takes turns."""

LARGE_BODIES_AT_ONCE: Final = 1
"""Large bodies decoded and admitted at once, per app."""


class LargeBodies:
    """The turns of one app's large bodies."""

    def __init__(self, threshold: int = LARGE_BODY_BYTES, at_once: int = LARGE_BODIES_AT_ONCE) -> None:
        self.threshold = threshold
        self._turns = asyncio.Semaphore(at_once)

    def is_large(self, size: int) -> bool:
        """Whether a body of ``size`` bytes takes turns."""
        return size > self.threshold

    @contextlib.asynccontextmanager
    async def turn(self, size: int) -> AsyncIterator[None]:
        """Hold a turn for a body of ``size`` bytes (none is needed for a small one)."""
        if not self.is_large(size):
            yield
            return
        async with self._turns:
            yield
