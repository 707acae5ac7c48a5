"""The thread list on Redis: written in the record's own save script, read on any replica."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis

from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.store.redis import store as rs
from aguiadapter.threads.listing import ListCursor, ThreadPage, list_owner, owner_id
from aguiadapter.threads.record import ThreadRecord, ThreadState, thread_key
from aguiadapter.store.contract import PersistenceError
from tests.support.adapter import run_body, start_adapter
from tests.support.tokens import bearer
from tests.test_thread_list import HOSTILE_CURSORS

from .conftest import StartReplicas
from .redis_server import RedisServer
from .test_thread_namespaces import jwt_replicas, post

ALICE = list_owner("alice", None)


@pytest.fixture
async def store(redis_server: RedisServer) -> AsyncIterator[rs.RedisThreadStore]:
    opened = rs.RedisThreadStore(redis_server.url)
    await opened.start()
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
async def raw(redis_server: RedisServer) -> AsyncIterator[Any]:
    client = aioredis.Redis.from_url(redis_server.url)
    try:
        yield client
    finally:
        await client.aclose()


def record(thread_id: str, principal: str = "alice") -> ThreadRecord:
    return ThreadRecord(thread_id=thread_id, context_id=f"ctx-{thread_id}", cwd="/w", principal=principal,
                        user_id=principal, namespaced=True)


async def walk(store: rs.RedisThreadStore, owner: str, limit: int, **kw: Any) -> list[str]:
    found: list[str] = []
    cursor: ListCursor | None = None
    while True:
        page: ThreadPage = await store.list_threads(owner, cursor, limit, **kw)
        found += [summary.thread_id for summary in page.threads]
        if page.next_cursor is None:
            return found
        cursor = page.next_cursor


async def test_paging_walks_every_thread_once_even_when_they_share_their_time(
    store: rs.RedisThreadStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(12):
        await store.save(record(f"t-{n:02d}"))
    monkeypatch.setattr(rs.time, "time", lambda: 2_000_000_000.5)
    for n in range(12, 25):  # saved within one clock tick: the key orders them
        await store.save(record(f"t-{n:02d}"))
    await store.save(record("t-99", principal="bob"))
    assert await walk(store, ALICE, 4) == [f"t-{n:02d}" for n in reversed(range(25))]
    assert await walk(store, list_owner("bob", None), 4) == ["t-99"]


async def test_a_refused_save_changes_neither_the_record_nor_the_list(store: rs.RedisThreadStore, raw: Any) -> None:
    first = record("t-1")
    (await store.save(first)).stamp(first)
    stale = record("t-1")  # version 0: another writer's view
    stale.state = ThreadState.TERMINAL
    with pytest.raises(PersistenceError):
        await store.save(stale)
    key = thread_key("t-1", "alice")
    members = await raw.zrange(f"aguiadapter:user-threads:{owner_id(ALICE)}", 0, -1, withscores=True)
    assert members == [(key.encode(), first.updated_at)]
    summary = json.loads(await raw.hget(f"aguiadapter:thread:{{:{key}}}", "summary"))
    assert (summary["state"], summary["updatedAt"]) == ("idle", first.updated_at)


async def test_the_list_lives_as_long_as_its_owners_newest_record(store: rs.RedisThreadStore, raw: Any) -> None:
    await store.save(record("t-1"))
    listed = f"aguiadapter:user-threads:{owner_id(ALICE)}"
    assert 29 * 86_400_000 < await raw.pttl(listed) <= 30 * 86_400_000


async def test_an_expired_record_leaves_the_list_when_a_page_meets_it(store: rs.RedisThreadStore, raw: Any) -> None:
    for name in ("t-1", "t-2", "t-3"):
        await store.save(record(name))
    await raw.delete(f"aguiadapter:thread:{{:{thread_key('t-2', 'alice')}}}")  # as its retention TTL does
    assert await walk(store, ALICE, 1) == ["t-3", "t-1"]
    assert await raw.zcard(f"aguiadapter:user-threads:{owner_id(ALICE)}") == 2


async def test_a_thread_made_on_one_replica_is_listed_on_the_other_to_its_user_only(
    start_replicas: StartReplicas, redis_server: RedisServer, http: aiohttp.ClientSession,
    demo: DemoRuntime, workspace: Path, tmp_path: Path,
) -> None:
    key, (first, second) = await jwt_replicas(start_replicas, redis_server.url, tmp_path, 2)
    alice, bob = key.token("alice"), key.token("bob")
    waiting = await post(http, first.url, run_body(thread_id="thread-1", text="permission notes.txt",
                                                   cwd=str(workspace)), alice)
    assert waiting.events()[-1]["outcome"]["type"] == "interrupt"
    done = await post(http, first.url, run_body(thread_id="thread-2", text="hi", cwd=str(workspace)), alice)
    assert done.events()[-1]["type"] == "RUN_FINISHED"

    async def page(url: str, token: str, query: str = "") -> Any:
        async with http.get(url + "threads" + query, headers=bearer(token)) as resp:
            assert resp.status == 200
            return await resp.json()

    listed = await page(second.url, alice)
    assert [(t["threadId"], t["state"], t["pendingInterrupts"]) for t in listed["threads"]] == [
        ("thread-2", "idle", 0), ("thread-1", "interrupted", 1)]
    assert listed["nextCursor"] is None
    assert (await page(second.url, bob))["threads"] == []
    narrowed = await page(first.url, alice, "?state=interrupted&limit=1")
    assert [t["threadId"] for t in narrowed["threads"]] == ["thread-1"]


@pytest.mark.parametrize("cursor", HOSTILE_CURSORS.values(), ids=HOSTILE_CURSORS.keys())
async def test_a_hostile_cursor_on_redis_is_invalid_input_not_a_store_outage(
    redis_server: RedisServer, demo: DemoRuntime, workspace: Path, tmp_path: Path, cursor: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    adapter = await start_adapter(tmp_path / "state", demo.url, allowed_cwds=(str(workspace),),
                                  store_url=redis_server.url)
    try:
        done = await adapter.run(run_body(thread_id="t-1", text="hi", cwd=str(workspace)))
        assert done.events()[-1]["type"] == "RUN_FINISHED"
        caplog.clear()
        caplog.set_level(logging.DEBUG)
        reply = await adapter.get(f"/threads?cursor={cursor}")
        assert (reply.status, reply.json()["error"]["code"]) == (400, "INVALID_INPUT")
        assert len(caplog.records) <= 1 and not any(record.exc_info for record in caplog.records), caplog.text
        listed = await adapter.get("/threads")
        assert [thread["threadId"] for thread in listed.json()["threads"]] == ["t-1"]
    finally:
        await adapter.close()
