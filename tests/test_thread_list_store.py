"""The file store's thread list: per-owner entries written with each record, never a scan at start."""

from __future__ import annotations

import builtins
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from aguiadapter.store.file import index as file_index
from aguiadapter.store.file.store import FileThreadStore
from aguiadapter.threads.listing import ListCursor, SortedSummaries, ThreadPage, list_owner, owner_id
from aguiadapter.threads.record import ThreadRecord, ThreadState, record_from_json, record_to_json, thread_key

ALICE = list_owner("alice", None)


def record(thread_id: str, principal: str | None = "alice", user_id: str | None = None, **fields: Any) -> ThreadRecord:
    return ThreadRecord(thread_id=thread_id, context_id=f"ctx-{thread_id}", cwd="/w", principal=principal,
                        user_id=user_id if user_id is not None else principal, namespaced=principal is not None,
                        **fields)


async def walk(store: FileThreadStore, owner: str, limit: int, **kw: Any) -> list[ThreadPage]:
    pages: list[ThreadPage] = []
    cursor: ListCursor | None = None
    while True:
        page = await store.list_threads(owner, cursor, limit, **kw)
        pages.append(page)
        if page.next_cursor is None:
            return pages
        cursor = page.next_cursor


def ids(pages: list[ThreadPage]) -> list[str]:
    return [summary.thread_id for page in pages for summary in page.threads]


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    opened = FileThreadStore(tmp_path / "state", retention_days=0)
    await opened.start()
    try:
        yield opened
    finally:
        await opened.close()


async def test_paging_walks_every_thread_once_newest_first_and_only_the_owners(store: FileThreadStore) -> None:
    for n in range(23):
        await store.save(record(f"t-{n:02d}"))
    await store.save(record("t-05", principal="bob"))  # bob's own t-05, saved last
    await store.save(record("open-1", principal=None))
    pages = await walk(store, ALICE, 5)
    assert [len(page.threads) for page in pages] == [5, 5, 5, 5, 3]
    assert ids(pages) == [f"t-{n:02d}" for n in reversed(range(23))]
    assert ids(await walk(store, list_owner("bob", None), 50)) == ["t-05"]
    assert ids(await walk(store, list_owner(None, None), 50)) == ["open-1"]


async def test_a_thread_saved_during_a_walk_moves_to_the_front_and_is_not_shown_twice(store: FileThreadStore) -> None:
    saved = {}
    for n in range(10):
        saved[n] = record(f"t-{n}")
        await store.save(saved[n])
    first = await store.list_threads(ALICE, None, 4)
    assert [s.thread_id for s in first.threads] == ["t-9", "t-8", "t-7", "t-6"]
    await store.save(saved[8])  # already seen: now newest
    await store.save(saved[2])  # not seen yet: now newest too
    rest: list[ThreadPage] = []
    cursor = first.next_cursor
    while cursor is not None:
        page = await store.list_threads(ALICE, cursor, 4)
        rest.append(page)
        cursor = page.next_cursor
    assert ids(rest) == ["t-5", "t-4", "t-3", "t-1", "t-0"]
    assert ids(await walk(store, ALICE, 4))[:2] == ["t-2", "t-8"]


async def test_the_list_shows_state_pending_interrupts_active_run_and_last_error(store: FileThreadStore) -> None:
    running = record("t-run", state=ThreadState.RUNNING, active_run_id="run-1")
    failed = record("t-failed", state=ThreadState.TERMINAL, last_error="EXECUTION_LOST", active_run_id="run-0")
    for item in (running, failed):
        (await store.save(item)).stamp(item)
    (newest, older) = (await store.list_threads(ALICE, None, 10)).threads
    assert (newest.thread_id, newest.state, newest.last_error, newest.active_run_id) == (
        "t-failed", ThreadState.TERMINAL, "EXECUTION_LOST", None)
    assert (older.state, older.active_run_id, older.pending_interrupts) == (ThreadState.RUNNING, "run-1", 0)
    assert older.created_at == running.created_at and older.updated_at == running.updated_at
    assert newest.key == thread_key("t-failed", "alice")


async def test_a_state_filter_keeps_paging_until_the_end(store: FileThreadStore) -> None:
    for n in range(30):
        state = ThreadState.TERMINAL if n % 3 == 0 else ThreadState.IDLE
        await store.save(record(f"t-{n:02d}", state=state))
    pages = await walk(store, ALICE, 4, states=frozenset({ThreadState.TERMINAL}))
    assert ids(pages) == [f"t-{n:02d}" for n in reversed(range(0, 30, 3))]
    assert all(s.state is ThreadState.TERMINAL for page in pages for s in page.threads)


