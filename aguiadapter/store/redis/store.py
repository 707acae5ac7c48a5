"""A shared store for several replicas: thread records, claims and signals in Redis.

Chosen with ``--store redis://HOST:PORT/DB`` (needs ``aguiadapter[redis]``).
Every key is described in ``docs/redis-layout.md``. In short:

- a record is one hash (``version`` and ``record`` JSON); a save is a Lua
  compare-and-set on the version, allowed only while the thread's claim key
  still holds the writer's fencing token;
- a claim is a key with a lease (``PX``) holding a fencing token that grows
  with a counter (``INCR``); renewal and release check the token first;
- deadlines are a sorted set; ``due_deadlines`` hands them out only to the
  replica that holds a short sweeper lease;
- cancels travel on a pub/sub channel that a background task listens to,
  reconnecting whenever Redis goes away.

Options of the store itself ride in the URL's query string and are removed
before the URL reaches redis-py: ``prefix`` (key prefix, default
``aguiadapter:``), ``lease_seconds`` (claim lease, default 5) and
``retention_days`` (how long idle and terminal records are kept, default 30;
0 keeps them forever). Interrupted and running records never expire.
"""

from __future__ import annotations

import asyncio
import difflib
import logging
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import attrs
import redis.asyncio as aioredis
from redis.asyncio.client import PubSub
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import AuthenticationError, AuthenticationWrongNumberOfArgsError, NoPermissionError, RedisError

from ...logs import log_fields
from ...threads.listing import ListCursor, ThreadPage, ThreadSummary, owner_id, owner_of, summary_of
from ...threads.record import RunEntry, ThreadRecord, ThreadState, record_from_json, record_to_json
from ..run_history import entry_json, entry_of, split_runs
from ..run_log import LogBounds
from .limits import RedisRunSlots
from .run_log import RedisRunLogs
from .run_log import _key as run_log_key
from .thread_list import RedisThreadList
from ..contract import Claim, PersistenceError, Saved, StoreUnavailable, parse_owned_record, parse_stored_record

log = logging.getLogger(__name__)

REDIS_SCHEMES = ("redis", "rediss", "unix")
DEFAULT_PREFIX = "aguiadapter:"
DEFAULT_LEASE_SECONDS = 5.0
DEFAULT_RETENTION_DAYS = 30.0
#: How long one replica keeps the right to sweep deadlines (service sweeps every 5 s).
SWEEPER_LEASE_MS = 4000
#: At most this many due threads are handed out per sweep.
SWEEP_BATCH = 100
#: How often the store PINGs Redis to tell an outage and its end in the logs.
WATCH_SECONDS = 1.0
#: States whose records may expire after the retention period.
EXPIRING_STATES = frozenset({"idle", "terminal"})
#: Low bits of a fencing token that come from a random number, so that a
#: counter that went back (Redis lost its last writes) cannot reissue a token.
_TOKEN_RANDOM_BITS = 16
#: Every Redis call ends within this budget (a hung server must not hang requests).
CALL_TIMEOUT_SECONDS = 3.0
_ERRORS = (RedisError, OSError, asyncio.TimeoutError)
#: The hash field of a run that moved out of its thread's record.
_RUN_FIELD = "run:"
_T = TypeVar("_T")

# KEYS: claim, fence counter. ARGV: lease ms, random low bits.
_CLAIM = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local token = redis.call('INCR', KEYS[2]) * 65536 + tonumber(ARGV[2])
redis.call('SET', KEYS[1], string.format('%.0f', token), 'PX', ARGV[1])
return token
"""

# KEYS: claim. ARGV: token, lease ms.
_RENEW = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""

# KEYS: claim. ARGV: token.
_RELEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
return redis.call('DEL', KEYS[1])
"""

