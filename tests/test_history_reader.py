"""The history reader's edge: runtime reads, the disk fallback of a spawned runtime, the bounds."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from aguiadapter.a2a.client import A2AClient
from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.threads.history_reader import HistoryReader, HistoryUnavailable, read_session_file
from aguiadapter.threads.record import ThreadRecord

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
