"""A shared store for several replicas: thread records, claims and signals in Redis.

Chosen with ``--store redis://HOST:PORT/DB`` (needs ``aguiadapter[redis]``).
Every key is described in ``docs/redis-layout.md``. In short:

- a record is one hash (``version`` and ``record`` JSON); a save is a Lua
  compare-and-set on the version, allowed only while the thread's claim key
  still holds the writer's fencing token;
- a claim is a key with a lease (``PX``) holding a fencing token that grows
  with a counter (``INCR``); renewal and release check the token first;
- deadlines are sorted sets (in buckets); ``due_deadlines`` hands them out
  only to the replica that holds a short sweeper lease;
- every script touches the keys of one hash slot (:mod:`.layout`), so the
  same scripts run on a Redis Cluster;
- cancels travel on a pub/sub channel that a background task listens to,
  reconnecting whenever Redis goes away.

Options of the store itself ride in the URL's query string and are removed
before the URL reaches redis-py: ``prefix`` (key prefix, default
``aguiadapter:``), ``lease_seconds`` (claim lease, default 5) and
``retention_days`` (how long idle and terminal records are kept, default 30;
0 keeps them forever). Interrupted and running records never expire.
``redis+sentinel://...`` finds the primary through Sentinel (:mod:`.topology`).
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
from redis.asyncio.client import Pipeline, PubSub
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import ExponentialBackoff
from redis.exceptions import AuthenticationError, AuthenticationWrongNumberOfArgsError, NoPermissionError, RedisError

from ...logs import log_fields
from ...threads.listing import ListCursor, ThreadPage, ThreadSummary, owner_id, owner_of, summary_of
from ...threads.record import RunEntry, ThreadRecord, ThreadState, record_from_json, record_to_json
from ..run_history import entry_json, entry_of, split_runs
from ..run_log import LogBounds
from .limits import RedisRunSlots
from .durable import KEEP_UNDO, UNDO, UNDO_TTL_MS, wait_refusal
from .earlier import ClaimReads, ReadAtClaim, version_of
from .layout import LAYOUT_VERSION, MIGRATION_LOCK_MS, Keys, Migrated, check_prefix, migrate
from .topology import (
    CLUSTER_OPTIONS, CLUSTER_SCHEME, SENTINEL_OPTIONS, SENTINEL_SCHEME, Client, TopologyError, close_sentinel,
    cluster_client, parse_cluster_url, parse_sentinel_url, sentinel_client,
)
from .run_log import RedisRunLogs
from .thread_list import RedisThreadList
from ..contract import Claim, PersistenceError, Saved, StoreUnavailable, parse_owned_record, parse_stored_record

log = logging.getLogger(__name__)

REDIS_SCHEMES = ("redis", "rediss", "unix", SENTINEL_SCHEME, CLUSTER_SCHEME)
DEFAULT_PREFIX = "aguiadapter:"
DEFAULT_LEASE_SECONDS = 5.0
DEFAULT_RETENTION_DAYS = 30.0
DEFAULT_WAIT_TIMEOUT_MS = 500
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

# KEYS: claim, record (one slot). ARGV: lease ms, the token (made by the
# caller from the thread's fence counter, which lives in another slot), the
# hash field of the run id in the thread's history (``run:<id>``). Returns
# {0} (held by another), or {1, the record's version, that field} (nil
# where absent), read in the step that takes the claim (:mod:`.earlier`).
_CLAIM = """
if redis.call('EXISTS', KEYS[1]) == 1 then return {0} end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[1])
local found = redis.call('HMGET', KEYS[2], 'version', ARGV[3])
return {1, found[1], found[2]}
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

