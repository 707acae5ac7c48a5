"""The SSE response of one run: lazy headers, heartbeats, disconnect watch.

The response is prepared on the first event, so anything that fails before
the run is announced can still be answered as an HTTP JSON error. While it is
open, the app's :class:`~aguiadapter.web.stream_watch.StreamWatch` ticks it:
a ``: heartbeat`` after a quiet interval, and notice when the client went
away, even while the runtime is silent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiohttp import web

from ..protocol.events import HEARTBEAT
from ..runs.shell import SinkClosed
from .stream_watch import StreamWatch

SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
    "Connection": "keep-alive",
}


class _SseResponse(web.StreamResponse):
    """A stream whose headers leave with its first event, in one write: a
    system call fewer per run (:meth:`SseWriter.open` sends them alone)."""

    _send_headers_immediately = False


class ClientGone(SinkClosed):
    """The client closed the connection."""


class SseWriter:
    """Writes AG-UI events to one streaming response."""

    __slots__ = ("_beat", "_gone", "_last_write", "_watch", "events_sent", "on_disconnect", "request", "response")

    def __init__(
        self,
        request: web.Request,
        watch: StreamWatch,
        *,
        on_disconnect: Callable[[], object] | None = None,
    ) -> None:
        self.request = request
        self.response: web.StreamResponse = _SseResponse(status=200, headers=SSE_HEADERS)
        self.on_disconnect = on_disconnect
        self.events_sent = 0
        self._watch = watch
        self._last_write = 0.0
        self._gone = False
        self._beat: asyncio.Task[None] | None = None

    @property
    def prepared(self) -> bool:
        """Whether headers went out (errors must then be ``RUN_ERROR``)."""
        return self.response.prepared

    async def send(self, chunk: bytes, count: int, *, last: bool = False) -> None:
        """Write ``count`` events already framed as SSE (with their ids);
        ``last``: the run's terminal event is among them, and the response
        ends with the same write (no heartbeat follows it)."""
        if self._gone:
            raise ClientGone()
        if not self.response.prepared:
            await self._prepare()
        try:
            if last:
                self._unwatch()
                await self.response.write_eof(chunk)
            else:
                await self.response.write(chunk)
        except (ConnectionError, RuntimeError) as exc:
            # The caller learns it from this exception; no callback needed.
            self._gone = True
            self._unwatch()
            raise ClientGone() from exc
        self.events_sent += count
        self._last_write = asyncio.get_running_loop().time()

    async def end(self) -> None:
        """Finish the stream now (shutdown: the client re-attaches with the
        id of the last event it got); later events are not ours to send."""
        self._gone = True
        self._unwatch()
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
        """Stop being watched and finish the response."""
        self._unwatch()
        if self.response.prepared and not self._gone:
            try:
                await self.response.write_eof()
            except (ConnectionError, RuntimeError):
                pass

    async def open(self) -> None:
        """Send the headers now (a stream whose events may never come)."""
        if not self.response.prepared:
            await self._prepare()
            # An empty write sends the headers held for the first event.
            await self.response.write(b"")

    def tick(self, now: float) -> None:
        """The watch looks: is the client still there, is a heartbeat due?"""
        transport = self.request.transport
        if transport is None or transport.is_closing():
            self._mark_gone()
        elif self._beat is None and now - self._last_write >= self._watch.heartbeat_seconds:
            self._last_write = now
            self._beat = asyncio.ensure_future(self._heartbeat())

    async def _heartbeat(self) -> None:
        try:
            await self.response.write(HEARTBEAT)
        except (ConnectionError, RuntimeError):
            self._mark_gone()
        finally:
            self._beat = None

    async def _prepare(self) -> None:
        await self.response.prepare(self.request)
        self._last_write = asyncio.get_running_loop().time()
        self._watch.add(self)

    def _unwatch(self) -> None:
        self._watch.discard(self)
        beat, self._beat = self._beat, None
        if beat is not None:
            beat.cancel()

    def _mark_gone(self) -> None:
        if not self._gone:
            self._gone = True
            self._unwatch()
            if self.on_disconnect is not None:
                self.on_disconnect()