# KEYS: record, claim, the owner's thread list. ARGV: expected version, new
# version, record JSON, token ('' when the write holds no claim), TTL ms ('0':
# keep forever), list score (updated time), list summary JSON, list member (the
# thread key), the list's TTL ms ('0': keep forever), then field and value
# pairs of the runs that move out of the record into its hash (``run:<id>``,
# aguiadapter/store/run_history.py). Returns 1 (written, or
# this very write was already applied),
# -1 (the claim is not ours any more), -2 (someone else changed the record).
_SAVE = """
if ARGV[4] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[4] then return -1 end
local current = redis.call('HGET', KEYS[1], 'version') or '0'
if current == ARGV[2] and redis.call('HGET', KEYS[1], 'record') == ARGV[3] then return 1 end
if current ~= ARGV[1] then return -2 end
redis.call('HSET', KEYS[1], 'version', ARGV[2], 'record', ARGV[3], 'summary', ARGV[7])
for i = 10, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('ZADD', KEYS[3], ARGV[6], ARGV[8])
if ARGV[9] == '0' then redis.call('PERSIST', KEYS[3]) else redis.call('PEXPIRE', KEYS[3], ARGV[9]) end
if ARGV[5] == '0' then redis.call('PERSIST', KEYS[1]) else redis.call('PEXPIRE', KEYS[1], ARGV[5]) end
return 1
"""

# KEYS: sweeper lease, deadlines. ARGV: replica id, lease ms, now, batch.
_SWEEP = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return {} end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[3], 'LIMIT', 0, tonumber(ARGV[4]))
"""


# KEYS: claim, record, the owner's list, deadlines, then the runs' event
# streams and watch keys. ARGV: token, the thread key. Erases a thread
# (operator command) while the caller's claim holds it: 1, else -1.
_DELETE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
redis.call('ZREM', KEYS[3], ARGV[2])
redis.call('ZREM', KEYS[4], ARGV[2])
for i = 2, #KEYS do if i ~= 3 and i ~= 4 then redis.call('DEL', KEYS[i]) end end
return 1
"""

class RedisStoreError(RuntimeError):
    """The Redis store cannot be configured or started (a clear startup error)."""


@attrs.frozen
class RedisSettings:
    """The store's own options, taken from the URL's query string."""

    prefix: str = DEFAULT_PREFIX
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    retention_days: float = DEFAULT_RETENTION_DAYS

    @property
    def retention_ms(self) -> int:
        """The TTL of idle and terminal records; 0 keeps them forever."""
        return round(self.retention_days * 86_400_000)

    @property
    def lease_ms(self) -> int:
        """The claim lease in milliseconds."""
        return max(1, round(self.lease_seconds * 1000))


@attrs.frozen
class Keys:
    """Every key name the store uses (see docs/redis-layout.md)."""

    prefix: str

    def thread(self, thread_id: str) -> str:
        """The hash holding a thread's record."""
        return f"{self.prefix}thread:{thread_id}"

    def claim(self, thread_id: str) -> str:
        """The lease of the run (or expiry, or cancel) that owns a thread."""
        return f"{self.prefix}claim:{thread_id}"

    def thread_list(self, owner: str) -> str:
        """The sorted set of one owner's threads (:func:`~.listing.owner_id`), by updated time."""
        return f"{self.prefix}user-threads:{owner}"

    @property
    def fence(self) -> str:
        """The counter fencing tokens are made from."""
        return f"{self.prefix}fence"

    @property
    def deadlines(self) -> str:
        """The sorted set of interrupt deadlines (score: epoch seconds)."""
        return f"{self.prefix}deadlines"

    @property
    def sweeper(self) -> str:
        """The short lease of the replica that sweeps deadlines."""
        return f"{self.prefix}sweeper"

    @property
    def cancel_channel(self) -> str:
        """The pub/sub channel of cross-replica cancels."""
        return f"{self.prefix}cancel"

    @property
    def attach_channel(self) -> str:
        """The pub/sub channel of re-attaches (a draining replica hands its run over)."""
        return f"{self.prefix}attach"


# ------------------------------------------------------------------ URLs
def split_store_url(url: str) -> tuple[str, RedisSettings]:
    """Split a store URL into the redis-py URL and the store's own options."""
    parts = urlsplit(url)
    if parts.scheme not in REDIS_SCHEMES:
        raise RedisStoreError(f"not a redis URL: {redact_url(url)} (use redis://HOST:PORT/DB)")
    ours: dict[str, str] = {}
    theirs: list[tuple[str, str]] = []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name in _OPTION_NAMES:
            ours[name] = value
        elif name in _redis_py_options():
            theirs.append((name, value))
        else:
            raise RedisStoreError(_unknown_option(name))
    settings = _settings_from(ours)
    return urlunsplit(parts._replace(query=urlencode(theirs))), settings


