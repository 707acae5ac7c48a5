"""The event log of a run: what lets a client re-attach and miss nothing.

Every event a run emits is written here first, framed as an SSE block with
an ``id:`` line, and the framed bytes are what goes to the client. The id
is the event's sequence number in its run (1, 2, ...): clients treat it as
an opaque cursor and hand it back in ``Last-Event-ID`` (or ``?after=``);
any replica finds the position from it alone.

A log keeps the run's events in the chunks they were written in (one chunk
per network write), so writing costs one list append and the id framing.
It is bounded per run (:class:`LogBounds`): past ``max_events`` or
``max_bytes`` the oldest chunks are dropped (the client that was attached
got them). A re-attach whose cursor is older than the oldest event kept is
refused (:class:`Truncated`): a replay never has a hole. An ended run's log
is kept for the retention time, then forgotten.

:class:`MemoryRunLogs` keeps logs in this process (the file store: one
process owns the state folder); the Redis store keeps them in Redis streams
(:mod:`.redis_run_log`) that every replica reads.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Iterator
from typing import Final, Protocol

import attrs

from ..errors import AdapterError, ErrorCode
from ..fastjson import dumps
from ..protocol.events import Event, encode_sse

log = logging.getLogger(__name__)

#: Event types that end a run's stream.
TERMINAL_TYPES: Final = frozenset({"RUN_FINISHED", "RUN_ERROR"})


@attrs.frozen
class LogBounds:
    """How much of a run the log keeps, and for how long after its end."""

    max_events: int = 10_000
    max_bytes: int = 8 * 1024 * 1024
    #: Seconds an ended run stays replayable.
    retention_seconds: float = 600.0


class Truncated(Exception):
    """The events after this cursor are no longer all in the log."""


def past_the_end() -> AdapterError:
    """A cursor after the last event of an ended run: none of its ids, refused
    as any other cursor that is not one of the run's."""
    return AdapterError(ErrorCode.INVALID_INPUT, "invalid_event_cursor")


class LogBroken(Exception):
    """The log cannot be written (its store failed, or another writer took it)."""


def note_trimmed(first_kept: int) -> None:
    """Say, once per run, that its log dropped its oldest events (a re-attach
    from before them gets ``EVENTS_TRUNCATED``, never a replay with a hole)."""
    log.warning("a run log reached its bounds: events before id %d are no longer replayable", first_kept)


def parse_cursor(value: str | None) -> int:
    """A client's cursor (``Last-Event-ID`` or ``?after=``); ``0``: the start.
    Raises ``ValueError`` for anything that is not one of our ids."""
    if value is None or value == "":
        return 0
    if not (value.isascii() and value.isdigit()) or len(value) > 18:
        raise ValueError(value)
    return int(value)


def frame(events: list[Event], first: int) -> bytes:
    """SSE blocks for ``events``, numbered from ``first``, in one buffer."""
    if len(events) == 1:
        return b"id: %d\ndata: %b\n\n" % (first, dumps(events[0]))
    return b"".join([b"id: %d\ndata: %b\n\n" % (first + i, dumps(event)) for i, event in enumerate(events)])


def tail_after(chunk: bytes, first: int, cursor: int) -> bytes:
    """The part of a chunk whose events come after ``cursor`` (``first`` is
    the id of the chunk's first event). JSON never holds a raw newline, so
    ``\\n\\nid: N\\n`` only occurs at an event boundary."""
    return chunk[offset_after(chunk, first, cursor) :] if cursor >= first else chunk


#: The most a replay hands the writer at once (cut at event boundaries): a
#: reader that does not read pins about this much, not the run's log.
REPLAY_PIECE_BYTES: Final = 64 * 1024


def offset_after(chunk: bytes, first: int, cursor: int) -> int:
    """Where the events after ``cursor`` begin in a chunk (``len(chunk)``: none)."""
    if cursor < first:
        return 0
    at = chunk.find(b"\n\nid: %d\n" % (cursor + 1))
    return len(chunk) if at < 0 else at + 2


def pieces(chunk: bytes, start: int = 0, limit: int = REPLAY_PIECE_BYTES) -> Iterator[bytes]:
    """``chunk[start:]`` in pieces of at most ``limit`` bytes, each made of whole
    events (one event longer than ``limit`` is a piece of its own); no copy of
    the rest is made while a piece waits to be written."""
    if start == 0 and len(chunk) <= limit:
        if chunk:
            yield chunk
        return
    view = memoryview(chunk)
    end = len(chunk)
    while start < end:
        stop = end
        if end - start > limit:
            cut = chunk.rfind(b"\n\n", start, start + limit)
            if cut < start:
                cut = chunk.find(b"\n\n", start + limit)
            stop = end if cut < 0 else cut + 2
        yield bytes(view[start:stop])
        start = stop


