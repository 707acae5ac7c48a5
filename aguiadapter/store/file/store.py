"""The default store: one small JSON file per thread, one process.

Every file operation of the store goes through aiofiles
(:func:`aiofiles.os.wrap`) on the one thread pool the store owns: reads, the
folder lock and its folders, the deadlines file, the retention sweep. The
one exception is the durable replacement of a file (:mod:`.durable`): one
writer thread of the store's makes writes durable in groups, because a trip
through the pool costs a short run measurably more CPU (the reason is in
that module). Under ``--durability process`` (no fsync) the same
replacements are made on the event loop itself, the writer thread never
started: a write of the page cache costs the loop less than a trip to a
thread and back. Nothing else in the store starts a thread or blocks the
event loop on a file.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import itertools
import json
import logging
import os
import re
import time
from collections.abc import AsyncIterator, Collection
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import aiofiles.os

from .durable import GroupWriter, read_bytes
from .history import FileRunHistory
from ..run_history import lines_of, split_runs
from ..slots import LocalRunSlots
from .index import FileThreadIndex
from .retention import FileRetention, retention_seconds_of
from ...threads.listing import ListCursor, ThreadPage, ThreadSummary, summary_of
from ...threads.record import RunEntry, ThreadRecord, ThreadState, record_from_json, record_to_json
from ..run_log import LogBounds, MemoryRunLogs
from ..contract import Claim, CorruptRecord, PersistenceError, Saved, parse_owned_record, parse_stored_record
from ..probe import AbsenceProbe

log = logging.getLogger(__name__)
_tmp_counter = itertools.count()
#: The store's threads, for every file operation (I/O-bound: more than the
#: cores, but few: every thread that allocates gets a malloc arena of its
#: own, and 16 of them cost some 30 MB of peak RSS under 200 concurrent runs;
#: the writer thread fsyncs a group's temp files side by side on them).
FILE_WORKERS = 4
#: Thread file names kept at hand (cleared when full).
_PATH_CACHE = 8192

_SAFE = re.compile(r"[^a-z0-9_-]+")


def thread_file_name(thread_id: str) -> str:
    """A file name for a thread id: no traversal, no case collisions.

    A readable lower-case slug helps an operator find a thread; the hash of
    the exact id makes names unique even where the disk ignores case.
    """
    digest = hashlib.sha256(thread_id.encode()).hexdigest()[:32]
    slug = _SAFE.sub("-", thread_id.lower()).strip("-")[:40]
    return f"{slug}-{digest}.json" if slug else f"{digest}.json"


class FileThreadStore:
    """One small JSON file per thread under ``<state_dir>/threads/``.

    Files are written with a temp file, fsync (not under ``process``: the
    writes are then made on the event loop) and an atomic replace, mode 0600
    in a 0700 folder. Nothing is scanned at startup; a record is read the
    first time its thread is used. Claims live in this process's memory: one
    process owns its state directory.
    """

    def __init__(
        self, state_dir: str | os.PathLike[str], *, retention_days: float = 30.0, durability: str = "fsync"
    ) -> None:
        self.state_dir = Path(state_dir)
        #: ``fsync`` (a write is on disk before it counts) or ``process`` (in
        #: the page cache: it survives this process, not the machine).
        self.durability = durability
        # The way to the disk: aiofiles on threads of the store's own (a burst
        # of runs should not queue behind the loop's default pool, which
        # other work shares). Durable writes go through one writer thread
        # that makes them durable in groups; unsynced ones (``process``) are
        # made on the loop, cheaper than the trip to that thread.
        self._executor = ThreadPoolExecutor(max_workers=FILE_WORKERS, thread_name_prefix="aguiadapter-store")
        self._writer = GroupWriter(self._executor, sync=durability != "process")
        self._inline = not self._writer.sync
        #: Idle and terminal threads untouched this long are deleted (0: kept forever).
        self.retention = FileRetention(
            self, self.state_dir / "threads", retention_seconds_of(retention_days), file_name=thread_file_name,
            executor=self._executor,
        )
        self.threads_dir = self.state_dir / "threads"
        self._claims: dict[str, Claim] = {}
        self._next_token = 0
        #: Writes begun and writes under way (:meth:`absence_probe`); the
        #: number of the last write whose caller was cancelled (the writer
        #: thread may still be making its file), 0 once a later write came back.
        self._writes_begun = 0
        self._writes_running = 0
        self._orphan = 0
        self._dir_ready = False
        self._deadlines: dict[str, float] | None = None
        self._deadline_lock = asyncio.Lock()
        self._lock_fd: int | None = None
        #: thread id -> its file (hashing and path joins cost more than a look-up).
        self._paths: dict[str, str] = {}
        #: Each owner's thread list (``<state_dir>/index/``): a marker per thread.
        self.index = FileThreadIndex(
            self.state_dir / "index", self.threads_dir, file_name=thread_file_name, executor=self._executor
        )
        #: The runs that moved out of the records (:mod:`.history`).
        self.history = FileRunHistory(self._file_of, executor=self._executor)
        self.retention.on_delete = self._forget
        self.retention.on_sweep = self.index.drop_orphans

    def location(self) -> str:
        """The folder that holds the thread files."""
        return str(self.threads_dir)

    @property
    def kind(self) -> str:
        """This is the file store."""
        return "file"

    def run_slots(self, purpose: str = "runs") -> LocalRunSlots:
        """Active runs are counted in memory: one process owns the state folder (each call counts apart)."""
        return LocalRunSlots()

    @property
    def shared(self) -> bool:
        """One process owns its state folder."""
        return False

    @property
    def lease_seconds(self) -> float:
        """Claims live in memory and never lapse while the process lives."""
        return 3600.0

    async def start(self) -> None:
        """Lock the state folder: claims live in this process's memory, so a
        second process on the same folder would break ``THREAD_BUSY``."""
        await self._ensure_dir()
        self._lock_fd = await _lock_folder_async(self.state_dir, executor=self._executor)
        self.retention.start()

    async def close(self) -> None:
        """Release the folder lock and the file threads (the writer thread
        ends once the writes already queued are done)."""
        await self.retention.close()
        self._writer.close()
        if self._lock_fd is not None:
            with contextlib.suppress(OSError, RuntimeError):
                await _close_fd(self._lock_fd, executor=self._executor)
            self._lock_fd = None
        self._executor.shutdown(wait=False)

    async def ping(self) -> bool:
        """The state folder exists or can be made."""
        try:
            await self._ensure_dir()
        except OSError:
            return False
        return True

    async def status(self) -> str:
        """``ok`` or ``unreachable`` (a folder asks for no credentials)."""
        return "ok" if await self.ping() else "unreachable"

    async def renew(self, claim: Claim) -> bool:
        """A claim held in memory stays valid until released."""
        return self._claims.get(claim.thread_id) == claim

    @property
    def signals(self) -> None:
        """One process: no other replica to cancel a run or hand one over."""

    def run_logs(self, bounds: LogBounds) -> MemoryRunLogs:
        """Run logs live in this process, which owns the state folder."""
        return MemoryRunLogs(bounds)

    async def due_deadlines(self, now: float) -> list[str]:
        """Deadlines that passed (the local timers usually got there first)."""
        return [thread_id for thread_id, at in (await self.deadlines()).items() if at <= now]

    def path_for(self, thread_id: str) -> Path:
        """The file of a thread."""
        return self.threads_dir / thread_file_name(thread_id)

    def _file_of(self, thread_id: str) -> str:
        path = self._paths.get(thread_id)
        if path is None:
            if len(self._paths) >= _PATH_CACHE:
                self._paths.clear()
            path = self._paths[thread_id] = str(self.path_for(thread_id))
        return path

    async def load(self, thread_id: str) -> ThreadRecord | None:
        """Read a thread's record, if it has one."""
        read = await self._read_record(thread_id)
        return None if read is None else parse_stored_record(thread_id, *read)

    async def load_owned(self, thread_id: str, principal: str | None) -> ThreadRecord | None:
        """A thread's record when it names ``principal`` (another's is not parsed)."""
        read = await self._read_record(thread_id)
        return None if read is None else parse_owned_record(thread_id, *read, principal)

    async def _read_record(self, thread_id: str) -> tuple[bytes, str] | None:
        """The bytes of a thread's record file and its name, ``None`` when it
        has none; an unreadable file is a :class:`CorruptRecord`."""
        path = self._file_of(thread_id)
        name = os.path.basename(path)
        try:
            return await read_bytes(path, executor=self._executor), name
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CorruptRecord(f"{name}: {exc.strerror}") from exc

    def absence_probe(self, key: str) -> AbsenceProbe | None:
        """A look for ``key``'s record file to take on a worker thread the
        caller visits anyway; ``None`` while a write is under way (its file
        may appear while the probe looks). See :mod:`..probe`."""
        if self._writes_running or self._orphan:
            return None
        return AbsenceProbe(key, self._file_of(key), self._writes_begun)

    def still_absent(self, probe: AbsenceProbe) -> bool:
        """Whether ``probe`` saw no file and no write began since it was made:
        only this process writes the folder (it holds its lock), and every
        file it writes goes through :meth:`_write_atomic`."""
        return probe.absent and probe.mark == self._writes_begun

    async def save(self, record: ThreadRecord, claim: Claim | None = None, *, durable: bool = True) -> Saved:
        """Atomically replace the thread's file (the runs that move out of
        the record are appended to its run history first, in the same write);
        ``durable=False``: its rename is left for the next durable save to
        sync (:mod:`.durable`)."""
        saved, stamped = Saved.next_of(record, time.time())
        stored, moved = split_runs(stamped)
        await self._write_listed(stored, self._append_of(stored, moved), settle=durable or bool(moved))
        if not moved:
            return saved
        self.history.appended(record.key, moved)
        return saved.keeping(stored)

    def _append_of(self, record: ThreadRecord, moved: Collection[tuple[str, RunEntry]]) -> tuple[str, bytes] | None:
        return (self.history.path_of(record.key), lines_of(moved)) if moved else None

    async def earlier_run(self, key: str, run_id: str) -> RunEntry | None:
        """A run that left the thread's record (:mod:`.history`)."""
        return await self.history.earlier_run(key, run_id)

    async def _forget(self, record: ThreadRecord) -> None:
        """A record is deleted: its list marker and run history go first."""
        await self.index.removed(record)
        await self.history.remove(record.key)

    async def _write_listed(
        self, record: ThreadRecord, append: tuple[str, bytes] | None = None, *, settle: bool = True
    ) -> None:
        """Write the record, and the first time, its thread list marker (a
        follower of the write, in the same group: a save costs one durable
        write). The record is the truth: a marker that failed is made again
        by the thread's next save."""
        try:
            marker = await self.index.marker_of(record)
        except OSError as exc:
            log.error("thread %s: not listed until its next save: %s", record.thread_id, exc)
            await self._write_atomic(self._file_of(record.key), record_to_json(record), append=append, settle=settle)
            return
        failed = await self._write_atomic(
            self._file_of(record.key), record_to_json(record), marker, append, settle=settle)
        if failed is not None:
            log.error("thread %s: not listed until its next save: %s", record.thread_id, failed)
        self.index.saved(record, marked=failed is None)

    async def list_threads(
        self, owner: str, after: ListCursor | None, limit: int, states: frozenset[ThreadState] | None = None
    ) -> ThreadPage:
        """A page of ``owner``'s threads, newest first (:mod:`.listing`)."""
        return await self.index.page(owner, after, limit, states)

    async def each_summary(self) -> AsyncIterator[ThreadSummary]:
        """Every record file's summary (unreadable files are skipped with a warning)."""
        try:
            names = await aiofiles.os.listdir(self.threads_dir, executor=self._executor)
        except FileNotFoundError:
            return
        for name in sorted(names):
            if name.startswith(".") or not name.endswith(".json"):
                continue
            try:
                data = await read_bytes(str(self.threads_dir / name), executor=self._executor)
                yield summary_of(record_from_json(data))
            except FileNotFoundError:
                continue
            except (OSError, ValueError) as exc:
                log.warning("%s unreadable, not listed: %s", name, exc)

    async def delete_thread(self, record: ThreadRecord, claim: Claim) -> bool:
        """Remove the list marker, the record file and the deadline. Run logs
        live in the memory of the process that ran the runs (the one that
        held this folder), and went with it."""
        if self._claims.get(record.key) != claim:
            return False
        await self._forget(record)
        with contextlib.suppress(FileNotFoundError):
            await aiofiles.os.remove(self._file_of(record.key), executor=self._executor)
        await self.set_deadline(record.key, None)
        return True

    async def set_deadline(self, thread_id: str, expires_at: float | None) -> None:
        """Keep ``<state_dir>/deadlines.json`` in step (only pending threads)."""
        async with self._deadline_lock:
            deadlines = await self._load_deadlines()
            if expires_at is None and thread_id not in deadlines:
                return
            changed = dict(deadlines)
            if expires_at is None:
                del changed[thread_id]
            else:
                changed[thread_id] = expires_at
            data = json.dumps(changed, sort_keys=True).encode()
            await self._write_atomic(str(self.state_dir / "deadlines.json"), data)
            self._deadlines = changed

    async def deadlines(self) -> dict[str, float]:
        """The deadlines file: as long as the number of pending threads, not
        of all threads, so reading it at startup stays cheap."""
        async with self._deadline_lock:
            return dict(await self._load_deadlines())

    async def deadlines_of(self, thread_ids: Collection[str]) -> dict[str, float]:
        """The deadlines of these threads, from the file's copy in memory."""
        deadlines = await self.deadlines()
        return {thread_id: deadlines[thread_id] for thread_id in thread_ids if thread_id in deadlines}

    async def deadline_count(self) -> int:
        """The threads of this folder that wait for interrupt answers."""
        return len(await self.deadlines())

    async def _load_deadlines(self) -> dict[str, float]:
        if self._deadlines is None:
            try:
                raw = json.loads(await read_bytes(str(self.state_dir / "deadlines.json"), executor=self._executor))
                self._deadlines = {str(k): float(v) for k, v in raw.items()}
            except FileNotFoundError:
                self._deadlines = {}
            except (OSError, ValueError, AttributeError) as exc:
                log.error("deadlines.json unreadable (%s); expiry runs on next access only", exc)
                self._deadlines = {}
        return self._deadlines

    async def _write_atomic(
        self, path: str, data: bytes, marker: str | None = None, append: tuple[str, bytes] | None = None,
        *, settle: bool = True,
    ) -> OSError | None:
        """Replace ``path`` durably (``PersistenceError`` when it failed;
        ``settle=False``: its rename is synced by the next write that
        settles), then make the file ``marker``, unsynced: what failed of that.
        Under ``process`` all of it is done on the loop before this returns."""
        name = os.path.basename(path)
        self._writes_begun += 1
        number = self._writes_begun
        self._writes_running += 1
        try:
            await self._ensure_dir()
            if self._inline:  # no fsync: written and renamed here, on the loop
                failed = self._writer.replace_now(_tmp_of(path), path, data, marker, append)
            else:
                # Written, fsynced, renamed and the folder fsynced before this
                # returns; writes that wait together share the folder fsync.
                failed = await self._writer.replace(_tmp_of(path), path, data, marker, append, settle=settle)
        except OSError as exc:
            raise PersistenceError(f"cannot write {name}: {exc.strerror or exc}") from exc
        except asyncio.CancelledError:
            self._orphan = max(self._orphan, number)
            raise
        finally:
            self._writes_running -= 1
        # The writer thread answers in the order writes came: one queued after
        # the orphan was written, so the orphan is done with too (a write made
        # on the loop has no orphan: nothing can cancel it half-way).
        if number > self._orphan:
            self._orphan = 0
        return failed

    async def claim(self, thread_id: str, run_id: str) -> Claim | None:
        """Claim in memory; the event loop serialises callers."""
        if thread_id in self._claims:
            return None
        self._next_token += 1
        claim = Claim(thread_id, run_id, self._next_token)
        self._claims[thread_id] = claim
        return claim

    async def release(self, claim: Claim) -> None:
        """Release a claim if it is still the current one."""
        if self._claims.get(claim.thread_id) == claim:
            del self._claims[claim.thread_id]

    async def _ensure_dir(self) -> None:
        if self._dir_ready:
            return
        await _make_private_dirs_async(self.threads_dir, executor=self._executor)
        self._dir_ready = True


class StateDirInUse(RuntimeError):
    """Another process serves from this state folder."""


def _tmp_of(path: str) -> str:
    """A temp file beside ``path``, unique to this process and write."""
    folder, name = os.path.split(path)
    return os.path.join(folder, f".{name}.{os.getpid()}.{next(_tmp_counter)}.tmp")


def _lock_folder(state_dir: Path) -> int:
    fd = os.open(state_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        os.close(fd)
        raise StateDirInUse(
            f"{state_dir} is used by another aguiadapter process; give each process its own "
            "--state-dir, or use a shared store for several replicas"
        ) from exc
    return fd


def _make_private_dirs(path: Path) -> None:
    # Only folders made here, and the threads folder, which is ours alone,
    # are set to 0700: a --state-dir that already exists keeps its mode.
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.mkdir(mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)


_lock_folder_async = aiofiles.os.wrap(_lock_folder)
_make_private_dirs_async = aiofiles.os.wrap(_make_private_dirs)
_close_fd = aiofiles.os.wrap(os.close)