_OPTION_NAMES = frozenset({"prefix", "lease_seconds", "retention_days"})
#: Options redis-py takes from a URL as strings, besides those it parses itself
#: (``URL_QUERY_ARGUMENT_PARSERS``): anything else would reach a connection's
#: constructor and fail there, at the first command, as a long traceback.
_REDIS_PY_STRING_OPTIONS = frozenset({
    "client_name", "username", "password", "ssl_cert_reqs", "ssl_ca_certs", "ssl_ca_path", "ssl_ca_data",
    "ssl_certfile", "ssl_keyfile", "ssl_password", "ssl_ciphers",
})


def _redis_py_options() -> frozenset[str]:
    from redis.asyncio.connection import URL_QUERY_ARGUMENT_PARSERS

    return _REDIS_PY_STRING_OPTIONS | frozenset(URL_QUERY_ARGUMENT_PARSERS)


def _unknown_option(name: str) -> str:
    known = sorted(_OPTION_NAMES | _redis_py_options())
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    return (f"unknown option {name[:100]!r} in the store URL: {hint}the store's own are "
            f"{', '.join(sorted(_OPTION_NAMES))}; redis-py's: {', '.join(sorted(_redis_py_options()))}")


def _settings_from(options: dict[str, str]) -> RedisSettings:
    try:
        lease = float(options.get("lease_seconds", DEFAULT_LEASE_SECONDS))
        retention = float(options.get("retention_days", DEFAULT_RETENTION_DAYS))
    except ValueError as exc:
        raise RedisStoreError(f"bad store option: {exc}") from exc
    if lease <= 0 or retention < 0:
        raise RedisStoreError("lease_seconds must be > 0 and retention_days >= 0")
    return RedisSettings(options.get("prefix", DEFAULT_PREFIX), lease, retention)


def redact_url(url: str) -> str:
    """The URL without its password (for banners, logs and /health)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = f"{parts.username}:***@" if parts.username else ":***@"
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=user + host))


def store_from_url(url: str) -> RedisThreadStore:
    """The store for a ``--store redis://...`` value (what ``create_app`` calls)."""
    redis_url, settings = split_store_url(url)
    return RedisThreadStore(redis_url, settings)


def _client_for(redis_url: str) -> aioredis.Redis:
    """A client with short timeouts and a quick retry (URL options win)."""
    retry = Retry(ExponentialBackoff(cap=0.2, base=0.05), retries=1)
    try:
        return aioredis.Redis.from_url(
            redis_url, socket_connect_timeout=1.0, socket_timeout=2.0, retry=retry, health_check_interval=15
        )
    except ValueError as exc:
        raise RedisStoreError(f"bad redis URL {redact_url(redis_url)}: {exc}") from exc


