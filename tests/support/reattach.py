"""A client whose connection breaks mid-run, and its re-attach.

:func:`read_then_cut` reads a run's stream over a real socket and aborts the
TCP connection (no FIN, as a dropped network does) once it saw enough;
:func:`reattach` opens ``GET /threads/{threadId}/runs/{runId}/events`` with
the id of the last event that arrived whole, as a browser's EventSource
does. :func:`joined` glues both halves into what the person saw.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import attrs

from .agui import check_models, check_order, parse_sse_ids

SSE = {"Content-Type": "application/json", "Accept": "text/event-stream"}


@attrs.define
class Half:
    """The events that arrived whole before the cut, and the last id among them."""

    raw: bytes
    last_id: str | None


def whole_events(raw: bytes) -> Half:
    """The part of ``raw`` up to its last complete SSE block."""
    end = raw.rfind(b"\n\n")
    complete = raw[: end + 2] if end >= 0 else b""
    _, ids, _ = parse_sse_ids(complete)
    return Half(complete, ids[-1] if ids else None)


async def read_then_cut(url: str, body: dict[str, Any], *, events: int, headers: dict[str, str] | None = None) -> Half:
    """POST a run, read until ``events`` events arrived, then cut the socket."""
    async with aiohttp.ClientSession() as session:
        resp = await session.post(url, json=body, headers={**SSE, **(headers or {})})
        assert resp.status == 200, await resp.read()
        raw = b""
        while raw.count(b"\ndata: ") + raw.startswith(b"data: ") < events:
            chunk = await asyncio.wait_for(resp.content.readany(), 10)
            assert chunk, f"the stream ended before {events} events: {raw[-300:]!r}"
            raw += chunk
        assert resp.connection is not None and resp.connection.transport is not None
        resp.connection.transport.abort()
        resp.release()
    return whole_events(raw)


async def reattach(
    url: str, thread_id: str, run_id: str, last_id: str | None, *, query: bool = False, timeout: float = 30.0,
    headers: dict[str, str] | None = None,
) -> tuple[int, bytes]:
    """Re-attach and read to the end; the status and the body."""
    path = f"{url}threads/{thread_id}/runs/{run_id}/events"
    sent = {"Accept": "text/event-stream", **(headers or {})}
    if last_id is not None:
        if query:
            path += f"?after={last_id}"
        else:
            sent["Last-Event-ID"] = last_id
    async with aiohttp.ClientSession() as session, session.get(path, headers=sent) as resp:
        return resp.status, await asyncio.wait_for(resp.read(), timeout)


def joined(first: Half, second: bytes) -> list[dict[str, Any]]:
    """The stream a person saw across the cut: valid AG-UI, every id once, in order."""
    events, ids, _ = parse_sse_ids(first.raw + second)
    numbers = [int(value) for value in ids]
    assert numbers == list(range(1, len(numbers) + 1)), f"an event lost or repeated: {ids}"
    check_models(events)
    check_order(events)
    return events
