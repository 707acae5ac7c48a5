"""``?min_replicas=1``: a save no replica acknowledged fails closed.

A real primary and replica on loopback. While the replica runs, saves wait
for it (``WAIT``) and succeed; once it is stopped, a save fails as a lost
write does (``STATE_PERSISTENCE_FAILED``), the record is put back as it
was, and the interrupt it would have answered stays answerable.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import redis.asyncio as aioredis

from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.store.contract import PersistenceError
from aguiadapter.store.redis import store as rs
from aguiadapter.threads.record import ThreadRecord, ThreadState
from tests.support.adapter import run_body
from tests.support.eventually import eventually

from .conftest import StartReplicas
from .redis_server import RedisServer
from .replicas import error_code, open_stream, post, resume_body, stored_record
from .sentinel_setup import ReplicaServer
from .test_replicas import assert_resumed, interrupt_on, tool_runs

WAITING = "?min_replicas=1&wait_timeout_ms=300"


@pytest.fixture
async def replica(redis_server: RedisServer, tmp_path: Path) -> AsyncIterator[ReplicaServer]:
    server = ReplicaServer(tmp_path / "replica", redis_server.port)
    await server.start()

    async def attached() -> bool:
        client = aioredis.Redis(port=redis_server.port)
        try:
            info = await client.info("replication")
            return int(info["connected_slaves"]) == 1 and info["slave0"]["state"] == "online"
        finally:
            await client.aclose()

    await eventually(attached, "the replica is attached and in sync", timeout=10, interval=0.05)
    try:
        yield server
    finally:
        await server.stop()


async def test_a_save_no_replica_acknowledged_is_refused_and_undone(
    redis_server: RedisServer, replica: ReplicaServer
) -> None:
    store = rs.store_from_url(redis_server.url + WAITING)
    await store.start()
    try:
        kept = ThreadRecord(thread_id="t-kept", context_id="c", cwd="/tmp", state=ThreadState.INTERRUPTED)
        (await store.save(kept)).stamp(kept)  # the replica acknowledges it
        assert kept.version == 1
        await replica.stop()
        kept.state = ThreadState.IDLE
        with pytest.raises(PersistenceError, match="acknowledged"):
            await store.save(kept)
        assert kept.version == 1, "the writer's view is the stored one again"
        stored = await store.load("t-kept")
        assert stored is not None and stored.version == 1 and stored.state == ThreadState.INTERRUPTED
        raw = aioredis.Redis.from_url(redis_server.url)
        try:
            assert await raw.pttl(store.keys.thread("t-kept")) == -1, "an interrupted record keeps no TTL"
        finally:
            await raw.aclose()
        fresh = ThreadRecord(thread_id="t-new", context_id="c", cwd="/tmp")
        with pytest.raises(PersistenceError):
            await store.save(fresh)
        assert await store.load("t-new") is None, "a record that never was stays absent"
    finally:
        await store.close()


async def test_with_the_replica_stopped_a_resume_fails_closed_and_the_interrupt_stays_answerable(
    start_replicas: StartReplicas, redis_server: RedisServer, replica: ReplicaServer,
    http: aiohttp.ClientSession, demo: DemoRuntime, workspace: Path,
) -> None:
    first, second = await start_replicas(2, redis_server.url + WAITING)
    asked = await interrupt_on(http, first, "t-wait", str(workspace))
    await replica.stop()
    refused = await post(http, second.url, resume_body("t-wait", str(workspace), asked["interrupt"]["id"]))
    if refused.status == 200:  # the run was admitted: a whole stream, never cut, ends with the error
        events = refused.events()
        assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "STATE_PERSISTENCE_FAILED", events[-1]
    else:  # refused at admission, as a failed save is today
        assert refused.status == 503 and error_code(refused) == "STATE_PERSISTENCE_FAILED", refused.body
    assert tool_runs(demo) == 0, "the answer was not sent"
    record = await stored_record(redis_server.url, "t-wait")
    assert record.state == "interrupted" and [i.id for i in record.pending_interrupts] == [asked["interrupt"]["id"]]
    await replica.start()
    reply = await eventually(
        lambda: _resumed(http, first.url, resume_body("t-wait", str(workspace), asked["interrupt"]["id"])),
        "the interrupt is answered once the replica is back", timeout=15, interval=0.5)
    assert_resumed(reply)
    assert tool_runs(demo) == 1


async def _resumed(http: aiohttp.ClientSession, url: str, body: dict[str, object]) -> object:
    reply = await post(http, url, body)
    if reply.status != 200 or reply.events()[-1]["type"] != "RUN_FINISHED":
        return None
    return reply


async def test_a_run_whose_end_no_replica_acknowledged_ends_its_stream_with_the_error(
    start_replicas: StartReplicas, redis_server: RedisServer, replica: ReplicaServer,
    http: aiohttp.ClientSession, workspace: Path,
) -> None:
    (adapter,) = await start_replicas(1, redis_server.url + WAITING)
    async with open_stream(http, adapter.url, run_body(thread_id="t-end", text="slow 3", cwd=str(workspace))) as stream:
        await stream.read_until(b"TEXT_MESSAGE_CONTENT")
        await replica.stop()
        events = await stream.finish(timeout=15)
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "STATE_PERSISTENCE_FAILED", events[-1]
    record = await stored_record(redis_server.url, "t-end")
    assert record.state != "idle", "the run's end was not recorded as a success"
