"""A save stamps the stored copy, not the record it is handed: the caller
(the run's shell) applies version and write time once the write succeeded."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from aguiadapter.runs.shell import ThreadShell
from aguiadapter.service.expiry import ExpiryScheduler
from aguiadapter.service.leases import LeaseKeeper
from aguiadapter.store.contract import PersistenceError
from aguiadapter.store.file.store import FileThreadStore
from aguiadapter.threads import machine as tm
from aguiadapter.threads.record import AppliedAnswer, RunEntry, ThreadRecord, ThreadState


async def test_the_file_store_returns_the_stamp_and_leaves_the_record_alone(tmp_path: Path) -> None:
    store = FileThreadStore(tmp_path / "state", retention_days=0)
    await store.start()
    try:
        record = ThreadRecord(thread_id="t-1", context_id="ctx", cwd="/w")
        handed = attrs.evolve(record)
        first = await store.save(record)
        assert record == handed, "the record handed in is not changed"
        assert first.version == 1 and first.updated_at > 0
        stored = await store.load("t-1")
        assert stored is not None and (stored.version, stored.updated_at) == (first.version, first.updated_at)
        first.stamp(record)
        assert stored == record
        second = await store.save(record)
        assert second.version == 2 and second.updated_at >= first.updated_at
    finally:
        await store.close()


async def test_a_failed_save_leaves_the_record_as_it_was(tmp_path: Path) -> None:
    store = FileThreadStore(tmp_path / "state", retention_days=0)
    await store.start()
    record = ThreadRecord(thread_id="t-1", context_id="ctx", cwd="/w")
    (await store.save(record)).stamp(record)
    await store.close()
    kept = attrs.evolve(record)
    with pytest.raises(PersistenceError):
        await store.save(record)
    assert record == kept


async def never_expires(thread_id: str) -> None:
    raise AssertionError("nothing expires here")


async def test_the_shell_applies_the_stamp_of_each_write_it_committed(tmp_path: Path) -> None:
    store = FileThreadStore(tmp_path / "state", retention_days=0)
    await store.start()
    try:
        claim = await store.claim("t", "test")
        assert claim is not None
        record = ThreadRecord("t", "ctx", "/w", state=ThreadState.RUNNING, active_run_id="r1", task_id="task")
        record.remember_run("r1", "digest")
        shell = ThreadShell(store, ExpiryScheduler(store, never_expires), claim, record, LeaseKeeper(store))
        await shell.apply(tm.BindTask("task-2", "session-2"))
        await shell.apply(tm.Finish([]))
        stored = await store.load("t")
        assert stored is not None and stored.version == 2
        # The live record is the stored one: its next save is the next version, as on Redis.
        assert shell.record is record and record == stored
        await store.release(claim)
    finally:
        await store.close()


def test_entries_of_a_record_are_replaced_never_changed() -> None:
    # The shell's working copy shares these with the live record.
    for entry in (RunEntry("digest"), AppliedAnswer("digest")):
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            entry.digest = "other"  # type: ignore[misc]
