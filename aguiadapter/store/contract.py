"""Where thread records live, and who may run a thread right now.

:class:`ThreadStore` is the interface the service talks to; the file store
(:mod:`aguiadapter.store.file.store`) is the default. Everything several
replicas must agree on goes through it: records (written whole, all or
nothing), the claim that makes ``THREAD_BUSY`` true (a lease with a fencing
token, renewed while a run streams), interrupt deadlines, and, for a shared
store only (:class:`ReplicaSignals`), the cancel and hand-over signals for a
run that streams from another replica.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Collection
from typing import Protocol

import attrs

from ..threads.listing import ListCursor, ThreadPage, ThreadSummary
from ..threads.record import RunEntry, ThreadRecord, ThreadState, copy_record, record_from_json, stored_principal
from .run_log import LogBounds, RunLogs
from .slots import RunSlots


class PersistenceError(Exception):
    """A record could not be written durably."""


class LostWrite(PersistenceError):
    """The record could not be written after ``transition``: the record is
    what it was before it (in memory and on disk)."""

    def __init__(self, transition: str, cause: PersistenceError) -> None:
        super().__init__(f"{transition}: {cause}")
        self.transition = transition


class CorruptRecord(Exception):
    """A stored record exists but cannot be read; that thread alone fails."""


class StoreUnavailable(Exception):
    """The store cannot be reached at all (nothing can be admitted)."""


@attrs.frozen
class Claim:
    """Proof that this process runs the thread until it releases the claim."""

    thread_id: str
    run_id: str
    token: int


@attrs.frozen
class Saved:
    """What a save stamped on the record it stored: the record it was handed
    is left as it was, and the caller applies these once the save succeeded."""

    #: The stored version (one more than the record's).
    version: int
    #: When it was written (seconds since the epoch).
    updated_at: float
    #: The runs the stored record kept when older ones moved to the thread's
    #: run history in this save (``None``: none moved), and how many runs
    #: the history then holds.
    runs: dict[str, RunEntry] | None = None
    earlier_runs: int = 0

    def stamp(self, record: ThreadRecord) -> None:
        """Make ``record`` the stored one: its version and write time, and
        without the runs that moved out."""
        record.version, record.updated_at = self.version, self.updated_at
        if self.runs is not None:
            record.runs, record.earlier_runs = self.runs, self.earlier_runs

    def keeping(self, stored: ThreadRecord) -> Saved:
        """This stamp, for a save that stored ``stored`` after runs moved out."""
        return attrs.evolve(self, runs=stored.runs, earlier_runs=stored.earlier_runs)

    @classmethod
    def next_of(cls, record: ThreadRecord, now: float) -> tuple[Saved, ThreadRecord]:
        """The stamp of ``record``'s next save at ``now``, and the copy of
        ``record`` to store with it (``record`` itself stays as it was)."""
        saved = cls(record.version + 1, now)
        stored = copy_record(record)
        stored.version, stored.updated_at = saved.version, now
        return saved, stored


class ReplicaSignals(Protocol):
    """What the replicas of a shared store tell each other about runs."""

    async def publish_cancel(self, execution_id: str) -> None:
        """Ask whichever replica streams this execution to cancel it."""

    def on_cancel(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(execution_id)`` for cancels published by any replica."""

    async def publish_attach(self, execution_id: str) -> None:
        """A client re-attached to this execution's run: the replica that
        relays it while shutting down hands it over."""

    def on_attach(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(execution_id)`` for re-attaches on any replica."""


class ThreadStore(Protocol):
    """Storage and run claims for thread records."""

    async def load(self, thread_id: str) -> ThreadRecord | None:
        """The stored record of a thread key (``record.key``: the thread id,
        or a per-user key), ``None`` if there is none; ``CorruptRecord`` if unreadable.

        Every ``thread_id`` of this interface is such a key; records are saved under ``record.key``."""

    async def load_owned(self, thread_id: str, principal: str | None) -> ThreadRecord | None:
        """As :meth:`load`, but ``None`` without parsing it when the record
        names another owner than ``principal`` (a record kept under a bare id
        by an earlier version: reading it for someone else must cost what
        reading nothing does; see threads/access.py)."""

    async def save(self, record: ThreadRecord, claim: Claim | None = None, *, durable: bool = True) -> Saved:
        """Write the record durably (all or nothing) as its next version; what
        that stamped on it (the record handed in is not changed: the caller
        applies :class:`Saved` once the write succeeded); ``PersistenceError`` on failure.

        ``durable=False`` is for a write that recovery can rebuild from the
        runtime (a turn's task binding): the store may let it survive only
        the process until the thread's next durable save, which then makes
        it durable too (the file store leaves its rename unsynced); it is
        still all or nothing, and a power cut leaves the version before it."""

    async def earlier_run(self, key: str, run_id: str) -> RunEntry | None:
        """The entry of a run that moved out of the thread's record into its
        run history (aguiadapter/store/run_history.py), ``None`` if it is not
        there; ``StoreUnavailable`` when the history cannot be read."""

    async def list_threads(
        self, owner: str, after: ListCursor | None, limit: int, states: frozenset[ThreadState] | None = None
    ) -> ThreadPage:
        """Up to ``limit`` of ``owner``'s threads (:func:`~.listing.list_owner`)
        after ``after``, newest first, in ``states`` when given; from the
        owner's index, which each save keeps in step with the record
        (``StoreUnavailable`` when the store cannot answer)."""

    def each_summary(self) -> AsyncIterator[ThreadSummary]:
        """Every thread's summary, whoever owns it, in no order (the operator
        command's look across users: it reads every record)."""

    async def delete_thread(self, record: ThreadRecord, claim: Claim) -> bool:
        """Erase a thread held by ``claim`` (the operator command): its
        record, list entry, deadline and run logs; ``False``, with nothing
        erased, when the claim is not held any more."""

    async def claim(self, thread_id: str, run_id: str) -> Claim | None:
        """Claim the thread for a run; ``None`` when another run holds it."""

    async def release(self, claim: Claim) -> None:
        """Give a claim back."""

    async def set_deadline(self, thread_id: str, expires_at: float | None) -> None:
        """Remember (or forget, with ``None``) when a thread's interrupts expire."""

    async def deadlines(self) -> dict[str, float]:
        """Every remembered deadline (read at startup to re-arm expiry)."""

    async def deadlines_of(self, thread_ids: Collection[str]) -> dict[str, float]:
        """The remembered deadlines of these threads (those that have one)."""

    async def deadline_count(self) -> int:
        """How many threads have a deadline (wait for interrupt answers), whoever set it."""

    async def due_deadlines(self, now: float) -> list[str]:
        """Threads whose deadline passed and that this replica should expire
        (a shared store hands them to one replica at a time)."""

    async def renew(self, claim: Claim) -> bool:
        """Extend a claim's lease; ``False`` once it is lost."""

    @property
    def signals(self) -> ReplicaSignals | None:
        """How replicas sharing this store reach each other; ``None`` when
        one process owns the records (nobody else to tell)."""

    def run_logs(self, bounds: LogBounds) -> RunLogs:
        """Where this store keeps the runs' event logs."""

    async def ping(self) -> bool:
        """Whether the store answers (for /health)."""

    async def status(self) -> str:
        """``ok``, ``unauthorized`` (it refuses the configured credentials) or
        ``unreachable``: ``/health``'s ``store.status``."""

    async def start(self) -> None:
        """Open connections and background work."""

    async def close(self) -> None:
        """Stop background work and close connections."""

    @property
    def kind(self) -> str:
        """``file``, ``redis``... for the banner and /health."""

    @property
    def durability(self) -> str:
        """How far a write goes before it counts: ``fsync``, ``process``
        (the file store's ``--durability``) or ``redis`` (the server's own)."""

    @property
    def shared(self) -> bool:
        """Whether other processes (replicas) use the same records."""

    @property
    def lease_seconds(self) -> float:
        """How long a claim lives without renewal."""

    def location(self) -> str:
        """Where records are kept, for the startup banner and /health."""

    def run_slots(self, purpose: str = "runs") -> RunSlots:
        """Where the admission limits count active runs (as widely as records
        are shared); another ``purpose`` (``reattach``) counts apart."""


def parse_owned_record(key: str, data: bytes, where: str, principal: str | None) -> ThreadRecord | None:
    """:func:`parse_stored_record` of a record that names ``principal`` as its
    owner; ``None``, parsing nothing, for one that names another."""
    said, owner = stored_principal(data)
    if said and owner != principal:
        return None
    return parse_stored_record(key, data, where)


def parse_stored_record(key: str, data: bytes, where: str) -> ThreadRecord:
    """A stored record of the thread ``key`` (:func:`~.record.thread_key`);
    ``CorruptRecord`` (naming ``where``) when it is not one, or belongs to
    another thread."""
    try:
        record = record_from_json(data)
    except ValueError as exc:
        raise CorruptRecord(f"{where}: {exc}") from exc
    if record.key != key:
        raise CorruptRecord(f"{where} belongs to another thread")
    return record
