"""The Redis store's thread list: a sorted set per owner, summaries in the records' hashes.

The save script adds the thread's key to ``<prefix>user-threads:<owner>``
(score: the record's updated time) and writes the thread's summary into the
record's hash (field ``summary``), in the same script as the record: the list
and the record never disagree. Records expire (retention) and sorted-set
members cannot: a member whose record is gone is removed when a page meets
it, by a script that checks that the record is still absent.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import attrs
import redis.asyncio as aioredis

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

# KEYS: records. ARGV: what the wanted summaries hold (none: every one is
# wanted). Returns {positions of wanted summaries, their summaries, positions
# of records that are gone}: one reply, however few of them are wanted.
_SUMMARIES = """
local wanted, summaries, gone = {}, {}, {}
for i, key in ipairs(KEYS) do
  local summary = redis.call('HGET', key, 'summary')
  if not summary then
    gone[#gone + 1] = i
  else
    local keep = #ARGV == 0
    for _, marker in ipairs(ARGV) do
      if string.find(summary, marker, 1, true) then keep = true break end
    end
    if keep then wanted[#wanted + 1] = i; summaries[#summaries + 1] = summary end
  end
end
return {wanted, summaries, gone}
"""

# KEYS: the owner's list, the record. ARGV: the member. Drops a member whose record expired.
_DROP = """
if redis.call('EXISTS', KEYS[2]) == 0 then return redis.call('ZREM', KEYS[1], ARGV[1]) end
return 0
"""

#: Index entries read per round trip when a state filter skips some.
FILTERED_BATCH = 500


@attrs.define
class RedisThreadList:
    """Pages of an owner's threads from the sorted set and the records' summaries."""

    client: aioredis.Redis
    #: owner id -> its sorted set.
    list_key: Callable[[str], str]
    #: thread key -> its record's hash.
    record_key: Callable[[str], str]
    _page_script: Any = attrs.field(init=False)
    _summaries_script: Any = attrs.field(init=False)
    _drop_script: Any = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._page_script = self.client.register_script(_PAGE)
        self._summaries_script = self.client.register_script(_SUMMARIES)
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
            wanted, gone = await self._summaries([member for member, _ in batch], markers)
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
        self, members: list[bytes], markers: list[bytes]
    ) -> tuple[dict[int, ThreadSummary], list[bytes]]:
        """The wanted summaries by position in ``members``, and the members whose record is gone."""
        if not members:
            return {}, []
        keys = [self.record_key(member.decode()) for member in members]
        positions, raws, gone = await self._summaries_script(keys=keys, args=markers)
        wanted = {}
        for position, raw in zip(positions, raws, strict=True):
            summary = _summary(raw)
            if summary is not None:
                wanted[int(position) - 1] = summary
        return wanted, [members[int(position) - 1] for position in gone]

    async def _drop(self, key: str, members: list[bytes]) -> None:
        for member in members:
            await self._drop_script(keys=[key, self.record_key(member.decode())], args=[member])


def _summary(raw: Any) -> ThreadSummary | None:
    try:
        return ThreadSummary.from_json(raw)
    except ValueError:
        return None


def _bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()