async def test_the_list_survives_a_restart_and_is_read_per_owner(tmp_path: Path, store: FileThreadStore) -> None:
    saved = [record(f"t-{n}") for n in range(3)]
    for item in saved:
        await store.save(item)
    # A later save moves the thread to the front and changes what is listed, after a restart too.
    saved[0].state = ThreadState.TERMINAL
    saved[0].last_error = "EXECUTION_LOST"
    await store.save(saved[0])
    await store.close()
    reopened = FileThreadStore(tmp_path / "state", retention_days=0)
    await reopened.start()
    try:
        pages = await walk(reopened, ALICE, 2)
        assert ids(pages) == ["t-0", "t-2", "t-1"]
        first = pages[0].threads[0]
        assert (first.state, first.last_error) == (ThreadState.TERMINAL, "EXECUTION_LOST")
    finally:
        await reopened.close()


async def test_opening_reads_no_record_and_lists_only_what_has_an_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A folder of 300 records as a version without the list left them (no index).
    state = tmp_path / "state"
    threads = state / "threads"
    threads.mkdir(parents=True)
    writer = FileThreadStore(state)
    for n in range(300):
        old = record(f"old-{n}")
        old.updated_at = time.time()
        writer.path_for(old.key).write_bytes(record_to_json(old))
    touched: list[str] = []
    real_open, real_listdir, real_scandir = builtins.open, os.listdir, os.scandir

    def spy(real: Any) -> Any:
        def wrapped(path: Any = ".", *args: Any, **kwargs: Any) -> Any:
            if str(threads) in str(path):
                touched.append(str(path))
            return real(path, *args, **kwargs)
        return wrapped

    monkeypatch.setattr(builtins, "open", spy(real_open))
    monkeypatch.setattr(os, "listdir", spy(real_listdir))
    monkeypatch.setattr(os, "scandir", spy(real_scandir))
    store = FileThreadStore(state, retention_days=0)
    await store.start()
    try:
        assert (await store.list_threads(ALICE, None, 50)).threads == []
        assert touched == [], "neither opening nor listing reads the thread records"
        # A thread made before the list is listed once it is used (saved) again.
        used = await store.load(thread_key("old-7", "alice"))
        assert used is not None
        await store.save(used)
        assert ids(await walk(store, ALICE, 50)) == ["old-7"]
    finally:
        await store.close()


async def test_a_record_without_a_creation_time_loads_and_lists_it_as_unknown(store: FileThreadStore) -> None:
    raw = json.loads(record_to_json(record("t-old")))
    del raw["created_at"]
    old = record_from_json(json.dumps(raw).encode())
    assert old.created_at is None
    await store.save(old)
    (listed,) = (await store.list_threads(ALICE, None, 5)).threads
    assert listed.created_at is None and listed.updated_at > 0
    assert record("t-new").created_at is not None


async def test_retention_removes_the_entry_with_the_record_and_entries_whose_record_went(tmp_path: Path) -> None:
    state = tmp_path / "state"
    store = FileThreadStore(state, retention_days=0)
    await store.start()
    try:
        for name in ("t-stale", "t-fresh", "t-by-hand"):
            await store.save(record(name))
        assert len(ids(await walk(store, ALICE, 10))) == 3
        months_ago = time.time() - 90 * 86400
        os.utime(store.path_for(thread_key("t-stale", "alice")), (months_ago, months_ago))
        os.remove(store.path_for(thread_key("t-by-hand", "alice")))  # an operator deleted it
        store.retention.retention_seconds = 86400.0
        assert await store.retention.sweep() == 1
        assert ids(await walk(store, ALICE, 10)) == ["t-fresh"]
        entries = [path.name for path in (state / "index").rglob("*") if path.is_file()]
        assert entries == [file_index.marker_name(store.path_for(thread_key("t-fresh", "alice")).name)]
    finally:
        await store.close()


