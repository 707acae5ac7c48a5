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


#: How long a turn's task binding may wait for the turn's next write before
#: it is written on its own (:meth:`ThreadShell.defer`). A short turn ends
#: well within it (its end's write carries the binding: two writes a short
#: turn, not three); a turn still running then has it on the store, for the
#: history and for a recovery that need not ask the runtime.
DEFERRED_WRITE_SECONDS: Final = 0.2


def needs_sync(event: Transition[Any], record: ThreadRecord) -> bool:
    """Whether ``event``'s write must be durable before anything it
    announces goes out, or may wait for the thread's next write
    (:meth:`ThreadShell.defer`; written on its own, it is unsettled:
    ``store.save(..., durable=False)``).

    Only a turn's task binding waits: the turn itself is durable (its
    start was), and so is whatever follows the binding that recovery
    needs (an interrupt's write, the end's). A process killed or a power
    cut before the binding reached the disk leaves a running turn without
    its task id, and recovery of a dead turn asks the runtime for the
    context's current task to cancel it (service/thread_service.py
    ``_find_turn_task``). Nothing announces a recoverable success before
    the binding is durable: the end's write carries it. A resume's (or a
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

    async def send(self, chunk: bytes, count: int, *, last: bool = False) -> None:
        """Deliver ``count`` events, framed as SSE in ``chunk``, in order;
        raise :class:`SinkClosed` when closed. ``last``: the run's terminal
        event is among them; nothing of the run follows."""



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
    #: A transition taken in memory whose write waits (:meth:`defer`): its
    #: name, and what to call when its own write fails.
    _unwritten: tuple[str, Callable[[str], Any]] | None = attrs.field(default=None, init=False)
    _unwritten_timer: asyncio.TimerHandle | None = attrs.field(default=None, init=False)
    #: The timer's write, held (the loop keeps only a weak reference to a task).
    _unwritten_write: asyncio.Task[None] | None = attrs.field(default=None, init=False)

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
            await self._save(event, live, draft)
            await self._follow_deadline(before)
            return result

    async def defer(self, event: Transition[_R], lost: Callable[[str], Any]) -> _R:
        """Take ``event``'s transition in memory and let its write wait: the
        thread's next write carries it, or it is written on its own (unsettled)
        :data:`DEFERRED_WRITE_SECONDS` later; its own write failing calls
        ``lost`` with its name (the run then ends as one whose write was
        lost). Only a transition that announces nothing that depends on it
        and moves no deadline waits (:func:`needs_sync` is false: a turn's
        task binding); any other is :meth:`apply`'d."""
        if needs_sync(event, self.record) or self._released:
            return await self.apply(event)
        async with self._lock:
            # No copy: nothing can fail before the next write (a copy's new
            # containers, made here and again at the write, would scatter a
            # run's long-lived objects: an idle stream's memory shows it).
            result = apply(self.record, event)
            if self._unwritten is None:
                self._unwritten = (event.name, lost)
                self._unwritten_timer = asyncio.get_running_loop().call_later(
                    DEFERRED_WRITE_SECONDS, self._write_unwritten)
            return result

    async def _save(self, event: Transition[Any], live: ThreadRecord, draft: ThreadRecord) -> None:
        """Write ``draft``, then make it the live record. Whatever waited
        unwritten goes with it; if this write fails, it waits no more either:
        the run ends by this lost write, and its end's write carries it."""
        try:
            if needs_sync(event, live):
                saved = await self.store.save(draft, self.claim)
            else:
                saved = await self.store.save(draft, self.claim, durable=False)
        except PersistenceError as exc:
            raise LostWrite(event.name, exc) from exc
        finally:
            self._written()
        saved.stamp(draft)
        commit(live, draft)

    def _write_unwritten(self) -> None:
        self._unwritten_timer = None
        self._unwritten_write = asyncio.create_task(self._flush())

    async def _flush(self) -> None:
        """Write what :meth:`defer` left unwritten, if no write carried it yet."""
        try:
            await self._write_waiting()
        finally:
            # Done: a run that goes on (an idle stream) keeps no finished task.
            self._unwritten_write = None

    async def _write_waiting(self) -> None:
        async with self._lock:
            if self._unwritten is None or self._released:
                return
            name, lost = self._unwritten
            # The live record as it is (the lock keeps transitions out; a
            # store encodes what it is given and changes none of it).
            live = self.record
            try:
                saved = await self.store.save(live, self.claim, durable=False)
            except PersistenceError as exc:
                log.warning("thread %s: the write of %s failed: %s", live.thread_id, name, exc)
                self._unwritten = None
                lost(name)
                return
            saved.stamp(live)
            self._unwritten = None

    def _written(self) -> None:
        """A write carried whatever waited: nothing is left to write on its own."""
        if self._unwritten is not None:
            self._unwritten = None
            self._drop_timer()

    def _drop_timer(self) -> None:
        if self._unwritten_timer is not None:
            self._unwritten_timer.cancel()
            self._unwritten_timer = None

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
            # What waited unwritten is the run's to write: a run that ends
            # writes its end (which carries it), one whose end was lost keeps
            # the record as it was.
            self._unwritten = None
            self._drop_timer()
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