class RunLog(Protocol):
    """The writing end of one run's log (held by the run's driver)."""

    #: The id of the last event written (0: none yet).
    last_id: int

    async def append(self, events: list[Event]) -> bytes:
        """Write events after the last ones; return their SSE bytes.
        Raises :class:`LogBroken` when they could not be written."""

    @property
    def readers(self) -> int:
        """Clients of this process reading the log right now."""


class RunLogs(Protocol):
    """Every run log of a store."""

    bounds: LogBounds

    async def open(self, thread_id: str, run_id: str, *, continuing: bool = False) -> RunLog:
        """The log of a run this process drives (``continuing``: an adopted
        run, whose log other processes wrote before)."""

    async def exists(self, thread_id: str, run_id: str) -> bool:
        """Whether the run's log can still be read."""

    def read(self, thread_id: str, run_id: str, cursor: int) -> AsyncIterator[bytes]:
        """SSE bytes after ``cursor`` up to the run's terminal event (live
        while the run goes on); raises :class:`Truncated` first if the events
        after ``cursor`` are no longer all kept."""

    async def watched(self, thread_id: str, run_id: str) -> bool:
        """Whether a client reads the run (on any replica)."""

    async def append_once(self, thread_id: str, run_id: str, events: list[Event]) -> None:
        """Close the log of a run nobody drives (a dead or expired run) with
        its terminal events; nothing happens if the log is gone or closed."""

    async def close(self) -> None:
        """Stop background work."""


class UnloggedRun:
    """A run without a log (re-attach off): plain ``data:`` blocks, no ids."""

    last_id = 0
    readers = 0

    async def append(self, events: list[Event]) -> bytes:
        """The SSE bytes of ``events``."""
        return encode_sse(events)


class DetachedRun:
    """What a run's own client still gets once its log can no longer be
    written (its store failed, or another replica owns the run now): the
    ids go on where the log stopped, so the stream keeps one id per event,
    and nothing is kept."""

    readers = 0

    def __init__(self, last_id: int) -> None:
        self.last_id = last_id

    async def append(self, events: list[Event]) -> bytes:
        """The SSE bytes of ``events``, numbered after the last ones."""
        first = self.last_id + 1
        self.last_id += len(events)
        return frame(events, first)


# ------------------------------------------------------------------ memory
#: The slots of trimmed chunks are let go of this many at a time.
_COMPACT: Final = 64
_TRIMMED: Final = (0, 0, b"")


class MemoryRunLog:
    """One run's events in this process's memory."""

    __slots__ = (
        "_bounds", "_chunks", "_head", "_size", "_wake", "ended", "ended_at", "first_kept", "last_id", "reader_count",
    )

    def __init__(self, bounds: LogBounds) -> None:
        self._bounds = bounds
        #: (id of the first event, id of the last event, SSE bytes); the slots
        #: before ``_head`` were trimmed (a list: a deque costs a 600-byte
        #: block per run from its first event).
        self._chunks: list[tuple[int, int, bytes]] = []
        self._head = 0
        self._size = 0
        self._wake: asyncio.Future[None] | None = None
        self.last_id = 0
        #: The id of the oldest event still kept.
        self.first_kept = 1
        self.ended = False
        self.ended_at = 0.0
        self.reader_count = 0

    @property
    def readers(self) -> int:
        """Clients reading this log (re-attached streams)."""
        return self.reader_count

    async def append(self, events: list[Event]) -> bytes:
        """Number, frame and keep ``events``; wake the readers."""
        return self.append_now(events)

    def append_now(self, events: list[Event]) -> bytes:
        """:meth:`append` without a suspension point."""
        if self.ended or not events:
            return b""
        first = self.last_id + 1
        chunk = frame(events, first)
        self.last_id += len(events)
        self._chunks.append((first, self.last_id, chunk))
        self._size += len(chunk)
        if events[-1]["type"] in TERMINAL_TYPES:
            self._end()
        else:
            self._trim()
        wake = self._wake
        if wake is not None:
            self._wake = None
            wake.set_result(None)
        return chunk

    def _trim(self) -> None:
        bounds, chunks = self._bounds, self._chunks
        trimmed = self.first_kept
        head = self._head
        while len(chunks) - head > 1 and (
            self._size > bounds.max_bytes or self.last_id - self.first_kept + 1 > bounds.max_events
        ):
            _, last, chunk = chunks[head]
            chunks[head] = _TRIMMED  # its bytes go now, its slot with the batch
            head += 1
            self._size -= len(chunk)
            self.first_kept = last + 1
        if head >= _COMPACT:
            del chunks[:head]
            head = 0
        self._head = head
        if trimmed == 1 and self.first_kept > 1:
            note_trimmed(self.first_kept)

    def _end(self) -> None:
        """The run is over: keep its events as one buffer (one object per
        kept run, not one per network write)."""
        self.ended = True
        self.ended_at = time.monotonic()
        self._trim()
        kept = self._chunks[self._head :]
        if len(kept) > 1:
            kept = [(kept[0][0], self.last_id, b"".join([chunk for _, _, chunk in kept]))]
        self._chunks, self._head = kept, 0

    def chunks_after(self, cursor: int) -> list[tuple[int, int, bytes]]:
        """The kept chunks with events after ``cursor`` (references, no copy);
        :class:`Truncated` when some of those events are gone."""
        if cursor + 1 < self.first_kept:
            raise Truncated()
        return [item for item in self._chunks[self._head :] if item[1] > cursor]

    def pending_after(self, cursor: int) -> bytes:
        """What is kept after ``cursor`` now."""
        if cursor + 1 < self.first_kept:
            raise Truncated()
        parts = [tail_after(chunk, first, cursor) for first, last, chunk in self._chunks[self._head :] if last > cursor]
        return b"".join(parts)

    async def wait(self) -> None:
        """Until something is appended."""
        if self._wake is None:
            self._wake = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._wake)


