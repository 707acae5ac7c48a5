"""Durable file replacement, in groups, through aiofiles on the store's executor.

Each write is a temp file (0600) written and fsynced, then an atomic
rename over the target, then an fsync of the folder; the caller's await
returns only once all of that is done, exactly as with a write of its own.
Writes that wait together form a group: while one group is on its way,
the writes that arrive wait, and the next group takes them all. A group
writes and fsyncs its temp files side by side on the executor (the file
system commits fsyncs that wait together at once), renames them in the
order they came, and fsyncs each folder once. A lone write is one trip to
the executor; many at once (a burst of runs) share folder fsyncs and
wake-ups. A write that fails fails alone (its folder's fsync fails all the
writes of that folder in the group).

The disk is reached only through :func:`aiofiles.os.wrap` on the executor
the store owns: nothing here starts a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Sequence
from concurrent.futures import Executor

import aiofiles.os
import attrs


@attrs.define
class _Write:
    tmp: str
    path: str
    data: bytes
    future: asyncio.Future[None]
    error: OSError | None = None


class GroupWriter:
    """Makes file replacements durable, in groups, on ``executor``."""

    def __init__(self, executor: Executor) -> None:
        self._executor = executor
        self._waiting: list[_Write] = []
        self._flushing: asyncio.Task[None] | None = None
        self._closed = False

    async def replace(self, tmp: str, path: str, data: bytes) -> None:
        """Write ``data`` to ``tmp``, fsync it, rename it to ``path`` and
        fsync the folder; raises ``OSError`` when any of it failed. A caller
        cancelled meanwhile leaves the write to go on."""
        if self._closed:
            raise OSError("the store is closed")
        loop = asyncio.get_running_loop()
        write = _Write(tmp, path, data, loop.create_future())
        self._waiting.append(write)
        if self._flushing is None:
            self._flushing = loop.create_task(self._flush())
        await write.future

    async def close(self) -> None:
        """Refuse new writes; wait for the ones already taken."""
        self._closed = True
        if self._flushing is not None:
            await asyncio.shield(self._flushing)

    async def _flush(self) -> None:
        try:
            while self._waiting:
                group, self._waiting = self._waiting, []
                try:
                    if len(group) == 1:
                        await _write_alone(group[0], executor=self._executor)
                    else:
                        await asyncio.gather(*(_write_temp(write, executor=self._executor) for write in group))
                        await _replace_group(group, executor=self._executor)
                except (RuntimeError, asyncio.CancelledError) as exc:  # the executor or the loop is gone
                    for write in group:
                        write.error = write.error or OSError(f"not written: {exc!r}")
                _settle(group)
        finally:
            self._flushing = None


def _write_alone_sync(write: _Write) -> None:
    _write_temp_sync(write)
    _replace_group_sync([write])


def _write_temp_sync(write: _Write) -> None:
    try:
        _write_synced(write.tmp, write.data)
    except OSError as exc:
        write.error = exc


def _replace_group_sync(group: Sequence[_Write]) -> None:
    """Rename the group's synced temp files in order, then fsync their folders."""
    folders: dict[str, list[_Write]] = {}
    for write in group:
        if write.error is not None:
            continue
        try:
            os.replace(write.tmp, write.path)
        except OSError as exc:
            write.error = exc
            continue
        folders.setdefault(os.path.dirname(write.path) or ".", []).append(write)
    for folder, writes in folders.items():
        try:
            _fsync_folder(folder)
        except OSError as exc:
            for write in writes:
                write.error = exc
    for write in group:
        if write.error is not None:
            with contextlib.suppress(OSError):
                os.unlink(write.tmp)


_write_alone = aiofiles.os.wrap(_write_alone_sync)
_write_temp = aiofiles.os.wrap(_write_temp_sync)
_replace_group = aiofiles.os.wrap(_replace_group_sync)


def _write_synced(tmp: str, data: bytes) -> None:
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_folder(folder: str) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _settle(writes: Sequence[_Write]) -> None:
    for write in writes:
        if write.future.done():
            continue  # its caller was cancelled: the file is written all the same
        if write.error is not None:
            write.future.set_exception(write.error)
        else:
            write.future.set_result(None)
