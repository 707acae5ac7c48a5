"""The Redis store's thread list: a sorted set per owner, summaries in the records' hashes.

The save script writes the thread's summary into the record's hash (field
``summary``) with the record; right after, the store adds the thread's key
to ``<prefix>user-threads:<owner>`` (score: the record's updated time). The
list and the records live in different hash slots (a Redis Cluster may keep
them on different nodes), so every read and write here touches one slot at a
time. Records expire (retention) and sorted-set members cannot: a member
whose record is gone is removed when a page meets it, only if its score is
still the one the page saw (a save in between moved it, and keeps it).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import attrs

from .topology import Client
from ...threads.listing import SCAN_BUDGET, ListCursor, ThreadPage, ThreadSummary, state_marker
from ...threads.record import ThreadState

# KEYS: the owner's list. ARGV: highest score ('+inf', or the cursor's), '1'
# when there is a cursor, count. The members at or below that score, newest
# first, with their scores; as many more as share the cursor's score, which
# the caller skips up to the cursor's member.
_PAGE = """
local ties = 0
if ARGV[2] == '1' then ties = redis.call('ZCOUNT', KEYS[1], ARGV[1], ARGV[1]) end
return redis.call('ZREVRANGEBYSCORE', KEYS[1], ARGV[1], '-inf', 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[3]) + ties)
"""

# KEYS: the owner's list. ARGV: the member, the score the page saw. Drops
# a member whose record was found gone, unless a save moved it since.
_DROP = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) == tonumber(ARGV[2]) then return redis.call('ZREM', KEYS[1], ARGV[1]) end
return 0
"""

#: Index entries read per round trip when a state filter skips some.
FILTERED_BATCH = 500


@attrs.define
class RedisThreadList:
    """Pages of an owner's threads from the sorted set and the records' summaries."""

    client: Client
    #: owner id -> its sorted set.
    list_key: Callable[[str], str]
    #: thread key -> its record's hash.
    record_key: Callable[[str], str]
    _page_script: Any = attrs.field(init=False)
    _drop_script: Any = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._page_script = self.client.register_script(_PAGE)
        self._drop_script = self.client.register_script(_DROP)

    async def page(
        self, owner: str, after: ListCursor | None, limit: int, states: Collection[ThreadState] | None
    ) -> ThreadPage:
        """Up to ``limit`` threads after ``after``, newest first (Redis errors propagate)."""
        key = self.list_key(owner)
        # What the summaries of the wanted states hold, looked for before any is parsed.
        markers = [] if states is None else [state_marker(state) for state in states]
        found: list[ThreadSummary] = []
        position = after
        scanned = 0
        while len(found) < limit and scanned < SCAN_BUDGET:
            want = limit - len(found) if states is None else min(FILTERED_BATCH, SCAN_BUDGET - scanned)
            entries = await self._entries(key, position, want + 1)
            more = len(entries) > want
            batch = entries[:want]
            wanted, gone = await self._summaries(batch, markers)
            taken = 0
            for at, (member, score) in enumerate(batch):
                if len(found) == limit:
                    break
                taken += 1
                position = ListCursor(score, member.decode())
                summary = wanted.get(at)
                if summary is not None and (states is None or summary.state in states):
                    found.append(summary)
            scanned += taken
            await self._drop(key, gone)
            if not more and taken == len(batch):
                return ThreadPage(found, None)
        return ThreadPage(found, position)

    async def _entries(self, key: str, after: ListCursor | None, count: int) -> list[tuple[bytes, float]]:
        """Members after ``after`` (newest first), at most ``count``."""
        top = "+inf" if after is None else repr(after.updated_at)
        raw = await self._page_script(keys=[key], args=[top, "" if after is None else "1", count])
        pairs = [(_bytes(raw[i]), float(raw[i + 1])) for i in range(0, len(raw), 2)]
        if after is not None:
            mark = after.key.encode()
            pairs = [(m, s) for m, s in pairs if s < after.updated_at or (s == after.updated_at and m < mark)]
        return pairs[:count]

    async def _summaries(
        self, entries: list[tuple[bytes, float]], markers: list[bytes]
    ) -> tuple[dict[int, ThreadSummary], list[tuple[bytes, float]]]:
        """The wanted summaries by position in ``entries``, and the entries whose
        record is gone: one pipelined ``HGET`` per record (each in its own
        slot); with ``markers``, only the summaries holding one are parsed."""
        if not entries:
            return {}, []
        async with self.client.pipeline(transaction=False) as pipe:
            for member, _ in entries:
                pipe.hget(self.record_key(member.decode()), "summary")
            raws = await pipe.execute()
        wanted: dict[int, ThreadSummary] = {}
        gone: list[tuple[bytes, float]] = []
        for position, (entry, raw) in enumerate(zip(entries, raws, strict=True)):
            if raw is None:
                gone.append(entry)
            elif not markers or any(marker in raw for marker in markers):
                summary = _summary(raw)
                if summary is not None:
                    wanted[position] = summary
        return wanted, gone

    async def _drop(self, key: str, entries: list[tuple[bytes, float]]) -> None:
        for member, score in entries:
            await self._drop_script(keys=[key], args=[member, repr(score)])


def _summary(raw: Any) -> ThreadSummary | None:
    try:
        return ThreadSummary.from_json(raw)
    except ValueError:
        return None


def _bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()
