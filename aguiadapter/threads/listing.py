"""The thread list: whose threads a list holds, what it shows of each, and how it pages.

Every store keeps, next to each record, a small :class:`ThreadSummary` in an
index of the record's *owner* (:func:`owner_of`): the verified user
(``p:<principal>``) when the thread has one, else the ``userId`` its first run
named (``u:<userId>``; ``u:`` alone for threads started without one). An
owner's index is ordered by the time of the record's last save, newest
first, with the record's key breaking ties; a page resumes after the
``(updated time, key)`` of the last thread of the page before it (a keyset
cursor, opaque to clients). A thread saved while a client walks the list
moves to the front: the walk never shows it twice, and shows it again only
from the first page.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import hashlib
import heapq
import json
import math
import re
from collections.abc import Collection, Iterable, Sequence

import attrs

from .record import ThreadRecord, ThreadState

#: Threads per page when the client does not say.
DEFAULT_LIMIT = 50
#: The most threads one page holds.
MAX_LIMIT = 200
#: With a state filter, index entries looked at per page call at most: a
#: page may then hold fewer threads than asked for (even none) and still
#: have a ``nextCursor``.
SCAN_BUDGET = 2000


@attrs.frozen
class ThreadSummary:
    """What the list shows of a thread, written with every save of its record."""

    key: str
    thread_id: str
    state: ThreadState
    #: ``None`` for a thread made before records kept their creation time.
    created_at: float | None
    updated_at: float
    pending_interrupts: int = 0
    active_run_id: str | None = None
    last_error: str | None = None
    #: The pool runtime the thread is pinned to (``None``: made before pools, ``default``'s).
    runtime: str | None = None

    def to_json(self) -> bytes:
        """The stored form (compact JSON)."""
        stored = {
            "key": self.key, "threadId": self.thread_id, "state": self.state.value,
            "createdAt": self.created_at, "updatedAt": self.updated_at,
            "pending": self.pending_interrupts, "activeRunId": self.active_run_id,
            "lastError": self.last_error,
        }
        if self.runtime is not None:
            stored["runtime"] = self.runtime
        return json.dumps(stored, separators=(",", ":"), ensure_ascii=False).encode()

    @classmethod
    def from_json(cls, data: bytes | str) -> ThreadSummary:
        """Parse a stored summary; ``ValueError`` when it is not one."""
        try:
            raw = json.loads(data)
            return cls(
                key=str(raw["key"]), thread_id=str(raw["threadId"]), state=ThreadState(raw["state"]),
                created_at=None if raw.get("createdAt") is None else float(raw["createdAt"]),
                updated_at=float(raw["updatedAt"]), pending_interrupts=int(raw.get("pending") or 0),
                active_run_id=raw.get("activeRunId"), last_error=raw.get("lastError"),
                runtime=None if raw.get("runtime") is None else str(raw["runtime"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"not a thread summary: {exc}") from exc

    @property
    def position(self) -> ListCursor:
        """Where this thread stands in its owner's list."""
        return ListCursor(self.updated_at, self.key)


def state_marker(state: ThreadState) -> bytes:
    """The bytes of :meth:`ThreadSummary.to_json` that say its state (a cheap
    test before a summary is parsed; the parsed state still decides)."""
    return b'"state":"' + state.value.encode() + b'"'


def summary_of(record: ThreadRecord) -> ThreadSummary:
    """The summary of a record as it is being saved (its ``updated_at`` set)."""
    state = ThreadState(record.state)
    return ThreadSummary(
        key=record.key,
        thread_id=record.thread_id,
        state=state,
        created_at=record.created_at,
        updated_at=record.updated_at,
        pending_interrupts=len(record.pending_interrupts),
        active_run_id=record.active_run_id if state is ThreadState.RUNNING else None,
        last_error=record.last_error if state is ThreadState.TERMINAL else None,
        runtime=record.runtime,
    )


def list_owner(principal: str | None, user_id: str | None) -> str:
    """The owner whose list a caller reads, or a record is listed in."""
    return f"p:{principal}" if principal is not None else f"u:{user_id or ''}"


def owner_of(record: ThreadRecord) -> str:
    """The list a record belongs to (see the module's docstring)."""
    return list_owner(record.principal, record.user_id)


def owner_id(owner: str) -> str:
    """The owner as a fixed-size name for keys and folders (32 hex of its SHA-256)."""
    return hashlib.sha256(owner.encode()).hexdigest()[:32]