# KEYS: record, claim (one slot). ARGV: expected version, new version, record
# JSON, token ('' when the write holds no claim), TTL ms ('0': keep forever),
# summary JSON, the undo key's TTL ms (with min_replicas, KEYS[3] is the undo
# key, :mod:`.durable`), then field and value pairs of the runs that move out
# of the record into its hash (``run:<id>``, aguiadapter/store/run_history.py).
# Returns 1 (written, or this very write was already applied),
# -1 (the claim is not ours any more), -2 (someone else changed the record).
# The owner's list is another slot: :meth:`RedisThreadStore.save` updates it next.
# With min_replicas, KEYS[3] is the undo key and ARGV[7] its TTL (:mod:`.durable`).
_SAVE = """
if ARGV[4] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[4] then return -1 end
local current = redis.call('HGET', KEYS[1], 'version') or '0'
if current == ARGV[2] and redis.call('HGET', KEYS[1], 'record') == ARGV[3] then return 1 end
if current ~= ARGV[1] then return -2 end
""" + KEEP_UNDO + """
redis.call('HSET', KEYS[1], 'version', ARGV[2], 'record', ARGV[3], 'summary', ARGV[6])
for i = 8, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
if ARGV[5] == '0' then redis.call('PERSIST', KEYS[1]) else redis.call('PEXPIRE', KEYS[1], ARGV[5]) end
return 1
"""

# KEYS: sweeper lease. ARGV: replica id, lease ms. 1 when this replica sweeps.
_SWEEP = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""


# KEYS: claim, record, then the runs' event streams and watch keys (one
# slot). ARGV: token. Erases a thread (operator command) while the caller's
# claim holds it: 1, else -1. Its list entry and deadline go next.
_DELETE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
for i = 2, #KEYS do redis.call('DEL', KEYS[i]) end
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
    #: Replicas that must acknowledge every save (``WAIT``); 0: none awaited.
    min_replicas: int = 0
    #: How long a save waits for them before it fails (and is undone).
    wait_timeout_ms: int = DEFAULT_WAIT_TIMEOUT_MS

    @property
    def retention_ms(self) -> int:
        """The TTL of idle and terminal records; 0 keeps them forever."""
        return round(self.retention_days * 86_400_000)

    @property
    def lease_ms(self) -> int:
        """The claim lease in milliseconds."""
        return max(1, round(self.lease_seconds * 1000))


# ------------------------------------------------------------------ URLs
def split_store_url(url: str) -> tuple[str, RedisSettings]:
    """Split a store URL into the redis-py URL and the store's own options."""
    parts = urlsplit(url)
    if parts.scheme not in REDIS_SCHEMES:
        raise RedisStoreError(f"not a redis URL: {redact_url(url)} (use redis://HOST:PORT/DB)")
    sentinel, cluster = parts.scheme == SENTINEL_SCHEME, parts.scheme == CLUSTER_SCHEME
    passed = SENTINEL_OPTIONS if sentinel else CLUSTER_OPTIONS if cluster else _redis_py_options()
    ours: dict[str, str] = {}
    theirs: list[tuple[str, str]] = []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name in _OPTION_NAMES:
            ours[name] = value
        elif name in passed:
            theirs.append((name, value))
        else:
            raise RedisStoreError(_unknown_option(name, passed))
    settings = _settings_from(ours)
    try:
        if sentinel:
            parse_sentinel_url(url, dict(theirs))
        elif cluster:
            parse_cluster_url(url, dict(theirs))
    except TopologyError as exc:
        raise RedisStoreError(f"bad store URL {redact_url(url)}: {exc}") from exc
    if cluster and settings.min_replicas:
        raise RedisStoreError("min_replicas is not available on a Redis Cluster yet (its WAIT would go to one "
                              "node of many): use Sentinel, or min_replicas=0")
    return urlunsplit(parts._replace(query=urlencode(theirs))), settings


def check_store_url(url: str) -> None:
    """Raise ``RedisStoreError`` or ``ValueError`` for a URL that cannot work
    (what the command line checks before anything starts)."""
    from redis.asyncio.connection import parse_url

    redis_url, _ = split_store_url(url)
    if urlsplit(redis_url).scheme not in (SENTINEL_SCHEME, CLUSTER_SCHEME):
        parse_url(redis_url)  # redis-py's own options: their values too


_OPTION_NAMES = frozenset({"prefix", "lease_seconds", "retention_days", "min_replicas", "wait_timeout_ms"})
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


