"""How long the file store keeps a thread nobody uses (as Redis does: 30 days).

An idle or terminal thread whose file was not written for the retention
period is deleted; its next request starts a new thread. Interrupted and
running threads are never deleted here (their interrupts expire through their
deadlines, which leaves them terminal, and only then does the clock start).

Nothing is scanned at startup: the first sweep comes one interval after the
store started (an hour, or a quarter of a shorter retention), then one per
interval. A sweep lists the folder once and looks at the files in small
batches, yielding to the event loop between them: only a file older than the
retention is read, and it is deleted under a claim of its thread, so that a
run admitted meanwhile either waits for the claim or finds no file. The
thread's list marker goes with it (``on_delete``), and after each sweep list
markers whose record file is gone (deleted by hand) are removed (``on_sweep``).
Every file operation is aiofiles on the store's executor.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection
from concurrent.futures import Executor
from pathlib import Path

import aiofiles.os

from .durable import read_bytes
from ...tasks import cancel_and_wait
from ...threads.record import ThreadRecord, ThreadState, record_from_json
from ..contract import ThreadStore

log = logging.getLogger(__name__)

#: Files looked at between two yields to the event loop.
BATCH = 64
#: The longest pause between two sweeps.
MAX_INTERVAL_SECONDS = 3600.0
_KEPT_STATES = (ThreadState.RUNNING, ThreadState.INTERRUPTED)


class FileRetention:
    """Deletes the files of idle and terminal threads untouched for ``retention_seconds``."""

    def __init__(
        self,
        store: ThreadStore,
        folder: Path,
        retention_seconds: float,
        *,
        file_name: Callable[[str], str],
        executor: Executor,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.folder = folder
        self.retention_seconds = retention_seconds
        self.interval_seconds = min(MAX_INTERVAL_SECONDS, max(retention_seconds / 4, 0.2))
        self.file_name = file_name
        self.clock = clock
        self.executor = executor
        self._task: asyncio.Task[None] | None = None
        #: Called with each record about to be deleted (its thread list marker goes first).
        self.on_delete: Callable[[ThreadRecord], Awaitable[None]] | None = None
        #: Called after each sweep with the record file names it saw and when it began.
        self.on_sweep: Callable[[Collection[str], float], Awaitable[int]] | None = None

    def start(self) -> None:
        """Sweep one interval from now, then every interval."""
        if self.retention_seconds > 0 and self._task is None:
            self._task = asyncio.create_task(self._sweep_forever(), name="file-retention")

    async def close(self) -> None:
        """Stop sweeping."""
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.interval_seconds)
            try:
                deleted = await self.sweep()
            except OSError as exc:
                log.warning("thread retention sweep failed: %s", exc)
                continue
            if deleted:
                log.info("thread retention: %d idle or terminal threads older than %g days deleted",
                         deleted, self.retention_seconds / 86400)

    async def sweep(self) -> int:
        """One pass over the folder; how many threads were deleted."""
        began = time.time()
        listed = await aiofiles.os.listdir(self.folder, executor=self.executor)
        names = [name for name in listed if name.endswith(".json") and not name.startswith(".")]
        deleted = 0
        for start in range(0, len(names), BATCH):
            cutoff = self.clock() - self.retention_seconds
            for name in names[start:start + BATCH]:
                deleted += await self._consider(self.folder / name, cutoff)
            await asyncio.sleep(0)
        if self.on_sweep is not None:
            await self.on_sweep(names, began)
        return deleted

    async def _consider(self, path: Path, cutoff: float) -> int:
        try:
            if (await aiofiles.os.stat(path, executor=self.executor)).st_mtime > cutoff:
                return 0
            record = record_from_json(await read_bytes(str(path), executor=self.executor))
        except (OSError, ValueError):
            return 0  # gone meanwhile, or unreadable: its owner is told when they use it
        if record.state in _KEPT_STATES or self.file_name(record.key) != path.name:
            return 0
        claim = await self.store.claim(record.key, "retention")
        if claim is None:
            return 0  # in use right now
        try:
            if (await aiofiles.os.stat(path, executor=self.executor)).st_mtime > cutoff:
                return 0  # written since it was read
            if self.on_delete is not None:
                await self.on_delete(record)  # first: the record's removal ends the claim's work
            await aiofiles.os.remove(path, executor=self.executor)
            return 1
        except OSError:
            return 0
        finally:
            await self.store.release(claim)


def retention_seconds_of(days: float) -> float:
    """Days as seconds (``0``: keep forever)."""
    if days < 0 or days != days:
        raise ValueError(f"retention days must not be negative, not {days}")
    return days * 86400.0
