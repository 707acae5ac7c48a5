"""A TCP link between a client and a server that breaks once, on cue.

Clients that cannot be told to drop a connection (a browser, ``@ag-ui/client``
in Node) reach the server through this link. It relays bytes both ways, and
the first time the server sends ``cut_at`` on any connection it passes that
chunk on and then aborts both sides of that connection (a reset, as a proxy
or a mobile network that gives up does). Later connections, the client's
re-attach among them, go through untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any

LOOPBACK = "127.0.0.1"


class FlakyLink:
    """Listens on a free loopback port and forwards to ``upstream_port``."""

    def __init__(self, upstream_port: int, cut_at: bytes) -> None:
        self.upstream_port = upstream_port
        self.cut_at = cut_at
        #: Set once the connection was cut.
        self.cut = asyncio.Event()
        self.connections = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[bool]] = set()

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> FlakyLink:
        self._server = await asyncio.start_server(self._serve, LOOPBACK, 0)
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        server_reader, server_writer = await asyncio.open_connection(LOOPBACK, self.upstream_port)
        up = self._spawn(self._pipe(client_reader, server_writer, watch=False))
        down = self._spawn(self._pipe(server_reader, client_writer, watch=True))
        try:
            if await down:
                for writer in (client_writer, server_writer):
                    writer.transport.abort()
        finally:
            up.cancel()
            for writer in (client_writer, server_writer):
                writer.close()

    def _spawn(self, work: Coroutine[Any, Any, bool]) -> asyncio.Task[bool]:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, watch: bool) -> bool:
        """Relay until EOF; ``True`` when this relay cut the connection."""
        tail = b""
        try:
            while True:
                chunk = await reader.read(65536)
                if not chunk:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return False
                writer.write(chunk)
                await writer.drain()
                if watch and not self.cut.is_set():
                    seen = tail + chunk
                    if self.cut_at in seen:
                        self.cut.set()
                        return True
                    tail = seen[-len(self.cut_at):]
        except (ConnectionError, OSError):
            return False


@contextlib.asynccontextmanager
async def flaky_link(upstream_port: int, cut_at: bytes) -> AsyncIterator[FlakyLink]:
    """A started :class:`FlakyLink`, closed on exit."""
    link = await FlakyLink(upstream_port, cut_at).start()
    try:
        yield link
    finally:
        await link.close()