@attrs.frozen(order=True)
class ListCursor:
    """A position in a list: after the thread saved at ``updated_at`` with ``key``."""

    updated_at: float
    key: str

    def encode(self) -> str:
        """Opaque to clients: base64url of ``[updated_at, key]``."""
        raw = json.dumps([self.updated_at, self.key], separators=(",", ":"), ensure_ascii=False).encode()
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    @classmethod
    def decode(cls, text: str) -> ListCursor:
        """A cursor from :meth:`encode`; ``ValueError`` for anything else.

        A client writes the cursor, so the work of refusing one is bounded
        before any is done: the text's length; the shape (a list whose first
        item is a number, so no nesting reaches the JSON parser's recursion);
        numbers read as floats (a 400-digit number is infinite, never an
        ``OverflowError``) that must be finite (``NaN`` and ``Infinity`` are
        no positions, and a store would fail on them as if it were down)."""
        if len(text) > MAX_CURSOR_CHARS:
            raise ValueError("not a thread list cursor")
        try:
            data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            if not _CURSOR_SHAPE.match(data):
                raise ValueError("not a thread list cursor")
            raw = json.loads(data, parse_int=float, parse_float=float, parse_constant=_no_constant)
        except (ValueError, binascii.Error, RecursionError) as exc:
            raise ValueError("not a thread list cursor") from exc
        if (not isinstance(raw, list) or len(raw) != 2 or not isinstance(raw[0], float)
                or not math.isfinite(raw[0]) or not isinstance(raw[1], str)):
            raise ValueError("not a thread list cursor")
        return cls(raw[0], raw[1])


#: The longest cursor text taken: a key of the longest thread id and user
#: namespace, every character escaped, in base64.
MAX_CURSOR_CHARS = 48 * 1024
#: What every cursor :meth:`ListCursor.encode` made starts with: ``[`` and a number.
_CURSOR_SHAPE = re.compile(rb"\[-?[0-9]")


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is no position in a list")


@attrs.frozen
class ThreadPage:
    """One page of a list, newest first; ``next_cursor`` is ``None`` on the last one."""

    threads: Sequence[ThreadSummary]
    next_cursor: ListCursor | None


def _sort_key(summary: ThreadSummary) -> tuple[float, str]:
    """A summary's place in its list, as :class:`ListCursor` orders it."""
    return (summary.updated_at, summary.key)


class SortedSummaries:
    """One owner's summaries in memory, ordered for newest-first keyset pages.

    Bounded: at most ``keep`` of them, the newest. When an owner has more,
    the list is not :attr:`complete`: it ends at :attr:`oldest`, and what is
    older is read again from the store when a page reaches it.
    """

    def __init__(self, summaries: Iterable[ThreadSummary] = (), *, keep: int | None = None) -> None:
        self.keep = keep
        # The newest summary of each key, sorted once (never one insertion each).
        newest: dict[str, ThreadSummary] = {}
        for summary in summaries:
            old = newest.get(summary.key)
            if old is None or old.updated_at <= summary.updated_at:
                newest[summary.key] = summary
        chosen: Collection[ThreadSummary] = newest.values()
        #: Whether every thread of the owner is here.
        self.complete = keep is None or len(newest) <= keep
        if keep is not None and not self.complete:
            chosen = heapq.nlargest(keep, chosen, key=_sort_key)
        # Compared as plain tuples: ListCursor's own ordering costs several times more.
        self._order: list[ListCursor] = [summary.position for summary in sorted(chosen, key=_sort_key)]
        self._by_key: dict[str, ThreadSummary] = {summary.key: summary for summary in chosen}

    def __len__(self) -> int:
        return len(self._by_key)

    @property
    def oldest(self) -> ListCursor | None:
        """The position of the oldest thread kept."""
        return self._order[0] if self._order else None

    def keys(self) -> list[str]:
        """The keys of the threads kept."""
        return list(self._by_key)

    def put(self, summary: ThreadSummary) -> None:
        """Add or replace a thread's summary (an older one than kept is ignored,
        and so is one older than what an incomplete list holds)."""
        old = self._by_key.get(summary.key)
        if old is not None:
            if old.updated_at > summary.updated_at:
                return
            self._remove_position(old.position)
        elif not self.complete and self._order and summary.position < self._order[0]:
            return
        self._by_key[summary.key] = summary
        bisect.insort(self._order, summary.position)
        if self.keep is not None and len(self._order) > self.keep:
            dropped = self._order.pop(0)
            del self._by_key[dropped.key]
            self.complete = False

    def drop(self, key: str) -> None:
        """Forget a thread."""
        old = self._by_key.pop(key, None)
        if old is not None:
            self._remove_position(old.position)

    def _remove_position(self, position: ListCursor) -> None:
        at = bisect.bisect_left(self._order, position)
        if at < len(self._order) and self._order[at] == position:
            del self._order[at]

    def page(self, after: ListCursor | None, limit: int, states: Collection[ThreadState] | None) -> ThreadPage:
        """Up to ``limit`` threads after ``after``, newest first, in ``states`` if given."""
        end = len(self._order) if after is None else bisect.bisect_left(self._order, after)
        found: list[ThreadSummary] = []
        scanned = 0
        index = end - 1
        while index >= 0 and len(found) < limit and scanned < SCAN_BUDGET:
            summary = self._by_key[self._order[index].key]
            scanned += 1
            index -= 1
            if states is None or summary.state in states:
                found.append(summary)
        if index < 0:
            return ThreadPage(found, None)
        last = self._order[index + 1]
        return ThreadPage(found, last)