def _unknown_option(name: str, passed: frozenset[str]) -> str:
    known = sorted(_OPTION_NAMES | passed)
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    whose = "redis-py's" if passed is not SENTINEL_OPTIONS and passed is not CLUSTER_OPTIONS else "the connection's"
    return (f"unknown option {name[:100]!r} in the store URL: {hint}the store's own are "
            f"{', '.join(sorted(_OPTION_NAMES))}; {whose}: {', '.join(sorted(passed))}")


def _settings_from(options: dict[str, str]) -> RedisSettings:
    try:
        lease = float(options.get("lease_seconds", DEFAULT_LEASE_SECONDS))
        retention = float(options.get("retention_days", DEFAULT_RETENTION_DAYS))
        replicas = int(options.get("min_replicas", 0))
        wait_ms = int(options.get("wait_timeout_ms", DEFAULT_WAIT_TIMEOUT_MS))
    except ValueError as exc:
        raise RedisStoreError(f"bad store option: {exc}") from exc
    if lease <= 0 or retention < 0:
        raise RedisStoreError("lease_seconds must be > 0 and retention_days >= 0")
    if not 0 <= replicas <= 100 or not 1 <= wait_ms <= 60_000:
        raise RedisStoreError("min_replicas must be 0-100 and wait_timeout_ms 1-60000")
    prefix = options.get("prefix", DEFAULT_PREFIX)
    refused = check_prefix(prefix)
    if refused is not None:
        raise RedisStoreError(f"bad store option: {refused}")
    return RedisSettings(prefix, lease, retention, replicas, wait_ms)


def redact_url(url: str) -> str:
    """The URL without its passwords (for banners, logs and /health)."""
    parts = urlsplit(url)
    query = parts.query
    if any(name in _SECRET_OPTIONS for name, _ in parse_qsl(query, keep_blank_values=True)):
        query = "&".join(f"{name}=***" if name in _SECRET_OPTIONS else f"{name}={value}"
                         for name, value in parse_qsl(query, keep_blank_values=True))
        parts = parts._replace(query=query)
    if parts.password is None:
        return urlunsplit(parts)
    user = f"{parts.username}:***@" if parts.username else ":***@"
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=user + host))


#: Query options whose values are secrets.
_SECRET_OPTIONS = frozenset({"password", "sentinel_password", "ssl_password"})


def store_from_url(url: str) -> RedisThreadStore:
    """The store for a ``--store redis://...`` value (what ``create_app`` calls)."""
    redis_url, settings = split_store_url(url)
    return RedisThreadStore(redis_url, settings)


def _client_for(redis_url: str) -> tuple[Client, Sentinel | None]:
    """A client with short timeouts and a quick retry (URL options win); for
    a Sentinel URL, a client of the current primary and its sentinels; for a
    Cluster URL, a client of the whole cluster."""
    parts = urlsplit(redis_url)
    try:
        if parts.scheme == SENTINEL_SCHEME:
            return sentinel_client(parse_sentinel_url(redis_url, dict(parse_qsl(parts.query))))
        if parts.scheme == CLUSTER_SCHEME:
            return cluster_client(parse_cluster_url(redis_url, dict(parse_qsl(parts.query)))), None
    except TopologyError as exc:
        raise RedisStoreError(f"bad store URL {redact_url(redis_url)}: {exc}") from exc
    return _plain_client(redis_url), None


