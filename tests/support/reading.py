"""Reading a stream in a test until what it waits for came: once, for every
test that reads an SSE response part way.

A loop of ``readany()`` never ends on its own once the response ended
(``readany`` answers ``b""`` at once, again and again): a server that ended
the stream early would turn the test's failure into a hang. These end it
with what came instead, and so does a silence of ``seconds``.
"""

from __future__ import annotations

import asyncio
from typing import Any


async def read_until(
    resp: Any, needle: bytes, count: int = 1, *, seconds: float = 10.0, seen: bytes = b""
) -> bytes:
    """Read ``resp`` (an aiohttp response) until ``needle`` came ``count``
    times; what came, ``seen`` first. An end of the stream or ``seconds``
    without a byte before that fails the test, naming what came."""
    while seen.count(needle) < count:
        seen += await _more(resp, seconds, seen, needle)
    return seen


async def read_until_all(resp: Any, *needles: bytes, seconds: float = 10.0) -> bytes:
    """Read ``resp`` until each of ``needles`` came (once at least)."""
    seen = b""
    for needle in needles:
        seen = await read_until(resp, needle, seconds=seconds, seen=seen)
    return seen


async def _more(resp: Any, seconds: float, seen: bytes | bytearray, needle: bytes) -> bytes:
    try:
        chunk: bytes = await asyncio.wait_for(resp.content.readany(), seconds)
    except asyncio.TimeoutError:
        raise AssertionError(f"nothing for {seconds:g} s before {needle!r}; so far: {bytes(seen[-500:])!r}") from None
    assert chunk, f"the stream ended before {needle!r}: {bytes(seen[-500:])!r}"
    return chunk


async def read_into(resp: Any, seen: bytearray, needle: bytes, count: int, *, seconds: float = 10.0) -> None:
    """:func:`read_until`, into a buffer the caller keeps."""
    while seen.count(needle) < count:
        seen += await _more(resp, seconds, seen, needle)