class MemoryRunLogs:
    """The run logs of the file store, in this process's memory."""

    def __init__(self, bounds: LogBounds) -> None:
        self.bounds = bounds
        self._logs: dict[tuple[str, str], MemoryRunLog] = {}
        self._sweeper: asyncio.TimerHandle | None = None

    async def open(self, thread_id: str, run_id: str, *, continuing: bool = False) -> MemoryRunLog:
        """A run's log, created on first use."""
        key = (thread_id, run_id)
        log = self._logs.get(key)
        if log is None:
            log = self._logs[key] = MemoryRunLog(self.bounds)
            self._sweep_later()
        return log

    def get(self, thread_id: str, run_id: str) -> MemoryRunLog | None:
        """A kept log, if any."""
        log = self._logs.get((thread_id, run_id))
        if log is not None and log.ended and time.monotonic() - log.ended_at >= self.bounds.retention_seconds:
            return None
        return log

    async def exists(self, thread_id: str, run_id: str) -> bool:
        """Whether the run's log is kept."""
        return self.get(thread_id, run_id) is not None

    async def read(self, thread_id: str, run_id: str, cursor: int) -> AsyncIterator[bytes]:
        """Replay, then follow, one run's log."""
        log = self.get(thread_id, run_id)
        if log is None:
            return
        chunks = log.chunks_after(cursor)  # raises Truncated before anything is sent
        if log.ended and cursor > log.last_id:
            raise past_the_end()
        log.reader_count += 1
        try:
            while True:
                # The chunks are taken as they are now; appends meanwhile come next time round.
                for first, last, chunk in chunks:
                    for piece in pieces(chunk, offset_after(chunk, first, cursor)):
                        yield piece
                    cursor = last
                if log.ended and cursor >= log.last_id:
                    return
                if cursor >= log.last_id:
                    await log.wait()
                chunks = log.chunks_after(cursor)
        finally:
            log.reader_count -= 1

    async def watched(self, thread_id: str, run_id: str) -> bool:
        """Whether a client of this process reads the run."""
        log = self._logs.get((thread_id, run_id))
        return log is not None and log.reader_count > 0

    async def append_once(self, thread_id: str, run_id: str, events: list[Event]) -> None:
        """End a log nobody writes any more."""
        log = self._logs.get((thread_id, run_id))
        if log is not None:
            log.append_now(events)

    @property
    def kept_bytes(self) -> int:
        """The SSE bytes held by every kept log (for benchmarks and metrics)."""
        return sum(log._size for log in self._logs.values())

    def _sweep_later(self) -> None:
        if self._sweeper is None:
            loop = asyncio.get_running_loop()
            self._sweeper = loop.call_later(max(self.bounds.retention_seconds / 4, 1.0), self._sweep)

    def _sweep(self) -> None:
        self._sweeper = None
        now, keep = time.monotonic(), self.bounds.retention_seconds
        for key in [key for key, log in self._logs.items() if log.ended and now - log.ended_at >= keep]:
            del self._logs[key]
        if self._logs:
            self._sweep_later()

    async def close(self) -> None:
        """Forget every log."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        self._logs.clear()
