"""Re-attach across replicas, and rolling restarts that cut no answer.

Adapter processes share one redis-server; a run's events go to a Redis
stream any replica reads. A client cut from one replica re-attaches on
another; a replica that gets SIGTERM lets its clients go and leaves its
runs to be adopted by the replica they re-attach to.
"""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import aiohttp

from aguiadapter.demo.runtime import DemoRuntime
from tests.support.a2a_proxy import A2AProxy
from tests.support.adapter import run_body
from tests.support.agui import texts
from tests.support.eventually import eventually
from tests.support.reattach import SSE, joined, read_then_cut, reattach, whole_events

from .conftest import StartReplicas
from .redis_server import RedisServer
from .replicas import health, interrupts_of, post
from tests.support.reading import read_until

TICKS = "".join(f"tick {n}. " for n in range(1, 16))


def cancels(demo: DemoRuntime) -> int:
    return demo.state.total_cancel_calls


async def test_a_client_cut_from_one_replica_re_attaches_on_another(
    start_replicas: StartReplicas, redis_server: RedisServer, demo: DemoRuntime, workspace: Path,
) -> None:
    first, second = await start_replicas(2, redis_server.url, "--disconnect-grace-seconds", "10")
    body = run_body(thread_id="t-moved", text="slow 3", cwd=str(workspace))
    half = await read_then_cut(first.url, body, events=6)
    status, rest = await reattach(second.url, "t-moved", body["runId"], half.last_id)
    assert status == 200
    events = joined(half, rest)
    assert events[-1]["type"] == "RUN_FINISHED" and texts(events) == TICKS
    assert cancels(demo) == 0 and len(demo.state.tasks) == 1
    # Past the end of the ended run, on either replica: not one of its cursors.
    last = max(int(line.split()[1]) for line in rest.decode().splitlines() if line.startswith("id: "))
    for replica in (first, second):
        status, reply = await reattach(replica.url, "t-moved", body["runId"], str(last + 1))
        assert status == 400 and json.loads(reply)["error"]["code"] == "INVALID_INPUT", reply


async def test_a_replica_stopped_mid_answer_hands_its_run_to_the_one_the_client_re_attaches_to(
    start_replicas: StartReplicas, redis_server: RedisServer, http: aiohttp.ClientSession,
    demo: DemoRuntime, workspace: Path,
) -> None:
    """Every word of the reply reaches the client once, also those the
    runtime streamed while no replica relayed the run: the adopter reaches
    the runtime through a link that holds its ``SubscribeToTask`` for a
    second, so the reply (a tick every 0.2 s) goes on for five ticks with
    nobody subscribed, however fast the machine."""
    (first,) = await start_replicas(1, redis_server.url, "--disconnect-grace-seconds", "20")
    async with A2AProxy(demo.url) as link:
        link.held["SubscribeToTask"] = 1.0
        (second,) = await start_replicas(1, redis_server.url, "--disconnect-grace-seconds", "20", "--a2a-url", link.url)
        body = run_body(thread_id="t-roll", text="slow 6", cwd=str(workspace))
        async with http.post(first.url, data=json.dumps(body), headers=SSE) as resp:
            raw = await read_until(resp, b"TEXT_MESSAGE_CONTENT", 3)
            assert first.process is not None
            first.process.send_signal(signal.SIGTERM)
            # The stopping replica ends the stream without a terminal event.
            raw += await asyncio.wait_for(resp.read(), 10)
        half = whole_events(raw)
        assert b"RUN_FINISHED" not in half.raw and b"RUN_ERROR" not in half.raw
        draining = await http.get(first.url + "health")
        assert draining.status == 503 and (await draining.json())["status"] == "draining"
        status, rest = await reattach(second.url, "t-roll", body["runId"], half.last_id)
        assert status == 200
    assert [exchange.rpc_method for exchange in link.exchanges].count("SubscribeToTask") == 1
    events = joined(half, rest)
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"] == {"type": "success"}
    assert texts(events) == "".join(f"tick {n}. " for n in range(1, 31)), "the whole answer, nothing twice"
    deltas = [event["delta"] for event in events if event["type"] == "TEXT_MESSAGE_CONTENT"]
    assert any(delta.count("tick") > 1 for delta in deltas), f"no tick was streamed unrelayed: {deltas}"
    assert cancels(demo) == 0 and len(demo.state.tasks) == 1, "the runtime's task ran once, not cancelled"
    await asyncio.to_thread(first.process.wait, 5)
    assert "handed off" in first.log() and "outcome=handed_off" in first.log() and "adopted" in second.log()


