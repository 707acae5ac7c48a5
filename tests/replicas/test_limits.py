"""Admission limits across replicas on one Redis: all replicas together, and a replica that dies."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from pathlib import Path
from typing import Any

import aiohttp

from aguiadapter.demo.runtime import DemoRuntime
from tests.support.adapter import Reply, run_body
from tests.support.eventually import eventually

from .conftest import StartReplicas
from .redis_server import RedisServer
from .replicas import HEADERS, Replica, error_code, stored_record

#: A short lease (the store URL's ``lease_seconds``) for the test of a replica that dies.
LEASE = 2.0


def slow(thread_id: str, cwd: Path, user: str) -> dict[str, Any]:
    return run_body(thread_id=thread_id, text="slow 30", cwd=str(cwd), userId=user)


async def try_run(stack: contextlib.AsyncExitStack, http: aiohttp.ClientSession, url: str,
                  body: dict[str, Any]) -> Reply | None:
    """Start a run: ``None`` once it streams (kept open by ``stack``), else the refusal."""
    resp = await stack.enter_async_context(http.post(url, data=json.dumps(body), headers=HEADERS))
    if resp.status != 200:
        return Reply(resp.status, dict(resp.headers), await resp.read())
    seen = b""
    while b"iac-code.session.v1" not in seen:
        chunk = await asyncio.wait_for(resp.content.readany(), 10)
        assert chunk, seen
        seen += chunk
    return None


def refused(reply: Reply | None, status: int, code: str) -> None:
    assert reply is not None, "the run was admitted"
    assert reply.status == status and error_code(reply) == code, reply.body
    assert reply.headers["Retry-After"] == "5"


async def test_the_limits_count_every_replica_together(
    start_replicas: StartReplicas, redis_server: RedisServer, http: aiohttp.ClientSession,
    demo: DemoRuntime, workspace: Path,
) -> None:
    first, second = await start_replicas(
        2, redis_server.url, "--max-active-runs", "3", "--max-active-runs-per-user", "2"
    )
    async with contextlib.AsyncExitStack() as stack:
        assert await try_run(stack, http, first.url, slow("l-1", workspace, "alice")) is None
        assert await try_run(stack, http, second.url, slow("l-2", workspace, "alice")) is None
        refused(await try_run(stack, http, first.url, slow("l-3", workspace, "alice")), 429, "TOO_MANY_RUNS")
        assert await try_run(stack, http, first.url, slow("l-4", workspace, "bob")) is None
        for replica, thread_id in ((first, "l-5"), (second, "l-6")):
            refused(await try_run(stack, http, replica.url, slow(thread_id, workspace, "carol")), 503, "SERVER_BUSY")
        assert len(demo.state.tasks) == 3, "a refused run never reached the runtime"
        for thread_id in ("l-3", "l-5", "l-6"):
            assert await stored_record(redis_server.url, thread_id) is None
    # The streams closed: their slots were given back, on both replicas.
    async with contextlib.AsyncExitStack() as stack:
        for index, replica in enumerate((first, second, first)):
            body = slow(f"l-again-{index}", workspace, f"user-{index}")
            assert await eventually_streaming(stack, http, replica, body) is None


async def test_concurrent_runs_on_two_replicas_take_exactly_the_free_slots(
    start_replicas: StartReplicas, redis_server: RedisServer, http: aiohttp.ClientSession,
    demo: DemoRuntime, workspace: Path,
) -> None:
    replicas = await start_replicas(2, redis_server.url, "--max-active-runs", "3")
    async with contextlib.AsyncExitStack() as stack:
        attempts = [
            try_run(stack, http, replicas[index % 2].url, slow(f"c-{index}", workspace, f"u{index}"))
            for index in range(8)
        ]
        results = await asyncio.gather(*attempts)
        admitted = [result for result in results if result is None]
        assert len(admitted) == 3, [None if r is None else r.body for r in results]
        for result in results:
            if result is not None:
                refused(result, 503, "SERVER_BUSY")
        assert len(demo.state.tasks) == 3


async def test_the_slots_of_a_replica_that_dies_lapse_within_the_lease(
    start_replicas: StartReplicas, redis_server: RedisServer, http: aiohttp.ClientSession,
    demo: DemoRuntime, workspace: Path,
) -> None:
    doomed, survivor = await start_replicas(2, f"{redis_server.url}?lease_seconds={LEASE}", "--max-active-runs", "2")
    async with contextlib.AsyncExitStack() as stack:
        assert await try_run(stack, http, doomed.url, slow("d-1", workspace, "a")) is None
        assert await try_run(stack, http, doomed.url, slow("d-2", workspace, "b")) is None
        refused(await try_run(stack, http, survivor.url, slow("d-3", workspace, "c")), 503, "SERVER_BUSY")
        # Past one renewal, the slots still count: they are renewed while the runs stream.
        await asyncio.sleep(LEASE + 1)
        refused(await try_run(stack, http, survivor.url, slow("d-4", workspace, "c")), 503, "SERVER_BUSY")
        await doomed.kill()
        # The dead replica's slots lapse within one lease (and a little for the scheduling).
        assert await eventually_streaming(stack, http, survivor, slow("d-5", workspace, "c"), timeout=LEASE + 3) is None


async def eventually_streaming(stack: contextlib.AsyncExitStack, http: aiohttp.ClientSession, replica: Replica,
                               body: dict[str, Any], *, timeout: float = 10.0) -> Reply | None:
    """Try a run until it is admitted (``None``: it streams) or refused for
    another reason than SERVER_BUSY or TOO_MANY_RUNS."""
    attempts = itertools.count()

    async def admitted() -> tuple[Reply | None] | None:
        result = await try_run(stack, http, replica.url, {**body, "runId": f"{body['runId']}-{next(attempts)}"})
        return None if result is not None and result.status in (429, 503) else (result,)

    (result,) = await eventually(admitted, "a slot frees up for the run", timeout=timeout, interval=0.2)
    return result
