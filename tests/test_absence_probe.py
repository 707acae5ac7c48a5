"""A new thread's admission reads no record file: the request's workspace
trip looks for it (store/probe.py). The look is taken before the thread is
claimed, so the store trusts a "no file" only when no write could have made
one since: a thread written meanwhile is read, never taken for a new one."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from aguiadapter.errors import AdapterError, ErrorCode
from aguiadapter.store.file.store import FileThreadStore
from aguiadapter.threads.record import ThreadRecord
from aguiadapter.workspace import resolve_workspace


def _record(thread_id: str) -> ThreadRecord:
    return ThreadRecord(thread_id=thread_id, context_id="c", cwd="/w")


async def test_a_look_proves_a_new_thread_until_a_write_begins(tmp_path: Path) -> None:
    store = FileThreadStore(tmp_path)
    await store.start()
    try:
        probe = store.absence_probe("t")
        assert probe is not None
        probe.look()
        assert store.still_absent(probe)
        (await store.save(_record("t"))).stamp(_record("t"))
        assert not store.still_absent(probe), "the thread written after the look must be read"
        later = store.absence_probe("t")
        assert later is not None
        later.look()
        assert not later.absent and not store.still_absent(later)
    finally:
        await store.close()


async def test_no_look_taken_during_a_write_proves_its_thread_new(tmp_path: Path) -> None:
    store = FileThreadStore(tmp_path)
    await store.start()
    try:
        saving = asyncio.create_task(store.save(_record("t")))
        looks = []
        while not saving.done():  # a look at every turn of the loop while t is being written
            probe = store.absence_probe("t")
            if probe is not None:
                probe.look()
                looks.append(probe)
            await asyncio.sleep(0)
        await saving
        assert looks, "the first look came before the write began"
        assert not any(store.still_absent(probe) for probe in looks), "t's file may appear while a look runs"
    finally:
        await store.close()


async def test_a_cancelled_write_stops_looks_until_a_later_write_came_back(tmp_path: Path) -> None:
    store = FileThreadStore(tmp_path)
    await store.start()
    try:
        saving = asyncio.create_task(store.save(_record("t")))
        deadline = asyncio.get_running_loop().time() + 30
        # Until t's write is with the writer thread (its marker is looked up first, on the executor).
        while not store._writes_running and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0)
        assert not saving.done()
        saving.cancel()
        await asyncio.gather(saving, return_exceptions=True)
        # The writer thread may still be making t's file: no look may say it is missing.
        assert store.absence_probe("t") is None
        await store.save(_record("u"))  # the writer answers in order: t's write is done
        probe = store.absence_probe("t")
        assert probe is not None
        probe.look()
        assert not store.still_absent(probe)
    finally:
        await store.close()


async def test_the_look_rides_only_on_a_workspace_that_passed(tmp_path: Path) -> None:
    looks: list[str] = []
    assert await resolve_workspace(str(tmp_path), [str(tmp_path)], lambda: looks.append("looked")) == str(tmp_path)
    assert looks == ["looked"]
    with pytest.raises(AdapterError) as refused:
        await resolve_workspace("/", [str(tmp_path)], lambda: looks.append("looked"))
    assert refused.value.code is ErrorCode.INVALID_INPUT and looks == ["looked"]
