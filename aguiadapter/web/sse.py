"""The SSE response of one run: lazy headers, heartbeats, disconnect watch.

The response is prepared on the first event, so anything that fails before
the run is announced can still be answered as an HTTP JSON error. A watcher
task writes ``: heartbeat`` after a quiet interval and notices when the
client went away, even while the runtime is silent.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable

from aiohttp import web

from ..protocol.events import HEARTBEAT
from ..threads.shell import SinkClosed

SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
    "Connection": "keep-alive",
}
#: How often the watcher looks for a vanished client, at most.
_WATCH_INTERVAL = 0.5


class ClientGone(SinkClosed):
    """The client closed the connection."""


class SseWriter:
    """Writes AG-UI events to one streaming response."""

    def __init__(
        self,
        request: web.Request,
        *,
        heartbeat_seconds: float,
        on_disconnect: Callable[[], object] | None = None,
    ) -> None:
        self.request = request
        self.response = web.StreamResponse(status=200, headers=SSE_HEADERS)
        self.heartbeat_seconds = heartbeat_seconds
        self.on_disconnect = on_disconnect
        self.events_sent = 0
        self._last_write = 0.0
        self._watcher: asyncio.Task[None] | None = None
        self._gone = False

    @property
    def prepared(self) -> bool:
        """Whether headers went out (errors must then be ``RUN_ERROR``)."""
        return self.response.prepared

    async def send(self, chunk: bytes, count: int) -> None:
        """Write ``count`` events already framed as SSE (with their ids)."""
        if self._gone:
            raise ClientGone()
        if not self.response.prepared:
            await self._prepare()
        try:
            await self.response.write(chunk)
        except (ConnectionError, RuntimeError) as exc:
            # The caller learns it from this exception; no callback needed.
            self._gone = True
            raise ClientGone() from exc
        self.events_sent += count
        self._last_write = asyncio.get_running_loop().time()

    async def end(self) -> None:
        """Finish the stream now (shutdown: the client re-attaches with the
        id of the last event it got); later events are not ours to send."""
        self._gone = True
        if self._watcher is not None:
            self._watcher.cancel()
            self._watcher = None
        if self.response.prepared:
            self.response.force_close()
            try:
                await self.response.write_eof()
            except (ConnectionError, RuntimeError):
                pass
            # The request's handler goes on (the run does): a keep-alive client
            # must not queue its next request behind it on this connection.
            transport = self.request.transport
            if transport is not None:
                transport.close()

    async def close(self) -> None:
        """Stop the watcher and finish the response."""
        if self._watcher is not None:
            self._watcher.cancel()
            self._watcher = None
        if self.response.prepared and not self._gone:
            try:
                await self.response.write_eof()
            except (ConnectionError, RuntimeError):
                pass

    async def open(self) -> None:
        """Send the headers now (a stream whose events may never come)."""
        if not self.response.prepared:
            await self._prepare()

    async def _prepare(self) -> None:
        await self.response.prepare(self.request)
        self._last_write = asyncio.get_running_loop().time()
        # A fresh context: the first event may be written from inside a
        # thread-machine transition, whose context the watcher (alive for the
        # whole stream) must not keep.
        self._watcher = contextvars.Context().run(asyncio.create_task, self._watch())

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._gone:
            quiet = loop.time() - self._last_write
            await asyncio.sleep(min(_WATCH_INTERVAL, max(self.heartbeat_seconds - quiet, 0.01)))
            transport = self.request.transport
            if transport is None or transport.is_closing():
                self._mark_gone()
                return
            if loop.time() - self._last_write >= self.heartbeat_seconds:
                try:
                    await self.response.write(HEARTBEAT)
                except (ConnectionError, RuntimeError):
                    self._mark_gone()
                    return
                self._last_write = loop.time()

    def _mark_gone(self) -> None:
        if not self._gone:
            self._gone = True
            if self.on_disconnect is not None:
                self.on_disconnect()
