"""Run event logs in Redis streams: a re-attach works on any replica.

One stream per run, ``<prefix>events:<len(threadId)>:{<threadId>}:<runId>``
(the length keeps two ids from ever making the same key; the braces put it
in its thread's hash slot, :mod:`.layout`). Each entry is one
write of the run (the events of one runtime chunk), with the fields ``f``
(the id of its first event), ``c`` (its SSE bytes, ids included) and ``t``
(``1`` on the entry holding the terminal event). The entry id is
``<id of its last event>-0``: explicit, so the ids of a run only grow, a
reader finds the entry of any cursor with ``XRANGE``, and a second writer
(a replica that lost the run) is refused by Redis itself.

The stream's TTL is the replay retention once the run ended, and
:data:`LIVE_TTL_MS` while it goes on (a safety net for a run whose every
writer died). A reader refreshes ``<prefix>watch:...`` (a short TTL) while
it streams, so the replica relaying a run without a client knows one came
back (see :mod:`.run_log` for the bounds and what they drop).
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import AsyncIterator
from typing import Any, Final

from redis.exceptions import RedisError, ResponseError

from .topology import Client
from ...protocol.events import Event
from ..run_log import (
    TERMINAL_TYPES, LogBounds, LogBroken, Truncated, frame, note_trimmed, offset_after, past_the_end, pieces,
)
from ..contract import StoreUnavailable
from .layout import Keys

#: The TTL of a stream whose run has not ended (a day).
LIVE_TTL_MS: Final = 86_400_000
#: How long a reader's presence lasts without a refresh.
WATCH_TTL_MS: Final = 5000
#: How long one XREAD waits for new entries.
BLOCK_MS: Final = 1000
_CALL_TIMEOUT: Final = 3.0
_ERRORS: Final = (RedisError, OSError, asyncio.TimeoutError)


def _key(prefix: str, kind: str, thread_id: str, run_id: str) -> str:
    return Keys(prefix).run_key(kind, thread_id, run_id)


def _last_of(entry_id: Any) -> int:
    text = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
    return int(text.split("-", 1)[0])


def _entries_of(answer: Any) -> list[Any]:
    """The entries of an XREAD answer on one stream (RESP2 list or RESP3 map)."""
    if not answer:
        return []
    if isinstance(answer, dict):
        return list(next(iter(answer.values())))
    return list(answer[0][1])


class RedisRunLog:
    """The writing end of one run's stream."""

    def __init__(self, client: Client, key: str, bounds: LogBounds, last_id: int) -> None:
        self._client = client
        self._key = key
        self._bounds = bounds
        self.last_id = last_id
        #: (id of the last event, bytes) of the entries this writer added.
        self._kept: collections.deque[tuple[int, int]] = collections.deque()
        self._size = 0
        self._first_kept = last_id + 1
        self._ended = False
        self._said_trimmed = False
        #: An append was cut off (its run stopped) after it may have reached
        #: Redis: the next one first reads where the stream ends.
        self._unsure = False

    @property
    def readers(self) -> int:
        """Readers are counted through their presence key, not here."""
        return 0

    async def append(self, events: list[Event]) -> bytes:
        """One XADD (and its TTL, and a trim when over the bounds) in one
        round trip; the bytes go to the client only once it is written."""
        if self._unsure:
            await self._resync()
        if self._ended or not events:
            return b""
        first = self.last_id + 1
        last = self.last_id + len(events)
        chunk = frame(events, first)
        terminal = events[-1]["type"] in TERMINAL_TYPES
        bounds = self._bounds
        pipe = self._client.pipeline(transaction=False)
        fields: dict[Any, Any] = {"f": first, "c": chunk, "t": 1 if terminal else 0}
        pipe.xadd(self._key, fields, id=f"{last}-0", maxlen=bounds.max_events, approximate=True)
        pipe.pexpire(self._key, round(bounds.retention_seconds * 1000) if terminal else LIVE_TTL_MS)
        self._kept.append((last, len(chunk)))
        self._size += len(chunk)
        trimmed = False
        while len(self._kept) > 1 and (
            self._size > bounds.max_bytes or last - self._first_kept + 1 > bounds.max_events
        ):
            dropped, size = self._kept.popleft()
            self._size -= size
            self._first_kept = dropped + 1
            trimmed = True
        if trimmed:
            pipe.xtrim(self._key, minid=f"{self._kept[0][0]}-0", approximate=False)
            if not self._said_trimmed:
                self._said_trimmed = True
                note_trimmed(self._first_kept)
        try:
            await asyncio.wait_for(pipe.execute(), _CALL_TIMEOUT)
        except ResponseError as exc:
            raise LogBroken(f"another writer holds this run's log: {exc}") from exc
        except _ERRORS as exc:
            raise LogBroken(f"redis: {exc}") from exc
        except asyncio.CancelledError:
            self._unsure = True
            raise
        self.last_id = last
        self._ended = terminal
        return chunk

    async def _resync(self) -> None:
        """Continue after the stream's newest entry (a cut-off append may
        have written it); a stream that ended takes nothing more."""
        try:
            newest = await asyncio.wait_for(self._client.xrevrange(self._key, "+", "-", count=1), _CALL_TIMEOUT)
        except _ERRORS as exc:
            raise LogBroken(f"redis: {exc}") from exc
        self._unsure = False
        if newest:
            entry_id, fields = newest[0]
            self.last_id = max(self.last_id, _last_of(entry_id))
            self._ended = fields is not None and fields.get(b"t") == b"1"


