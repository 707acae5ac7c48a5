"""Key names of the Redis store, with the hash tags a Redis Cluster needs.

A Redis Cluster runs a script or transaction only when all its keys hash to
one slot, and computes a key's slot from the part between its first ``{``
and the next ``}`` (the hash tag) when there is one. So:

- every key of one thread puts ``:`` and the thread's key in braces right
  after a fixed kind (``thread:{:<T>}``, ``claim:{:<T>}``,
  ``events:<len>:{:<T>}:<R>``): whatever ``<T>`` holds, the first ``{`` of
  each is the same one and the tag is never empty, so they share a slot and
  a script may touch them together. A new per-thread key
  is made with :meth:`Keys.of_thread` and joins that slot too;
- process-wide keys are touched one at a time (``deadlines`` in
  :data:`BUCKETS` buckets, the ``fence`` counters, the ``sweeper`` lease),
  except the run slots, whose script counts the whole server and one user
  together: they share the tag ``{runs}``;
- a prefix with a brace would move the tags, so it is refused.

On one primary the tags change nothing. Deployments whose keys predate
the tags are migrated once, by :func:`migrate` (see docs/redis-layout.md).
"""

from __future__ import annotations

import logging
import zlib
from typing import Any

import attrs

from ...threads.record import record_from_json

log = logging.getLogger(__name__)

#: The layout this code writes; kept in ``<prefix>layout`` once migrated.
LAYOUT_VERSION = "2"
#: How many deadline sorted sets (and fence counters) the threads spread over.
BUCKETS = 16
#: How long the replica migrating the keys keeps others waiting (ms).
MIGRATION_LOCK_MS = 120_000


def bucket_of(thread_key: str) -> int:
    """The bucket of a thread's deadline and fence counter (stable across processes)."""
    return zlib.crc32(thread_key.encode()) % BUCKETS


def check_prefix(prefix: str) -> str | None:
    """Why ``prefix`` cannot be used (``None``: it can)."""
    if "{" in prefix or "}" in prefix:
        return "prefix must not hold '{' or '}' (the store puts hash tags in its key names)"
    return None


@attrs.frozen
class Keys:
    """Every key name the store uses (see docs/redis-layout.md)."""

    prefix: str

    def of_thread(self, kind: str, thread_id: str) -> str:
        """A key of one thread, in that thread's hash slot: ``<prefix><kind>:{:<thread>}``
        (the colon keeps the tag from being empty when a thread id starts with ``}``)."""
        return f"{self.prefix}{kind}:{{:{thread_id}}}"

    def thread(self, thread_id: str) -> str:
        """The hash holding a thread's record."""
        return self.of_thread("thread", thread_id)

    def claim(self, thread_id: str) -> str:
        """The lease of the run (or expiry, or cancel) that owns a thread."""
        return self.of_thread("claim", thread_id)

    def run_key(self, kind: str, thread_id: str, run_id: str) -> str:
        """A run's key (``events``, ``watch``) in its thread's slot; the
        thread's length keeps two (thread, run) pairs from making one name."""
        return f"{self.prefix}{kind}:{len(thread_id)}:{{:{thread_id}}}:{run_id}"

    def thread_list(self, owner: str) -> str:
        """The sorted set of one owner's threads (:func:`~.listing.owner_id`), by updated time."""
        return f"{self.prefix}user-threads:{owner}"

    def fence(self, thread_id: str) -> str:
        """The counter the thread's fencing tokens are made from (one per bucket)."""
        return f"{self.prefix}fence:{bucket_of(thread_id)}"

    def deadlines(self, thread_id: str) -> str:
        """The sorted set holding the thread's interrupt deadline (score: epoch seconds)."""
        return self.deadline_bucket(bucket_of(thread_id))

    def deadline_bucket(self, bucket: int) -> str:
        """One of the :data:`BUCKETS` deadline sorted sets."""
        return f"{self.prefix}deadlines:{bucket}"

    @property
    def all_deadlines(self) -> list[str]:
        """Every deadline sorted set."""
        return [self.deadline_bucket(bucket) for bucket in range(BUCKETS)]

    @property
    def sweeper(self) -> str:
        """The short lease of the replica that sweeps deadlines."""
        return f"{self.prefix}sweeper"

    @property
    def layout(self) -> str:
        """The layout version the keys are in (absent: before hash tags)."""
        return f"{self.prefix}layout"

    @property
    def migration_lock(self) -> str:
        """Held by the replica migrating the keys."""
        return f"{self.prefix}layout-migration"

    @property
    def cancel_channel(self) -> str:
        """The pub/sub channel of cross-replica cancels."""
        return f"{self.prefix}cancel"

    @property
    def attach_channel(self) -> str:
        """The pub/sub channel of re-attaches (a draining replica hands its run over)."""
        return f"{self.prefix}attach"


@attrs.frozen
class OldKeys:
    """The names of layout 1 (before hash tags) that hold lasting data."""

    prefix: str

    def thread(self, thread_id: str) -> str:
        return f"{self.prefix}thread:{thread_id}"

    @property
    def deadlines(self) -> str:
        return f"{self.prefix}deadlines"


# KEYS: the old record, the new one. Moves a record unless the new name is taken.
_MOVE_RECORD = """
if redis.call('EXISTS', KEYS[2]) == 1 or redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('RENAME', KEYS[1], KEYS[2])
return 1
"""


@attrs.frozen
class Migrated:
    """What :func:`migrate` moved."""

    records: int = 0
    deadlines: int = 0


async def migrate(client: Any, keys: Keys) -> Migrated:
    """Move the lasting keys of layout 1 to their tagged names, once.

    Records (``thread:<T>`` to ``thread:{:<T>}``) and deadlines (``deadlines``
    to its buckets) move; claims, slots and watch keys are leases that lapse
    by themselves, and run logs of runs that ended before the upgrade stay
    under their old names until their replay retention ends (they are not
    replayed). A record's own JSON names its thread, which tells an old name
    from a new one even when a thread id holds braces, so a migration cut off
    half-way is simply run again. Only a plain Redis can hold layout 1 (the
    cluster was not supported before), so the script's two keys are fine.
    """
    old = OldKeys(keys.prefix)
    move = client.register_script(_MOVE_RECORD)
    records = 0
    start = len(old.thread(""))
    pattern = _glob_escaped(old.thread("")) + "*"
    async for raw_key in client.scan_iter(match=pattern, count=500, _type="hash"):
        name = _text(raw_key)
        thread_key = _thread_of(await client.hget(raw_key, "record"))
        if thread_key is None or name[start:] != thread_key:
            continue  # already in the new layout, or unreadable (left where it is, and logged by the reader)
        records += int(await move(keys=[name, keys.thread(thread_key)]))
    entries = await client.zrange(old.deadlines, 0, -1, withscores=True)
    for member, score in entries:
        thread_key = _text(member)
        await client.zadd(keys.deadlines(thread_key), {thread_key: score})
        await client.zrem(old.deadlines, member)
    return Migrated(records, len(entries))


def _thread_of(record_json: Any) -> str | None:
    if record_json is None:
        return None
    try:
        return record_from_json(record_json).key
    except ValueError:
        return None


def _glob_escaped(text: str) -> str:
    """``text`` matched literally by a ``SCAN MATCH`` pattern."""
    return "".join(f"\\{char}" if char in "*?[]\\" else char for char in text)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
