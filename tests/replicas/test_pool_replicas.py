"""Two replicas on one redis-server with the same pool of three demo runtimes:
placement counts every replica's runs, racing replicas pin a new thread once,
and a resume on one replica reaches the runtime the thread was pinned to on
the other. Where a thread runs is judged from the runtimes themselves."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from aguiadapter.demo.runtime import DemoRuntime
from tests.support.adapter import run_body
from tests.support.agui import check_stream
from tests.support.demo_pool import demo_runtimes

from .redis_server import RedisServer
from .replicas import HEADERS, Replica, interrupts_of, post, resume_body, stored_record
from tests.support.reading import read_until

NAMES = ("a", "b", "c")


@pytest.fixture
async def trio() -> AsyncIterator[dict[str, DemoRuntime]]:
    async with demo_runtimes(NAMES) as runtimes:
        yield runtimes


@pytest.fixture
async def pair(tmp_path: Path, redis_server: RedisServer,
               trio: dict[str, DemoRuntime]) -> AsyncIterator[tuple[Replica, Replica]]:
    pool = [option for name, demo in trio.items() for option in ("--runtime", f"{name}={demo.url}")]
    replicas = []
    for number in range(2):
        replica = Replica(f"pool-{number}", tmp_path / "replicas", redis_server.url, "unused",
                          "--allowed-cwd", str(tmp_path / "workspaces"))
        at = replica.args.index("--a2a-url")
        replica.args[at:at + 2] = pool
        replicas.append(replica)
    await asyncio.gather(*(replica.start() for replica in replicas))
    try:
        yield replicas[0], replicas[1]
    finally:
        await asyncio.gather(*(replica.stop() for replica in replicas))
        for replica in replicas:
            print(f"----- {replica.name}\n{replica.log()}")


def holders(trio: dict[str, DemoRuntime], text: str) -> list[str]:
    return [name for name, demo in trio.items()
            if any(part.get("text") == text for message in demo.state.received for part in message.get("parts", ()))]


async def test_placement_counts_the_runs_of_every_replica(
    pair: tuple[Replica, Replica], trio: dict[str, DemoRuntime], workspace: Path
) -> None:
    first, second = pair
    async with aiohttp.ClientSession() as http, contextlib.AsyncExitStack() as stack:
        for number, replica in enumerate((first, second, first)):
            body = run_body(thread_id=f"busy-{number}", text=f"slow 30 #{number}", cwd=str(workspace))
            resp = await stack.enter_async_context(http.post(replica.url, data=json.dumps(body), headers=HEADERS))
            assert resp.status == 200
            await read_until(resp, b"iac-code.session.v1")  # the run streams: its runtime counts it
        # Each replica alone would have started its own rotation at the same runtime.
        placed = [holders(trio, f"slow 30 #{number}") for number in range(3)]
        assert sorted(name for names in placed for name in names) == list(NAMES), placed
        async with http.get(second.url + "health") as resp:
            listed = (await resp.json())["runtimes"]
        assert [item["activeRuns"] for item in listed] == [1, 1, 1]


async def test_replicas_racing_on_a_new_thread_pin_it_once(
    pair: tuple[Replica, Replica], trio: dict[str, DemoRuntime], workspace: Path, redis_server: RedisServer
) -> None:
    first, second = pair
    async with aiohttp.ClientSession() as http:
        for number in range(4):
            thread_id = f"race-{number}"
            bodies = [run_body(thread_id=thread_id, text=f"race {number}", cwd=str(workspace)) for _ in range(6)]
            replies = await asyncio.gather(*(post(http, (first, second)[index % 2].url, body)
                                             for index, body in enumerate(bodies)))
            admitted = [reply for reply in replies if reply.status == 200]
            assert admitted and all(reply.status in (200, 409) for reply in replies), [r.status for r in replies]
            for reply in admitted:
                assert check_stream(reply.body)[-1]["type"] == "RUN_FINISHED"
            record = await stored_record(redis_server.url, thread_id)
            assert record is not None and record.runtime in NAMES
            # Every message of the thread reached its one runtime.
            assert holders(trio, f"race {number}") == [record.runtime]


async def test_a_resume_on_the_other_replica_reaches_the_runtime_the_thread_is_pinned_to(
    pair: tuple[Replica, Replica], trio: dict[str, DemoRuntime], workspace: Path
) -> None:
    first, second = pair
    async with aiohttp.ClientSession() as http:
        asked = await post(http, first.url, run_body(thread_id="across", text="permission note.txt",
                                                     cwd=str(workspace)))
        (interrupt,) = interrupts_of(check_stream(asked.body))
        (name,) = holders(trio, "permission note.txt")
        answered = await post(http, second.url, resume_body("across", str(workspace), interrupt["id"]))
        assert check_stream(answered.body)[-1]["outcome"] == {"type": "success"}
        assert {runtime: sum(demo.state.tool_runs.values()) for runtime, demo in trio.items()} == {
            runtime: int(runtime == name) for runtime in NAMES}


async def test_an_adopted_run_counts_on_its_runtime_until_it_ends(
    tmp_path: Path, redis_server: RedisServer, trio: dict[str, DemoRuntime], workspace: Path
) -> None:
    """A run handed off by a stopping replica is one of its runtime's active
    runs on the replica that adopts it (placement and /health see it), and
    stops counting when it ends."""
    import signal

    from tests.support.eventually import eventually
    from tests.support.reattach import SSE, whole_events

    from .replicas import health

    pool = [option for name, demo in trio.items() for option in ("--runtime", f"{name}={demo.url}")]
    replicas = []
    for number in range(2):
        replica = Replica(f"adopt-{number}", tmp_path / "replicas", redis_server.url, "unused",
                          "--allowed-cwd", str(tmp_path / "workspaces"), "--disconnect-grace-seconds", "20")
        at = replica.args.index("--a2a-url")
        replica.args[at:at + 2] = pool
        replicas.append(replica)
    first, second = replicas
    await asyncio.gather(*(replica.start() for replica in replicas))
    try:
        body = run_body(thread_id="t-adopted", text="slow 8", cwd=str(workspace))
        async with aiohttp.ClientSession() as http:
            async with http.post(first.url, data=json.dumps(body), headers=HEADERS) as resp:
                raw = await read_until(resp, b"TEXT_MESSAGE_CONTENT", 3)
                assert first.process is not None
                first.process.send_signal(signal.SIGTERM)
                raw += await asyncio.wait_for(resp.read(), 10)  # the stopping replica lets its client go
            (name,) = holders(trio, "slow 8")
            half = whole_events(raw)
            assert half.last_id is not None
            path = f"{second.url}threads/t-adopted/runs/{body['runId']}/events"
            async with http.get(path, headers={**SSE, "Last-Event-ID": half.last_id}) as resp:
                assert resp.status == 200
                rest = await read_until(resp, b"TEXT_MESSAGE_CONTENT")  # adopted: it streams again
                adopted = f"run {body['runId']} adopted"
                await eventually(lambda: adopted in second.log(), "the second replica adopts the run")
                # The replica that handed it off is gone, and its count of the run with it.
                await asyncio.to_thread(first.process.wait, 10)
                assert "outcome=handed_off" in first.log()
                during = {item["name"]: item["activeRuns"] for item in (await health(http, second.url))["runtimes"]}
                assert during == {other: int(other == name) for other in NAMES}, during
                rest += await asyncio.wait_for(resp.read(), 20)
            assert b"RUN_FINISHED" in rest
            after = {item["name"]: item["activeRuns"] for item in (await health(http, second.url))["runtimes"]}
            assert after == dict.fromkeys(NAMES, 0), after
        assert "adopted" in second.log()
    finally:
        await asyncio.gather(*(replica.stop() for replica in replicas))
        for replica in replicas:
            print(f"----- {replica.name}\n{replica.log()}")
