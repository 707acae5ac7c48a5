"""The history reader's edge: runtime reads, the disk fallback of a spawned runtime, the bounds."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from aguiadapter.a2a.client import A2AClient
from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.i18n import render
from aguiadapter.service.history_reader import HistoryReader, HistoryUnavailable, read_session_file
from aguiadapter.threads.record import ThreadRecord
from tests.support.serve import on_loopback, port_of

RECORDING = json.loads((Path(__file__).parent / "fixtures" / "history" / "iac-code-0.16.0.json").read_text())
SESSION = "0b6f7c1e-2f7d-4c55-9d55-6a3a1f0e9c11"


def record(session_id: str | None = SESSION) -> ThreadRecord:
    return ThreadRecord("t-disk", "ctx-unknown-to-the-runtime", "/workspace", session_id=session_id, task_id="task-1")


def write_session(config_dir: Path, rows: list[dict[str, Any]], workspace: str = "-workspace") -> Path:
    """A session file as iac-code writes it: stamped rows, and a note row without a role."""
    folder = config_dir / "projects" / workspace / SESSION
    folder.mkdir(parents=True)
    lines = [json.dumps({**row, "session_id": SESSION, "cwd": "/workspace", "version": "0.16.0"}) for row in rows]
    lines.insert(1, json.dumps({"type": "last-prompt", "session_id": SESSION, "prompt": "x"}))
    lines.append('{"role": "assistant", "content": [{"type": "te')  # a line being written
    path = folder / "session.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
async def client(demo: DemoRuntime) -> Any:
    async with A2AClient(demo.url) as a2a:
        yield a2a


async def test_a_spawned_runtimes_session_file_serves_when_its_route_cannot(client: A2AClient, tmp_path: Path) -> None:
    write_session(tmp_path, RECORDING["transcript"])
    reader = HistoryReader(transcripts_dir=tmp_path)
    reader.start(client)
    turns = await reader.turns(record())
    messages = [message for turn in turns for message in turn.messages]
    assert len(turns) == 5 and messages[0]["content"].startswith("[scenario:reasoning]")
    assert [m["toolCallId"] for m in messages if m["role"] == "tool"] == [
        block["tool_use_id"] for row in RECORDING["transcript"] if isinstance(row["content"], list)
        for block in row["content"] if block["type"] == "tool_result"
    ]


async def test_without_the_file_or_a_session_history_is_unavailable(client: A2AClient, tmp_path: Path) -> None:
    reader = HistoryReader(transcripts_dir=tmp_path)
    reader.start(client)
    with pytest.raises(HistoryUnavailable) as refused:
        await reader.turns(record())
    # The runtime answers 404 (it holds no such conversation): asking again cannot help.
    assert refused.value.response_headers() == {} and refused.value.message_id == "history_gone"
    write_session(tmp_path, RECORDING["transcript"])
    with pytest.raises(HistoryUnavailable):
        await reader.turns(record(session_id=None))
    with pytest.raises(HistoryUnavailable):
        await HistoryReader().turns(record())  # a remote runtime: never the disk


async def test_in_safe_mode_the_file_is_not_read(
    client: A2AClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """iac-code's A2A safe mode hides local paths from its routes; its files do not."""
    write_session(tmp_path, RECORDING["transcript"])
    monkeypatch.setenv("IAC_CODE_A2A_SAFE_MODE", "true")
    reader = HistoryReader(transcripts_dir=tmp_path)
    reader.start(client)
    with pytest.raises(HistoryUnavailable):
        await reader.turns(record())


@pytest.mark.parametrize("session_id", ["../x", "*", "a/b", ".", ""])
def test_a_session_id_is_never_a_path(tmp_path: Path, session_id: str) -> None:
    write_session(tmp_path, RECORDING["transcript"])
    assert read_session_file(tmp_path, session_id) is None


def test_note_rows_and_a_line_being_written_are_skipped(tmp_path: Path) -> None:
    write_session(tmp_path, RECORDING["transcript"])
    rows = read_session_file(tmp_path, SESSION)
    assert rows is not None and [row["role"] for row in rows] == [row["role"] for row in RECORDING["transcript"]]


async def test_a_thread_that_never_reached_the_runtime_has_no_history_and_costs_no_call() -> None:
    reader = HistoryReader()
    assert await reader.turns(ThreadRecord("t-new", "ctx", "/workspace")) == []
    assert reader.reads == 0


