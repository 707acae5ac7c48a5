"""The file store's run history: one append-only file per thread.

``threads/<record's file stem>.runs`` holds the runs that moved out of the
thread's record (:mod:`..run_history`), one JSON line each. The store's
writer appends a batch and syncs it before it renames the record that no
longer holds those runs (:mod:`.durable`): a crash between the two leaves
them in both places, never in neither. Retention and the operator's delete
remove the file with its record; a folder scan for records (``*.json``)
never sees it.

Looking a run up reads the thread's file once and keeps its runs in memory
for the threads used last (a thread's file is written only by this process,
which holds the state folder, so the copy stays true: each append adds its
runs to it).
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Callable, Iterable
from concurrent.futures import Executor

import aiofiles.os

from .durable import read_bytes
from ..contract import StoreUnavailable
from ..run_history import parse_lines
from ...threads.record import RunEntry

#: Threads whose earlier runs are kept in memory (the least recently used leave first).
CACHED_THREADS = 256


class FileRunHistory:
    """Where a thread's earlier runs are kept, and a look-up of them."""

    def __init__(self, record_file: Callable[[str], str], *, executor: Executor) -> None:
        self._record_file = record_file
        self._executor = executor
        self._cache: OrderedDict[str, dict[str, RunEntry]] = OrderedDict()
        #: Counts appends and removals: a file read while one happened may
        #: miss it, and is not kept (the next look-up reads the file again).
        self._changes = 0

    def path_of(self, key: str) -> str:
        """The history file of the thread ``key``: beside its record."""
        return self._record_file(key).removesuffix(".json") + ".runs"

    async def earlier_run(self, key: str, run_id: str) -> RunEntry | None:
        """The entry of ``run_id`` in the thread's history; ``StoreUnavailable``
        when the file cannot be read (a used id must never pass for a new one)."""
        runs = self._cache.get(key)
        if runs is None:
            changes = self._changes
            try:
                data = await read_bytes(self.path_of(key), executor=self._executor)
            except FileNotFoundError:
                data = b""
            except OSError as exc:
                raise StoreUnavailable(f"run history of {key}: {exc.strerror or exc}") from exc
            runs = parse_lines(data)
            if changes == self._changes:
                self._keep(key, runs)
        else:
            self._cache.move_to_end(key)
        return runs.get(run_id)

    def appended(self, key: str, moved: Iterable[tuple[str, RunEntry]]) -> None:
        """Runs that reached the thread's file (a copy in memory takes them too)."""
        self._changes += 1
        runs = self._cache.get(key)
        if runs is not None:
            runs.update(moved)

    async def remove(self, key: str) -> None:
        """Forget the thread's history (its record is deleted)."""
        self._changes += 1
        self._cache.pop(key, None)
        with contextlib.suppress(FileNotFoundError):
            await aiofiles.os.remove(self.path_of(key), executor=self._executor)

    def _keep(self, key: str, runs: dict[str, RunEntry]) -> None:
        self._cache[key] = runs
        while len(self._cache) > CACHED_THREADS:
            self._cache.popitem(last=False)

