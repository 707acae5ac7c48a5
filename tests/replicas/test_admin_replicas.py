"""``python -m aguiadapter threads ...`` on Redis while two replicas serve.

The command is one more process of the store: a cancel of a run that
replica A streams goes over the replicas' cancel signal and ends A's stream
with its terminal event; a delete of a thread whose run is live is refused
and leaves the run alone; once the thread has ended, a delete erases its
record, run logs and list entry from Redis.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import aiohttp
import redis.asyncio as aioredis

from aguiadapter.demo.runtime import DemoRuntime
from tests.support.adapter import run_body
from tests.support.stops import assert_stopped
from tests.support.tokens import bearer
from tests.test_admin_command import threads

from .conftest import StartReplicas
from .redis_server import RedisServer
from .replicas import open_stream, post, stored_record
from .test_thread_namespaces import jwt_replicas
from .test_thread_namespaces import post as post_as


async def redis_keys(url: str) -> list[str]:
    client = aioredis.from_url(url)
    try:
        return sorted(key.decode() for key in await client.keys("aguiadapter:*"))
    finally:
        await client.aclose()


async def test_a_cancel_from_the_command_ends_the_stream_another_replica_relays(
    start_replicas: StartReplicas, redis_server: RedisServer, http: aiohttp.ClientSession,
    demo: DemoRuntime, workspace: Path,
) -> None:
    streaming, other = await start_replicas(2, redis_server.url)
    store = ("--store", redis_server.url)
    async with open_stream(http, streaming.url, run_body(thread_id="t-slow", text="slow 30",
                                                         cwd=str(workspace))) as stream:
        await stream.read_until(b"TEXT_MESSAGE_CONTENT")
        session = stream.session()
        running = await threads("list", *store, "--state", "running", "--json")
        assert [row["threadId"] for row in running.json()["threads"]] == ["t-slow"], running.out

        # A delete behind the live run's back is refused; the stream goes on.
        refused = await threads("delete", "t-slow", *store)
        assert refused.code == 1 and "has a live run" in refused.err, refused.err
        assert len(refused.err.strip().splitlines()) == 1
        before = len(stream.raw)
        await stream.read_until(b"TEXT_MESSAGE_CONTENT", timeout=5)
        stream.raw, tail = stream.raw[:before], stream.raw[before:]
        await stream.read_until(b"TEXT_MESSAGE_CONTENT")  # more deltas still arrive
        stream.raw += tail

        cancelled = await threads("cancel", "t-slow", *store, "--a2a-url", demo.url, "--json")
        events = await stream.finish(timeout=10)
    assert cancelled.code == 0, cancelled.err
    assert cancelled.json()["outcome"] == "cancelled" and cancelled.json()["state"] == "terminal"
    assert cancelled.json()["runtimeTask"]["state"] == "TASK_STATE_CANCELED"
    assert_stopped(events)  # AG-UI 1.0: RUN_FINISHED with the cancelled outcome
    assert demo.state.cancel_calls[session["taskId"]] >= 1
    record = await stored_record(redis_server.url, "t-slow")
    assert record.state == "terminal" and record.last_error == "CANCELLED"

    # Ended: the delete erases everything of the thread, and the id starts a new one.
    assert any("t-slow" in key for key in await redis_keys(redis_server.url))
    deleted = await threads("delete", "t-slow", *store, "--json")
    assert deleted.code == 0, deleted.err
    assert deleted.json()["deleted"]["threadId"] == "t-slow" and session["sessionId"] in deleted.json()["runtimeKeeps"]
    left = [key for key in await redis_keys(redis_server.url) if "t-slow" in key]
    assert left == [], left
    assert await stored_record(redis_server.url, "t-slow") is None
    async with http.get(other.url + "threads") as resp:
        assert (await resp.json())["threads"] == []
    fresh = await post(http, other.url, run_body(thread_id="t-slow", text="hello", cwd=str(workspace)))
    assert fresh.events()[-1]["type"] == "RUN_FINISHED"


async def test_a_delete_waits_for_the_live_run_to_end_when_asked_and_users_are_found_by_principal(
    start_replicas: StartReplicas, redis_server: RedisServer, http: aiohttp.ClientSession,
    demo: DemoRuntime, workspace: Path, tmp_path: Path,
) -> None:
    key, (first, second) = await jwt_replicas(start_replicas, redis_server.url, tmp_path, 2)
    store = ("--store", redis_server.url)
    alice = "alice@example.com"
    hashed = hashlib.sha256(alice.encode()).hexdigest()[:32]
    body = run_body(thread_id="thread-1", text="slow 10", cwd=str(workspace))
    async with http.post(first.url, json=body, headers={"Accept": "text/event-stream",
                                                        **bearer(key.token(alice))}) as resp:
        assert resp.status == 200
        await resp.content.readany()
        listed = await threads("list", "--user", alice, *store, "--json")
        (row,) = listed.json()["threads"]
        assert row["key"] == f"u/{hashed}/thread-1" and row["state"] == "running"
        waited = await threads("delete", "thread-1", "--user", alice, *store, "--wait", "30")
        assert waited.code == 0, waited.err
        rest = await resp.read()
    assert b'"type":"RUN_FINISHED"' in rest, "the run went on to its end, then the thread was deleted"
    assert await stored_record(redis_server.url, f"u/{hashed}/thread-1") is None
    assert [k for k in await redis_keys(redis_server.url) if hashed in k] == []
    again = await post_as(http, second.url, run_body(thread_id="thread-1", text="hello", cwd=str(workspace)),
                          key.token(alice))
    assert again.events()[-1]["type"] == "RUN_FINISHED"
