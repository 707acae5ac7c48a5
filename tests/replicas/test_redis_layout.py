"""The Redis key layout: one hash slot per script, and the move from the old names.

A Redis Cluster refuses (``CROSSSLOT``) a script whose keys hash to
different slots, even when one node serves every slot. The guard here is
that real refusal: the store runs against a ``redis-server`` started with
``--cluster-enabled yes`` that owns all 16384 slots, reached with a plain
``redis://`` URL; besides, every script call's keys are recorded and
checked with redis-py's own slot function, so a script that spans slots is
named even where the server would not see it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.commands.core import AsyncScript
from redis.crc import key_slot

from aguiadapter.store.redis import store as rs
from aguiadapter.store.redis.layout import BUCKETS, Keys, bucket_of
from aguiadapter.store.run_log import LogBounds
from aguiadapter.store.slots import RunSlot
from aguiadapter.threads.listing import list_owner
from aguiadapter.threads.record import ThreadRecord, record_to_json

from .redis_server import ClusterNode, RedisServer

#: Thread ids whose braces and colons would move a careless hash tag.
ODD_IDS = ("t-1", "{braced}", "a}b{c", "colon:ids:here", "u/0123abcd/x")


@pytest.fixture
async def cluster_node(tmp_path: Path) -> AsyncIterator[ClusterNode]:
    node = ClusterNode(tmp_path / "cluster-node")
    await node.start()
    try:
        yield node
    finally:
        await node.stop()


@pytest.fixture
def script_keys(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The keys of every script call made during the test."""
    seen: list[list[str]] = []
    original = AsyncScript.__call__

    async def recording(self: AsyncScript, keys: Any = None, args: Any = None, client: Any = None) -> Any:
        seen.append([key.decode() if isinstance(key, bytes) else str(key) for key in keys or []])
        return await original(self, keys=keys, args=args, client=client)

    monkeypatch.setattr(AsyncScript, "__call__", recording)
    return seen


def record(thread_id: str, state: str = "idle") -> ThreadRecord:
    return ThreadRecord(thread_id=thread_id, context_id="ctx-1", cwd="/tmp", state=state)


def events(text: str, last: bool) -> list[dict[str, Any]]:
    chunk: list[dict[str, Any]] = [{"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": text}]
    if last:
        chunk.append({"type": "RUN_FINISHED", "threadId": "t", "runId": "r"})
    return chunk


async def test_every_script_of_the_store_keeps_to_one_slot_on_a_cluster_node(
    cluster_node: ClusterNode, script_keys: list[list[str]]
) -> None:
    store = rs.RedisThreadStore(cluster_node.url)
    await store.start()
    try:
        now = time.time()
        claims = []
        for thread_id in ODD_IDS:
            claim = await store.claim(thread_id, "run-1")
            assert claim is not None
            claims.append(claim)
            rec = record(thread_id, "interrupted")
            rec.remember_run("run-1", "digest")
            await store.save(rec, claim)
            assert await store.renew(claim)
            await store.set_deadline(thread_id, now - 1)
            log = await store.run_logs(LogBounds()).open(thread_id, "run-1")
            await log.append(events("hello", last=False))
            await log.append(events("bye", last=True))
            replayed = b"".join([piece async for piece in store.run_logs(LogBounds()).read(thread_id, "run-1", 0)])
            assert b"hello" in replayed and b"RUN_FINISHED" in replayed
        assert sorted(await store.due_deadlines(now)) == sorted(ODD_IDS)
        assert await store.deadline_count() == len(ODD_IDS)
        assert set(await store.deadlines_of(ODD_IDS)) == set(ODD_IDS)
        page = await store.list_threads(list_owner(None, None), None, 2)
        assert len(page.threads) == 2 and page.next_cursor is not None
        assert sorted([s.thread_id async for s in store.each_summary()]) == sorted(ODD_IDS)
        for purpose in ("runs", "reattach"):
            slots = store.run_slots(purpose)
            slot = RunSlot("slot-1", "alice")
            assert await slots.take(slot, 2, 1) == "taken"
            assert await slots.take(RunSlot("slot-2", "alice"), 2, 1) == "user_full"
            await slots.renew([slot])
            await slots.release(slot)
            assert await slots.new_thread("alice", 5, 60) == 0
        doomed = await store.load("{braced}")
        assert doomed is not None
        assert await store.delete_thread(doomed, claims[1]) is True
        assert await store.load("{braced}") is None and "{braced}" not in await store.deadlines()
        for claim in claims:
            await store.release(claim)
    finally:
        await store.close()
    assert len(script_keys) > 4 * len(ODD_IDS)
    for keys in script_keys:
        assert len({key_slot(key.encode()) for key in keys}) == 1, keys


