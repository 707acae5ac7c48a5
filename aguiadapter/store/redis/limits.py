"""Run slots shared by every replica on one Redis (the admission limits' counts).

Two sorted sets per deployment prefix (see ``docs/redis-layout.md``):
``<prefix>{runs}`` holds every active run's slot and ``<prefix>{runs}:user:<user>``
the slots of one user (the user hashed: :func:`hashed_user`); a member's score is when its lease ends (Redis's own
clock, in milliseconds). Both carry the hash tag ``{runs}``: the scripts
count the whole server and one user together, so on a Redis Cluster every
run slot lives on one node (a handful of small commands per run). Taking a slot is one Lua script: drop the lapsed
members, compare the counts with the limits, add the slot to both sets.
The replica renews the leases of its slots every third of a lease while the
runs stream, and removes them when they end; a replica that dies stops
renewing, and its slots stop counting one lease later.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import uuid
from collections.abc import Awaitable, Collection, Sequence
from typing import TypeVar

from redis.exceptions import RedisError

from .topology import Client
from ..slots import RunSlot, Taken
from ..contract import StoreUnavailable

log = logging.getLogger(__name__)

#: Every Redis call ends within this budget, like the store's own calls.
CALL_TIMEOUT_SECONDS = 3.0
#: Slots renewed per script call.
RENEW_BATCH = 500
_ERRORS = (RedisError, OSError, asyncio.TimeoutError)
_T = TypeVar("_T")

_NOW_MS = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
"""

# KEYS: all runs, the user's runs. ARGV: slot id, lease ms, max total, max per user (0: no limit).
# Returns 1 (taken), -1 (the server is full), -2 (the user is at their limit).
_TAKE = _NOW_MS + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local max_user = tonumber(ARGV[4])
if max_user > 0 and redis.call('ZCARD', KEYS[2]) >= max_user then return -2 end
local max_total = tonumber(ARGV[3])
if max_total > 0 and redis.call('ZCARD', KEYS[1]) >= max_total then return -1 end
local expiry = now + tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], expiry, ARGV[1])
redis.call('ZADD', KEYS[2], expiry, ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return 1
"""

# KEYS: the user sets to count. Returns their sizes, lapsed slots left out.
_HELD = _NOW_MS + """
local counts = {}
for i = 1, #KEYS do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
  counts[i] = redis.call('ZCARD', KEYS[i])
end
return counts
"""

# KEYS: all runs, then the user set of each slot. ARGV: lease ms, then each slot id (in KEYS[2..] order).
_RENEW = _NOW_MS + """
local expiry = now + tonumber(ARGV[1])
for i = 2, #KEYS do
  redis.call('ZADD', KEYS[1], expiry, ARGV[i])
  redis.call('ZADD', KEYS[i], expiry, ARGV[i])
  redis.call('PEXPIRE', KEYS[i], ARGV[1])
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return #KEYS - 1
"""

# KEYS: all runs, the user's runs. ARGV: slot id.
_RELEASE = """
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
"""

# KEYS: the user's new threads. ARGV: a unique member, the limit, the window ms.
# Returns 0 (counted) or the milliseconds until the oldest leaves the window.
_NEW_THREAD = _NOW_MS + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[3]))
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return math.max(1, tonumber(oldest[2]) + tonumber(ARGV[3]) - now)
end
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 0
"""

_TAKEN: dict[int, Taken] = {1: "taken", -1: "server_full", -2: "user_full"}


class RedisRunSlots:
    """Run slots as leases in two sorted sets (all runs, and per user)."""

    def __init__(self, client: Client, prefix: str, lease_ms: int) -> None:
        self.prefix = prefix
        self.lease_ms = lease_ms
        self._take = client.register_script(_TAKE)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)
        self._new_thread = client.register_script(_NEW_THREAD)
        self._held = client.register_script(_HELD)

    @property
    def lease_seconds(self) -> float | None:
        """A slot lapses this long after its last renewal."""
        return self.lease_ms / 1000

    @property
    def all_runs_key(self) -> str:
        """The sorted set of every replica's active runs."""
        return f"{self.prefix}{{runs}}"

    def user_key(self, user: str) -> str:
        """The sorted set of one user's active runs (the user hashed, as in the thread keys)."""
        return f"{self.prefix}{{runs}}:user:{hashed_user(user)}"

    async def take(self, slot: RunSlot, max_total: int | None, max_per_user: int | None) -> Taken:
        """Take a slot unless a limit is reached (one script, so replicas cannot both take the last)."""
        keys = [self.all_runs_key, self.user_key(slot.user)]
        args: list[str | int] = [slot.slot_id, self.lease_ms, max_total or 0, max_per_user or 0]
        try:
            answer = await _bounded(self._take(keys=keys, args=args))
        except _ERRORS as exc:
            raise StoreUnavailable(f"redis: {_why(exc)}") from exc
        return _TAKEN[int(answer)]

    async def renew(self, slots: Collection[RunSlot]) -> None:
        """Extend the leases of ``slots`` (in batches)."""
        batch = list(slots)
        for start in range(0, len(batch), RENEW_BATCH):
            part = batch[start:start + RENEW_BATCH]
            keys = [self.all_runs_key, *(self.user_key(slot.user) for slot in part)]
            args: list[str | int] = [self.lease_ms, *(slot.slot_id for slot in part)]
            try:
                await _bounded(self._renew(keys=keys, args=args))
            except _ERRORS as exc:
                raise StoreUnavailable(f"redis: {_why(exc)}") from exc

    async def release(self, slot: RunSlot) -> None:
        """Remove the slot; if Redis does not answer, it lapses after its lease."""
        keys = [self.all_runs_key, self.user_key(slot.user)]
        try:
            await _bounded(self._release(keys=keys, args=[slot.slot_id]))
        except _ERRORS as exc:
            log.warning("run slot not released (it lapses by itself): %s", _why(exc))


    async def held(self, users: Sequence[str]) -> list[int]:
        """The live slots of each user, every replica's, in one script."""
        try:
            answer = await _bounded(self._held(keys=[self.user_key(user) for user in users], args=[]))
        except _ERRORS as exc:
            raise StoreUnavailable(f"redis: {_why(exc)}") from exc
        return [int(count) for count in answer]

    async def new_thread(self, user: str, limit: int, window_seconds: float) -> float:
        """A sliding window per user in ``<prefix>new-threads:<sha256(user)[:32]>``, shared by every replica."""
        window_ms = max(1, int(window_seconds * 1000))
        keys = [f"{self.prefix}new-threads:{hashed_user(user)}"]
        try:
            answer = await _bounded(self._new_thread(keys=keys, args=[uuid.uuid4().hex, limit, window_ms]))
        except _ERRORS as exc:
            raise StoreUnavailable(f"redis: {_why(exc)}") from exc
        return int(answer) / 1000


def hashed_user(user: str) -> str:
    """A user as key names hold it: 32 hex of its SHA-256, so that no key
    (``redis-cli --scan``, a dump, a slow log) holds a principal in clear;
    the empty user (runs without one) stays empty."""
    return hashlib.sha256(user.encode()).hexdigest()[:32] if user else ""


async def _bounded(call: Awaitable[_T]) -> _T:
    return await asyncio.wait_for(call, CALL_TIMEOUT_SECONDS)


def _why(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
