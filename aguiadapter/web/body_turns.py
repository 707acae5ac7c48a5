"""Request bodies: the bytes held at once are bounded, and large ones take turns.

**The bytes held at once.** A run's body may be 12 MiB (two images of up to
10 MiB in base64), and a gzipped one is a few kB on the wire. Sixteen of
them read at once held 16 x 12 MiB before anything else could look at them.
So a body is read only once the app's body budget (:data:`BODY_BUDGET_BYTES`,
24 MiB: two bodies of the largest size) holds room for all it can become:

- its ``Content-Length`` when it is sent as is (no ``Content-Encoding``);
- the body limit (12 MiB by default) when it is compressed or chunked, as
  only the inflated size counts and it is not known before the end.

The room is reserved before the first byte is read, so a body never holds
part of the budget while waiting for the rest of it (no two bodies can wait
for each other). Bodies of at most :data:`SMALL_BODY_BYTES` (64 KiB, every
run without images) are not counted: their memory is that of the request
itself. A body that finds no room waits, first come first served, up to
:data:`BODY_WAIT_SECONDS`; its bytes stay in the client's connection
meanwhile (aiohttp stops reading a connection whose buffer is full). After
that it gets 503 ``SERVER_BUSY`` with ``Retry-After`` (message
``server_busy_bodies``), having read nothing. The room is given back once
the body's run is admitted and its images fitted (the decoded body is
dropped then), or refused.

**Slow senders.** A reserved body must arrive at a minimum pace: after
:data:`BODY_GRACE_SECONDS` (10 s), at least :data:`BODY_MIN_BYTES_PER_SECOND`
(64 KiB/s) on average since its first byte was awaited; otherwise it is
refused with 400 ``BAD_REQUEST`` (message ``body_too_slow``), and its room
given back. So a client that holds the budget without sending gives it back
within 10 s, and a 12 MiB body may take up to 3.4 minutes.

**Turns.** A body over :data:`LARGE_BODY_BYTES`, once read, waits for its
turn: one (:data:`LARGE_BODIES_AT_ONCE`) is decoded (in a worker thread, so
that other users' events go on), admitted and has its images fitted at a
time, first come first served; the others hold only their raw bytes
meanwhile. The turn starts after the body is whole, so a client that sends
slowly never holds it. Ordinary requests do not take turns.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import Final

from aiohttp import hdrs, web

from ..errors import AdapterError, ErrorCode
from ..service.limits import LimitReached

__all__ = [
    "BODY_BUDGET_BYTES", "BODY_GRACE_SECONDS", "BODY_MIN_BYTES_PER_SECOND", "BODY_WAIT_SECONDS",
    "LARGE_BODIES_AT_ONCE", "LARGE_BODY_BYTES", "SMALL_BODY_BYTES", "LargeBodies", "read_at_pace",
]

LARGE_BODY_BYTES: Final = 1024 * 1024
"""A body larger than this (inflated) takes turns."""

LARGE_BODIES_AT_ONCE: Final = 1
"""Large bodies decoded and admitted at once, per app."""

BODY_BUDGET_BYTES: Final = 24 * 1024 * 1024
"""Bytes of request bodies an app holds at once (reserved before reading).

