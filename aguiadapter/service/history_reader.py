"""A thread's conversation, read from the runtime on demand (the async edge).

The adapter stores no conversation text (the protocol reference: the state
folder is not where iac-code conversation text lives). :class:`HistoryReader`
reads the session transcript from the runtime when a client asks for it,
projects it (:mod:`aguiadapter.runtime.history`) and keeps the projection a
few seconds, so that a reload storm costs the runtime little:

- a short in-memory cache per thread (``cache_seconds``; at most
  ``max_kept`` threads), keyed by the record's version too, so that a page
  asked for after a turn ended (the record was written) reads afresh;
- a single flight per thread: concurrent reads of one thread share one
  runtime call (a caller that leaves does not cancel it for the others);
- a bound on the transcript reads in flight in this process (``max_reads``),
  and a smaller one per user (``max_reads_per_user``, the owner of the
  thread's list): one user's reads wait for each other, never hold every
  read; a read that waits longer than ``wait_seconds`` for its turn is
  refused (:class:`HistoryUnavailable`, ``history_busy``);
- the cache is bounded by count (``max_kept``) and by the bytes of the
  messages it holds (``max_kept_bytes``, images included), and a
  conversation leaves it when it expires, not at the next read;
- the runtime's reply (or the session file) is read up to ``max_reply_bytes``
  and refused beyond (``history_too_large``, not retried), never held whole.

Interface (what ``GET /threads/{id}/messages`` and ``POST /connect`` call)::

    reader = request.config_dict[HISTORY]          # aguiadapter.web.keys
    page = await reader.page(record, limit=20, before=None, byte_budget=256 * 1024)
    page.messages   # AG-UI Message objects (JSON), oldest first
    page.before     # opaque cursor to older turns, None at the first turn
    turns = await reader.turns(record)              # the whole projection

``record`` is the thread's :class:`~aguiadapter.threads.record.ThreadRecord`
the caller already checked ownership of. Both raise :class:`HistoryUnavailable`
(an ``AdapterError`` answered 503 ``HISTORY_UNAVAILABLE``) when the runtime
cannot serve the transcript: with ``Retry-After`` when it is down or answers
nonsense, without when its route answers 404 (iac-code after a restart,
until the thread's next turn; a runtime without the route), where asking
again cannot help. A thread that never reached the
runtime has an empty history (no call is made). A pipeline thread has
none that can be told (``HistoryUnavailable`` without ``Retry-After``):
iac-code keeps a pipeline's conversation out of the session transcript,
which holds a hidden hand-off row only. ``page`` raises ``ValueError`` for
a bad cursor or limit.

The runtime's transcript: ``GET /iac-code/execution/state?contextId`` names
the context's current execution, ``GET /iac-code/session/recovery?contextId&
executionId`` returns its session's messages (the whole session).

With ``--spawn-iac-code`` the adapter owns the runtime and its config folder
(``transcripts_dir``): when the route cannot serve, the session's
``projects/<workspace>/<sessionId>/session.jsonl`` is read from disk instead
(one JSON row per line, rows without ``role`` are the session's own notes),
so history survives a runtime restart. Not when iac-code's A2A safe mode
(``IAC_CODE_A2A_SAFE_MODE``) is on: the route hides local paths then, the
file does not.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from ..a2a.client import A2AClient, A2AError, A2AHttpError, A2AReplyTooLarge
from ..errors import AdapterError, ErrorCode
from ..pool.pool import RuntimeGone
from ..runtime.history import Page, Turn, page, project
from ..runtime.iac_code import EXECUTION_STATE_PATH, SESSION_RECOVERY_PATH
from ..threads.listing import owner_of
from ..threads.record import ThreadRecord

log = logging.getLogger(__name__)

#: A thread's runtime: its client, and its config folder (``None``: not known here).
Route = Callable[[ThreadRecord], tuple[A2AClient, Path | None]]

#: ``Retry-After`` of a refusal: the runtime may serve again by then (or the cache has it).
RETRY_AFTER_SECONDS: Final = 5
#: The bytes of messages the cache holds at most, for all threads (images included).
DEFAULT_KEPT_BYTES: Final = 64 * 1024 * 1024
#: The longest transcript reply (or session file) read (``--history-max-bytes``).
DEFAULT_REPLY_BYTES: Final = 32 * 1024 * 1024
#: What an iac-code session id looks like (anything else is never a path part).
_SESSION_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_SAFE_MODE_ENV: Final = "IAC_CODE_A2A_SAFE_MODE"
#: Transcripts up to this many rows are projected on the event loop (well under a millisecond).
_INLINE_ROWS: Final = 200
_TRUTHY: Final = frozenset({"1", "true", "yes", "on"})


class HistoryUnavailable(AdapterError):
    """The transcript cannot be read now: 503 ``HISTORY_UNAVAILABLE`` with ``Retry-After``."""

    def __init__(self, reason: str, message_id: str | None = None, *, retry: bool = True) -> None:
        super().__init__(ErrorCode.HISTORY_UNAVAILABLE, message_id)
        #: Why, for logs (never shown to a client: it may name the runtime's answer).
        self.reason = reason
        #: Whether asking again later may help (not for a pipeline thread).
        self.retry = retry

    def response_headers(self) -> dict[str, str]:
        """``Retry-After``: whole seconds (RFC 9110, 10.2.3), when asking again may help."""
        return {"Retry-After": str(RETRY_AFTER_SECONDS)} if self.retry else {}


class _NotServed(Exception):
    """The runtime's route did not serve the transcript (the disk may);
    ``gone``: it answered 404, it holds no such conversation (iac-code after a
    restart, until the thread's next turn; a runtime without the route), so
    asking again cannot help."""

    def __init__(self, reason: str, *, gone: bool = False) -> None:
        super().__init__(reason)
        self.gone = gone


class _TooLarge(Exception):
    """The transcript is longer than the reader reads (``max_reply_bytes``)."""


class HistoryReader:
    """Reads, projects and briefly keeps threads' conversations."""

    def __init__(
        self,
        *,
        cache_seconds: float = 5.0,
        max_reads: int = 4,
        max_reads_per_user: int | None = None,
        wait_seconds: float = 10.0,
        max_kept: int = 64,
        max_kept_bytes: int = DEFAULT_KEPT_BYTES,
        max_reply_bytes: int = DEFAULT_REPLY_BYTES,
        transcripts_dir: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        per_user = max_reads_per_user if max_reads_per_user is not None else max(1, max_reads // 2)
        if (cache_seconds < 0 or max_reads < 1 or per_user < 1 or wait_seconds < 0 or max_kept < 1
                or max_kept_bytes < 1 or max_reply_bytes < 1):
            raise ValueError("cache_seconds and wait_seconds must not be negative; max_reads, max_reads_per_user, "
                             "max_kept, max_kept_bytes and max_reply_bytes at least 1")
        self.cache_seconds = cache_seconds
        self.max_kept = max_kept
        self.max_kept_bytes = max_kept_bytes
        self.max_reply_bytes = max_reply_bytes
        self.max_reads_per_user = min(per_user, max_reads)
        self.wait_seconds = wait_seconds
        #: The runtime's config folder, read when its route cannot serve (``--spawn-iac-code``).
        self.transcripts_dir = transcripts_dir
        self._clock = clock
        self._reads = asyncio.Semaphore(max_reads)
        #: owner -> [its reads' semaphore, how many reads hold or wait for it].
        self._user_reads: dict[str, tuple[asyncio.Semaphore, list[int]]] = {}
        #: key -> (expires at, turns, bytes), the oldest first.
        self._cache: OrderedDict[str, tuple[float, list[Turn], int]] = OrderedDict()
        self._kept_bytes = 0
        self._flights: dict[str, asyncio.Future[list[Turn]]] = {}
        self._client: A2AClient | None = None
        self._route: Route | None = None
        #: Transcript reads that reached the runtime or the disk (for tests and benchmarks).
        self.reads = 0

    # ------------------------------------------------------------- lifecycle
    def start(self, client: A2AClient, route: Route | None = None) -> None:
        """Read through ``client`` from now on (the app's, once it starts); with
        ``route``, through the client of each thread's own runtime (a pool), and
        from that runtime's config folder when the session files are read."""
        self._client = client
        self._route = route

    def stop(self) -> None:
        """Forget the client and everything kept."""
        self._client = self._route = None
        self._cache.clear()
        self._kept_bytes = 0

    @property
    def kept_bytes(self) -> int:
        """The bytes of the messages kept (for tests and benchmarks)."""
        return self._kept_bytes

    # ----------------------------------------------------------------- reads
    async def page(
        self, record: ThreadRecord, *, limit: int, before: str | None = None, byte_budget: int | None = None
    ) -> Page:
        """The newest ``limit`` turns before ``before`` within ``byte_budget``
        (see :func:`aguiadapter.runtime.history.page`)."""
        return page(await self.turns(record), limit, before, byte_budget)

    async def turns(self, record: ThreadRecord) -> list[Turn]:
        """The thread's whole conversation, projected, from the cache when fresh."""
        if record.task_id is None and record.session_id is None:
            return []  # nothing reached the runtime yet
        if record.pipeline is not None and record.pipeline.pipeline_run_id is not None:
            # iac-code keeps a pipeline's conversation out of the session transcript
            # (which then holds one hidden hand-off row): an empty page would lie.
            raise HistoryUnavailable("a pipeline thread", "history_pipeline", retry=False)
        key = _cache_key(record)
        kept = self._cache.get(key)
        now = self._clock()
        if kept is not None and kept[0] > now:
            return kept[1]
        flight = self._flights.get(key)
        if flight is None:
            flight = self._flights[key] = asyncio.ensure_future(self._read(key, record))
            flight.add_done_callback(lambda done: self._landed(key, done))
        # Shielded: a caller that leaves does not cancel the read the others wait for.
        return await asyncio.shield(flight)

    def _landed(self, key: str, flight: asyncio.Future[list[Turn]]) -> None:
        self._flights.pop(key, None)
        if not flight.cancelled():
            flight.exception()  # retrieved: every caller may have left

    def forget(self, record: ThreadRecord) -> None:
        """Drop what is kept of the thread (a turn just ended: read afresh)."""
        self._drop(_cache_key(record))

    async def _read(self, key: str, record: ThreadRecord) -> list[Turn]:
        owner = owner_of(record)
        gate = self._user_reads.get(owner)
        if gate is None:
            gate = self._user_reads[owner] = (asyncio.Semaphore(self.max_reads_per_user), [0])
        gate[1][0] += 1
        try:
            turns = await self._read_as(gate[0], record)
        finally:
            gate[1][0] -= 1
            if not gate[1][0]:
                self._user_reads.pop(owner, None)
        self._keep(key, turns)
        return turns

    async def _read_as(self, user_reads: asyncio.Semaphore, record: ThreadRecord) -> list[Turn]:
        """Read once this user's turn, then the process's, has come (both
        within ``wait_seconds``): a user's own reads queue behind each other."""
        deadline = time.monotonic() + self.wait_seconds
        try:
            await asyncio.wait_for(user_reads.acquire(), self.wait_seconds)
        except asyncio.TimeoutError:
            raise HistoryUnavailable("too many transcript reads of one user at once", "history_busy") from None
        try:
            try:
                await asyncio.wait_for(self._reads.acquire(), max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                raise HistoryUnavailable("too many transcript reads at once", "history_busy") from None
            try:
                self.reads += 1
                rows = await self._transcript(record)
                # Off the event loop: a long session takes tens of ms to project,
                # which the streams this process serves must not wait for.
                return await asyncio.to_thread(project, rows) if len(rows) > _INLINE_ROWS else project(rows)
            finally:
                self._reads.release()
        finally:
            user_reads.release()

    def _keep(self, key: str, turns: list[Turn]) -> None:
        """Keep a projection for ``cache_seconds``, within the count and the
        bytes kept (one larger than all the bytes allowed is not kept)."""
        size = sum(turn.size for turn in turns)
        if self.cache_seconds <= 0 or size > self.max_kept_bytes:
            return
        self._drop(key)
        while self._cache and (len(self._cache) >= self.max_kept or self._kept_bytes + size > self.max_kept_bytes):
            self._drop(next(iter(self._cache)))  # the oldest kept
        expires = self._clock() + self.cache_seconds
        self._cache[key] = (expires, turns, size)
        self._kept_bytes += size
        # Gone when it expires, not when the next read happens to look.
        asyncio.get_running_loop().call_later(self.cache_seconds, self._expire, key, expires)

    def _expire(self, key: str, expires: float) -> None:
        kept = self._cache.get(key)
        if kept is not None and kept[0] == expires:
            self._drop(key)

    def _drop(self, key: str) -> None:
        kept = self._cache.pop(key, None)
        if kept is not None:
            self._kept_bytes -= kept[2]

    async def _transcript(self, record: ThreadRecord) -> list[dict[str, Any]]:
        try:
            return await self._from_runtime(record)
        except _NotServed as exc:
            reason, gone = str(exc), exc.gone
        except _TooLarge as exc:
            log.warning("thread %s: history not read: %s", record.thread_id, exc)
            raise HistoryUnavailable(str(exc), "history_too_large", retry=False) from None
        folder = self._transcripts_of(record)
        if folder is not None and record.session_id is not None and not _safe_mode():
            try:
                rows = await asyncio.to_thread(read_session_file, folder, record.session_id, self.max_reply_bytes)
            except _TooLarge as exc:
                log.warning("thread %s: history not read: %s", record.thread_id, exc)
                raise HistoryUnavailable(str(exc), "history_too_large", retry=False) from None
            if rows is not None:
                log.info("thread %s: history read from the runtime's folder (%s)", record.thread_id, reason)
                return rows
        log.info("thread %s: history unavailable: %s", record.thread_id, reason)
        if gone:  # no Retry-After: only the thread's next turn helps
            raise HistoryUnavailable(reason, "history_gone", retry=False)
        raise HistoryUnavailable(reason)

    def _transcripts_of(self, record: ThreadRecord) -> Path | None:
        """Where the thread's session files are, when this server may read them (its own children)."""
        if self.transcripts_dir is None or self._route is None:
            return self.transcripts_dir
        try:
            return self._route(record)[1] or self.transcripts_dir
        except RuntimeGone:
            return None

    async def _from_runtime(self, record: ThreadRecord) -> list[dict[str, Any]]:
        client = self._client
        if client is None:
            raise _NotServed("the reader is not started")
        if self._route is not None:
            try:
                client = self._route(record)[0]
            except RuntimeGone:
                raise _NotServed("its runtime left the pool", gone=True) from None
        context_id = record.context_id
        # A turn that starts between the two calls makes the second one refuse
        # (409: not the current execution): ask again, once.
        for attempt in (1, 2):
            try:
                execution = await client.get_json(EXECUTION_STATE_PATH, {"contextId": context_id},
                                                  max_bytes=self.max_reply_bytes)
                execution_id = execution.get("executionId")
                if not isinstance(execution_id, str) or not execution_id:
                    raise _NotServed("the execution state names no execution")
                document = await client.get_json(
                    SESSION_RECOVERY_PATH, {"contextId": context_id, "executionId": execution_id},
                    max_bytes=self.max_reply_bytes,
                )
            except A2AReplyTooLarge as exc:
                raise _TooLarge(f"the runtime's transcript is longer than {self.max_reply_bytes} bytes") from exc
            except A2AHttpError as exc:
                if exc.status == 409 and attempt == 1:
                    continue
                raise _NotServed(f"HTTP {exc.status}", gone=exc.status == 404) from exc
            except A2AError as exc:
                raise _NotServed(type(exc).__name__) from exc
            messages = document.get("messages")
            if not isinstance(messages, list):
                raise _NotServed("the recovery document has no messages")
            return [row for row in messages if isinstance(row, dict)]
        raise _NotServed("the execution changed twice while read")  # pragma: no cover - loop returns or raises


def _cache_key(record: ThreadRecord) -> str:
    return f"{record.key}\x00{record.context_id}\x00{record.version}"


def _safe_mode() -> bool:
    return os.environ.get(_SAFE_MODE_ENV, "").strip().lower() in _TRUTHY


def session_file(config_dir: Path, session_id: str) -> Path | None:
    """The session's transcript file under an iac-code config folder (the
    newest, should the session be found under several workspace folders)."""
    if not _SESSION_ID.fullmatch(session_id) or session_id in (".", ".."):
        return None
    projects = config_dir / "projects"
    found = [*projects.glob(f"*/{session_id}/session.jsonl"), *projects.glob(f"*/{session_id}.jsonl")]
    files = [path for path in found if path.is_file()]
    if not files:
        return None
    return max(files, key=lambda path: path.stat().st_mtime)


def read_session_file(
    config_dir: Path, session_id: str, max_bytes: int | None = None
) -> list[dict[str, Any]] | None:
    """The session's message rows read from disk (blocking: call it off the
    event loop); ``None`` when there is no such file. Lines that are not a
    JSON object with a ``role`` (the session's own notes, a line being
    written) are skipped, as iac-code skips them. A file longer than
    ``max_bytes`` is not read (``_TooLarge``)."""
    path = session_file(config_dir, session_id)
    if path is None:
        return None
    rows: list[dict[str, Any]] = []
    try:
        if max_bytes is not None and path.stat().st_size > max_bytes:
            raise _TooLarge(f"the session file is longer than {max_bytes} bytes")
        with path.open(encoding="utf-8") as lines:
            for line in lines:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if isinstance(row, dict) and row.get("role") in ("user", "assistant"):
                    rows.append(row)
    except OSError as exc:
        log.info("session transcript %s not read: %s", path.name, type(exc).__name__)
        return None
    return rows
