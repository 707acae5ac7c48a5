"""Durable replacements in groups: each write is whole and in place when its await returns."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import attrs
import pytest

from aguiadapter.threads.durable import GroupWriter
from aguiadapter.threads.file_store import FileThreadStore
from aguiadapter.threads.record import ThreadRecord
from aguiadapter.threads.store import PersistenceError


async def test_writes_that_wait_together_all_land_whole_and_private(tmp_path: Path) -> None:
    writer = GroupWriter()
    try:
        paths = [tmp_path / f"f{n}.json" for n in range(200)]

        async def one(n: int) -> None:
            await writer.replace(str(paths[n].with_suffix(".tmp")), str(paths[n]), f"{n}".encode() * 100)
            # In place, whole, when the await returns.
            assert paths[n].read_bytes() == f"{n}".encode() * 100

        await asyncio.gather(*(one(n) for n in range(200)))
        assert all(stat.S_IMODE(path.stat().st_mode) == 0o600 for path in paths)
        assert not list(tmp_path.glob("*.tmp"))
    finally:
        writer.close()


async def test_a_write_that_fails_fails_alone(tmp_path: Path) -> None:
    writer = GroupWriter()
    try:
        good = [tmp_path / f"ok{n}" for n in range(5)]
        missing = tmp_path / "no-such-folder" / "x"
        results = await asyncio.gather(
            *(writer.replace(f"{path}.tmp", str(path), b"data") for path in good),
            writer.replace(f"{missing}.tmp", str(missing), b"data"),
            return_exceptions=True,
        )
        assert results[:5] == [None] * 5 and isinstance(results[5], FileNotFoundError)
        assert all(path.read_bytes() == b"data" for path in good)
    finally:
        writer.close()


async def test_the_same_file_written_twice_in_a_group_keeps_the_later_write(tmp_path: Path) -> None:
    writer = GroupWriter()
    try:
        path = tmp_path / "same"
        await asyncio.gather(*(writer.replace(f"{path}.{n}.tmp", str(path), f"v{n}".encode()) for n in range(10)))
        assert path.read_bytes() == b"v9"
    finally:
        writer.close()


async def test_a_closed_store_refuses_writes_and_its_thread_ends(tmp_path: Path) -> None:
    store = FileThreadStore(tmp_path / "state")
    await store.start()
    record = ThreadRecord(thread_id="t-1", context_id="ctx", cwd="/w")
    await store.save(record)
    saved = attrs.evolve(record)
    thread = store._writer._thread
    assert thread is not None and thread.is_alive()
    await store.close()
    await asyncio.to_thread(thread.join, 5)
    assert not thread.is_alive()
    with pytest.raises(PersistenceError):
        await store.save(record)
    assert (await FileThreadStore(tmp_path / "state").load("t-1")) == saved
    assert not [name for name in os.listdir(store.threads_dir) if name.endswith(".tmp")]


async def test_a_write_whose_caller_was_cancelled_still_lands_before_the_next_one(tmp_path: Path) -> None:
    writer = GroupWriter()
    try:
        path = tmp_path / "same"
        first = asyncio.create_task(writer.replace(f"{path}.1.tmp", str(path), b"v1"))
        await asyncio.sleep(0)  # on its way
        first.cancel()
        await writer.replace(f"{path}.2.tmp", str(path), b"v2")
        assert path.read_bytes() == b"v2", "an older write landed over a newer one"
    finally:
        writer.close()