async def test_the_reply_in_flight_at_a_handover_stays_one_message(
    start_replicas: StartReplicas, redis_server: RedisServer, http: aiohttp.ClientSession,
    demo: DemoRuntime, workspace: Path,
) -> None:
    """The adopting replica goes on with the message the stopped one left
    open: one TEXT_MESSAGE_START, one id for every delta, one END; not two
    messages split where the SIGTERM fell."""
    first, second = await start_replicas(2, redis_server.url, "--disconnect-grace-seconds", "20")
    # Six seconds of reply: the handover happens well before its end, however busy the machine.
    body = run_body(thread_id="t-one-message", text="slow 6", cwd=str(workspace))
    async with http.post(first.url, data=json.dumps(body), headers=SSE) as resp:
        raw = await read_until(resp, b"TEXT_MESSAGE_CONTENT", 4)
        assert first.process is not None
        first.process.send_signal(signal.SIGTERM)
        raw += await asyncio.wait_for(resp.read(), 10)
    half = whole_events(raw)
    status, rest = await reattach(second.url, "t-one-message", body["runId"], half.last_id)
    assert status == 200
    events = joined(half, rest)
    # (Whether every delta made it across is test_a_replica_stopped_mid_answer_...'s question.)
    assert events[-1]["type"] == "RUN_FINISHED" and texts(events).endswith("tick 30. ")
    starts = [e["messageId"] for e in events if e["type"] == "TEXT_MESSAGE_START"]
    ends = [e["messageId"] for e in events if e["type"] == "TEXT_MESSAGE_END"]
    contents = {e["messageId"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"}
    assert len(starts) == 1 and ends == starts and contents == set(starts), (starts, ends, contents)
    assert "adopted" in second.log()


async def test_a_second_signal_cancels_what_is_still_draining(
    start_replicas: StartReplicas, redis_server: RedisServer, http: aiohttp.ClientSession,
    demo: DemoRuntime, workspace: Path,
) -> None:
    (only,) = await start_replicas(1, redis_server.url, "--disconnect-grace-seconds", "30", "--log-format", "json")
    body = run_body(thread_id="t-twice", text="slow 30", cwd=str(workspace))
    async with http.post(only.url, data=json.dumps(body), headers=SSE) as resp:
        await read_until(resp, b"TEXT_MESSAGE_CONTENT")
        assert only.process is not None
        only.process.send_signal(signal.SIGTERM)
        await eventually(lambda: "draining" in only.log(), "the replica drains")
        only.process.send_signal(signal.SIGTERM)
        await asyncio.to_thread(only.process.wait, 5)
    await eventually(lambda: [t.state for t in demo.state.tasks.values()] == ["TASK_STATE_CANCELED"],
                     "cancelled as before the drain existed")
    # Under --log-format json every line the process wrote parses: banner, drain, shutdown included.
    lines = [json.loads(line) for line in only.log_path.read_text().splitlines()]
    said = [line["message"] for line in lines if line["logger"] == "aguiadapter"]
    assert said[0] == "listening" and "draining" in said and said[-1] == "shutting down", said
    assert next(line for line in lines if line["message"] == "draining")["runs"] == 1


async def test_the_thread_route_on_another_replica_shows_the_pending_interrupt(
    start_replicas: StartReplicas, redis_server: RedisServer, http: aiohttp.ClientSession, workspace: Path,
) -> None:
    first, second = await start_replicas(2, redis_server.url)
    reply = await post(http, first.url, run_body(thread_id="t-seen", text="permission notes.txt", cwd=str(workspace)))
    (interrupt,) = interrupts_of(reply.events())
    async with http.get(second.url + "threads/t-seen") as resp:
        view = await resp.json()
    assert resp.status == 200 and view["state"] == "interrupted" and view["pendingInterrupts"] == [interrupt]
    # An ended run replays from any replica too.
    status, replay = await reattach(second.url, "t-seen", reply.events()[0]["runId"], None)
    assert (status, replay) == (200, reply.body)


async def test_a_replica_with_nothing_streaming_stops_at_sigterm_without_draining(
    start_replicas: StartReplicas, redis_server: RedisServer, http: aiohttp.ClientSession,
) -> None:
    """How fast it exits is measured by the benchmark suite (python -m benchmarks --only shutdown)."""
    (only,) = await start_replicas(1, redis_server.url, "--disconnect-grace-seconds", "30")
    assert (await health(http, only.url))["status"] == "ok"
    assert only.process is not None
    only.process.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(only.process.wait, 10) == 0
    assert "shutting down" in only.log() and "draining" not in only.log(), "nothing to hand over, no grace waited"