async def test_reads_beyond_the_bound_wait_and_then_are_refused(client: A2AClient, tmp_path: Path) -> None:
    gate = asyncio.Event()

    class SlowReader(HistoryReader):
        async def _transcript(self, record: ThreadRecord) -> list[dict[str, Any]]:
            await gate.wait()
            return []

    reader = SlowReader(max_reads=1, wait_seconds=0.05)
    reader.start(client)
    first = asyncio.ensure_future(reader.turns(ThreadRecord("t-1", "ctx-1", "/w", task_id="a")))
    await asyncio.sleep(0)
    with pytest.raises(HistoryUnavailable) as refused:
        await reader.turns(ThreadRecord("t-2", "ctx-2", "/w", task_id="b"))
    assert refused.value.message_id == "history_busy"
    gate.set()
    assert await first == []


async def test_a_caller_that_leaves_does_not_cancel_the_shared_read(client: A2AClient) -> None:
    gate = asyncio.Event()

    class SlowReader(HistoryReader):
        async def _transcript(self, record: ThreadRecord) -> list[dict[str, Any]]:
            await gate.wait()
            return [{"role": "user", "content": "hi"}]

    reader = SlowReader()
    reader.start(client)
    thread = ThreadRecord("t-1", "ctx-1", "/w", task_id="a")
    leaving = asyncio.ensure_future(reader.turns(thread))
    staying = asyncio.ensure_future(reader.turns(thread))
    await asyncio.sleep(0)
    leaving.cancel()
    gate.set()
    assert (await staying)[0].messages[0]["content"] == "hi"
    assert reader.reads == 1
    assert await reader.turns(thread) == await staying, "kept: no second read"
    assert reader.reads == 1


async def test_the_cache_keeps_at_most_max_kept_threads(client: A2AClient) -> None:
    class CountingReader(HistoryReader):
        async def _transcript(self, record: ThreadRecord) -> list[dict[str, Any]]:
            return [{"role": "user", "content": record.thread_id}]

    reader = CountingReader(max_kept=2)
    reader.start(client)
    threads = [ThreadRecord(f"t-{n}", f"ctx-{n}", "/w", task_id="a") for n in range(3)]
    for thread in threads:
        await reader.turns(thread)
    await reader.turns(threads[2])
    assert reader.reads == 3, "the newest is kept"
    await reader.turns(threads[0])
    assert reader.reads == 4, "the oldest was let go"


def owned(thread_id: str, principal: str) -> ThreadRecord:
    return ThreadRecord(thread_id, f"ctx-{thread_id}", "/w", task_id="a", principal=principal, user_id=principal,
                        namespaced=True)


async def test_one_user_cannot_hold_every_read(client: A2AClient) -> None:
    gate = asyncio.Event()

    class SlowReader(HistoryReader):
        async def _transcript(self, record: ThreadRecord) -> list[dict[str, Any]]:
            if record.principal == "alice":
                await gate.wait()
            return [{"role": "user", "content": record.thread_id}]

    reader = SlowReader(max_reads=4, wait_seconds=0.5)
    reader.start(client)
    hers = [asyncio.ensure_future(reader.turns(owned(f"a-{n}", "alice"))) for n in range(6)]
    await asyncio.sleep(0.01)
    # Alice's six reads hold two of the four; bob is served at once.
    bobs = await reader.turns(owned("b-1", "bob"))
    assert bobs[0].messages[0]["content"] == "b-1"
    gate.set()
    assert [turns[0].messages[0]["content"] for turns in await asyncio.gather(*hers)] == [f"a-{n}" for n in range(6)]


async def test_a_users_reads_beyond_their_share_wait_and_then_are_refused(client: A2AClient) -> None:
    gate = asyncio.Event()

    class SlowReader(HistoryReader):
        async def _transcript(self, record: ThreadRecord) -> list[dict[str, Any]]:
            await gate.wait()
            return []

    reader = SlowReader(max_reads=4, max_reads_per_user=1, wait_seconds=0.05)
    reader.start(client)
    first = asyncio.ensure_future(reader.turns(owned("a-1", "alice")))
    await asyncio.sleep(0)
    with pytest.raises(HistoryUnavailable) as refused:
        await reader.turns(owned("a-2", "alice"))
    assert refused.value.message_id == "history_busy"
    gate.set()
    assert await first == []


