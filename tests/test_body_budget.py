"""The bytes of request bodies an app holds at once are bounded (issue 34, item 1).

Sixteen 12 MiB bodies (a few kB each on the wire, gzipped) were read at once
before any of them took its turn. Now a body is read only once the app's body
budget has room for all it can become; one that finds none waits, then gets
503 ``SERVER_BUSY`` with ``Retry-After`` in the caller's language, having read
nothing; and a body that does not arrive at the minimum pace gives its room
back with 400 ``body_too_slow``. Small bodies are not counted.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import aguiadapter.web.body_turns
from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.web.keys import LARGE_BODIES
from tests.support.adapter import RunningAdapter, run_body, start_adapter
from tests.support.eventually import eventually

MIB = 1024 * 1024


@pytest.fixture
async def small_budget(tmp_path: Path, demo: DemoRuntime) -> AsyncIterator[RunningAdapter]:
    """An adapter whose body budget holds 3 MiB, and whose bodies wait 0.5 s for room."""
    running = await start_adapter(tmp_path / "state", demo.url, allowed_cwds=(str(tmp_path / "workspaces"),))
    bodies = running.app[LARGE_BODIES]
    bodies.budget_bytes = bodies.free = 3 * MIB
    bodies.wait_seconds = 0.5
    try:
        yield running
    finally:
        await running.close()


async def _open_body(adapter: RunningAdapter, length: int, first: bytes) -> tuple[asyncio.StreamReader,
                                                                                asyncio.StreamWriter]:
    """A POST declaring ``length`` bytes of body, of which only ``first`` is sent for now."""
    host, port = adapter.url.split("//")[1].rstrip("/").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        f"POST / HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\nAccept: text/event-stream\r\n\r\n".encode() + first
    )
    await writer.drain()
    return reader, writer


def _padded_run(workspace: Path, size: int, thread_id: str) -> bytes:
    """A run of ``size`` bytes of JSON (a text message padded with spaces)."""
    text = json.dumps(run_body(thread_id=thread_id, text="hi", cwd=str(workspace))).encode()
    return text[:-1] + b" " * (size - len(text)) + b"}"


async def test_a_body_that_finds_no_room_is_refused_busy_in_the_callers_language_and_reads_nothing(
    small_budget: RunningAdapter, workspace: Path
) -> None:
    bodies = small_budget.app[LARGE_BODIES]
    first = _padded_run(workspace, 2 * MIB, "first")
    reader, writer = await _open_body(small_budget, len(first), first[:1024])
    try:
        # The first body's whole declared size is reserved before it has arrived.
        await eventually(lambda: bodies.free == 1 * MIB, "the first body holds 2 MiB of the budget")
        second = _padded_run(workspace, 2 * MIB, "second")
        for language, words in (("en", "request bodies"), ("zh-CN", "请求体")):
            refused = await small_budget.post("/", second, {"Accept-Language": language})
            assert refused.status == 503, refused.body[:300]
            error = refused.json()["error"]
            assert error["code"] == "SERVER_BUSY" and words in error["message"], error
            assert int(refused.headers["Retry-After"]) > 0
        # A small body is not counted: another user's ordinary run goes on.
        small = await small_budget.run(run_body(thread_id="small", text="hi", cwd=str(workspace)))
        assert small.events()[-1]["type"] == "RUN_FINISHED"
        # The first body arrives whole and runs; its room is given back.
        writer.write(first[1024:])
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 200"), head
        await eventually(lambda: bodies.free == 3 * MIB, "the first body's room is given back")
    finally:
        writer.close()
    again = await small_budget.post("/", second)
    assert again.status == 200 and again.events()[-1]["type"] == "RUN_FINISHED"


async def test_a_body_that_waits_gets_the_room_a_finished_one_gives_back(
    small_budget: RunningAdapter, workspace: Path
) -> None:
    bodies = small_budget.app[LARGE_BODIES]
    bodies.wait_seconds = 10.0
    first = _padded_run(workspace, 2 * MIB, "first")
    reader, writer = await _open_body(small_budget, len(first), first[:1024])
    try:
        await eventually(lambda: bodies.free == 1 * MIB, "the first body holds its room")
        waiting = asyncio.create_task(small_budget.post("/", _padded_run(workspace, 2 * MIB, "second")))
        await eventually(lambda: len(bodies._waiting) == 1, "the second body waits for room")
        writer.write(first[1024:])
        await writer.drain()
        await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        second = await asyncio.wait_for(waiting, 10)
        assert second.status == 200 and second.events()[-1]["type"] == "RUN_FINISHED"
    finally:
        writer.close()


async def test_a_body_that_stalls_is_refused_and_gives_its_room_back(
    small_budget: RunningAdapter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(aguiadapter.web.body_turns, "BODY_GRACE_SECONDS", 0.3)
    bodies = small_budget.app[LARGE_BODIES]
    reader, writer = await _open_body(small_budget, 2 * MIB, b'{"threadId": "slow", ')
    try:
        head = await asyncio.wait_for(reader.read(4096), 10)
    finally:
        writer.close()
    status, _, rest = head.partition(b"\r\n")
    assert status.startswith(b"HTTP/1.1 400"), head
    assert b'"BAD_REQUEST"' in rest and b"too slowly" in rest, rest
    await eventually(lambda: bodies.free == 3 * MIB, "the stalled body's room is given back")
