"""Durable replacements in groups: each write is whole and in place when its await returns,
and the file store under fsync reaches the disk only on threads of its own (its executor and
its writer; under process its writes are made on the loop: tests/test_inline_writes.py)."""

from __future__ import annotations

import asyncio
import os
import stat
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import attrs
import pytest

from aguiadapter.store.file.durable import GroupWriter
from aguiadapter.store.file.store import FileThreadStore
from aguiadapter.threads.listing import owner_of
from aguiadapter.threads.record import ThreadRecord
from aguiadapter.store.contract import PersistenceError


@pytest.fixture
async def writer() -> AsyncIterator[GroupWriter]:
    executor = ThreadPoolExecutor(4)
    writer = GroupWriter(executor)
    try:
        yield writer
    finally:
        writer.close()
        executor.shutdown()


async def test_writes_that_wait_together_all_land_whole_and_private(tmp_path: Path, writer: GroupWriter) -> None:
    paths = [tmp_path / f"f{n}.json" for n in range(200)]

    async def one(n: int) -> None:
        await writer.replace(str(paths[n].with_suffix(".tmp")), str(paths[n]), f"{n}".encode() * 100)
        # In place, whole, when the await returns.
        assert paths[n].read_bytes() == f"{n}".encode() * 100

    await asyncio.gather(*(one(n) for n in range(200)))
    assert all(stat.S_IMODE(path.stat().st_mode) == 0o600 for path in paths)
    assert not list(tmp_path.glob("*.tmp"))


async def test_a_marker_is_made_with_its_write_and_never_without_it(tmp_path: Path, writer: GroupWriter) -> None:
    record, marker = tmp_path / "record", tmp_path / "marker"
    # A write that fails takes its marker with it: a marker never names a record that is not there.
    lost = tmp_path / "no-such-folder" / "record"
    with pytest.raises(FileNotFoundError):
        await writer.replace(f"{lost}.tmp", str(lost), b"r1", str(marker))
    assert not marker.exists()
    assert await writer.replace(f"{record}.tmp", str(record), b"r2", str(marker)) is None
    assert record.read_bytes() == b"r2" and marker.exists() and stat.S_IMODE(marker.stat().st_mode) == 0o600
    # A marker that fails does not fail its write: the caller is told.
    nowhere = tmp_path / "no-such-folder" / "marker"
    failed = await writer.replace(f"{record}.tmp", str(record), b"r3", str(nowhere))
    assert isinstance(failed, FileNotFoundError) and record.read_bytes() == b"r3"
    assert not list(tmp_path.glob("*.tmp"))


async def test_a_write_that_fails_fails_alone(tmp_path: Path, writer: GroupWriter) -> None:
    good = [tmp_path / f"ok{n}" for n in range(5)]
    missing = tmp_path / "no-such-folder" / "x"
    results = await asyncio.gather(
        *(writer.replace(f"{path}.tmp", str(path), b"data") for path in good),
        writer.replace(f"{missing}.tmp", str(missing), b"data"),
        return_exceptions=True,
    )
    assert results[:5] == [None] * 5 and isinstance(results[5], FileNotFoundError)
    assert all(path.read_bytes() == b"data" for path in good)


async def test_the_same_file_written_twice_in_a_group_keeps_the_later_write(
    tmp_path: Path, writer: GroupWriter
) -> None:
    path = tmp_path / "same"
    await asyncio.gather(*(writer.replace(f"{path}.{n}.tmp", str(path), f"v{n}".encode()) for n in range(10)))
    assert path.read_bytes() == b"v9"


def store_threads() -> set[threading.Thread]:
    return {thread for thread in threading.enumerate() if thread.name.startswith(("aguiadapter-store", "aguiadapter-writer"))}


async def test_the_file_store_reaches_the_disk_only_on_its_own_threads(tmp_path: Path) -> None:
    before = set(threading.enumerate())
    store = FileThreadStore(tmp_path / "state", retention_days=1)
    await store.start()
    records = [ThreadRecord(thread_id=f"t-{n}", context_id="ctx", cwd="/w") for n in range(20)]
    for record, saved in zip(records, await asyncio.gather(*(store.save(record) for record in records)), strict=True):
        saved.stamp(record)
    await store.set_deadline("t-1", 1.0)
    assert [await store.load(record.thread_id) for record in records] == records
    assert len((await store.list_threads(owner_of(records[0]), None, 50)).threads) == 20
    assert await store.retention.sweep() == 0
    started = set(threading.enumerate()) - before
    assert started and started <= store_threads(), {thread.name for thread in started}
    await store.close()


async def test_a_closed_store_refuses_writes_and_its_threads_end(tmp_path: Path) -> None:
    before = set(threading.enumerate())
    store = FileThreadStore(tmp_path / "state")
    await store.start()
    record = ThreadRecord(thread_id="t-1", context_id="ctx", cwd="/w")
    (await store.save(record)).stamp(record)
    saved = attrs.evolve(record)
    threads = set(threading.enumerate()) - before
    assert threads and threads <= store_threads()
    await store.close()
    for thread in threads:
        await asyncio.to_thread(thread.join, 5)
    assert not any(thread.is_alive() for thread in threads)
    with pytest.raises(PersistenceError):
        await store.save(record)
    assert (await FileThreadStore(tmp_path / "state").load("t-1")) == saved
    assert not [name for name in os.listdir(store.threads_dir) if name.endswith(".tmp")]


async def test_a_write_whose_caller_was_cancelled_still_lands_before_the_next_one(tmp_path: Path, writer: GroupWriter) -> None:
    path = tmp_path / "same"
    first = asyncio.create_task(writer.replace(f"{path}.1.tmp", str(path), b"v1"))
    await asyncio.sleep(0)  # on its way
    first.cancel()
    await writer.replace(f"{path}.2.tmp", str(path), b"v2")
    assert path.read_bytes() == b"v2", "an older write landed over a newer one"
