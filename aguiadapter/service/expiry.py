"""Interrupt expiry: timers armed from absolute deadlines.

Deadlines live in the store, so a restarted adapter re-arms every timer from
the stored absolute time without reading any thread file; a thread whose
deadline passed while nobody ran is expired right after startup.

The scheduler also knows which deadlines are this process's own: those it
set, and with a store of its own (the file store) every stored one. That is
the pending-interrupt count a replica reports; with a shared store each
replica arms every deadline, so its timers say nothing about whose they are.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from ..store.contract import PersistenceError, ThreadStore

log = logging.getLogger(__name__)


class ExpiryScheduler:
    """Calls ``on_expire(thread_id)`` when a thread's interrupts expire."""

    def __init__(
        self,
        store: ThreadStore,
        on_expire: Callable[[str], Coroutine[Any, Any, None]],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.on_expire = on_expire
        self.clock = clock
        self._timers: dict[str, asyncio.TimerHandle] = {}
        #: The deadline each armed timer is for.
        self._deadlines: dict[str, float] = {}
        self._running: set[asyncio.Task[None]] = set()
        #: The deadlines this process set (or owns) and has not seen cleared.
        self._own: dict[str, float] = {}

    async def start(self) -> None:
        """Re-arm every stored deadline."""
        stored = await self.store.deadlines()
        for thread_id, expires_at in stored.items():
            self._arm(thread_id, expires_at)
        if not self.store.shared:
            self._own.update(stored)

    async def schedule(self, thread_id: str, expires_at: float) -> None:
        """Store a thread's deadline and arm its timer (nothing to do when
        this timer is armed for that deadline already)."""
        if self._deadlines.get(thread_id) == expires_at and thread_id in self._timers:
            return
        await self.store.set_deadline(thread_id, expires_at)
        self._own[thread_id] = expires_at
        self._arm(thread_id, expires_at)

    async def pending_here(self) -> int:
        """Threads waiting for answers to interrupts this process announced
        (its own deadlines that the store still holds unchanged: another
        replica may have answered, expired or re-interrupted them since)."""
        own = self._own
        if not own:
            return 0
        stored = await self.store.deadlines_of(list(own))
        for thread_id, expires_at in list(own.items()):
            now = stored.get(thread_id)
            if now is None or abs(now - expires_at) > 1e-6:
                del own[thread_id]
        return len(own)

    async def cancel(self, thread_id: str) -> None:
        """Forget a thread's deadline (its interrupts were answered or ended)."""
        self._own.pop(thread_id, None)
        timer = self._timers.pop(thread_id, None)
        self._deadlines.pop(thread_id, None)
        if timer is not None:
            timer.cancel()
        try:
            await self.store.set_deadline(thread_id, None)
        except PersistenceError as exc:
            # A stale deadline only causes a harmless check later.
            log.warning("thread %s: deadline not cleared: %s", thread_id, exc)

    def is_armed(self, thread_id: str) -> bool:
        """Whether this process has a timer for the thread."""
        return thread_id in self._timers

    async def close(self) -> None:
        """Disarm every timer and wait for expiries in progress."""
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        if self._running:
            await asyncio.wait(self._running, timeout=1.0)

    def _arm(self, thread_id: str, expires_at: float) -> None:
        loop = asyncio.get_running_loop()
        previous = self._timers.pop(thread_id, None)
        if previous is not None:
            previous.cancel()
        delay = max(0.0, expires_at - self.clock())
        self._timers[thread_id] = loop.call_later(delay, self._fire, thread_id)
        self._deadlines[thread_id] = expires_at

    def _fire(self, thread_id: str) -> None:
        self._timers.pop(thread_id, None)
        self._deadlines.pop(thread_id, None)
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(self.on_expire(thread_id))
        self._running.add(task)
        task.add_done_callback(self._running.discard)
