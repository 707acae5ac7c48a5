"""Under ``--durability process`` the file store makes its writes on the event loop (issue 35):
no trip to the writer thread and back, and each write still lands whole or fails alone, its
marker and its run-history append as before."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.store.contract import PersistenceError
from aguiadapter.store.file.store import FileThreadStore
from aguiadapter.store.run_history import SPILL_AT
from aguiadapter.threads.listing import owner_of
from aguiadapter.threads.record import RunEntry, ThreadRecord
from tests.support.adapter import run_body, started


def renames_in(folder: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The name of the thread that made each rename into ``folder`` from now on."""
    threads: list[str] = []
    real = os.replace

    def watched(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        if os.path.dirname(os.path.abspath(dst)) == str(folder):
            threads.append(threading.current_thread().name)
        real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", watched)
    return threads


def fail_open(monkeypatch: pytest.MonkeyPatch, failing: Callable[[str], bool]) -> list[tuple[str, str]]:
    """``os.open`` fails with ENOSPC for the paths ``failing`` picks (returned as they are
    tried, with the name of the thread that tried)."""
    tried: list[tuple[str, str]] = []
    real = os.open

    def faulty(path: Any, *args: Any, **kwargs: Any) -> int:
        if isinstance(path, str) and failing(path):
            tried.append((path, threading.current_thread().name))
            raise OSError(errno.ENOSPC, "No space left on device", path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", faulty)
    return tried


def writer_threads() -> set[threading.Thread]:
    return {thread for thread in threading.enumerate() if thread.name == "aguiadapter-writer"}


def temp_files(folder: Path) -> list[str]:
    return [name for name in os.listdir(folder) if name.endswith(".tmp")]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[FileThreadStore]:
    store = FileThreadStore(tmp_path / "state", durability="process")
    await store.start()
    try:
        yield store
    finally:
        await store.close()


@pytest.mark.parametrize(("durability", "on_loop"), [("process", True), ("fsync", False)])
async def test_a_short_run_in_process_mode_writes_its_record_on_the_loop_without_the_writer_thread(
    tmp_path: Path, demo: DemoRuntime, monkeypatch: pytest.MonkeyPatch, durability: str, on_loop: bool
) -> None:
    cwd = tmp_path / "workspaces" / "ws"
    cwd.mkdir(parents=True)
    before = writer_threads()
    loop_thread = threading.current_thread().name
    renames = renames_in(tmp_path / "state" / "threads", monkeypatch)
    async with started(tmp_path, demo.url, durability=durability) as adapter:
        response = await adapter.run(run_body(thread_id="t-short", text="firehose 5", cwd=str(cwd)))
        assert response.status == 200 and response.events()[-1]["type"] == "RUN_FINISHED"
        started_writers = writer_threads() - before
    # The run's start and end at least (the binding may ride on one of them).
    assert len(renames) >= 2
    if on_loop:
        assert set(renames) == {loop_thread} and not started_writers, (renames, started_writers)
    else:  # fsync: a durable write still goes through the writer thread (it groups folder fsyncs)
        assert set(renames) == {"aguiadapter-writer"} and started_writers


async def test_a_failed_write_on_the_loop_fails_alone_and_leaves_the_record_whole(
    store: FileThreadStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = {key: ThreadRecord(thread_id=key, context_id="c", cwd="/w") for key in ("t-a", "t-b")}
    for record in records.values():
        (await store.save(record)).stamp(record)
    kept = (await store.load("t-a"))
    target = os.path.basename(store.path_for("t-a"))
    renames = renames_in(store.threads_dir, monkeypatch)
    # The temp file is made, then its bytes cannot be written: the disk is full.
    temps: set[int] = set()
    failed: list[int] = []
    real_open, real_write = os.open, os.write

    def opened(path: Any, *args: Any, **kwargs: Any) -> int:
        fd = real_open(path, *args, **kwargs)
        if isinstance(path, str) and os.path.basename(path).startswith(f".{target}."):
            temps.add(fd)
        return fd

    def full(fd: int, data: Any) -> int:
        if fd in temps:
            temps.discard(fd)  # closed next: the number may serve another file
            failed.append(fd)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "open", opened)
    monkeypatch.setattr(os, "write", full)
    records["t-a"].context_id = records["t-b"].context_id = "c2"
    results = await asyncio.gather(*(store.save(record) for record in records.values()), return_exceptions=True)
    assert isinstance(results[0], PersistenceError) and "No space left" in str(results[0])
    assert not isinstance(results[1], BaseException)
    results[1].stamp(records["t-b"])
    assert failed, "the temp file was made"
    assert await store.load("t-a") == kept, "the record is the one before the failed write, whole"
    assert await store.load("t-b") == records["t-b"]
    assert not temp_files(store.threads_dir)
    assert renames == [threading.current_thread().name], "the write that landed was made on the loop"
    monkeypatch.setattr(os, "write", real_write)
    (await store.save(records["t-a"])).stamp(records["t-a"])
    assert await store.load("t-a") == records["t-a"]


async def test_a_failed_rename_on_the_loop_removes_its_temp_file(
    store: FileThreadStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = ThreadRecord(thread_id="t-a", context_id="c", cwd="/w")
    (await store.save(record)).stamp(record)
    kept = await store.load("t-a")
    target = str(store.path_for("t-a"))
    real = os.replace

    def refused(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        if str(dst) == target:
            raise OSError(errno.EROFS, "Read-only file system", str(dst))
        real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", refused)
    record.context_id = "c2"
    with pytest.raises(PersistenceError, match="Read-only file system"):
        await store.save(record)
    assert await store.load("t-a") == kept and not temp_files(store.threads_dir)


async def test_a_marker_that_fails_on_the_loop_is_reported_and_made_by_the_next_save(
    store: FileThreadStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    record = ThreadRecord(thread_id="t-m", context_id="c", cwd="/w")
    tried = fail_open(monkeypatch, lambda path: path.endswith(".mark"))
    with caplog.at_level(logging.ERROR, logger="aguiadapter.store.file.store"):
        (await store.save(record)).stamp(record)
    assert [thread for _, thread in tried] == [threading.current_thread().name], "made on the loop"
    assert "not listed until its next save" in caplog.text
    assert await store.load("t-m") == record, "the write landed all the same"
    assert not temp_files(store.threads_dir)
    monkeypatch.undo()
    (await store.save(record)).stamp(record)
    assert os.path.exists(tried[0][0])
    page = await store.list_threads(owner_of(record), None, 10)
    assert [summary.thread_id for summary in page.threads] == ["t-m"]


async def test_a_run_history_append_that_fails_on_the_loop_fails_the_write(
    store: FileThreadStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = ThreadRecord(thread_id="t-h", context_id="c", cwd="/w")
    record.runs["r-first"] = RunEntry("d-first", "success")
    (await store.save(record)).stamp(record)
    kept = await store.load("t-h")
    for number in range(SPILL_AT):  # the next save moves runs out to the history
        record.runs[f"r-{number}"] = RunEntry(f"d-{number}", "success")
    tried = fail_open(monkeypatch, lambda path: path.endswith(".runs"))
    with pytest.raises(PersistenceError, match="No space left"):
        await store.save(record)
    assert [thread for _, thread in tried] == [threading.current_thread().name], "tried on the loop"
    assert await store.load("t-h") == kept, "the record still holds its runs: none is lost"
    assert not temp_files(store.threads_dir)
    monkeypatch.undo()
    (await store.save(record)).stamp(record)
    assert await store.earlier_run("t-h", "r-first") == RunEntry("d-first", "success")


async def test_a_closed_process_mode_store_refuses_writes(tmp_path: Path) -> None:
    store = FileThreadStore(tmp_path / "state", durability="process")
    await store.start()
    record = ThreadRecord(thread_id="t-1", context_id="ctx", cwd="/w")
    (await store.save(record)).stamp(record)
    await store.close()
    changed = ThreadRecord(thread_id="t-1", context_id="other", cwd="/w")
    with pytest.raises(PersistenceError, match="closed"):
        await store.save(changed)
    assert await FileThreadStore(tmp_path / "state").load("t-1") == record
