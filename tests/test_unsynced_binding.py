"""A turn's task binding goes with the run's next write, or is written on
its own, unsynced, once the turn ran a moment (issue 35, item 4); a process
killed before it was written, or a power cut before the thread's next
synced write, loses nothing recovery needs.

A power cut is modelled on the file store's folder fsyncs: what survives it
is each record as the last fsync of its folder left it (a record's bytes
are synced before its rename, so a rename not yet carried by a folder fsync
leaves the previous record, whole). The turn runs on the demo runtime; the
machine "stops" when the turn's session event is sent (its events go to a
sink that then never returns), and a second service starts on the image.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from aguiadapter.a2a.client import A2AClient
from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.protocol.digest import canonical_digest
from aguiadapter.protocol.parsing import parse_run_input
from aguiadapter.runs import shell
from aguiadapter.service.thread_service import ThreadService
from aguiadapter.store.file import durable
from aguiadapter.store.file.store import FileThreadStore
from aguiadapter.threads.record import RunKind, ThreadRecord, ThreadState, record_from_json
from tests.support.adapter import run_body
from tests.support.agui import parse_sse
from tests.support.eventually import eventually
from tests.test_durability import count_fsyncs


class PowerCut:
    """The files of each folder as its last fsync left them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.images: dict[str, dict[str, bytes]] = {}
        real = durable._fsync_folder

        def synced(folder: str) -> None:
            real(folder)
            self.images[os.path.abspath(folder)] = {
                name: Path(folder, name).read_bytes()
                for name in os.listdir(folder) if name.endswith(".json") and not name.startswith(".")
            }

        monkeypatch.setattr(durable, "_fsync_folder", synced)

    def restore(self, folder: Path, into: Path) -> None:
        """Write ``folder`` as a power cut would leave it into ``into``."""
        into.mkdir(parents=True, mode=0o700)
        for name, data in self.images.get(os.path.abspath(folder), {}).items():
            (into / name).write_bytes(data)


class FrozenAfterSession:
    """A client whose machine stops once the run named its task."""

    def __init__(self) -> None:
        self.session: dict[str, Any] | None = None
        self.frozen = asyncio.Event()

    async def send(self, chunk: bytes, count: int, *, last: bool = False) -> None:
        events, _ = parse_sse(chunk)
        for event in events:
            if event["type"] == "CUSTOM" and isinstance(event.get("value"), dict) and "taskId" in event["value"]:
                self.session = event["value"]
        if self.session is not None:
            self.frozen.set()
            await asyncio.Event().wait()  # nothing of this process happens any more


async def start_service(state: Path, url: str, token: str | None = None) -> tuple[ThreadService, A2AClient]:
    client = A2AClient(url, token=token)
    service = ThreadService(FileThreadStore(state), client)
    await service.start()
    return service, client


@pytest.fixture
async def cut_turn(
    tmp_path: Path, demo: DemoRuntime, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[PowerCut, FrozenAfterSession, dict[str, Any]]]:
    """A turn on a new thread, frozen once its session event went out (the
    process goes on: a binding due is written)."""
    cut = PowerCut(monkeypatch)
    service, client = await start_service(tmp_path / "before", demo.url)
    body = run_body(thread_id="t-cut", text="slow 30", cwd=str(workspace))
    run_input = parse_run_input(body)
    ticket = await service.admit(run_input, canonical_digest(body), "en", str(workspace))
    sink = FrozenAfterSession()
    running = asyncio.ensure_future(service.run(ticket, sink))
    try:
        await asyncio.wait_for(sink.frozen.wait(), 10)
        yield cut, sink, body
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await service.shutdown()
        await client.close()


def stored(state: Path) -> ThreadRecord:
    (path,) = (state / "threads").glob("*.json")
    return record_from_json(path.read_bytes())


async def test_a_power_cut_after_the_binding_leaves_the_turn_without_it_and_recovery_cancels_its_task(
    tmp_path: Path, demo: DemoRuntime, workspace: Path, cut_turn: tuple[PowerCut, FrozenAfterSession, dict[str, Any]]
) -> None:
    cut, sink, body = cut_turn
    assert sink.session is not None
    task_id = sink.session["taskId"]

    async def written() -> bool:
        return stored(tmp_path / "before").task_id == task_id

    # The process's view (what a kill -9 leaves) gets the binding a moment later; the disk's does not.
    await eventually(written, "the binding of a turn that still runs was never written on its own")
    cut.restore(tmp_path / "before" / "threads", tmp_path / "after" / "threads")
    image = stored(tmp_path / "after")
    assert image.state is ThreadState.RUNNING and image.active_run_kind is RunKind.TURN
    assert image.task_id is None, "the binding was synced on its own"
    await check_recovered(tmp_path / "after", demo, workspace, body, sink.session)


