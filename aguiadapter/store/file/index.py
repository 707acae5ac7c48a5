"""The file store's thread list: a marker file per thread, in a folder per owner.

``<state_dir>/index/<owner>/<slug>-<hash>.mark`` is an empty file that says
the record ``threads/<slug>-<hash>.json`` belongs to ``<owner>`` (32 hex digits of the
SHA-256 of the record's owner, :func:`~.listing.owner_of`). A thread's
marker is made once, by its first save in this process (a follower of the
record's durable write: same group, after the record landed, not synced:
:mod:`.durable`); later saves write nothing more. It is removed with its
record by the retention sweep. What the list shows (state, times, pending
interrupts) is read from the records themselves, never copied, so it cannot
be behind them; a marker that a power cut took is made again by the
thread's next save. Markers of earlier versions bore the record's own name
(``.json``, though empty: an operator's ``jq`` over the folder failed on
them): they are listed as before, and the retention sweep renames them.

Nothing is read at startup. The first list call for an owner reads that
owner's markers and their records (not the other owners' records) and
sorts them once, all of it on the store's executor (never on the event
loop), and keeps the newest :data:`MAX_KEPT_PER_OWNER` in memory; later
saves and removals update the copy in memory, so further pages are
answered from memory. A page past what is kept of a larger owner is read
from the records again (bounded as the first call is, and not kept). Only
so many owners, and so many threads in all, are kept at once (the least
recently listed are forgotten and read again when listed); an owner with
no thread is never kept, so listing made-up owners evicts nobody. Every
file operation is aiofiles on the store's executor, as the store's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections import OrderedDict
from collections.abc import Callable, Collection
from concurrent.futures import Executor
from pathlib import Path

import aiofiles.os

from ...threads.listing import (
    SCAN_BUDGET,
    ListCursor,
    SortedSummaries,
    ThreadPage,
    ThreadSummary,
    owner_id,
    owner_of,
    summary_of,
)
from ...threads.record import ThreadRecord, ThreadState, record_from_json

log = logging.getLogger(__name__)

#: Owners whose list is kept in memory at once.
MAX_OWNERS_KEPT = 256
#: Threads of one owner kept in memory (the newest).
MAX_KEPT_PER_OWNER = 10_000
#: Threads kept in memory for all owners together.
MAX_KEPT = 100_000
#: Threads whose marker this process remembers having seen or made.
MAX_MARKED = 100_000

#: The ending of a marker's name (it promises no JSON: the file is empty).
MARKER_SUFFIX = ".mark"
#: The ending of a record's name, which markers of earlier versions bore too.
_RECORD_SUFFIX = ".json"

_Change = ThreadSummary | str  # a summary to put, or the key of a thread to drop


class FileThreadIndex:
    """Per-owner entry files, and the lists of recently listed owners in memory."""

    def __init__(
        self,
        folder: Path,
        records: Path,
        *,
        file_name: Callable[[str], str],
        executor: Executor,
    ) -> None:
        self.folder = folder
        self.records = records
        self._file_name = file_name
        self._executor = executor
        self._kept: OrderedDict[str, SortedSummaries] = OrderedDict()
        #: Owners being read from disk -> the changes made meanwhile.
        self._reading: dict[str, list[_Change]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._made: set[str] = set()
        #: Keys of the threads whose marker is known to be there.
        self._marked: set[str] = set()

    def entry_path(self, record: ThreadRecord) -> Path:
        """The entry file of a record."""
        return self.folder / owner_id(owner_of(record)) / marker_name(self._file_name(record.key))

    async def marker_of(self, record: ThreadRecord) -> str | None:
        """The marker a save of ``record`` must leave (its owner's folder made,
        once); ``None`` when it is known to be there (a new record: never)."""
        if record.version > 1 and record.key in self._marked:
            return None
        owner = owner_id(owner_of(record))
        if owner not in self._made:
            await _make_private_dir_async(self.folder / owner, executor=self._executor)
            self._made.add(owner)
        return str(self.folder / owner / marker_name(self._file_name(record.key)))

    def saved(self, record: ThreadRecord, marked: bool) -> None:
        """A record was saved, with its marker (``marked``: made just now, or
        known): the lists kept in memory take its summary."""
        if not marked:
            return
        if len(self._marked) >= MAX_MARKED:
            self._marked.clear()  # asked again: one marker write each
        self._marked.add(record.key)
        owner = owner_id(owner_of(record))
        if owner in self._kept or owner in self._reading:
            self._apply(owner, summary_of(record))

    async def removed(self, record: ThreadRecord) -> None:
        """Remove the entry of a record just deleted."""
        self._marked.discard(record.key)
        entry = self.entry_path(record)
        for path in (entry, entry.with_name(self._file_name(record.key))):  # and an earlier version's
            with contextlib.suppress(FileNotFoundError):
                await aiofiles.os.remove(path, executor=self._executor)
        self._apply(owner_id(owner_of(record)), record.key)

    async def page(
        self, owner: str, after: ListCursor | None, limit: int, states: Collection[ThreadState] | None
    ) -> ThreadPage:
        """A page of ``owner``'s list (see :mod:`.listing`)."""
        folder = owner_id(owner)
        kept = await self._list_of(folder)
        oldest = kept.oldest
        if kept.complete or (oldest is not None and (after is None or oldest < after)):
            page = kept.page(after, limit, states)
            if kept.complete or page.next_cursor is not None:
                return page
            # Ran past what is kept: the rest is older than its oldest.
            after, found = oldest, list(page.threads)
            if len(found) == limit:
                return ThreadPage(found, after)
        else:
            found = []
        older = await _older_page_async(self.folder / folder, self.records, after, limit - len(found), states,
                                        executor=self._executor)
        return ThreadPage([*found, *older.threads], older.next_cursor)

    async def drop_orphans(self, record_names: Collection[str], older_than: float) -> int:
        """Remove the entries whose record file is not in ``record_names`` (a
        record deleted by hand), written before ``older_than``; how many.
        An earlier version's marker of a record still there takes the new name."""
        removed = 0
        try:
            owners = await aiofiles.os.listdir(self.folder, executor=self._executor)
        except FileNotFoundError:
            return 0
        names = set(record_names)
        for owner in owners:
            with contextlib.suppress(OSError):
                for name in await aiofiles.os.listdir(self.folder / owner, executor=self._executor):
                    record = record_name_of(name)
                    if record is None:
                        continue
                    path = self.folder / owner / name
                    if record in names:
                        if record == name:
                            await aiofiles.os.replace(path, path.with_name(marker_name(record)),
                                                      executor=self._executor)
                        continue
                    if (await aiofiles.os.stat(path, executor=self._executor)).st_mtime < older_than:
                        await aiofiles.os.remove(path, executor=self._executor)
                        self._kept.pop(owner, None)  # read again when next listed
                        removed += 1
            await asyncio.sleep(0)
        return removed

    def _apply(self, owner: str, change: _Change) -> None:
        if owner in self._reading:
            self._reading[owner].append(change)
        kept = self._kept.get(owner)
        if kept is None:
            return
        if isinstance(change, str):
            kept.drop(change)
        else:
            kept.put(change)

    async def _list_of(self, owner: str) -> SortedSummaries:
        kept = self._kept.get(owner)
        if kept is not None:
            self._kept.move_to_end(owner)
            return kept
        lock = self._locks.setdefault(owner, asyncio.Lock())
        async with lock:
            kept = self._kept.get(owner)
            if kept is not None:
                return kept
            self._reading[owner] = []
            try:
                kept = await _load_owner_async(self.folder / owner, self.records, executor=self._executor)
            finally:
                changes = self._reading.pop(owner)
                self._locks.pop(owner, None)
            for change in changes:
                kept.drop(change) if isinstance(change, str) else kept.put(change)
            if not len(kept) and kept.complete:
                return kept  # nobody's list: not worth a place (a made-up userId)
            self._marked.update(kept.keys())
            self._kept[owner] = kept
            total = sum(len(each) for each in self._kept.values())
            while len(self._kept) > 1 and (len(self._kept) > MAX_OWNERS_KEPT or total > MAX_KEPT):
                total -= len(self._kept.popitem(last=False)[1])
        return kept