def _plain_client(redis_url: str) -> aioredis.Redis:
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
        self._client, self._sentinel = _client_for(redis_url)
        self._claim_script = self._client.register_script(_CLAIM)
        self._renew_script = self._client.register_script(_RENEW)
        self._release_script = self._client.register_script(_RELEASE)
        self._save_script = self._client.register_script(_SAVE)
        self._sweep_script = self._client.register_script(_SWEEP)
        self._delete_script = self._client.register_script(_DELETE)
        self._undo_script = self._client.register_script(UNDO)
        self._lists = RedisThreadList(self._client, self.keys.thread_list, self.keys.thread)
        #: What each claim held here read of its run id's history (:mod:`.earlier`).
        self._claim_reads = ClaimReads()
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
    def cluster(self) -> bool:
        """Whether the client talks to a Redis Cluster."""
        return isinstance(self._client, RedisCluster)

    @property
    def lease_seconds(self) -> float:
        """A claim lapses this long after its last renewal."""
        return self.settings.lease_seconds

    def location(self) -> str:
        """The server (password hidden) and the key prefix."""
        return f"{self._url} (prefix {self.settings.prefix})"

    def run_slots(self, purpose: str = "runs") -> RedisRunSlots:
        """Active runs are counted in Redis, for every replica together (leases
        like claims); another ``purpose`` in keys of its own (``<prefix><purpose>-{runs}``...)."""
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
        await self._upgrade_layout()
        self._listener = asyncio.create_task(self._listen_forever(), name="redis-cancel-listener")
        self._watcher = asyncio.create_task(self._watch_forever(), name="redis-store-watch")

    async def _upgrade_layout(self) -> None:
        """Move keys written before the hash tags to their new names, once per
        deployment: the replica that takes the migration lock does it while the
        others wait (docs/redis-layout.md, "Upgrading from layout 1")."""
        keys = self.keys
        try:
            deadline = time.monotonic() + MIGRATION_LOCK_MS / 1000
            while await _bounded(self._client.get(keys.layout)) != LAYOUT_VERSION.encode():
                locked = self._client.set(keys.migration_lock, self.replica_id, nx=True, px=MIGRATION_LOCK_MS)
                if await _bounded(locked):
                    # Layout 1 never ran on a cluster (it could not): nothing to move there.
                    moved = Migrated() if self.cluster else await migrate(self._client, keys)
                    await _bounded(self._client.set(keys.layout, LAYOUT_VERSION))
                    await _bounded(self._client.delete(keys.migration_lock))
                    if moved.records or moved.deadlines:
                        log_fields(log, logging.WARNING, "redis store keys migrated to layout 2", {
                            "store": self._url, "records": moved.records, "deadlines": moved.deadlines})
                    return
                if time.monotonic() > deadline:
                    raise RedisStoreError(f"the redis store at {self._url}: another replica has been migrating "
                                          f"its keys for {MIGRATION_LOCK_MS // 1000} s; see docs/redis-layout.md")
                await asyncio.sleep(0.2)
        except _ERRORS as exc:
            raise RedisStoreError(f"the redis store at {self._url} could not migrate its keys: {_why(exc)}") from exc

    async def close(self) -> None:
        """Stop listening and close the connections."""
        self._closing = True
        listener, self._listener = self._listener, None
        watcher, self._watcher = self._watcher, None
        for task in (listener, watcher):
            if task is not None:
                await _stop_task(task)
        await self._client.aclose()
        if self._sentinel is not None:
            await close_sentinel(self._sentinel)

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
        raw = await self._read_record(thread_id)
        record = None if raw is None else parse_stored_record(thread_id, raw, f"redis record of {thread_id}")
        self._claim_reads.loaded(thread_id, record)
        return record

    async def load_owned(self, thread_id: str, principal: str | None) -> ThreadRecord | None:
        """The stored record when it names ``principal`` (another's is not parsed)."""
        raw = await self._read_record(thread_id)
        record = None if raw is None else parse_owned_record(
            thread_id, raw, f"redis record of {thread_id}", principal)
        self._claim_reads.loaded(thread_id, record)
        return record

    async def _read_record(self, thread_id: str) -> bytes | None:
        """The bytes of a thread's record, ``None`` when it has none."""
        try:
            data = await _bounded(self._client.hget(self.keys.thread(thread_id), "record"))
        except _ERRORS as exc:
            raise StoreUnavailable(f"redis: {_why(exc)}") from exc
        if data is None:
            return None
        return data if isinstance(data, bytes) else data.encode()

    async def save(self, record: ThreadRecord, claim: Claim | None = None, *, durable: bool = True) -> Saved:
        """Compare-and-set the record on its version, fenced by the claim's token.

        Every save waits for ``min_replicas``, ``durable=False`` too: a save
        a failover lost would make the thread's next one a version conflict
        (the run's end a lost write), so skipping the WAIT saves nothing
        that is not paid back as a failed end."""
        if claim is not None and claim.thread_id != record.key:
            raise PersistenceError(f"claim of {claim.thread_id} used for {record.key}")
        expected = record.version
        saved, record = Saved.next_of(record, time.time())
        stored, moved = split_runs(record)
        summary = summary_of(record)
        data = record_to_json(stored)
        try:
            keys = [self.keys.thread(record.key), self.keys.claim(record.key)]
            args: list[bytes | str | int] = [
                expected, record.version, data, _token_arg(claim), self._ttl_ms(record), summary.to_json(),
                UNDO_TTL_MS if self.settings.min_replicas else 0,
            ]
            for run_id, entry in moved:
                args += [_RUN_FIELD + run_id, entry_json(entry)]
            if self.settings.min_replicas:
                result = await self._save_and_wait(record, keys, args, data)
            else:
                result = await _bounded(self._save_script(keys=keys, args=args))
        except _ERRORS as exc:
            raise PersistenceError(f"redis: {_why(exc)}") from exc
        if result != 1:
            raise PersistenceError(_SAVE_REFUSALS.get(int(result), f"unexpected answer {result!r}"))
        await self._list(record, summary.updated_at)
        return saved.keeping(stored) if moved else saved

    async def _save_and_wait(
        self, record: ThreadRecord, keys: list[str], args: list[bytes | str | int], data: bytes
    ) -> int:
        """The save script and ``WAIT`` on one connection (a pipeline); a save
        too few replicas acknowledged is undone and refused (:mod:`.durable`)."""
        wanted, timeout_ms = self.settings.min_replicas, self.settings.wait_timeout_ms
        undo = self.keys.of_thread("undo", record.key)
        async with self._client.pipeline(transaction=False) as pipe:
            if not isinstance(pipe, Pipeline):  # refused at start: split_store_url
                raise PersistenceError("min_replicas needs one primary (plain or behind Sentinel)")
            await self._save_script(keys=[*keys, undo], args=args, client=pipe)
            pipe.execute_command("WAIT", wanted, timeout_ms)
            result, acked = await _bounded(pipe.execute(), CALL_TIMEOUT_SECONDS + timeout_ms / 1000)
        if int(result) != 1 or int(acked) >= wanted:
            return int(result)
        log_fields(log, logging.WARNING, "redis save not acknowledged by enough replicas", {
            "thread": record.key, "acknowledged": int(acked), "min_replicas": wanted})
        try:
            await _bounded(self._undo_script(keys=[keys[0], undo], args=[record.version, data]))
        except _ERRORS as exc:
            log.warning("thread %s: the unacknowledged save was not undone: %s", record.key, _why(exc))
        raise PersistenceError(wait_refusal(int(acked), wanted, timeout_ms))

    async def _list(self, record: ThreadRecord, updated_at: float) -> None:
        """Put the saved thread at its place in its owner's list (another slot
        than the record, so a step of its own, after the record: a listed
        thread always has a record). The record is saved whatever happens
        here; a list write that fails leaves the thread where it was listed
        (or unlisted, when new) until its next save, and says so."""
        key = self.keys.thread_list(owner_id(owner_of(record)))
        retention = self.settings.retention_ms
        try:
            async with self._client.pipeline(transaction=False) as pipe:
                pipe.zadd(key, {record.key: updated_at})
                if retention == 0:
                    pipe.persist(key)
                else:
                    pipe.pexpire(key, retention)
                await _bounded(pipe.execute())
        except _ERRORS as exc:
            log.warning("thread %s saved, but its place in the thread list was not updated: %s", record.key, _why(exc))

    async def earlier_run(self, key: str, run_id: str) -> RunEntry | None:
        """A run that left the thread's record: a field of the record's hash,
        as the claim taken for this run read it, else asked for (``HGET``)."""
        read = self._claim_reads.take(key, run_id)
        value: bytes | str | None
        if read is not None:
            value = read.entry
        else:
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
        start = len(self.keys.thread("")) - 1
        pattern = _glob_escaped(self.keys.thread("")[:-1]) + "*"
        found: list[Any] = []
        try:
            # scan_iter walks every primary of a cluster, one after the other.
            async for key in self._client.scan_iter(match=pattern, count=500, _type="hash"):
                found.append(key)
                if len(found) >= 500:
                    for summary in await self._summaries_of(found, start):
                        yield summary
                    found = []
            for summary in await self._summaries_of(found, start):
                yield summary
        except _ERRORS as exc:
            raise StoreUnavailable(f"redis: {_why(exc)}") from exc

    async def _summaries_of(self, keys: list[Any], start: int) -> list[ThreadSummary]:
        """The summaries of these record hashes (one pipeline)."""
        if not keys:
            return []
        async with self._client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.hmget(key, "summary", "record")
            rows = await _bounded(pipe.execute())
        summaries = []
        for key, (summary, record) in zip(keys, rows, strict=True):
            try:
                summaries.append(ThreadSummary.from_json(summary) if summary is not None
                                 else summary_of(record_from_json(record)))
            except (ValueError, TypeError) as exc:
                log.warning("redis record of %s unreadable, not listed: %s", _text(key)[start:-1], exc)
        return summaries

    async def delete_thread(self, record: ThreadRecord, claim: Claim) -> bool:
        """Erase the record, claim and run logs in one script (the thread's slot),
        then its list entry and deadline (a member left behind by a failure
        there is dropped by the page that meets it, or the sweep)."""
        logs = [self.keys.run_key(kind, record.key, run_id) for run_id in record.runs for kind in ("events", "watch")]
        keys = [self.keys.claim(record.key), self.keys.thread(record.key), *logs]
        try:
            done = await _bounded(self._delete_script(keys=keys, args=[claim.token]))
            if int(done) != 1:
                return False
            async with self._client.pipeline(transaction=False) as pipe:
                pipe.zrem(self.keys.thread_list(owner_id(owner_of(record))), record.key)
                pipe.zrem(self.keys.deadlines(record.key), record.key)
                await _bounded(pipe.execute())
        except _ERRORS as exc:
            raise PersistenceError(f"redis: {_why(exc)}") from exc
        return True

    def _ttl_ms(self, record: ThreadRecord) -> int:
        return self.settings.retention_ms if record.state in EXPIRING_STATES else 0

    # -------------------------------------------------------------- claims
    async def claim(self, thread_id: str, run_id: str) -> Claim | None:
        """Take the thread's lease with a new fencing token; ``None`` if held.
        The same script reads ``run_id``'s entry in the thread's history, which
        admission may need next (:mod:`.earlier`)."""
        try:
            count = await _bounded(self._client.incr(self.keys.fence(thread_id)))
            token = int(count) * (1 << _TOKEN_RANDOM_BITS) + secrets.randbits(_TOKEN_RANDOM_BITS)
            keys = [self.keys.claim(thread_id), self.keys.thread(thread_id)]
            args: list[str | int] = [self.settings.lease_ms, token, _RUN_FIELD + run_id]
            answer = await _bounded(self._claim_script(keys=keys, args=args))
        except _ERRORS as exc:
            raise StoreUnavailable(f"redis: {_why(exc)}") from exc
        if int(answer[0]) != 1:
            return None
        version, entry = answer[1:3]
        self._claim_reads.keep(thread_id, ReadAtClaim(run_id, token, version_of(version), entry))
        return Claim(thread_id, run_id, token)

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
        self._claim_reads.released(claim.thread_id, claim.token)
        try:
            await _bounded(self._release_script(keys=[self.keys.claim(claim.thread_id)], args=[claim.token]))
        except _ERRORS as exc:
            log.warning("thread %s: claim not released (it lapses by itself): %s", claim.thread_id, _why(exc))

    # ----------------------------------------------------------- deadlines
    async def set_deadline(self, thread_id: str, expires_at: float | None) -> None:
        """Add, move or remove a thread's deadline in the sorted set."""
        try:
            if expires_at is None:
                await _bounded(self._client.zrem(self.keys.deadlines(thread_id), thread_id))
            else:
                await _bounded(self._client.zadd(self.keys.deadlines(thread_id), {thread_id: expires_at}))
        except _ERRORS as exc:
            raise PersistenceError(f"redis: {_why(exc)}") from exc

    async def deadlines(self) -> dict[str, float]:
        """Every deadline (each replica re-arms them all at startup)."""
        try:
            async with self._client.pipeline(transaction=False) as pipe:
                for key in self.keys.all_deadlines:
                    pipe.zrange(key, 0, -1, withscores=True)
                buckets = await _bounded(pipe.execute())
        except _ERRORS as exc:
            raise StoreUnavailable(f"redis: {_why(exc)}") from exc
        return {member: score for entries in buckets for member, score in _scores(entries).items()}

    async def deadlines_of(self, thread_ids: Collection[str]) -> dict[str, float]:
        """The deadlines of these threads, in one ``ZMSCORE``."""
        by_key: dict[str, list[str]] = {}
        for member in thread_ids:
            by_key.setdefault(self.keys.deadlines(member), []).append(member)
        if not by_key:
            return {}
        try:
            async with self._client.pipeline(transaction=False) as pipe:
                for key, members in by_key.items():
                    pipe.zmscore(key, members)
                answers = await _bounded(pipe.execute())
        except _ERRORS as exc:
            raise StoreUnavailable(f"redis: {_why(exc)}") from exc
        return {member: float(score) for members, scores in zip(by_key.values(), answers, strict=True)
                for member, score in zip(members, scores, strict=True) if score is not None}

    async def deadline_count(self) -> int:
        """Every replica's waiting threads: ``ZCARD`` of the deadline buckets."""
        try:
            async with self._client.pipeline(transaction=False) as pipe:
                for key in self.keys.all_deadlines:
                    pipe.zcard(key)
                return sum(int(count) for count in await _bounded(pipe.execute()))
        except _ERRORS as exc:
            raise StoreUnavailable(f"redis: {_why(exc)}") from exc

    async def due_deadlines(self, now: float) -> list[str]:
        """Deadlines that passed, for the replica holding the sweeper lease only."""
        args: list[str | int] = [self.replica_id, SWEEPER_LEASE_MS]
        try:
            if int(await _bounded(self._sweep_script(keys=[self.keys.sweeper], args=args))) != 1:
                return []
            async with self._client.pipeline(transaction=False) as pipe:
                for key in self.keys.all_deadlines:
                    pipe.zrangebyscore(key, "-inf", repr(now), start=0, num=SWEEP_BATCH, withscores=True)
                buckets = await _bounded(pipe.execute())
        except _ERRORS as exc:
            raise StoreUnavailable(f"redis: {_why(exc)}") from exc
        due = sorted((float(score), _text(member)) for entries in buckets for member, score in entries)
        return [member for _, member in due[:SWEEP_BATCH]]

    # ------------------------------------------------------------- cancels
    @property
    def signals(self) -> RedisThreadStore:
        """Cancels and hand-overs go over this store's pub/sub channels."""
        return self

    async def publish_cancel(self, execution_id: str) -> None:
        """Tell every replica; the one streaming the execution stops it."""
        # Unpublished, the caller waits for the run to end and reports 503 or busy.
        await self._publish(self.keys.cancel_channel, execution_id, "cancel")

    def on_cancel(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(execution_id)`` for every published cancel."""
        self._callbacks.append(callback)

    async def publish_attach(self, execution_id: str) -> None:
        """Tell every replica a client re-attached to this execution's run."""
        await self._publish(self.keys.attach_channel, execution_id, "re-attach")

    async def _publish(self, channel: str, execution_id: str, what: str) -> None:
        """Publish ``execution_id`` on ``channel``; a failure is logged, not raised."""
        try:
            await _bounded(self._client.publish(channel, execution_id))
        except _ERRORS as exc:
            log.warning("%s of %s not published: %s", what, execution_id, _why(exc))

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


async def _bounded(call: Awaitable[_T], timeout: float = CALL_TIMEOUT_SECONDS) -> _T:
    """Await a Redis call for at most :data:`CALL_TIMEOUT_SECONDS` (or ``timeout``)."""
    return await asyncio.wait_for(call, timeout)


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