@pytest.fixture
def binding_held(monkeypatch: pytest.MonkeyPatch) -> None:
    """However slow the machine, a turn's binding waits for its next write."""
    monkeypatch.setattr(shell, "DEFERRED_WRITE_SECONDS", 60.0)


async def test_a_process_killed_before_the_binding_was_written_orphans_no_task(
    tmp_path: Path, demo: DemoRuntime, workspace: Path, binding_held: None,
    cut_turn: tuple[PowerCut, FrozenAfterSession, dict[str, Any]],
) -> None:
    _, sink, body = cut_turn
    assert sink.session is not None
    # What a kill -9 leaves while the binding waits for the turn's next write.
    assert stored(tmp_path / "before").task_id is None, "the binding was written on its own at once"
    shutil.copytree(tmp_path / "before" / "threads", tmp_path / "killed" / "threads")
    await check_recovered(tmp_path / "killed", demo, workspace, body, sink.session)


async def check_recovered(
    state: Path, demo: DemoRuntime, workspace: Path, body: dict[str, Any], session: dict[str, Any]
) -> None:
    """A service started on ``state`` settles the dead turn before the
    thread's next turn: its task cancelled on the runtime, its session found."""
    task_id, session_id = session["taskId"], session["sessionId"]
    assert demo.state.tasks[task_id].cancelable, "the turn still runs on the runtime"
    service, client = await start_service(state, demo.url)
    try:
        again = {**body, "runId": "run-after-the-cut",
                 "messages": [{"id": "m-after", "role": "user", "content": "hello"}]}
        ticket = await service.admit(parse_run_input(again), canonical_digest(again), "en", str(workspace))
        await service.run(ticket, None)
    finally:
        await service.shutdown()
        await client.close()
    assert demo.state.cancel_calls[task_id] == 1, "the dead turn's task was left running on the runtime"
    assert not demo.state.tasks[task_id].cancelable
    record = stored(state)
    assert record.runs[body["runId"]].outcome == "EXECUTION_LOST"
    assert record.session_id == session_id, "the session the history reads was not found again"


async def test_the_end_of_the_turn_makes_the_binding_durable(
    tmp_path: Path, demo: DemoRuntime, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cut = PowerCut(monkeypatch)
    service, client = await start_service(tmp_path / "state", demo.url)
    try:
        body = run_body(thread_id="t-whole", text="firehose 5", cwd=str(workspace))
        ticket = await service.admit(parse_run_input(body), canonical_digest(body), "en", str(workspace))
        await service.run(ticket, None)
    finally:
        await service.shutdown()
        await client.close()
    cut.restore(tmp_path / "state" / "threads", tmp_path / "image" / "threads")
    image, kept = stored(tmp_path / "image"), stored(tmp_path / "state")
    assert image.state is ThreadState.IDLE and image.task_id is not None
    assert image == kept


async def test_an_unsynced_save_syncs_its_bytes_not_its_rename_and_the_next_save_carries_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cut = PowerCut(monkeypatch)
    fsyncs = count_fsyncs(monkeypatch)
    store = FileThreadStore(tmp_path / "state")
    await store.start()
    try:
        record = ThreadRecord(thread_id="t", context_id="c", cwd="/w")
        (await store.save(record)).stamp(record)
        assert len(fsyncs) == 2, "a synced save: its temp file and its folder"
        record.task_id = "task-1"
        (await store.save(record, durable=False)).stamp(record)
        assert len(fsyncs) == 3, "an unsynced save: its temp file only"
        assert await store.load("t") == record, "the process (and a kill -9) sees it at once"
        cut.restore(tmp_path / "state" / "threads", tmp_path / "cut-1")
        (image,) = (tmp_path / "cut-1").iterdir()
        assert record_from_json(image.read_bytes()).version == 1, "a power cut keeps the version before, whole"
        record.session_id = "session-1"
        (await store.save(record)).stamp(record)
        assert len(fsyncs) == 5
        cut.restore(tmp_path / "state" / "threads", tmp_path / "cut-2")
        (image,) = (tmp_path / "cut-2").iterdir()
        assert record_from_json(image.read_bytes()) == record
    finally:
        await store.close()
