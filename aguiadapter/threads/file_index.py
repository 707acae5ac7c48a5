"""The file store's thread list: one small entry file per thread, in a folder per owner.

``<state_dir>/index/<owner>/<thread file name>`` holds the thread's
:class:`~.listing.ThreadSummary` (about 200 bytes), where ``<owner>`` is 32
hex digits of the SHA-256 of the record's owner (:func:`~.listing.owner_of`)
and the file name is the record's own. An entry is written with its record
right after it, as a follower of the record's durable write (same group,
no fsync of its own: :mod:`.durable`), and removed with it by the
retention sweep. It is derived from the record: one that a failed write or
a power cut left behind is right again at the thread's next save.

Nothing is read at startup. The first list call for an owner reads that
owner's folder alone (not the state folder's thread files) and keeps it in
memory, sorted; later saves and removals update the copy in memory, so
further pages are answered from memory. Only so many owners are kept at once
(the least recently listed are forgotten and read again when listed).
Every file operation is aiofiles on the store's executor, as the store's own.
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
import attrs

from .listing import ListCursor, SortedSummaries, ThreadPage, ThreadSummary, owner_id, owner_of, summary_of
from .record import ThreadRecord, ThreadState

log = logging.getLogger(__name__)

#: Owners whose list is kept in memory at once.
MAX_OWNERS_KEPT = 256

_Change = ThreadSummary | str  # a summary to put, or the key of a thread to drop


@attrs.frozen
class Entry:
    """A thread's entry file as a save writes it."""

    owner: str
    path: str
    data: bytes
    summary: ThreadSummary


class FileThreadIndex:
    """Per-owner entry files, and the lists of recently listed owners in memory."""

    def __init__(
        self,
        folder: Path,
        *,
        file_name: Callable[[str], str],
        executor: Executor,
    ) -> None:
        self.folder = folder
        self._file_name = file_name
        self._executor = executor
        self._kept: OrderedDict[str, SortedSummaries] = OrderedDict()
        #: Owners being read from disk -> the changes made meanwhile.
        self._reading: dict[str, list[_Change]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._made: set[str] = set()

    def entry_path(self, record: ThreadRecord) -> Path:
        """The entry file of a record."""
        return self.folder / owner_id(owner_of(record)) / self._file_name(record.key)

    async def entry_of(self, record: ThreadRecord) -> Entry:
        """The entry a save of ``record`` writes (its owner's folder made, once)."""
        summary = summary_of(record)
        owner = owner_id(owner_of(record))
        if owner not in self._made:
            await _make_private_dir_async(self.folder / owner, executor=self._executor)
            self._made.add(owner)
        return Entry(owner, str(self.folder / owner / self._file_name(record.key)), summary.to_json(), summary)

    def saved(self, entry: Entry) -> None:
        """An entry was written: the lists kept in memory take it."""
        self._apply(entry.owner, entry.summary)

    async def removed(self, record: ThreadRecord) -> None:
        """Remove the entry of a record just deleted."""
        with contextlib.suppress(FileNotFoundError):
            await aiofiles.os.remove(self.entry_path(record), executor=self._executor)
        self._apply(owner_id(owner_of(record)), record.key)

    async def page(
        self, owner: str, after: ListCursor | None, limit: int, states: Collection[ThreadState] | None
    ) -> ThreadPage:
        """A page of ``owner``'s list (see :mod:`.listing`)."""
        kept = await self._list_of(owner_id(owner))
        return kept.page(after, limit, states)

    async def drop_orphans(self, record_names: Collection[str], older_than: float) -> int:
        """Remove the entries whose record file is not in ``record_names`` (a
        record deleted by hand), written before ``older_than``; how many."""
        removed = 0
        try:
            owners = await aiofiles.os.listdir(self.folder, executor=self._executor)
        except FileNotFoundError:
            return 0
        names = set(record_names)
        for owner in owners:
            with contextlib.suppress(OSError):
                for name in await aiofiles.os.listdir(self.folder / owner, executor=self._executor):
                    if name.startswith(".") or name in names:
                        continue
                    path = self.folder / owner / name
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
                summaries = await _read_owner_async(self.folder / owner, executor=self._executor)
            finally:
                changes = self._reading.pop(owner)
                self._locks.pop(owner, None)
            kept = SortedSummaries(summaries)
            for change in changes:
                kept.drop(change) if isinstance(change, str) else kept.put(change)
            self._kept[owner] = kept
            while len(self._kept) > MAX_OWNERS_KEPT:
                self._kept.popitem(last=False)
        return kept


def _read_owner(folder: Path) -> list[ThreadSummary]:
    """Every readable entry of one owner's folder (none when it has none)."""
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        if name.startswith("."):
            continue  # a temp file of a write under way
        try:
            with open(folder / name, "rb") as handle:
                found.append(ThreadSummary.from_json(handle.read()))
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as exc:
            log.warning("thread list entry %s/%s unreadable, not listed: %s", folder.name, name, exc)
    return found


def _make_private_dir(path: Path) -> None:
    path.parent.mkdir(mode=0o700, exist_ok=True)
    path.mkdir(mode=0o700, exist_ok=True)


_read_owner_async = aiofiles.os.wrap(_read_owner)
_make_private_dir_async = aiofiles.os.wrap(_make_private_dir)
