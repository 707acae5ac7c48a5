"""Durable file replacement, in groups: one writer thread for a store
(without fsync, the same replacement on the caller's thread).

Each write is a temp file (0600) written and fsynced, then an atomic
rename over the target, then an fsync of the folder; the caller's await
returns only once all of that is done, exactly as with a write of its own.
The writer thread takes every write waiting when it wakes: it writes and
fsyncs their temp files (side by side on the store's executor when there
are several: the file system commits fsyncs that wait together at once),
renames them in the order they came, fsyncs each folder once for the
group, and wakes the event loop once for the group. Many writes at once (a
burst of runs) share commits, folder fsyncs and wake-ups. A write that
fails fails alone (its folder's fsync fails all the writes of that folder
in the group).

Why a thread of its own and not a trip through aiofiles on the executor,
as every other file operation of the store: every short run waits for
three lone durable writes, and a trip through ``run_in_executor`` (its two
futures and their callbacks, the pool's locks, two more event-loop turns)
costs 1.1-1.3x the CPU of a write handed to this thread and woken with one
``call_soon_threadsafe``: some 0.1 ms a write, 5-8 % of a short run's CPU
(``python -m benchmarks.durable_saves`` measures both side by side; the
numbers are in ``benchmarks/README.md``).

Without fsync (``--durability process``: the same writes reach the page
cache, not the disk) a write is some tens of microseconds of work of the
kernel's, less than the trip to the thread and back (a futex wake, the GIL
handed over and back, a self-pipe wake-up of the loop: about 0.1 ms of
CPU). The store then makes its writes with :meth:`GroupWriter.replace_now`
on the event loop, one at a time, and the thread never starts
(``python -m benchmarks.durable_saves --durability process`` measures both).

A write that does not *settle* (the store's ``save(..., durable=False)``:
a write recovery can rebuild from the runtime) has its temp file synced and
renamed like any other, but its folder is not fsynced for it: it survives
the process at once, and a power cut only once the next settled write of
the folder fsynced it (until then a power cut may keep the previous file,
whole: the bytes are on disk before the name can point at them, on any file
system). That saves one of a write's two syncs.

A write may carry a *marker*: an empty file (the thread list's mark of a
record) made right after the write landed, in the same group and with the
same wake-up, but not synced: a power cut may take it (a process that dies
does not: the page cache keeps it). It is made only when its write
succeeded, so it never names a file that is not there; its failure is
returned to the caller, never failing the write.

:data:`read_bytes` is the store's other file operation on the hot path:
one trip through aiofiles on the store's executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import threading
from collections.abc import Sequence
from concurrent.futures import Executor

import aiofiles.os
import attrs


@attrs.define
class _Write:
    tmp: str
    path: str
    data: bytes
    marker: str | None = None
    #: ``(path, data)`` appended to another file, and synced, before the
    #: rename (a thread's run history: :mod:`.history`).
    append: tuple[str, bytes] | None = None
    sync: bool = True
    #: Whether the rename is made durable (its folder fsynced) before the
    #: caller hears of it; ``False``: the temp file's bytes are synced, the
    #: rename is not (the next write of the folder that is carries it).
    settle: bool = True
    error: OSError | None = None
    marker_error: OSError | None = None
    #: Whom the writer thread answers (``None``: a write made on the
    #: caller's thread, :meth:`GroupWriter.replace_now`).
    future: asyncio.Future[OSError | None] | None = None
    loop: asyncio.AbstractEventLoop | None = None


_STOP = object()


class GroupWriter:
    """Makes file replacements durable, in groups, from one thread
    (``executor`` fsyncs the temp files of a group side by side)."""

    def __init__(self, executor: Executor, name: str = "aguiadapter-writer", *, sync: bool = True) -> None:
        self._executor = executor
        #: ``False`` (``--durability process``): the same writes in the same
        #: order, without fsync (they survive the process, not the machine).
        self.sync = sync
        self._name = name
        self._queue: queue.SimpleQueue[_Write | object] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False

    async def replace(
        self, tmp: str, path: str, data: bytes, marker: str | None = None, append: tuple[str, bytes] | None = None,
        *, settle: bool = True,
    ) -> OSError | None:
        """Write ``data`` to ``tmp``, fsync it, rename it to ``path`` and
        fsync the folder; raises ``OSError`` when any of it failed. With
        ``append``, first append to that file and fsync it (its failure fails
        the write). Then make the file ``marker``, if any: returns what
        failed of it (``None``: made). ``settle=False`` leaves the folder
        unsynced: a power cut may keep the file ``path`` was, whole, instead
        of the new one (never a torn one: the bytes were synced before the
        rename); the next settled write of the folder makes it durable."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[OSError | None] = loop.create_future()
        write = _Write(tmp, path, data, marker, append, self.sync, settle, future=future, loop=loop)
        self._start()
        self._queue.put(write)
        return await future

    def replace_now(
        self, tmp: str, path: str, data: bytes, marker: str | None = None, append: tuple[str, bytes] | None = None,
    ) -> OSError | None:
        """The write :meth:`replace` makes, for a writer that does not sync,
        made here on the caller's thread (the event loop) and not on the
        writer's: the same files in the same order (``append``, the temp file,
        the rename, ``marker``), the same answers (``OSError`` raised when the
        write failed, its temp file removed; what failed of the marker
        returned). Without fsync a write is some tens of microseconds of page
        cache work, less than the trip to the thread and back."""
        if self.sync:
            raise RuntimeError("a writer that syncs makes its writes on its own thread")
        if self._closed:
            raise OSError("the store is closed")
        write = _Write(tmp, path, data, marker, append, sync=False)
        _write_temp(write)
        _replace_group((write,), sync=False)
        if write.error is not None:
            raise write.error
        return write.marker_error

    def close(self) -> None:
        """Let the thread end once the writes already queued are done."""
        with self._lock:
            self._closed = True
            if self._thread is not None:
                self._queue.put(_STOP)

    def _start(self) -> None:
        if self._closed:
            raise OSError("the store is closed")
        if self._thread is not None:
            return
        with self._lock:
            if self._closed:
                raise OSError("the store is closed")
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            group: list[_Write] = []
            stop = item is _STOP
            if not stop:
                group.append(item)  # type: ignore[arg-type]
            while not stop:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is _STOP:
                    stop = True
                else:
                    group.append(item)  # type: ignore[arg-type]
            if group:
                self._write_group(group)
                _report(group)
            if stop:
                return

    def _write_group(self, group: Sequence[_Write]) -> None:
        if len(group) == 1:
            _write_temp(group[0])
        else:
            try:
                list(self._executor.map(_write_temp, group))
            except RuntimeError:  # the store's executor is shut down: one after the other here
                for write in group:
                    if write.error is None:
                        _write_temp(write)
        _replace_group(group, sync=self.sync)