Two bodies of the largest size: large bodies are decoded one at a time
(their turn), so one more read and waiting keeps the turns busy; more
would only be held (measured: 16 image bombs peaked 283-316 MB above idle
with 48 MiB, goal under 300)."""

SMALL_BODY_BYTES: Final = 64 * 1024
"""A body of at most this many bytes is not counted in the budget."""

BODY_WAIT_SECONDS: Final = 30.0
"""How long a body waits for room in the budget before 503 ``SERVER_BUSY``."""

BODY_GRACE_SECONDS: Final = 10.0
"""Seconds a body may take before the minimum pace applies."""

BODY_MIN_BYTES_PER_SECOND: Final = 64 * 1024
"""The minimum average pace of a body after the grace."""

_READ_SIZE: Final = 65536


def reserved_size(request: web.Request, limit: int) -> int:
    """What a body may become: its ``Content-Length`` sent as is, else ``limit``
    (413 ``REQUEST_TOO_LARGE`` at once for a declared length over it)."""
    length = request.content_length
    if length is not None and length > limit:
        raise AdapterError(ErrorCode.REQUEST_TOO_LARGE)
    encoded = request.headers.get(hdrs.CONTENT_ENCODING, "identity").strip().lower() not in ("", "identity")
    return limit if length is None or encoded else length


async def read_at_pace(request: web.Request, limit: int, clock: float | None = None) -> bytes:
    """The body's bytes, at most ``limit`` once inflated (413 beyond, counted
    as it inflates), arriving at the minimum pace (400 ``body_too_slow``)."""
    started = time.monotonic() if clock is None else clock
    content = request.content
    chunks: list[bytes] = []
    size = 0
    while True:
        try:
            if content.is_eof():
                # All of it arrived (a small body comes with its headers):
                # nothing to wait for, so no timer to arm and cancel.
                chunk = content.read_nowait(_READ_SIZE)
            else:
                # The body may take the grace plus what its bytes so far earn it.
                allowed = started + BODY_GRACE_SECONDS + size / BODY_MIN_BYTES_PER_SECOND - time.monotonic()
                async with asyncio.timeout(max(allowed, 0.0)):
                    chunk = await content.read(_READ_SIZE)
        except TimeoutError:
            raise AdapterError(ErrorCode.BAD_REQUEST, "body_too_slow") from None
        except web.RequestPayloadError:
            # A body whose chunking or Content-Encoding (gzip...) is broken.
            raise AdapterError(ErrorCode.BAD_REQUEST, "bad_request_body") from None
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            raise AdapterError(ErrorCode.REQUEST_TOO_LARGE)
        chunks.append(chunk)


class LargeBodies:
    """The bodies of one app: the bytes held at once, and the turns of large ones."""

    def __init__(
        self,
        threshold: int = LARGE_BODY_BYTES,
        at_once: int = LARGE_BODIES_AT_ONCE,
        *,
        budget_bytes: int = BODY_BUDGET_BYTES,
        wait_seconds: float = BODY_WAIT_SECONDS,
    ) -> None:
        self.threshold = threshold
        self._turns = asyncio.Semaphore(at_once)
        self.budget_bytes = budget_bytes
        self.wait_seconds = wait_seconds
        #: Bytes of the budget not reserved now.
        self.free = budget_bytes
        self._waiting: deque[tuple[int, asyncio.Future[None]]] = deque()

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

    @contextlib.asynccontextmanager
    async def room(self, size: int) -> AsyncIterator[None]:
        """Hold ``size`` bytes of the budget (a small body holds none); 503
        ``SERVER_BUSY`` when no room is found within ``wait_seconds``."""
        if size <= SMALL_BODY_BYTES:
            yield
            return
        size = min(size, self.budget_bytes)
        await self._reserve(size)
        try:
            yield
        finally:
            self.free += size
            self._grant()

    async def _reserve(self, size: int) -> None:
        if not self._waiting and self.free >= size:
            self.free -= size
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (size, granted)
        self._waiting.append(entry)
        try:
            await asyncio.wait_for(asyncio.shield(granted), self.wait_seconds)
        except (TimeoutError, asyncio.CancelledError) as exc:
            if granted.done() and not granted.cancelled():
                self.free += size  # granted as the wait ended: give it back
            else:
                self._waiting.remove(entry)
                granted.cancel()
            self._grant()  # those behind it may fit now
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise LimitReached(ErrorCode.SERVER_BUSY, message_id="server_busy_bodies") from None

    def _grant(self) -> None:
        """Give room to the waiting bodies, in order, while the first fits."""
        while self._waiting and self._waiting[0][0] <= self.free:
            size, granted = self._waiting.popleft()
            self.free -= size
            granted.set_result(None)

    @contextlib.asynccontextmanager
    async def whole(self, request: web.Request, limit: int) -> AsyncIterator[list[bytes]]:
        """Room for the body, then the body read at pace, then its turn: yields
        ``[body]`` (pop it to drop it early); room and turn are held until exit."""
        async with self.room(reserved_size(request, limit)):
            body = await read_at_pace(request, limit)
            async with self.turn(len(body)):
                yield [body]
