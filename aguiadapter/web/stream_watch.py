"""One timer for every open SSE stream of an app.

A stream needs two things while its run is quiet: a ``: heartbeat`` comment
after a quiet interval, and notice when its client went away (aiohttp does
not cancel a handler whose connection closed). Instead of a task per stream
that wakes twice a second, one task per app walks the open streams at a
fixed tick and does both; it sleeps only while streams are open, and costs
nothing when none are.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Protocol


class Watched(Protocol):
    """What the watch asks of an open stream."""

    def tick(self, now: float) -> None:
        """Look at the connection; send a heartbeat if it has been quiet."""


class StreamWatch:
    """Ticks every open stream of one app, from a single task."""

    #: The longest pause between two looks at a stream.
    MAX_TICK = 0.5

    def __init__(self, heartbeat_seconds: float) -> None:
        self.heartbeat_seconds = heartbeat_seconds
        self.tick_seconds = min(self.MAX_TICK, heartbeat_seconds)
        self._streams: dict[Watched, None] = {}
        self._task: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._streams)

    @property
    def idle(self) -> bool:
        """No timer runs (nothing is open, so nothing wakes the process)."""
        return self._task is None

    def add(self, stream: Watched) -> None:
        """Watch ``stream`` until :meth:`discard`."""
        self._streams[stream] = None
        if self._task is None:
            # A fresh context: the first stream may be added from inside a
            # thread-machine transition, whose context the watch must not keep.
            self._task = contextvars.Context().run(asyncio.create_task, self._run(), name="sse-stream-watch")

    def discard(self, stream: Watched) -> None:
        """Stop watching ``stream`` (it ended, or its client is gone)."""
        self._streams.pop(stream, None)

    async def close(self) -> None:
        """Stop the timer (the app shuts down)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._streams:
                await asyncio.sleep(self.tick_seconds)
                now = loop.time()
                # A stream may leave (or a new one come) while we walk.
                for stream in list(self._streams):
                    stream.tick(now)
        finally:
            if self._task is asyncio.current_task():
                self._task = None
