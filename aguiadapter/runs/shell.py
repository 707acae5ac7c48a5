"""The async shell around the thread machine: load, apply, save, emit.

A :class:`ThreadShell` holds one thread that this process claimed (the
claim is what makes ``THREAD_BUSY`` true, across replicas on a shared
store). It applies a transition of :mod:`.machine` to the record, writes the
record (fenced by the claim's token on a shared store), keeps the thread's
expiry deadline in step with its state, and only then lets the caller emit
what the transition announced. Nothing here decides anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, Final, Protocol, TypeVar

import attrs

from ..threads.machine import BindTask, Transition, apply
from ..threads.record import RunKind, ThreadRecord
from ..store.contract import Claim, LostWrite, PersistenceError, ThreadStore
from ..threads.record import copy_record

log = logging.getLogger(__name__)

_R = TypeVar("_R")


#: The record's fields, in the order :func:`commit` copies them.
_FIELDS: Final = tuple(field.name for field in attrs.fields(ThreadRecord))


def needs_sync(event: Transition[Any], record: ThreadRecord) -> bool:
    """Whether ``event``'s write must be durable before anything it
    announces goes out, or may wait for the thread's next durable save
    (``store.save(..., durable=False)``).

    Only a turn's task binding waits: the turn itself is durable (its
    start was), and so is whatever follows the binding that recovery
    needs (an interrupt's write, the end's). A power cut before the next
    durable save leaves a running turn without its task id, and recovery
    of a dead turn asks the runtime for the context's current task to
    cancel it (service/thread_service.py ``_recover``). A resume's (or a
    follow's) binding stays synced: the answers it carries are settled by
    looking at its task."""
    return not (isinstance(event, BindTask) and record.active_run_kind is RunKind.TURN)


def working_copy(record: ThreadRecord) -> ThreadRecord:
    """A copy of ``record`` that a transition may change without touching
    ``record``: its containers are new; the entries they hold are shared, and
    the machine replaces an entry instead of changing it (pending interrupts,
    which it does change, are copied). The pipeline cursor is shared on
    purpose: the run's translator moves it between transitions."""
    draft = copy_record(record)
    draft.runs = dict(record.runs)
    draft.pending_interrupts = [attrs.evolve(item) for item in record.pending_interrupts]
    draft.applied_answers = dict(record.applied_answers)
    return draft


def commit(live: ThreadRecord, draft: ThreadRecord) -> None:
    """Make the live record what the stored draft says (in place: the run
    and the service hold the live record)."""
    for name in _FIELDS:
        setattr(live, name, getattr(draft, name))


class SinkClosed(Exception):
    """The sink cannot take events any more (the client went away)."""


class EventSink(Protocol):
    """Where a run's AG-UI events go (the SSE response of its request)."""

    async def send(self, chunk: bytes, count: int) -> None:
        """Deliver ``count`` events, framed as SSE in ``chunk``, in order;
        raise :class:`SinkClosed` when closed."""



class Deadlines(Protocol):
    """The process's expiry timers, as a run's shell sees them (a port: the
    timers live in the service, which hands them down)."""

    async def schedule(self, thread_id: str, expires_at: float) -> None:
        """Arm (or move) the thread's timer to the absolute time ``expires_at``."""

    async def cancel(self, thread_id: str) -> None:
        """Disarm the thread's timer, here and in the store."""

    def is_armed(self, thread_id: str) -> bool:
        """Whether this process holds a timer for the thread."""


class Leases(Protocol):
    """The process's lease keeper, as a run's shell sees it (a port)."""

    def hold(self, claim: Claim, on_lost: Callable[[], Any] | None = None) -> None:
        """Renew ``claim`` until :meth:`drop`; a lost lease calls ``on_lost``."""

    def drop(self, claim: Claim) -> None:
        """Stop renewing ``claim``."""

    def forget(self, claim: Claim) -> None:
        """The claim was given back: forget it."""

    def holding(self, claim: Claim) -> contextlib.AbstractAsyncContextManager[None]:
        """Renew ``claim`` for as long as the block runs."""


@attrs.define(eq=False, slots=False)
class ThreadShell:
    """One claimed thread: its record, and the way transitions reach the store."""

    store: ThreadStore
    expiry: Deadlines
    claim: Claim
    record: ThreadRecord
    leases: Leases
    _released: bool = attrs.field(default=False, init=False)
    _kept: bool = attrs.field(default=False, init=False)
    #: One transition at a time: a run's relay and its grace watcher
    #: both write the record, and a shared store fences by version.
    _lock: asyncio.Lock = attrs.field(factory=asyncio.Lock, init=False)

    async def apply(self, event: Transition[_R]) -> _R:
        """Take ``event``'s transition and write its outcome, as h11 commits a sent
        event only once it went out: the transition works on a copy of the
        record, and the live record becomes that copy only after the store
        took it. A write that fails raises :class:`LostWrite` (a :class:`PersistenceError`); the
        record (in memory, and on disk) is what it was, and the caller
        announces nothing of the transition."""
        async with self._lock:
            live = self.record
            before = live.deadline
            draft = working_copy(live)
            result = apply(draft, event)
            try:
                if needs_sync(event, live):
                    saved = await self.store.save(draft, self.claim)
                else:
                    saved = await self.store.save(draft, self.claim, durable=False)
            except PersistenceError as exc:
                raise LostWrite(event.name, exc) from exc
            saved.stamp(draft)
            commit(live, draft)
            await self._follow_deadline(before)
            return result

    async def _follow_deadline(self, before: float | None) -> None:
        """Interrupts that expire (a resume keeps their deadline until the
        runtime took the answers: if its process dies, the expiry timer is one
        of the requests that recover the thread), and a handed-off run whose
        grace ends, are looked at by the expiry timers of any replica."""
        record = self.record
        deadline = record.deadline
        if deadline is not None:
            await self.expiry.schedule(record.key, deadline)
        elif before is not None or self.expiry.is_armed(record.key):
            await self.expiry.cancel(record.key)

    async def release(self) -> None:
        """Give the claim back (once)."""
        if not self._released:
            self._released = True
            self.leases.forget(self.claim)
            await self.store.release(self.claim)

    # -------------------------------------------------------------- leases
    def keep_claim(self, on_lost: Callable[[], Any] | None = None) -> None:
        """Have the process's lease keeper renew the claim until
        :meth:`stop_keeping` or :meth:`release`; a lost lease calls
        ``on_lost``."""
        if not self._kept and not self._released:
            self._kept = True
            self.leases.hold(self.claim, on_lost)

    def stop_keeping(self) -> None:
        """The run no longer needs its lease renewed (idempotent)."""
        if self._kept:
            self._kept = False
            self.leases.drop(self.claim)

    @contextlib.asynccontextmanager
    async def renewing(self) -> AsyncIterator[None]:
        """Keep the lease alive around slow calls to the runtime."""
        async with self.leases.holding(self.claim):
            yield
