"""One loop per process renews the leases of every claim it holds.

A claim's lease (an hour on the file store, seconds on a shared store)
must be renewed while its run streams or while a slow call to the runtime
is on its way. A task per run that sleeps a third of the lease costs a
task, a timer and their memory for every open stream; here one task wakes
every third of a lease, renews all the claims held at that moment, and
stops when none is held. The rules are those of a lease: a store that does
not answer is asked again until the lease would have run out; a claim the
store refuses is lost, and whoever held it is told (writes would be
refused anyway: the store checks the claim's fencing token).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import attrs

from ..store.contract import Claim, StoreUnavailable, ThreadStore

log = logging.getLogger(__name__)


@attrs.define
class _Held:
    renewed_at: float
    #: How many holders keep this claim (a run, a slow call inside it).
    holders: int = 1
    on_lost: list[Callable[[], Any]] = attrs.Factory(list)


class LeaseKeeper:
    """Renews the leases of the claims held in this process."""

    def __init__(self, store: ThreadStore, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.clock = clock
        self._held: dict[Claim, _Held] = {}
        self._task: asyncio.Task[None] | None = None

    @property
    def held(self) -> int:
        """How many claims are kept right now."""
        return len(self._held)

    def hold(self, claim: Claim, on_lost: Callable[[], Any] | None = None) -> None:
        """Keep ``claim`` alive until :meth:`drop` (holds nest)."""
        held = self._held.get(claim)
        if held is None:
            held = self._held[claim] = _Held(self.clock())
        else:
            held.holders += 1
        if on_lost is not None:
            held.on_lost.append(on_lost)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._renew_while_held())

    def drop(self, claim: Claim) -> None:
        """One holder of ``claim`` lets go; the last one stops its renewal."""
        held = self._held.get(claim)
        if held is None:
            return
        held.holders -= 1
        if held.holders <= 0:
            del self._held[claim]

    def forget(self, claim: Claim) -> None:
        """Stop renewing ``claim`` whoever holds it (it was released)."""
        self._held.pop(claim, None)

    @contextlib.asynccontextmanager
    async def holding(self, claim: Claim) -> AsyncIterator[None]:
        """Keep the lease alive around a slow call."""
        self.hold(claim)
        try:
            yield
        finally:
            self.drop(claim)

    async def close(self) -> None:
        """Stop renewing (shutdown)."""
        self._held.clear()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _renew_while_held(self) -> None:
        lease = self.store.lease_seconds
        while self._held:
            await asyncio.sleep(lease / 3)
            claims = list(self._held)
            answers = await asyncio.gather(*(self._renew(claim) for claim in claims), return_exceptions=True)
            for claim, kept in zip(claims, answers, strict=True):
                if isinstance(kept, BaseException) and not isinstance(kept, Exception):
                    raise kept
                self._settle(claim, kept if isinstance(kept, bool) else None, lease)

    async def _renew(self, claim: Claim) -> bool | None:
        """``True`` renewed, ``False`` lost, ``None`` the store did not answer."""
        try:
            return await self.store.renew(claim)
        except StoreUnavailable:
            return None

    def _settle(self, claim: Claim, kept: bool | None, lease: float) -> None:
        held = self._held.get(claim)
        if held is None:
            return  # dropped while its renewal was on its way
        now = self.clock()
        if kept:
            held.renewed_at = now
            return
        if kept is None and now - held.renewed_at < lease:
            return
        del self._held[claim]
        log.error("thread %s: lease lost by %s", claim.thread_id, claim.run_id)
        for callback in held.on_lost:
            callback()
