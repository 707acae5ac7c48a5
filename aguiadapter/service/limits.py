"""Admission limits: how many runs may stream at once, in all and per user.

``--max-active-runs N`` bounds the whole server (all replicas together on a
shared store) and answers ``SERVER_BUSY`` (503) beyond it;
``--max-active-runs-per-user M`` bounds each user (the verified principal,
else the body's ``userId``; runs without one share one anonymous count) and
answers ``TOO_MANY_RUNS`` (429). Both carry ``Retry-After``.

A run holds a slot from just before its admission until its stream ends, so
a refused request never loads, creates or claims a thread and never reaches
the runtime. Slots are counted where the threads live (:mod:`.slots`, one
per store): in this process's memory for the file store, whose state
folder belongs to one process, and in Redis for the shared store, where a
slot is a lease that the replica renews while the run streams, so that the
slots of a replica that dies lapse within one lease.
"""

from __future__ import annotations

import asyncio
import logging
import math
import uuid

import attrs

from ..errors import AdapterError, ErrorCode
from ..store.slots import RunSlot, RunSlots
from ..store.contract import StoreUnavailable
from ..tasks import cancel_and_wait

log = logging.getLogger(__name__)

#: ``Retry-After`` of a refusal: seconds after which trying again is worth it.
#: A hint, not a reservation; it is also the default lease of a slot in Redis,
#: the longest a dead replica's slots can keep counting.
RETRY_AFTER_SECONDS = 5


class LimitReached(AdapterError):
    """``SERVER_BUSY`` or ``TOO_MANY_RUNS``, answered with ``Retry-After``."""

    def __init__(self, code: ErrorCode, retry_after: int = RETRY_AFTER_SECONDS, message_id: str | None = None) -> None:
        super().__init__(code, message_id)
        self.retry_after = retry_after

    def response_headers(self) -> dict[str, str]:
        """``Retry-After``: whole seconds (RFC 9110, 10.2.3)."""
        return {"Retry-After": str(self.retry_after)}


@attrs.define(eq=False, slots=False)
class AdmissionLimits:
    """The gate the run handler passes before admission, and leaves when the run ends."""

    slots: RunSlots
    max_total: int | None = None
    max_per_user: int | None = None
    new_threads_per_user: int | None = attrs.field(default=None, kw_only=True)
    new_threads_window_seconds: float = attrs.field(default=60.0, kw_only=True)
    #: Where re-attached streams are counted, apart from runs (the same per-user limit).
    reattach_slots: RunSlots | None = attrs.field(default=None, kw_only=True)
    #: Slots this process holds, renewed together while their runs stream.
    held: dict[str, RunSlot] = attrs.field(factory=dict, init=False)
    #: Re-attach slots this process holds.
    held_reattaches: dict[str, RunSlot] = attrs.field(factory=dict, init=False)
    _renewer: asyncio.Task[None] | None = attrs.field(default=None, init=False)

    @property
    def enabled(self) -> bool:
        """Whether any limit is configured (without one, nothing is counted)."""
        return self.max_total is not None or self.max_per_user is not None

    async def start(self) -> None:
        """Renew held slots every third of a lease (stores whose slots lapse)."""
        lease = self.slots.lease_seconds
        if self.enabled and lease is not None:
            self._renewer = asyncio.create_task(self._renew_forever(lease / 3), name="run-slot-renewer")

    async def close(self) -> None:
        """Stop renewing (released or not, the slots then lapse by themselves)."""
        renewer, self._renewer = self._renewer, None
        await cancel_and_wait(renewer)

    async def acquire(self, user: str | None) -> RunSlot | None:
        """A slot for a run of ``user``; ``LimitReached`` when a limit says no.

        ``None`` when no limit is configured: nothing is counted then.
        """
        if not self.enabled:
            return None
        slot = RunSlot(f"slot-{uuid.uuid4()}", user or "")
        try:
            taken = await self.slots.take(slot, self.max_total, self.max_per_user)
        except StoreUnavailable as exc:
            raise AdapterError(ErrorCode.STATE_STORE_UNAVAILABLE) from exc
        if taken == "user_full":
            raise LimitReached(ErrorCode.TOO_MANY_RUNS)
        if taken == "server_full":
            raise LimitReached(ErrorCode.SERVER_BUSY)
        self.held[slot.slot_id] = slot
        return slot

    async def release(self, slot: RunSlot | None) -> None:
        """Give a slot back (``None``: nothing was counted)."""
        if slot is None:
            return
        if self.held_reattaches.pop(slot.slot_id, None) is not None and self.reattach_slots is not None:
            await self.reattach_slots.release(slot)
            return
        self.held.pop(slot.slot_id, None)
        await self.slots.release(slot)

    async def acquire_reattach(self, user: str | None) -> RunSlot | None:
        """A slot for a re-attached stream of ``user``: at most ``max_per_user``
        of them per user, counted apart from runs (a run whose client left
        still counts as a run; its own client's re-attach must get in).
        ``None`` when no per-user limit is set."""
        if self.max_per_user is None or self.reattach_slots is None:
            return None
        slot = RunSlot(f"reattach-{uuid.uuid4()}", user or "")
        try:
            taken = await self.reattach_slots.take(slot, None, self.max_per_user)
        except StoreUnavailable as exc:
            raise AdapterError(ErrorCode.STATE_STORE_UNAVAILABLE) from exc
        if taken != "taken":
            raise LimitReached(ErrorCode.TOO_MANY_RUNS, message_id="too_many_reattaches")
        self.held_reattaches[slot.slot_id] = slot
        return slot

    async def new_thread(self, owner: str) -> None:
        """Count a new thread of ``owner`` (the list it joins:
        :func:`~.listing.list_owner`); ``LimitReached`` (``TOO_MANY_THREADS``)
        beyond ``new_threads_per_user`` in the window.

        Unverified callers are counted too, by the ``userId`` their body
        names (or none): a caller may rotate it, but then each list it grows
        is a list of its own, bounded as any other, and no list grows faster
        than the limit (the file store keeps each in memory, the Redis store
        pages through each)."""
        if not self.new_threads_per_user:
            return
        try:
            wait = await self.slots.new_thread(owner, self.new_threads_per_user, self.new_threads_window_seconds)
        except StoreUnavailable as exc:
            raise AdapterError(ErrorCode.STATE_STORE_UNAVAILABLE) from exc
        if wait > 0:
            raise LimitReached(ErrorCode.TOO_MANY_THREADS, max(1, math.ceil(wait)))

    async def _renew_forever(self, every: float) -> None:
        while True:
            await asyncio.sleep(every)
            try:
                if self.held:
                    await self.slots.renew(list(self.held.values()))
                if self.held_reattaches and self.reattach_slots is not None:
                    await self.reattach_slots.renew(list(self.held_reattaches.values()))
            except StoreUnavailable as exc:
                log.warning("run slots not renewed (they lapse if this goes on): %s", exc)