def test_a_thread_s_keys_share_its_slot_and_deadlines_spread() -> None:
    keys = Keys("aguiadapter:")
    for thread_id in (*ODD_IDS, "", "}", "{", "{}"):
        names = [keys.thread(thread_id), keys.claim(thread_id), keys.of_thread("history", thread_id),
                 keys.run_key("events", thread_id, "run-1"), keys.run_key("watch", thread_id, "r}{")]
        assert len({key_slot(name.encode()) for name in names}) == 1, names
    # Two (thread, run) pairs never make one name, whatever the ids hold.
    assert keys.run_key("events", "a}:events:1:b", "c") != keys.run_key("events", "a", "b}:events:1:c")
    buckets = {bucket_of(f"thread-{n}") for n in range(200)}
    assert buckets == set(range(BUCKETS))
    assert len({key_slot(name.encode()) for name in keys.all_deadlines}) > BUCKETS // 2
    with pytest.raises(rs.RedisStoreError, match="must not hold"):
        rs.split_store_url("redis://127.0.0.1/0?prefix=blue{1}:")


async def test_keys_of_the_old_layout_are_moved_once_when_the_store_starts(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A deployment upgraded from layout 1 finds its records and deadlines;
    a migration cut off half-way (one record already moved) runs again."""
    raw = aioredis.Redis.from_url(redis_server.url)
    try:
        for thread_id in ("t-old", "{braced}", "o/x"):
            rec = record(thread_id, "interrupted")
            rec.version = 3
            await raw.hset(f"aguiadapter:thread:{thread_id}", mapping={"version": "3", "record": record_to_json(rec)})
            await raw.zadd("aguiadapter:deadlines", {thread_id: 1234.5})
        # Already moved by a first attempt: its new name is the old name of thread "{:b}".
        moved = record("b", "idle")
        moved.version = 1
        await raw.hset("aguiadapter:thread:{:b}", mapping={"version": "1", "record": record_to_json(moved)})
        store = rs.RedisThreadStore(redis_server.url)
        await store.start()
        try:
            for thread_id in ("t-old", "{braced}", "o/x"):
                loaded = await store.load(thread_id)
                assert loaded is not None and loaded.state == "interrupted" and loaded.version == 3
                loaded.state = "idle"  # the next save compares with the moved version
                await store.save(loaded)
            assert (await store.load("b")) is not None and await store.load("{:b}") is None
            assert await store.deadlines() == {"t-old": 1234.5, "{braced}": 1234.5, "o/x": 1234.5}
            assert await raw.exists("aguiadapter:deadlines", "aguiadapter:thread:t-old") == 0
            assert await raw.get("aguiadapter:layout") == b"2"
        finally:
            await store.close()
        assert "migrated to layout 2" in caplog.text
        caplog.clear()
        again = rs.RedisThreadStore(redis_server.url)
        await again.start()
        await again.close()
        assert "migrated" not in caplog.text
    finally:
        await raw.aclose()


async def test_replicas_starting_together_migrate_once(redis_server: RedisServer) -> None:
    raw = aioredis.Redis.from_url(redis_server.url)
    try:
        for n in range(50):
            rec = record(f"t-{n}")
            await raw.hset(f"aguiadapter:thread:t-{n}", mapping={"version": "0", "record": record_to_json(rec)})
        stores = [rs.RedisThreadStore(redis_server.url) for _ in range(3)]
        await asyncio.gather(*(store.start() for store in stores))
        try:
            assert [await stores[2].load(f"t-{n}") is not None for n in range(50)] == [True] * 50
            assert await raw.exists("aguiadapter:layout-migration") == 0
        finally:
            await asyncio.gather(*(store.close() for store in stores))
    finally:
        await raw.aclose()