# ----------------------------------------------------------------- store
class RedisThreadStore:
    """Thread records, claims, deadlines and cancels shared through Redis."""

    def __init__(self, redis_url: str, settings: RedisSettings | None = None) -> None:
        self.settings = settings or RedisSettings()
        self.keys = Keys(self.settings.prefix)
        self.replica_id = f"{uuid.uuid4()}"
        self._url = redact_url(redis_url)
        self._client = _client_for(redis_url)
        self._claim_script = self._client.register_script(_CLAIM)
        self._renew_script = self._client.register_script(_RENEW)
        self._release_script = self._client.register_script(_RELEASE)
        self._save_script = self._client.register_script(_SAVE)
        self._sweep_script = self._client.register_script(_SWEEP)
        self._delete_script = self._client.register_script(_DELETE)
        self._lists = RedisThreadList(self._client, self.keys.thread_list, self.keys.thread)
        self._callbacks: list[Callable[[str], None]] = []
        self._attach_callbacks: list[Callable[[str], None]] = []
        self._listener: asyncio.Task[None] | None = None
        self._closing = False
        #: Set while the cancel listener is subscribed (tests wait on it).
        self.listening = asyncio.Event()
        #: When Redis stopped answering (monotonic), until it answers again.
        self._lost_at: float | None = None
        self._watcher: asyncio.Task[None] | None = None

    # ------------------------------------------------------------ identity
    @property
    def kind(self) -> str:
        """This is the Redis store."""
        return "redis"

    @property
    def durability(self) -> str:
        """A write counts once Redis took it; how far it goes is the server's
        persistence (``appendfsync``), not the adapter's."""
        return "redis"

    @property
    def shared(self) -> bool:
        """Every replica reads and writes the same keys."""
        return True

    @property
    def lease_seconds(self) -> float:
        """A claim lapses this long after its last renewal."""
        return self.settings.lease_seconds

    def location(self) -> str:
        """The server (password hidden) and the key prefix."""
        return f"{self._url} (prefix {self.settings.prefix})"

    def run_slots(self, purpose: str = "runs") -> RedisRunSlots:
        """Active runs are counted in Redis, for every replica together (leases
        like claims); another ``purpose`` in keys of its own (``<prefix><purpose>-runs``...)."""
        prefix = self.keys.prefix if purpose == "runs" else f"{self.keys.prefix}{purpose}-"
        return RedisRunSlots(self._client, prefix, self.settings.lease_ms)

    # ----------------------------------------------------------- lifecycle
    async def start(self) -> None:
        """Check that Redis answers, then listen for cancels."""
        try:
            await _bounded(self._client.ping())
        except _REFUSED_CREDENTIALS as exc:
            raise RedisStoreError(
                f"the redis store at {self._url} refuses its credentials ({_why(exc)}): check the user and "
                "password in --store / IAC_CODE_AGUI_STORE against Redis's requirepass or ACL") from exc
        except _ERRORS as exc:
            raise RedisStoreError(f"cannot reach the redis store at {self._url}: {_why(exc)}") from exc
        self._listener = asyncio.create_task(self._listen_forever(), name="redis-cancel-listener")
        self._watcher = asyncio.create_task(self._watch_forever(), name="redis-store-watch")

    async def close(self) -> None:
        """Stop listening and close the connections."""
        self._closing = True
        listener, self._listener = self._listener, None
        watcher, self._watcher = self._watcher, None
        for task in (listener, watcher):
            if task is not None:
                await _stop_task(task)
        await self._client.aclose()

    async def ping(self) -> bool:
        """Whether Redis answers (for /health)."""
        return await self.status() == "ok"

    async def status(self) -> str:
        """``ok``, ``unauthorized`` (Redis refuses the URL's user or password) or ``unreachable``."""
        try:
            return "ok" if await _bounded(self._client.ping()) else "unreachable"
        except _REFUSED_CREDENTIALS:
            return "unauthorized"
        except _ERRORS:
            return "unreachable"

    # ------------------------------------------------------------- records
    async def load(self, thread_id: str) -> ThreadRecord | None:
        """The stored record; ``StoreUnavailable`` when Redis does not answer."""
        try:
            data = await _bounded(self._client.hget(self.keys.thread(thread_id), "record"))
        except _ERRORS as exc:
            raise StoreUnavailable(f"redis: {_why(exc)}") from exc
        if data is None:
            return None
        raw = data if isinstance(data, bytes) else data.encode()
        return parse_stored_record(thread_id, raw, f"redis record of {thread_id}")

    async def load_owned(self, thread_id: str, principal: str | None) -> ThreadRecord | None:
        """The stored record when it names ``principal`` (another's is not parsed)."""
        try:
            data = await _bounded(self._client.hget(self.keys.thread(thread_id), "record"))
        except _ERRORS as exc:
            raise StoreUnavailable(f"redis: {_why(exc)}") from exc
        if data is None:
            return None
        raw = data if isinstance(data, bytes) else data.encode()
        return parse_owned_record(thread_id, raw, f"redis record of {thread_id}", principal)

    async def save(self, record: ThreadRecord, claim: Claim | None = None) -> Saved:
        """Compare-and-set the record on its version, fenced by the claim's token."""
        if claim is not None and claim.thread_id != record.key:
            raise PersistenceError(f"claim of {claim.thread_id} used for {record.key}")
        expected = record.version
        saved, record = Saved.next_of(record, time.time())
        stored, moved = split_runs(record)
        try:
            summary = summary_of(record)
            keys = [self.keys.thread(record.key), self.keys.claim(record.key),
                    self.keys.thread_list(owner_id(owner_of(record)))]
            args: list[bytes | str | int] = [
                expected, record.version, record_to_json(stored), _token_arg(claim), self._ttl_ms(record),
                repr(summary.updated_at), summary.to_json(), record.key, self.settings.retention_ms,
            ]
            for run_id, entry in moved:
                args += [_RUN_FIELD + run_id, entry_json(entry)]
            result = await _bounded(self._save_script(keys=keys, args=args))
        except _ERRORS as exc:
            raise PersistenceError(f"redis: {_why(exc)}") from exc
        if result != 1:
            raise PersistenceError(_SAVE_REFUSALS.get(int(result), f"unexpected answer {result!r}"))
        return saved.keeping(stored) if moved else saved

    async def earlier_run(self, key: str, run_id: str) -> RunEntry | None:
        """A run that left the thread's record: a field of the record's hash."""
        try:
            value = await _bounded(self._client.hget(self.keys.thread(key), _RUN_FIELD + run_id))
        except _ERRORS as exc:
            raise StoreUnavailable(f"redis: {_why(exc)}") from exc
        if value is None:
            return None
        try:
            return entry_of(value)
        except ValueError as exc:
            raise StoreUnavailable(f"redis: run {run_id} of {key} unreadable: {exc}") from exc

    async def list_threads(
        self, owner: str, after: ListCursor | None, limit: int, states: frozenset[ThreadState] | None = None
    ) -> ThreadPage:
        """A page of ``owner``'s threads, newest first (:mod:`.redis_thread_list`)."""
        try:
            return await _bounded(self._lists.page(owner_id(owner), after, limit, states))
        except _ERRORS as exc:
            raise StoreUnavailable(f"redis: {_why(exc)}") from exc

    async def each_summary(self) -> AsyncIterator[ThreadSummary]:
        """Every record's summary: ``SCAN`` over the record hashes, in batches."""
        start = len(self.keys.thread(""))
        pattern = _glob_escaped(self.keys.thread("")) + "*"
        cursor: int = 0
        try:
            while True:
                cursor, found = await _bounded(self._client.scan(cursor, match=pattern, count=500, _type="hash"))
                async with self._client.pipeline(transaction=False) as pipe:
                    for key in found:
                        pipe.hmget(key, "summary", "record")
                    rows = await _bounded(pipe.execute())
                for key, (summary, record) in zip(found, rows, strict=True):
                    try:
                        yield (ThreadSummary.from_json(summary) if summary is not None
                               else summary_of(record_from_json(record)))
                    except (ValueError, TypeError) as exc:
                        log.warning("redis record of %s unreadable, not listed: %s", _text(key)[start:], exc)
                if int(cursor) == 0:
                    return
        except _ERRORS as exc:
            raise StoreUnavailable(f"redis: {_why(exc)}") from exc

    async def delete_thread(self, record: ThreadRecord, claim: Claim) -> bool:
        """Erase the record, its list entry, deadline, claim and run logs in one script."""
        prefix = self.settings.prefix
        logs = [run_log_key(prefix, kind, record.key, run_id) for run_id in record.runs for kind in ("events", "watch")]
        keys = [self.keys.claim(record.key), self.keys.thread(record.key),
                self.keys.thread_list(owner_id(owner_of(record))), self.keys.deadlines, *logs]
        try:
            done = await _bounded(self._delete_script(keys=keys, args=[claim.token, record.key]))
        except _ERRORS as exc:
            raise PersistenceError(f"redis: {_why(exc)}") from exc
        return int(done) == 1

    def _ttl_ms(self, record: ThreadRecord) -> int:
        return self.settings.retention_ms if record.state in EXPIRING_STATES else 0

    # -------------------------------------------------------------- claims
    async def claim(self, thread_id: str, run_id: str) -> Claim | None:
        """Take the thread's lease with a new fencing token; ``None`` if held."""
        low_bits = secrets.randbits(_TOKEN_RANDOM_BITS)
        keys = [self.keys.claim(thread_id), self.keys.fence]
        try:
            token = await _bounded(self._claim_script(keys=keys, args=[self.settings.lease_ms, low_bits]))
        except _ERRORS as exc:
            raise StoreUnavailable(f"redis: {_why(exc)}") from exc
        return Claim(thread_id, run_id, int(token)) if int(token) > 0 else None

    async def renew(self, claim: Claim) -> bool:
        """Extend the lease if it still holds our token; ``False`` once lost."""
        keys = [self.keys.claim(claim.thread_id)]
        try:
            kept = await _bounded(self._renew_script(keys=keys, args=[claim.token, self.settings.lease_ms]))
        except _ERRORS as exc:
            raise StoreUnavailable(f"redis: {_why(exc)}") from exc
        return int(kept) == 1

    async def release(self, claim: Claim) -> None:
        """Delete the lease only if it still holds our token (never raises)."""
        try:
            await _bounded(self._release_script(keys=[self.keys.claim(claim.thread_id)], args=[claim.token]))
        except _ERRORS as exc:
            log.warning("thread %s: claim not released (it lapses by itself): %s", claim.thread_id, _why(exc))

    # ----------------------------------------------------------- deadlines
    async def set_deadline(self, thread_id: str, expires_at: float | None) -> None:
        """Add, move or remove a thread's deadline in the sorted set."""
        try:
            if expires_at is None:
                await _bounded(self._client.zrem(self.keys.deadlines, thread_id))
            else:
                await _bounded(self._client.zadd(self.keys.deadlines, {thread_id: expires_at}))
        except _ERRORS as exc:
            raise PersistenceError(f"redis: {_why(exc)}") from exc

    async def deadlines(self) -> dict[str, float]:
        """Every deadline (each replica re-arms them all at startup)."""
        try:
            entries = await _bounded(self._client.zrange(self.keys.deadlines, 0, -1, withscores=True))
        except _ERRORS as exc:
            raise StoreUnavailable(f"redis: {_why(exc)}") from exc
        return _scores(entries)

    async def deadlines_of(self, thread_ids: Collection[str]) -> dict[str, float]:
        """The deadlines of these threads, in one ``ZMSCORE``."""
        members = list(thread_ids)
        if not members:
            return {}
        try:
            scores = await _bounded(self._client.zmscore(self.keys.deadlines, members))
        except _ERRORS as exc:
            raise StoreUnavailable(f"redis: {_why(exc)}") from exc
        return {member: float(score) for member, score in zip(members, scores, strict=True) if score is not None}

    async def deadline_count(self) -> int:
        """Every replica's waiting threads: ``ZCARD`` of the deadlines."""
        try:
            return int(await _bounded(self._client.zcard(self.keys.deadlines)))
        except _ERRORS as exc:
            raise StoreUnavailable(f"redis: {_why(exc)}") from exc

    async def due_deadlines(self, now: float) -> list[str]:
        """Deadlines that passed, for the replica holding the sweeper lease only."""
        keys = [self.keys.sweeper, self.keys.deadlines]
        args: list[str | int] = [self.replica_id, SWEEPER_LEASE_MS, repr(now), SWEEP_BATCH]
        try:
            due = await _bounded(self._sweep_script(keys=keys, args=args))
        except _ERRORS as exc:
            raise StoreUnavailable(f"redis: {_why(exc)}") from exc
        return [_text(member) for member in due]

    # ------------------------------------------------------------- cancels
    @property
    def signals(self) -> RedisThreadStore:
        """Cancels and hand-overs go over this store's pub/sub channels."""
        return self

    async def publish_cancel(self, execution_id: str) -> None:
        """Tell every replica; the one streaming the execution stops it."""
        try:
            await _bounded(self._client.publish(self.keys.cancel_channel, execution_id))
        except _ERRORS as exc:
            # The caller then waits for the run to end and reports 503 or busy.
            log.warning("cancel of %s not published: %s", execution_id, _why(exc))

    def on_cancel(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(execution_id)`` for every published cancel."""
        self._callbacks.append(callback)

    async def publish_attach(self, execution_id: str) -> None:
        """Tell every replica a client re-attached to this execution's run."""
        try:
            await _bounded(self._client.publish(self.keys.attach_channel, execution_id))
        except _ERRORS as exc:
            log.warning("re-attach of %s not published: %s", execution_id, _why(exc))

    def on_attach(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(execution_id)`` for every published re-attach."""
        self._attach_callbacks.append(callback)

    def run_logs(self, bounds: LogBounds) -> RedisRunLogs:
        """Run logs as Redis streams (``docs/redis-layout.md``)."""
        return RedisRunLogs(self._client, self.settings.prefix, bounds)

    async def _listen_forever(self) -> None:
        """Listen, and after any failure listen again (backing off while Redis
        stays away); cancels published in the gap are lost."""
        delay = 0.1
        while not self._closing:
            problem = "closed"
            try:
                await self._listen_once()
            except _ERRORS as exc:
                problem = _why(exc)
            delay = 0.1 if self.listening.is_set() else min(delay * 2, 5.0)
            self.listening.clear()
            if not self._closing:
                self._lost(problem)
                log.warning("cancel listener lost redis (%s); again in %.1f s", problem, delay)
                await asyncio.sleep(delay)

    async def _watch_forever(self) -> None:
        """PING every :data:`WATCH_SECONDS`: an outage gets one ``redis store
        unreachable`` line and its end one ``redis store reconnected`` line,
        whatever the calls that failed in between logged."""
        while not self._closing:
            await asyncio.sleep(WATCH_SECONDS)
            try:
                await _bounded(self._client.ping())
            except _ERRORS as exc:
                self._lost(_why(exc))
            else:
                self._back()

    def _lost(self, problem: str) -> None:
        if self._lost_at is None:
            self._lost_at = time.monotonic()
            log_fields(log, logging.WARNING, "redis store unreachable", {"store": self._url, "error": problem})

    def _back(self) -> None:
        if self._lost_at is not None:
            log_fields(log, logging.INFO, "redis store reconnected", {
                "store": self._url, "outage_seconds": round(time.monotonic() - self._lost_at, 1)})
            self._lost_at = None

    async def _listen_once(self) -> None:
        pubsub = self._client.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(self.keys.cancel_channel, self.keys.attach_channel)
            self.listening.set()
            self._back()
            attach = self.keys.attach_channel.encode()
            while not self._closing:
                message = await pubsub.get_message(timeout=0.25)
                if message is not None and message.get("type") == "message":
                    channel = message.get("channel")
                    callbacks = self._attach_callbacks if channel == attach else self._callbacks
                    self._dispatch(_text(message["data"]), callbacks)
        finally:
            await _close_quietly(pubsub)

    def _dispatch(self, execution_id: str, callbacks: list[Callable[[str], None]]) -> None:
        for callback in list(callbacks):
            try:
                callback(execution_id)
            except Exception:
                log.exception("cancel callback failed for %s", execution_id)


_SAVE_REFUSALS = {
    -1: "the thread's claim was lost (its lease lapsed or another replica holds it)",
    -2: "the record was changed by another writer (version conflict)",
}


async def _bounded(call: Awaitable[_T]) -> _T:
    """Await a Redis call for at most :data:`CALL_TIMEOUT_SECONDS`."""
    return await asyncio.wait_for(call, CALL_TIMEOUT_SECONDS)


#: What Redis answers to a wrong or missing user or password (NOAUTH, WRONGPASS, NOPERM).
_REFUSED_CREDENTIALS = (AuthenticationError, AuthenticationWrongNumberOfArgsError, NoPermissionError)


def _why(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _glob_escaped(text: str) -> str:
    """``text`` matched literally by a ``SCAN MATCH`` pattern."""
    return "".join(f"\\{char}" if char in "*?[]\\" else char for char in text)


def _token_arg(claim: Claim | None) -> str:
    return "" if claim is None else str(claim.token)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _scores(entries: Any) -> dict[str, float]:
    return {_text(member): float(score) for member, score in entries}


async def _close_quietly(pubsub: PubSub) -> None:
    close: Callable[[], Awaitable[None]] = pubsub.aclose
    try:
        await close()
    except _ERRORS:
        pass


async def _stop_task(task: asyncio.Task[None]) -> None:
    """Cancel a task until it ends: redis-py (8.1) can swallow a cancel that
    arrives while a pub/sub connection subscribes; the listener also checks
    ``_closing`` after each wait of at most a second."""
    for _ in range(30):
        if task.done():
            break
        task.cancel()
        await asyncio.wait({task}, timeout=0.1)
    if task.done() and not task.cancelled() and task.exception() is not None:
        log.warning("cancel listener ended with %r", task.exception())
