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
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from ..protocol.events import Event
from .expiry import ExpiryScheduler
from .machine import Machine, restore
from .record import ThreadRecord, ThreadState
from .store import Claim, PersistenceError, StoreUnavailable, ThreadStore

log = logging.getLogger(__name__)

_P = ParamSpec("_P")
_R = TypeVar("_R")


#: States in which pending interrupts keep their expiry deadline.
_WAITING = frozenset({ThreadState.INTERRUPTED, ThreadState.RUNNING})


class SinkClosed(Exception):
    """The sink cannot take events any more (the client went away)."""


class EventSink(Protocol):
    """Where a run's AG-UI events go (the SSE response)."""

    async def emit(self, events: list[Event]) -> None:
        """Deliver events in order; raise :class:`SinkClosed` when closed."""


class ThreadShell:
    """One claimed thread: its record, and the way transitions reach the store."""

    def __init__(self, store: ThreadStore, expiry: ExpiryScheduler, claim: Claim, record: ThreadRecord) -> None:
        self.store = store
        self.expiry = expiry
        self.claim = claim
        self.record = record
        self._released = False

    async def apply(
        self,
        transition: Callable[Concatenate[Machine, _P], _R],
        *args: _P.args,
        **kwargs: _P.kwargs,
    ) -> _R:
        """Take a transition and write its outcome; a write that fails
        raises :class:`PersistenceError` and the caller announces nothing."""
        before = self.record.state
        result = transition(restore(self.record), *args, **kwargs)
        await self.store.save(self.record, self.claim)
        await self._follow_deadline(before)
        return result

    async def apply_best_effort(
        self,
        transition: Callable[Concatenate[Machine, _P], _R],
        *args: _P.args,
        **kwargs: _P.kwargs,
    ) -> _R:
        """Like :meth:`apply`, for a transition whose announcement must reach
        the client even when the record cannot be written (an error)."""
        before = self.record.state
        result = transition(restore(self.record), *args, **kwargs)
        try:
            await self.store.save(self.record, self.claim)
        except PersistenceError as exc:
            log.warning("thread %s: %s not persisted: %s", self.record.thread_id, self.record.state.value, exc)
        else:
            await self._follow_deadline(before)
        return result

    async def _follow_deadline(self, before: ThreadState) -> None:
        # A resume keeps its interrupts' deadline until the runtime took the
        # answers: if its process dies, the expiry timer is one of the
        # requests that recover the thread.
        record = self.record
        deadline = record.next_deadline if record.state in _WAITING else None
        if deadline is not None:
            await self.expiry.schedule(record.thread_id, deadline)
        elif before is ThreadState.INTERRUPTED or self.expiry.is_armed(record.thread_id):
            await self.expiry.cancel(record.thread_id)

    async def release(self) -> None:
        """Give the claim back (once)."""
        if not self._released:
            self._released = True
            await self.store.release(self.claim)

    # -------------------------------------------------------------- leases
    async def keep_claim(self, on_lost: Callable[[], Any] | None = None) -> None:
        """Renew the claim's lease until cancelled. A store that does not
        answer is retried until the lease would have run out; a lost lease
        calls ``on_lost`` (writes would be refused anyway: the store checks
        the claim's fencing token)."""
        lease = self.store.lease_seconds
        renewed_at = time.monotonic()
        while not self._released:
            await asyncio.sleep(lease / 3)
            try:
                kept = await self.store.renew(self.claim)
            except StoreUnavailable:
                if time.monotonic() - renewed_at < lease:
                    continue
                kept = False
            if kept:
                renewed_at = time.monotonic()
                continue
            log.error("thread %s: lease lost by %s", self.claim.thread_id, self.claim.run_id)
            if on_lost is not None:
                on_lost()
            return

    @contextlib.asynccontextmanager
    async def renewing(self) -> AsyncIterator[None]:
        """Keep the lease alive around slow calls to the runtime."""
        keeper = asyncio.create_task(self.keep_claim())
        try:
            yield
        finally:
            keeper.cancel()