def rows_of(text: str, count: int) -> list[dict[str, Any]]:
    return [{"role": "user" if n % 2 == 0 else "assistant", "content": text} for n in range(count)]


async def test_the_cache_is_bounded_by_the_bytes_it_holds(client: A2AClient) -> None:
    class BigReader(HistoryReader):
        async def _transcript(self, record: ThreadRecord) -> list[dict[str, Any]]:
            return rows_of("x" * 10_000, 10)  # about 100 kB of messages

    reader = BigReader(max_kept_bytes=250_000)
    reader.start(client)
    threads = [ThreadRecord(f"t-{n}", f"ctx-{n}", "/w", task_id="a") for n in range(5)]
    for thread in threads:
        await reader.turns(thread)
        assert reader.kept_bytes <= 250_000
    assert reader.kept_bytes > 150_000, "two conversations kept"
    reads = reader.reads
    await reader.turns(threads[-1])
    assert reader.reads == reads, "the newest is kept"
    await reader.turns(threads[0])
    assert reader.reads == reads + 1, "the oldest was let go"
    alone = BigReader(max_kept_bytes=50_000)  # one conversation is larger than all it may keep
    alone.start(client)
    await alone.turns(threads[0])
    await alone.turns(threads[0])
    assert (alone.reads, alone.kept_bytes) == (2, 0)


async def test_a_kept_conversation_leaves_when_it_expires_not_at_the_next_read(client: A2AClient) -> None:
    class BigReader(HistoryReader):
        async def _transcript(self, record: ThreadRecord) -> list[dict[str, Any]]:
            return rows_of("y" * 10_000, 4)

    reader = BigReader(cache_seconds=0.05)
    reader.start(client)
    await reader.turns(ThreadRecord("t-1", "ctx-1", "/w", task_id="a"))
    assert reader.kept_bytes > 40_000
    for _ in range(100):
        if not reader.kept_bytes:
            break
        await asyncio.sleep(0.02)
    assert reader.kept_bytes == 0


@pytest.fixture
async def verbose_runtime() -> Any:
    """A runtime whose transcript route answers 2 MB, with a length and without one (chunked)."""
    messages = rows_of("z" * 1000, 2000)

    async def state(request: web.Request) -> web.Response:
        return web.json_response({"executionId": "exec-1"})

    async def recovery(request: web.Request) -> web.StreamResponse:
        body = json.dumps({"messages": messages}).encode()
        if request.query["contextId"] == "ctx-sized":
            return web.Response(body=body, content_type="application/json")
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        for start in range(0, len(body), 64 * 1024):
            await response.write(body[start:start + 64 * 1024])
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/iac-code/execution/state", state)
    app.router.add_get("/iac-code/session/recovery", recovery)
    runner = web.AppRunner(app)
    await on_loopback(runner)
    port = port_of(runner)
    try:
        async with A2AClient(f"http://127.0.0.1:{port}/") as a2a:
            yield a2a
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("context_id", ["ctx-sized", "ctx-chunked"])
async def test_a_transcript_longer_than_the_cap_is_refused_not_read_whole(
    verbose_runtime: A2AClient, context_id: str
) -> None:
    thread = ThreadRecord("t-1", context_id, "/w", task_id="a")
    small = HistoryReader(max_reply_bytes=1024 * 1024)
    small.start(verbose_runtime)
    with pytest.raises(HistoryUnavailable) as refused:
        await small.turns(thread)
    assert refused.value.message_id == "history_too_large" and refused.value.response_headers() == {}
    assert "--history-max-bytes" in render("history_too_large", "en")
    large = HistoryReader(max_reply_bytes=4 * 1024 * 1024)
    large.start(verbose_runtime)
    assert len(await large.turns(thread)) == 1000


async def test_a_session_file_longer_than_the_cap_is_not_read(client: A2AClient, tmp_path: Path) -> None:
    write_session(tmp_path, rows_of("w" * 1000, 2000))
    reader = HistoryReader(transcripts_dir=tmp_path, max_reply_bytes=1024 * 1024)
    reader.start(client)
    with pytest.raises(HistoryUnavailable) as refused:
        await reader.turns(record())
    assert refused.value.message_id == "history_too_large"