def _write_temp(write: _Write) -> None:
    try:
        if write.append is not None:
            append_synced(*write.append, sync=write.sync)
        _write_synced(write.tmp, write.data, sync=write.sync)
    except OSError as exc:
        write.error = exc


def _replace_group(group: Sequence[_Write], *, sync: bool = True) -> None:
    """Rename the group's synced temp files in order, then fsync the folders
    of those that settle (once a folder: its fsync carries every rename
    made in it before, settled or not)."""
    folders: dict[str, list[_Write]] = {}
    for write in group:
        if write.error is not None:
            continue
        try:
            os.replace(write.tmp, write.path)
        except OSError as exc:
            write.error = exc
            continue
        if write.settle:
            folders.setdefault(os.path.dirname(write.path) or ".", []).append(write)
    for folder, writes in folders.items() if sync else ():
        try:
            _fsync_folder(folder)
        except OSError as exc:
            for write in writes:
                write.error = exc
    for write in group:
        if write.error is not None:
            with contextlib.suppress(OSError):
                os.unlink(write.tmp)
        elif write.marker is not None:
            write.marker_error = _mark(write.marker)


def _mark(path: str) -> OSError | None:
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    except OSError as exc:
        return exc
    return None


def _write_synced(tmp: str, data: bytes, *, sync: bool = True) -> None:
    _write_all(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), data, sync=sync)


def _write_all(fd: int, data: bytes, *, sync: bool) -> None:
    """Write all of ``data`` to ``fd`` (``os.write`` may take less), fsync it
    with ``sync``, and close it."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def append_synced(path: str, data: bytes, *, sync: bool = True) -> None:
    """Append ``data`` to ``path`` (made 0600 when new) and, with ``sync``,
    fsync it, and its folder when the file is new (the file is on disk
    whenever the record that relies on it is)."""
    created = not os.path.exists(path)
    _write_all(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), data, sync=sync)
    if created and sync:
        _fsync_folder(os.path.dirname(path) or ".")


def _fsync_folder(folder: str) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _report(group: Sequence[_Write]) -> None:
    """Wake each event loop once for its writes of the group."""
    by_loop: dict[asyncio.AbstractEventLoop | None, list[_Write]] = {}
    for write in group:
        by_loop.setdefault(write.loop, []).append(write)
    for loop, writes in by_loop.items():
        if loop is None:  # never: every write queued has its loop
            continue
        with contextlib.suppress(RuntimeError):  # a loop that closed meanwhile
            loop.call_soon_threadsafe(_settle, writes)


def _settle(writes: Sequence[_Write]) -> None:
    for write in writes:
        if write.future is None or write.future.done():
            continue  # its caller was cancelled: the file is written all the same
        if write.error is not None:
            write.future.set_exception(write.error)
        else:
            write.future.set_result(write.marker_error)


def _read_bytes_sync(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


#: A whole file's bytes, in one trip to the executor (pass ``executor=``).
read_bytes = aiofiles.os.wrap(_read_bytes_sync)