def _read_owner(folder: Path, records: Path) -> list[ThreadSummary]:
    """The summaries of the records one owner's folder marks (none when it
    has none; a marker whose record went is left to the retention sweep)."""
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    found = []
    # A thread marked by this version and by an earlier one is listed once.
    for name in {record for record in map(record_name_of, names) if record is not None}:
        try:
            with open(records / name, "rb") as handle:
                found.append(summary_of(record_from_json(handle.read())))
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as exc:
            log.warning("thread %s unreadable, not listed: %s", name, exc)
    return found


def marker_name(record_name: str) -> str:
    """The name of the marker of the record file ``record_name``."""
    return record_name.removesuffix(_RECORD_SUFFIX) + MARKER_SUFFIX


def record_name_of(marker: str) -> str | None:
    """The record file a marker names (``None``: not a marker)."""
    if marker.startswith("."):
        return None
    if marker.endswith(MARKER_SUFFIX):
        return marker.removesuffix(MARKER_SUFFIX) + _RECORD_SUFFIX
    return marker if marker.endswith(_RECORD_SUFFIX) else None


def _load_owner(folder: Path, records: Path) -> SortedSummaries:
    """An owner's list as kept in memory (off the event loop: reading and
    sorting 100,000 threads takes seconds)."""
    return SortedSummaries(_read_owner(folder, records), keep=MAX_KEPT_PER_OWNER)


def _older_page(
    folder: Path, records: Path, after: ListCursor | None, limit: int, states: Collection[ThreadState] | None
) -> ThreadPage:
    """A page of the threads older than ``after``, read from the records
    (past what is kept of an owner): at most ``SCAN_BUDGET`` of them are
    sorted, never all."""
    older = SortedSummaries(
        (summary for summary in _read_owner(folder, records) if after is None or summary.position < after),
        keep=SCAN_BUDGET,
    )
    page = older.page(None, limit, states)
    if page.next_cursor is None and not older.complete:
        return ThreadPage(page.threads, older.oldest)
    return page


def _make_private_dir(path: Path) -> None:
    path.parent.mkdir(mode=0o700, exist_ok=True)
    path.mkdir(mode=0o700, exist_ok=True)


_load_owner_async = aiofiles.os.wrap(_load_owner)
_older_page_async = aiofiles.os.wrap(_older_page)
_make_private_dir_async = aiofiles.os.wrap(_make_private_dir)
