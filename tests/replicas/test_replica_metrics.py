"""The pending-interrupt gauges with two and three replicas on one Redis.

Each replica reports the interrupts it announced and that still wait
(``aguiadapter_pending_interrupt_threads``), and every replica reports the
store's count of waiting threads (``aguiadapter_store_pending_interrupt_threads``),
however many deadlines it armed at start.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from .conftest import StartReplicas
from .redis_server import RedisServer
from tests.support.adapter import run_body

from .replicas import Replica, interrupts_of, post, resume_body

HERE, SHARED = "aguiadapter_pending_interrupt_threads", "aguiadapter_store_pending_interrupt_threads"


async def interrupt_on(http: aiohttp.ClientSession, replica: Replica, thread_id: str, cwd: str) -> dict[str, Any]:
    """A run on ``replica`` that ends waiting for a permission; its interrupt."""
    reply = await post(http, replica.url, run_body(thread_id=thread_id, text="permission notes.txt", cwd=cwd))
    (interrupt,) = interrupts_of(reply.events())
    return interrupt


async def gauges(http: aiohttp.ClientSession, replica: Replica) -> tuple[float, float]:
    """(this replica's pending interrupts, the store's), from its /metrics."""
    async with http.get(replica.url + "metrics") as resp:
        assert resp.status == 200
        families = {f.name: f for f in text_string_to_metric_families(await resp.text())}
    return families[HERE].samples[0].value, families[SHARED].samples[0].value


async def test_each_replica_counts_the_interrupts_it_announced_and_all_see_the_store(
    start_replicas: StartReplicas, redis_server: RedisServer, http: aiohttp.ClientSession, workspace: Path,
) -> None:
    first, second = await start_replicas(2, redis_server.url, "--metrics")
    cwd = str(workspace)
    await interrupt_on(http, first, "g-1", cwd)
    asked = await interrupt_on(http, second, "g-2", cwd)
    await interrupt_on(http, second, "g-3", cwd)
    assert [await gauges(http, r) for r in (first, second)] == [(1, 3), (2, 3)]

    # Answered on the first replica, announced by the second: the second stops counting it.
    reply = await post(http, first.url, resume_body("g-2", cwd, asked["id"]))
    assert reply.events()[-1]["outcome"] == {"type": "success"}
    assert [await gauges(http, r) for r in (first, second)] == [(1, 2), (1, 2)]

    # A replica started now arms both deadlines, and announced none of them.
    (third,) = await start_replicas(1, redis_server.url, "--metrics")
    assert await gauges(http, third) == (0, 2)