async def test_no_marker_promises_json_and_a_folder_marked_by_an_earlier_version_still_lists(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    store = FileThreadStore(state, retention_days=0)
    await store.start()
    for name in ("t-a", "t-b", "t-c"):
        await store.save(record(name))
    await store.close()
    markers = [path for path in (state / "index").rglob("*") if path.is_file()]
    assert len(markers) == 3
    # An operator's jq over the state folder reads every *.json: no marker is one.
    assert not [path for path in state.rglob("*.json") if path.stat().st_size == 0]
    # The folder as an earlier version left it: each marker bore its record's name.
    for marker in markers:
        marker.rename(marker.with_name(marker.name.removesuffix(".mark") + ".json"))
    upgraded = FileThreadStore(state, retention_days=0)
    await upgraded.start()
    try:
        assert sorted(ids(await walk(upgraded, ALICE, 10))) == ["t-a", "t-b", "t-c"]
        # A save marks it anew; the thread is listed once all the same, after a restart too.
        touched = await upgraded.load(thread_key("t-b", "alice"))
        assert touched is not None
        await upgraded.save(touched)
        assert ids(await walk(upgraded, ALICE, 10))[0] == "t-b"
    finally:
        await upgraded.close()
    again = FileThreadStore(state, retention_days=0)
    await again.start()
    try:
        assert sorted(ids(await walk(again, ALICE, 10))) == ["t-a", "t-b", "t-c"]
        # The retention sweep gives the earlier version's markers the new name.
        again.retention.retention_seconds = 86400.0
        await again.retention.sweep()
        left = sorted(path.name for path in (state / "index").rglob("*") if path.is_file())
        assert len(left) == 3 and all(name.endswith(".mark") for name in left)
        assert sorted(ids(await walk(again, ALICE, 10))) == ["t-a", "t-b", "t-c"]
    finally:
        await again.close()


async def test_a_large_owner_keeps_only_its_newest_threads_in_memory_and_still_pages_through_all(
    store: FileThreadStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_index, "MAX_KEPT_PER_OWNER", 5)
    for n in range(23):
        await store.save(record(f"t-{n:02d}", state=ThreadState.TERMINAL if n % 3 == 0 else ThreadState.IDLE))
    newest_first = [f"t-{n:02d}" for n in reversed(range(23))]
    assert ids(await walk(store, ALICE, 3)) == newest_first
    assert ids(await walk(store, ALICE, 200)) == newest_first
    terminal = await walk(store, ALICE, 2, states=frozenset({ThreadState.TERMINAL}))
    assert ids(terminal) == [f"t-{n:02d}" for n in reversed(range(0, 23, 3))]
    assert len(store.index._kept[owner_id(ALICE)]) == 5, "the newest 5, not 23"
    # An old thread saved again during a walk moves to the front: never shown twice.
    first = await store.list_threads(ALICE, None, 4)
    older = await store.load(thread_key("t-01", "alice"))
    assert older is not None
    await store.save(older)
    rest = await walk_from(store, first.next_cursor)
    assert ids([first]) + rest == newest_first[:4] + [name for name in newest_first[4:] if name != "t-01"]
    assert ids(await walk(store, ALICE, 7))[0] == "t-01"


async def walk_from(store: FileThreadStore, cursor: ListCursor | None) -> list[str]:
    found: list[str] = []
    while cursor is not None:
        page = await store.list_threads(ALICE, cursor, 4)
        found += [summary.thread_id for summary in page.threads]
        cursor = page.next_cursor
    return found


async def test_listing_made_up_owners_evicts_no_real_list(
    store: FileThreadStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(3):
        await store.save(record(f"t-{n}"))
    assert len(ids(await walk(store, ALICE, 50))) == 3
    reads: list[str] = []
    real_open = builtins.open

    def counting(path: Any, *args: Any, **kwargs: Any) -> Any:
        if "threads" in str(path):
            reads.append(str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting)
    for n in range(file_index.MAX_OWNERS_KEPT + 50):  # ?userId=<random>, again and again
        assert (await store.list_threads(list_owner(None, f"nobody-{n}"), None, 50)).threads == []
    assert len(ids(await walk(store, ALICE, 50))) == 3
    assert reads == [], "alice's list was still kept: none of her records read again"


async def test_an_owners_list_is_read_and_sorted_off_the_event_loop(
    store: FileThreadStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(30):
        await store.save(record(f"t-{n:02d}"))
    await store.close()
    reopened = FileThreadStore(store.state_dir, retention_days=0)
    await reopened.start()
    loop_thread = threading.get_ident()
    sorted_on: list[int] = []

    class Spied(SortedSummaries):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            sorted_on.append(threading.get_ident())
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(file_index, "SortedSummaries", Spied)
    try:
        assert len(ids(await walk(reopened, ALICE, 7))) == 30
    finally:
        await reopened.close()
    assert sorted_on and loop_thread not in sorted_on
