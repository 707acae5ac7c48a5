"""Adapters on Redis behind Sentinel: a real primary, replica and three sentinels.

The primary is killed (``kill -9``) around an interrupt and its resume;
the sentinels promote the replica and the adapters follow without a
restart. What must hold: every decision is applied once or reported
truthfully (the tool never runs twice, a success is never claimed for an
answer the runtime did not take), no stream ends without its terminal
event, and the thread is usable again within 30 s of the kill.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis

from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.store.redis.layout import Keys
from tests.support.adapter import Reply, run_body
from tests.support.eventually import eventually

from .conftest import StartReplicas
from .redis_server import RedisServer
from .replicas import error_code, health, open_stream, post, resume_body, stored_record
from .sentinel_setup import SentinelSet
from .test_replicas import interrupt_on, tool_runs

#: The thread must be usable again this long after the primary died.
RECOVERY_SECONDS = 30.0
TERMINAL = {"RUN_FINISHED", "RUN_ERROR"}


@pytest.fixture
async def sentinels(tmp_path: Path) -> AsyncIterator[SentinelSet]:
    topology = SentinelSet(tmp_path / "sentinel-set")
    await topology.start()
    try:
        yield topology
    finally:
        await topology.stop()
        print(topology.logs())


def terminal_of(reply: Reply) -> dict[str, Any] | None:
    """The terminal event of a 200 reply (``None`` for a refusal)."""
    if reply.status != 200:
        return None
    events = reply.events()  # judged: a stream without its terminal event fails here
    assert events[-1]["type"] in TERMINAL, events[-1]
    return events[-1]


async def settle(http: aiohttp.ClientSession, url: str, make: Callable[[], dict[str, Any]], deadline: float) -> Reply:
    """Send a new run made by ``make`` until the store answers (not 503, not
    busy, not a failed save), by ``deadline``: what a client that retries sees
    once it works (each try is a new run, with a run id of its own)."""
    while True:
        reply = await post(http, url, make())
        last = terminal_of(reply)
        busy = reply.status == 409 and error_code(reply) == "THREAD_BUSY"
        unsettled = busy or reply.status == 503 or (last is not None and last.get("code") in {
            "STATE_PERSISTENCE_FAILED", "STATE_STORE_UNAVAILABLE"})
        if not unsettled or time.monotonic() > deadline:
            return reply
        await asyncio.sleep(0.5)


@pytest.mark.parametrize("seed", [32, 11])
async def test_a_primary_killed_around_a_resume_loses_no_decision_and_ends_every_stream(
    start_replicas: StartReplicas, sentinels: SentinelSet, http: aiohttp.ClientSession,
    demo: DemoRuntime, workspace: Path, seed: int,
) -> None:
    chance = random.Random(seed)
    first, second = await start_replicas(2, sentinels.url)
    asked = await interrupt_on(http, first, "t-fo", str(workspace))
    await eventually(sentinels.synced, "the replica holds the interrupt", timeout=10, interval=0.05)
    resume = resume_body("t-fo", str(workspace), asked["interrupt"]["id"])
    slow = run_body(thread_id="t-slow", text="slow 8", cwd=str(workspace))
    async with open_stream(http, first.url, slow) as streaming:
        await streaming.read_until(b"TEXT_MESSAGE_CONTENT")
        answering = asyncio.create_task(post(http, second.url, resume))
        delay = chance.uniform(0.0, 0.6)
        print(f"kill -9 of the primary {delay:.3f} s into the resume")
        await asyncio.sleep(delay)
        await sentinels.primary.kill()
        killed_at = time.monotonic()
        slow_events = await streaming.finish(timeout=RECOVERY_SECONDS)
    assert slow_events[-1]["type"] in TERMINAL, "the stream in flight ends with a terminal event"
    first_reply = await answering
    first_end = terminal_of(first_reply)
    await eventually(sentinels.failed_over, "the sentinels promote the replica", timeout=RECOVERY_SECONDS)
    await sentinels.primary.start()  # the old primary comes back; the sentinels make it a replica
    deadline = killed_at + RECOVERY_SECONDS
    again = await settle(http, first.url, lambda: resume_body("t-fo", str(workspace), asked["interrupt"]["id"]), deadline)
    again_end = terminal_of(again)
    took = tool_runs(demo)
    assert took <= 1, "the answer ran the tool once at most"
    if first_end is not None and first_end["type"] == "RUN_FINISHED" and first_end["outcome"] == {"type": "success"}:
        assert took == 1, "a success was reported: the runtime took the answer"
    # The retry says what happened: it resumed (now), or the answer was already applied.
    if again_end is not None:
        assert again_end["type"] == "RUN_FINISHED" and again_end["outcome"] == {"type": "success"}, again_end
        assert took == 1
    else:
        assert again.status == 409 and error_code(again) == "RESUME_ALREADY_APPLIED", again.body[:300]
        assert took == 1
    after = await settle(http, second.url, lambda: run_body(thread_id="t-fo", text="hello", cwd=str(workspace)), deadline)
    after_end = terminal_of(after)
    assert after_end is not None and after_end["type"] == "RUN_FINISHED", after.body[-300:]
    assert time.monotonic() - killed_at <= RECOVERY_SECONDS
    assert (await health(http, first.url))["store"]["reachable"] is True


async def test_with_no_primary_runs_get_503_and_health_degrades_until_one_answers(
    start_replicas: StartReplicas, sentinels: SentinelSet, http: aiohttp.ClientSession, workspace: Path,
) -> None:
    (replica,) = await start_replicas(1, sentinels.url)
    assert (await post(http, replica.url, run_body(thread_id="t-up", text="hello", cwd=str(workspace)))).status == 200
    await sentinels.replica.stop()  # nothing to promote
    await sentinels.primary.kill()
    reply = await post(http, replica.url, run_body(thread_id="t-none", text="hello", cwd=str(workspace)))
    assert reply.status == 503 and error_code(reply) == "STATE_STORE_UNAVAILABLE"
    status = await health(http, replica.url)
    assert status["status"] == "degraded" and status["store"]["reachable"] is False
    await sentinels.primary.start()  # the same primary answers again: no operator, no restart

    async def works() -> Reply | None:
        answer = await post(http, replica.url, run_body(thread_id="t-none", text="hello", cwd=str(workspace)))
        return answer if answer.status == 200 else None

    answer = await eventually(works, "runs work again", timeout=RECOVERY_SECONDS, interval=0.5)
    assert terminal_of(answer) is not None and (await health(http, replica.url))["status"] == "ok"


async def test_a_record_that_went_back_in_time_never_applies_an_answer_twice(
    start_replicas: StartReplicas, redis_server: RedisServer, http: aiohttp.ClientSession,
    demo: DemoRuntime, workspace: Path,
) -> None:
    """What ``min_replicas=0`` can lose: the writes a dead primary had not yet
    replicated. Here the replica that gets promoted holds the thread as it
    was when the interrupt was raised (the answer taken and the run's end are
    gone, while the runtime did take the answer): the record is put back to
    that state byte for byte (``DUMP``/``RESTORE``, what a promotion shows),
    and the same answer sent again is not applied a second time."""
    first, second = await start_replicas(2, redis_server.url)
    asked = await interrupt_on(http, first, "t-back", str(workspace))
    keys = Keys("aguiadapter:")
    raw = aioredis.Redis.from_url(redis_server.url)
    try:
        before = {key: await raw.dump(key) for key in (keys.thread("t-back"), keys.deadlines("t-back"))}
        answered = await post(http, second.url, resume_body("t-back", str(workspace), asked["interrupt"]["id"]))
        assert terminal_of(answered) == {**(terminal_of(answered) or {}), "outcome": {"type": "success"}}
        assert tool_runs(demo) == 1
        for key, value in before.items():
            await raw.restore(key, 0, value, replace=True)
    finally:
        await raw.aclose()
    record = await stored_record(redis_server.url, "t-back")
    assert record.state == "interrupted" and record.pending_interrupts, "the record went back in time"
    again = await post(http, first.url, resume_body("t-back", str(workspace), asked["interrupt"]["id"]))
    end = terminal_of(again)
    print("the same answer again:", again.status, again.body[-400:])
    assert tool_runs(demo) == 1, "the runtime's evidence wins over the old record: the tool ran once"
    if end is not None:
        assert end["type"] == "RUN_FINISHED" and end["outcome"] == {"type": "success"}, end
    else:
        assert error_code(again) == "RESUME_ALREADY_APPLIED", again.body[:300]
    after = await post(http, second.url, run_body(thread_id="t-back", text="hello", cwd=str(workspace)))
    assert (terminal_of(after) or {}).get("type") == "RUN_FINISHED", after.body[-300:]
