"""Per-user thread ids on the Redis store: two users' ``thread-1`` are two threads,
and another user's thread answers as an unknown one, on any replica."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis

from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.store.redis import store as rs
from aguiadapter.threads.record import thread_key
from tests.support.adapter import Reply, run_body
from tests.support.tokens import AUDIENCE, SigningKey, bearer, write_jwks

from .conftest import StartReplicas
from .redis_server import RedisServer
from .replicas import HEADERS, Replica, stored_record

CANCEL = "extensions/iac-code/v1/executions/{}/cancel"


async def post(http: aiohttp.ClientSession, url: str, body: Any, token: str) -> Reply:
    async with http.post(url, data=json.dumps(body), headers={**HEADERS, **bearer(token)}) as resp:
        return Reply(resp.status, dict(resp.headers), await resp.read())


async def hash_of(redis_url: str, key: str) -> dict[bytes, bytes]:
    client = aioredis.from_url(redis_url)
    try:
        return await client.hgetall(f"aguiadapter:thread:{{:{key}}}")  # type: ignore[no-any-return]
    finally:
        await client.aclose()


def resume(thread_id: str, cwd: Path, interrupt_id: str) -> dict[str, Any]:
    body = run_body(thread_id=thread_id, text=None, cwd=str(cwd))
    body["resume"] = [{"interruptId": interrupt_id, "status": "resolved", "payload": {"decision": "allow_once"}}]
    return body


async def jwt_replicas(
    start_replicas: StartReplicas, redis_url: str, tmp_path: Path, count: int, *options: str
) -> tuple[SigningKey, list[Replica]]:
    """``count`` replicas verifying JWTs of one signing key (with ``options``), and that key."""
    key = SigningKey("ES256", kid="es-1")
    jwks = tmp_path / "jwks.json"
    write_jwks(jwks, key)
    replicas = await start_replicas(count, redis_url, "--jwt-jwks-file", str(jwks), "--jwt-audience", AUDIENCE,
                                    *options)
    return key, replicas


async def test_two_users_thread_1_are_two_threads_and_neither_reaches_the_other(
    start_replicas: StartReplicas, redis_server: RedisServer, http: aiohttp.ClientSession,
    demo: DemoRuntime, workspace: Path, tmp_path: Path,
) -> None:
    key, (first, second) = await jwt_replicas(start_replicas, redis_server.url, tmp_path, 2)
    alice, bob = key.token("alice"), key.token("bob")
    started = await post(http, first.url, run_body(thread_id="thread-1", text="permission notes.txt",
                                                   cwd=str(workspace)), alice)
    events = started.events()
    (interrupt,) = events[-1]["outcome"]["interrupts"]
    (session,) = [e["value"] for e in events if e.get("name") == "iac-code.session.v1"]
    hers = await hash_of(redis_server.url, thread_key("thread-1", "alice"))
    assert hers and await hash_of(redis_server.url, "thread-1") == {}, "kept under alice's own key"

    # Bob, on the other replica: each attack answers as on an id nobody used, and alice's hash stays.
    for name, theirs_body, unknown_body in [
        ("made-up resume", resume("thread-1", workspace, "made-up"), resume("t-never", workspace, "made-up")),
        ("her resume", resume("thread-1", workspace, interrupt["id"]), resume("t-never", workspace, interrupt["id"])),
    ]:
        theirs, unknown = (await post(http, second.url, theirs_body, bob),
                           await post(http, second.url, unknown_body, bob))
        assert (theirs.status, theirs.body) == (unknown.status, unknown.body), name
    cancel = {"threadId": "thread-1", "rosInvocationId": "invocation-1"}
    refused = await post(http, second.url + CANCEL.format(session["executionId"]), cancel, bob)
    assert refused.status == 404
    own = await post(http, second.url, run_body(thread_id="thread-1", text="hello", cwd=str(workspace)), bob)
    assert own.events()[-1]["type"] == "RUN_FINISHED"
    assert (await stored_record(redis_server.url, thread_key("thread-1", "bob"))).principal == "bob"
    assert await hash_of(redis_server.url, thread_key("thread-1", "alice")) == hers
    assert sum(demo.state.tool_runs.values()) == 0

    done = await post(http, second.url, resume("thread-1", workspace, interrupt["id"]), alice)
    assert done.events()[-1]["outcome"] == {"type": "success"}


async def test_a_record_kept_under_its_bare_id_stays_its_owners(
    start_replicas: StartReplicas, redis_server: RedisServer, http: aiohttp.ClientSession,
    demo: DemoRuntime, workspace: Path, tmp_path: Path,
) -> None:
    key, (replica,) = await jwt_replicas(start_replicas, redis_server.url, tmp_path, 1)
    alice, bob = key.token("alice"), key.token("bob")
    started = await post(http, replica.url, run_body(thread_id="t-old", text="permission notes.txt",
                                                     cwd=str(workspace)), alice)
    (interrupt,) = started.events()[-1]["outcome"]["interrupts"]
    # As a version before per-user ids kept it: under the bare id.
    store = rs.store_from_url(redis_server.url)
    try:
        record = await store.load(thread_key("t-old", "alice"))
        record.namespaced, record.version = False, 0
        await store.save(record)
    finally:
        await store.close()
    client = aioredis.from_url(redis_server.url)
    try:
        await client.delete(f"aguiadapter:thread:{{:{thread_key('t-old', 'alice')}}}")
    finally:
        await client.aclose()
    before = await hash_of(redis_server.url, "t-old")

    unknown = await post(http, replica.url, resume("t-never", workspace, interrupt["id"]), bob)
    theirs = await post(http, replica.url, resume("t-old", workspace, interrupt["id"]), bob)
    assert (theirs.status, theirs.body) == (unknown.status, unknown.body)
    assert await hash_of(redis_server.url, "t-old") == before
    done = await post(http, replica.url, resume("t-old", workspace, interrupt["id"]), alice)
    assert done.events()[-1]["outcome"] == {"type": "success"}
    assert (await stored_record(redis_server.url, "t-old")).principal == "alice"


async def test_new_threads_per_user_are_counted_across_replicas(
    start_replicas: StartReplicas, redis_server: RedisServer, http: aiohttp.ClientSession,
    demo: DemoRuntime, workspace: Path, tmp_path: Path,
) -> None:
    key, (first, second) = await jwt_replicas(start_replicas, redis_server.url, tmp_path, 2,
                                              "--max-new-threads-per-user", "2")
    alice, bob = key.token("alice"), key.token("bob")
    for replica, thread in ((first, "n-1"), (second, "n-2")):
        reply = await post(http, replica.url, run_body(thread_id=thread, text="hi", cwd=str(workspace)), alice)
        assert reply.status == 200
    for replica in (first, second):
        refused = await post(http, replica.url, run_body(thread_id="n-3", text="hi", cwd=str(workspace)), alice)
        assert refused.status == 429 and json.loads(refused.body)["error"]["code"] == "TOO_MANY_THREADS"
        assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert await stored_record(redis_server.url, thread_key("n-3", "alice")) is None
    assert (await post(http, first.url, run_body(thread_id="n-3", text="hi", cwd=str(workspace)), bob)).status == 200
    # The window's key names the user hashed, as thread keys do: no key holds a principal in clear.
    client = aioredis.from_url(redis_server.url)
    try:
        names = [name.decode() async for name in client.scan_iter("*")]
    finally:
        await client.aclose()
    assert any(name.startswith("aguiadapter:new-threads:") for name in names), names
    assert not [name for name in names if "alice" in name or "bob" in name], names


async def test_a_shared_token_replica_cannot_reach_a_jwt_users_key_on_the_same_store(
    start_replicas: StartReplicas, redis_server: RedisServer, http: aiohttp.ClientSession,
    demo: DemoRuntime, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One Redis, two modes at once: a bare id spelling alice's key is the token holder's own thread."""
    key, (secured,) = await jwt_replicas(start_replicas, redis_server.url, tmp_path, 1)
    monkeypatch.setenv("IAC_CODE_AGUI_AUTH_TOKEN", "shared-secret")
    (shared,) = await start_replicas(1, redis_server.url)
    alice = key.token("alice")
    started = await post(http, secured.url, run_body(thread_id="z", text="permission notes.txt",
                                                     cwd=str(workspace)), alice)
    (interrupt,) = started.events()[-1]["outcome"]["interrupts"]
    hers = await hash_of(redis_server.url, thread_key("z", "alice"))

    spelled = thread_key("z", "alice")
    probe = await post(http, shared.url, run_body(thread_id=spelled, text="hello", cwd=str(workspace)), "shared-secret")
    assert probe.status == 200 and probe.events()[-1]["type"] == "RUN_FINISHED", probe.body[:300]
    squat = await post(http, shared.url, run_body(thread_id=thread_key("y", "alice"), text="hello",
                                                  cwd=str(workspace)), "shared-secret")
    assert squat.events()[-1]["type"] == "RUN_FINISHED"
    assert await hash_of(redis_server.url, thread_key("z", "alice")) == hers
    assert await hash_of(redis_server.url, thread_key("y", "alice")) == {}
    assert (await stored_record(redis_server.url, "o/" + spelled)).thread_id == spelled

    mine = await post(http, secured.url, run_body(thread_id="y", text="hello", cwd=str(workspace)), alice)
    assert mine.events()[-1]["type"] == "RUN_FINISHED", "nobody took y first"
    done = await post(http, secured.url, resume("z", workspace, interrupt["id"]), alice)
    assert done.events()[-1]["outcome"] == {"type": "success"}
