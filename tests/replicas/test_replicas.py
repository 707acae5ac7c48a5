"""Two or three adapter processes sharing one redis-server, in front of one runtime.

The demo runtime runs in the test process (so its counters show how many
times a tool ran or a task was cancelled); the adapters are real processes
started with ``--store redis://...`` that a test may ``kill -9``.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp
import redis.asyncio as aioredis

from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.store.redis import store as rs
from tests.support.adapter import Reply, run_body
from tests.support.agui import texts
from tests.support.eventually import eventually
from tests.support.stops import assert_stopped

from .conftest import StartReplicas
from .redis_server import RedisServer
from .replicas import (
    Replica,
    cancel,
    error_code,
    health,
    interrupts_of,
    open_stream,
    post,
    resume_body,
    session_of,
    stored_record,
)

#: The store's default lease: a dead replica's thread is free again after it.
LEASE = 5.0


async def interrupt_on(http: aiohttp.ClientSession, replica: Replica, thread_id: str, cwd: str) -> dict[str, Any]:
    """Ask for a permission on ``replica``; the run ends with its interrupt."""
    reply = await post(http, replica.url, run_body(thread_id=thread_id, text="permission notes.txt", cwd=cwd))
    events = reply.events()
    (interrupt,) = interrupts_of(events)
    return {"interrupt": interrupt, "session": session_of(events)}


def assert_resumed(reply: Reply) -> list[dict[str, Any]]:
    """A resume that ran the tool and finished the turn."""
    events = reply.events()
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"] == {"type": "success"}, events[-1]
    assert "notes.txt was written" in texts(events)
    return events


def tool_runs(demo: DemoRuntime) -> int:
    return sum(demo.state.tool_runs.values())


async def test_an_interrupt_raised_on_one_replica_is_resumed_on_another(
    start_replicas: StartReplicas, redis_server: RedisServer, http: aiohttp.ClientSession,
    demo: DemoRuntime, workspace: Path,
) -> None:
    first, second = await start_replicas(2, redis_server.url)
    asked = await interrupt_on(http, first, "t-hop", str(workspace))
    reply = await post(http, second.url, resume_body("t-hop", str(workspace), asked["interrupt"]["id"]))
    assert_resumed(reply)
    assert tool_runs(demo) == 1
    again = await post(http, first.url, resume_body("t-hop", str(workspace), asked["interrupt"]["id"]))
    assert error_code(again) == "RESUME_ALREADY_APPLIED"
    record = await stored_record(redis_server.url, "t-hop")
    assert record.state == "idle" and record.pending_interrupts == []
    status = await health(http, second.url)
    assert status["store"] == {"kind": "redis", "reachable": True, "status": "ok", "durability": "redis"} and status["status"] == "ok"


async def test_two_runs_posted_to_two_replicas_at_once_one_wins(
    start_replicas: StartReplicas, redis_server: RedisServer, http: aiohttp.ClientSession, workspace: Path,
) -> None:
    replicas = await start_replicas(2, redis_server.url)
    bodies = [run_body(thread_id="t-race", text="slow 2", cwd=str(workspace)) for _ in replicas]
    replies = await asyncio.gather(*(post(http, r.url, b) for r, b in zip(replicas, bodies, strict=True)))
    assert sorted(reply.status for reply in replies) == [200, 409]
    (lost,) = [reply for reply in replies if reply.status == 409]
    assert error_code(lost) == "THREAD_BUSY"
    (won,) = [reply for reply in replies if reply.status == 200]
    assert won.events()[-1]["type"] == "RUN_FINISHED"


async def test_the_same_resume_sent_to_three_replicas_runs_the_tool_once(
    start_replicas: StartReplicas, redis_server: RedisServer, http: aiohttp.ClientSession,
    demo: DemoRuntime, workspace: Path,
) -> None:
    replicas = await start_replicas(3, redis_server.url)
    asked = await interrupt_on(http, replicas[0], "t-thrice", str(workspace))
    interrupt_id = asked["interrupt"]["id"]
    replies = await asyncio.gather(
        *(post(http, r.url, resume_body("t-thrice", str(workspace), interrupt_id)) for r in replicas)
    )
    assert [reply.status for reply in replies].count(200) == 1, [reply.body[:200] for reply in replies]
    for reply in replies:
        if reply.status == 200:
            assert_resumed(reply)
        else:
            assert error_code(reply) in {"RESUME_ALREADY_APPLIED", "THREAD_BUSY"}
    task = demo.state.tasks[asked["session"]["taskId"]]
    assert tool_runs(demo) == 1 and demo.state.tool_runs_by_use_id == {task.input_received["toolUseId"]: 1}
    # What the runtime holds: one answer received, one file written.
    assert task.input_received is not None and task.input_received["inputId"] == interrupt_id
    assert list(task.answered) == [interrupt_id] and len(task.artifacts) == 1


async def test_a_replica_killed_while_an_interrupt_waits_is_not_needed_to_resume(
    start_replicas: StartReplicas, redis_server: RedisServer, http: aiohttp.ClientSession,
    demo: DemoRuntime, workspace: Path,
) -> None:
    owner, other = await start_replicas(2, redis_server.url)
    asked = await interrupt_on(http, owner, "t-orphan", str(workspace))
    await owner.kill()
    reply = await post(http, other.url, resume_body("t-orphan", str(workspace), asked["interrupt"]["id"]))
    assert_resumed(reply)
    assert tool_runs(demo) == 1


async def test_a_replica_killed_mid_run_frees_its_thread_within_the_lease(
    start_replicas: StartReplicas, redis_server: RedisServer, http: aiohttp.ClientSession,
    demo: DemoRuntime, workspace: Path,
) -> None:
    doomed, survivor = await start_replicas(2, redis_server.url)
    body = run_body(thread_id="t-crash", text="slow 30", cwd=str(workspace))
    async with open_stream(http, doomed.url, body) as stream:
        await stream.read_until(b"TEXT_MESSAGE_CONTENT")
        session = stream.session()
        await doomed.kill()
        killed_at = time.monotonic()
    busy = await post(http, survivor.url, run_body(thread_id="t-crash", text="hello", cwd=str(workspace)))
    assert error_code(busy) == "THREAD_BUSY", "the dead replica's lease still runs"

    async def run_again() -> Reply | None:
        reply = await post(http, survivor.url, run_body(thread_id="t-crash", text="hello again", cwd=str(workspace)))
        if reply.status == 409:
            assert error_code(reply) == "THREAD_BUSY"
            return None
        return reply

    reply = await eventually(run_again, "the dead replica's thread is free again", timeout=LEASE + 3, interval=0.25)
    freed_after = time.monotonic() - killed_at
    assert reply.events()[-1]["type"] == "RUN_FINISHED" and freed_after <= LEASE + 3
    record = await stored_record(redis_server.url, "t-crash")
    assert record.runs[body["runId"]].outcome == "EXECUTION_LOST"
    assert demo.state.cancel_calls[session["taskId"]] == 1, "the lost run's task was cancelled once"
    assert demo.state.tasks[session["taskId"]].state == "TASK_STATE_CANCELED"


async def test_cancel_through_a_replica_that_does_not_hold_the_stream(
    start_replicas: StartReplicas, redis_server: RedisServer, http: aiohttp.ClientSession,
    demo: DemoRuntime, workspace: Path,
) -> None:
    streaming, other = await start_replicas(2, redis_server.url)
    body = run_body(thread_id="t-remote", text="slow 30", cwd=str(workspace))
    async with open_stream(http, streaming.url, body) as stream:
        await stream.read_until(b"TEXT_MESSAGE_CONTENT")
        session = stream.session()
        reply = await cancel(http, other.url, session["executionId"], "t-remote")
        events = await stream.finish(timeout=10)
    assert reply.status == 200 and reply.json() == {"executionId": session["executionId"], "status": "cancelled"}
    assert_stopped(events)  # the replica that streams ends it as AG-UI 1.0 ends a stop
    assert demo.state.cancel_calls[session["taskId"]] == 1
    record = await stored_record(redis_server.url, "t-remote")
    assert record.state == "terminal" and record.last_error == "CANCELLED"
    after = await post(http, other.url, run_body(thread_id="t-remote", text="next", cwd=str(workspace)))
    assert after.status == 200


async def test_interrupts_survive_a_redis_restart(
    start_replicas: StartReplicas, redis_aof: RedisServer, http: aiohttp.ClientSession,
    demo: DemoRuntime, workspace: Path,
) -> None:
    first, second = await start_replicas(2, redis_aof.url)
    one = await interrupt_on(http, first, "t-aof-1", str(workspace))
    two = await interrupt_on(http, second, "t-aof-2", str(workspace))
    await redis_aof.kill()
    await redis_aof.start()
    assert_resumed(await post(http, second.url, resume_body("t-aof-1", str(workspace), one["interrupt"]["id"])))
    assert_resumed(await post(http, first.url, resume_body("t-aof-2", str(workspace), two["interrupt"]["id"])))
    assert tool_runs(demo) == 2
    assert (await post(http, first.url, run_body(thread_id="t-aof-1", text="more", cwd=str(workspace)))).status == 200


async def test_redis_down_gives_503_and_an_unreachable_store_in_health(
    start_replicas: StartReplicas, redis_server: RedisServer, http: aiohttp.ClientSession, workspace: Path,
) -> None:
    (replica,) = await start_replicas(1, redis_server.url)
    body = run_body(thread_id="t-down", text="slow 6", cwd=str(workspace))
    async with open_stream(http, replica.url, body) as stream:
        await stream.read_until(b"TEXT_MESSAGE_CONTENT")
        await redis_server.kill()
        events = await stream.finish(timeout=10)
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "STATE_PERSISTENCE_FAILED"
    reply = await post(http, replica.url, run_body(thread_id="t-down-2", text="hello", cwd=str(workspace)))
    assert reply.status == 503 and error_code(reply) == "STATE_STORE_UNAVAILABLE"
    status = await health(http, replica.url)
    assert status["status"] == "degraded" and status["store"] == {"kind": "redis", "reachable": False, "status": "unreachable", "durability": "redis"}
    await redis_server.start()  # back (empty: this server keeps nothing)
    reply = await post(http, replica.url, run_body(thread_id="t-down-2", text="hello", cwd=str(workspace)))
    assert reply.status == 200
    assert (await health(http, replica.url))["store"]["reachable"] is True


async def test_interrupts_expire_once_after_every_replica_restarted(
    start_replicas: StartReplicas, redis_server: RedisServer, http: aiohttp.ClientSession,
    demo: DemoRuntime, workspace: Path,
) -> None:
    ttl = ("--interrupt-ttl-seconds", "3")
    first, second = await start_replicas(2, redis_server.url, *ttl)
    asked = await interrupt_on(http, first, "t-expire", str(workspace))
    await asyncio.gather(first.kill(), second.kill())
    await asyncio.sleep(3)  # the deadline passes while no replica runs
    await start_replicas(2, redis_server.url, *ttl)
    task_id = asked["session"]["taskId"]

    async def expired() -> Any:
        record = await stored_record(redis_server.url, "t-expire")
        return record if record.state == "terminal" else None

    record = await eventually(expired, "a restarted replica expires the interrupt", timeout=15, interval=0.2)
    assert record.last_error == "EXECUTION_EXPIRED"
    await asyncio.sleep(6)  # one more sweep on each replica: nobody expires it again
    assert demo.state.cancel_calls[task_id] == 1
    client = aioredis.Redis.from_url(redis_server.url)
    try:
        assert [key async for key in client.scan_iter(match="aguiadapter:deadlines*")] == []
    finally:
        await client.aclose()


async def test_a_replica_that_takes_over_a_dead_resume_follows_what_the_runtime_did(
    start_replicas: StartReplicas, redis_server: RedisServer, http: aiohttp.ClientSession,
    demo: DemoRuntime, workspace: Path,
) -> None:
    # The replica that resumed died holding the thread, after the runtime
    # took the answer: the record says "resume in flight", its lease runs out.
    from aguiadapter.a2a.client import A2AClient
    from aguiadapter.a2a.messages import permission_part
    from aguiadapter.protocol.inputs import ResumeEntry
    from aguiadapter.protocol.resume import check_resume
    from aguiadapter.threads import machine as tm

    first, survivor = await start_replicas(2, redis_server.url)
    asked = await interrupt_on(http, first, "t-took-over", str(workspace))
    await first.kill()
    store = rs.store_from_url(redis_server.url)
    try:
        claim = await store.claim("t-took-over", "run-dead")
        assert claim is not None
        record = await store.load("t-took-over")
        item = record.pending_interrupts[0]
        entry = ResumeEntry(interrupt_id=item.id, status="resolved", payload={"decision": "allow_once"})
        tm.apply(record, tm.Resume(tm.RunBinding("run-dead", "d", "exec-x", "invocation-1"),
                  check_resume([entry], [item.interrupt], {})))
        await store.save(record, claim)
    finally:
        await store.close()
    client = A2AClient(demo.url)
    try:
        message = {"messageId": "taken-before-the-crash", "contextId": record.context_id, "taskId": record.task_id,
                   "role": "ROLE_USER", "parts": [permission_part(item.envelope.fields, "allow_once")]}
        async for _ in client.stream_message(message):
            pass
    finally:
        await client.close()

    async def retried() -> Reply | None:
        reply = await post(http, survivor.url, resume_body("t-took-over", str(workspace), asked["interrupt"]["id"]))
        if reply.status == 409 and error_code(reply) == "THREAD_BUSY":
            return None  # the dead replica's lease still runs
        return reply

    reply = await eventually(retried, "the dead replica's lease runs out", timeout=LEASE + 3, interval=0.25)
    assert reply.events()[-1]["outcome"] == {"type": "success"}, "the taken answer is reported, not refused"
    assert tool_runs(demo) == 1 and demo.state.cancel_calls == {}, "never sent again, never cancelled"
    again = await post(http, survivor.url, resume_body("t-took-over", str(workspace), asked["interrupt"]["id"]))
    assert error_code(again) == "RESUME_ALREADY_APPLIED"