class RedisRunLogs:
    """Every run's stream, readable from any replica."""

    def __init__(self, client: Client, prefix: str, bounds: LogBounds) -> None:
        self._client = client
        self._prefix = prefix
        self.bounds = bounds

    def _stream(self, thread_id: str, run_id: str) -> str:
        return _key(self._prefix, "events", thread_id, run_id)

    def _watch(self, thread_id: str, run_id: str) -> str:
        return _key(self._prefix, "watch", thread_id, run_id)

    async def open(self, thread_id: str, run_id: str, *, continuing: bool = False) -> RedisRunLog:
        """A writer; an adopted run continues after the last id written."""
        key = self._stream(thread_id, run_id)
        last_id = 0
        if continuing:
            newest = await self._call(self._client.xrevrange(key, "+", "-", count=1))
            if newest:
                last_id = _last_of(newest[0][0])
        return RedisRunLog(self._client, key, self.bounds, last_id)

    async def exists(self, thread_id: str, run_id: str) -> bool:
        """Whether the run's stream is still kept."""
        return bool(await self._call(self._client.exists(self._stream(thread_id, run_id))))

    async def read(self, thread_id: str, run_id: str, cursor: int) -> AsyncIterator[bytes]:
        """Replay from the stream, then block for new entries until the
        terminal one (the stream vanishing ends the read too)."""
        client, key = self._client, self._stream(thread_id, run_id)
        oldest = await self._call(client.xrange(key, "-", "+", count=1))
        if not oldest:
            return
        if cursor + 1 < int(oldest[0][1][b"f"]):
            raise Truncated()
        if cursor:
            newest = await self._call(client.xrevrange(key, "+", "-", count=1))
            if newest and newest[0][1][b"t"] == b"1" and cursor > _last_of(newest[0][0]):
                raise past_the_end()
        watch = self._watch(thread_id, run_id)
        await self._call(client.set(watch, 1, px=WATCH_TTL_MS))
        watched_at = time.monotonic()
        entries = await self._call(client.xrange(key, f"{cursor + 1}-0", "+", count=500))
        last_entry = f"{cursor}-0"
        try:
            while True:
                for entry_id, fields in entries:
                    chunk = fields[b"c"]
                    start = offset_after(chunk, int(fields[b"f"]), cursor)
                    cursor = _last_of(entry_id)
                    last_entry = f"{cursor}-0"
                    for piece in pieces(chunk, start):
                        yield piece
                    if fields[b"t"] == b"1":
                        return
                if time.monotonic() - watched_at >= 1.0:
                    watched_at = time.monotonic()
                    await self._call(client.set(watch, 1, px=WATCH_TTL_MS))
                answer = await self._call(
                    client.xread({key: last_entry}, count=500, block=BLOCK_MS), _CALL_TIMEOUT + BLOCK_MS / 1000
                )
                entries = _entries_of(answer)
                if not entries and not await self._call(client.exists(key)):
                    return
        finally:
            try:
                await asyncio.wait_for(client.delete(watch), _CALL_TIMEOUT)
            except _ERRORS:
                pass  # it lapses by itself

    async def watched(self, thread_id: str, run_id: str) -> bool:
        """Whether a reader on any replica refreshed its presence lately."""
        try:
            return bool(await self._call(self._client.exists(self._watch(thread_id, run_id))))
        except StoreUnavailable:
            return True  # cannot tell: do not cancel a run for a Redis hiccup

    async def append_once(self, thread_id: str, run_id: str, events: list[Event]) -> None:
        """End a run's stream that nobody writes any more (unless it ended)."""
        key = self._stream(thread_id, run_id)
        newest = await self._call(self._client.xrevrange(key, "+", "-", count=1))
        if not newest or newest[0][1].get(b"t") == b"1":
            return
        writer = RedisRunLog(self._client, key, self.bounds, _last_of(newest[0][0]))
        await writer.append(events)

    async def close(self) -> None:
        """The client belongs to the store, which closes it."""

    async def _call(self, call: Any, timeout: float = _CALL_TIMEOUT) -> Any:
        """One Redis call; :class:`StoreUnavailable` when Redis does not answer."""
        try:
            return await asyncio.wait_for(call, timeout)
        except _ERRORS as exc:
            raise StoreUnavailable(f"redis: {exc or type(exc).__name__}") from exc
