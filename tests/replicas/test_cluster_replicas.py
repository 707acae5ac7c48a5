"""The replica suite's main scenarios on a real Redis Cluster (3 primaries, 3 replicas).

The same scenario functions as on one primary, with ``redis_server``
replaced by a cluster started with ``redis-cli --cluster create`` and
reached with ``redis+cluster://``: a turn on A then B, an interrupt raised
on A answered on B, cancel from B of a run streaming on A, the thread list,
retention and the run limits. Then a planned ``CLUSTER FAILOVER`` of the
shard holding a thread while its run streams: the stream ends with its
terminal event, the thread takes new runs, and a cancel published after the
failover still reaches the replica that streams.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from redis.asyncio.cluster import RedisCluster

from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.store.redis.layout import Keys
from tests.support.adapter import Reply, run_body
from tests.support.eventually import eventually
from tests.support.stops import assert_stopped

from .cluster_setup import Cluster
from .conftest import StartReplicas
from .replicas import cancel, open_stream, post
from .test_history_replicas import test_any_replica_serves_the_same_history_of_a_thread as test_history
from .test_limits import test_the_limits_count_every_replica_together as test_limits
from .test_redis_store import make_store
from .test_redis_store import test_retention_applies_to_idle_and_terminal_records_only as test_retention
from .test_replicas import (
    test_an_interrupt_raised_on_one_replica_is_resumed_on_another as test_interrupt_on_a_answered_on_b,
)
from .test_replicas import test_cancel_through_a_replica_that_does_not_hold_the_stream as test_cancel_from_b
from .test_thread_list_replicas import (
    test_a_thread_made_on_one_replica_is_listed_on_the_other_to_its_user_only as test_thread_list,
)

__all__ = [
    "make_store", "test_cancel_from_b", "test_history", "test_interrupt_on_a_answered_on_b", "test_limits",
    "test_retention", "test_thread_list",
]


@pytest.fixture
async def redis_server(tmp_path: Path) -> AsyncIterator[Cluster]:
    """Replaces the single server of the imported scenarios."""
    cluster = Cluster(tmp_path / "cluster")
    await cluster.start()
    try:
        yield cluster
    finally:
        await cluster.stop()


@pytest.fixture
async def raw(redis_server: Cluster) -> AsyncIterator[Any]:
    """A cluster client, to look at the keys."""
    client = RedisCluster(host="127.0.0.1", port=redis_server.nodes[0].port)
    try:
        yield client
    finally:
        await client.aclose()


async def test_a_planned_failover_of_a_thread_s_shard_during_its_run(
    start_replicas: StartReplicas, redis_server: Cluster, http: aiohttp.ClientSession,
    demo: DemoRuntime, workspace: Path,
) -> None:
    first, second = await start_replicas(2, redis_server.url)
    replica = await redis_server.replica_of_slot_of(Keys("aguiadapter:").thread("t-shard"))
    body = run_body(thread_id="t-shard", text="slow 3", cwd=str(workspace))
    async with open_stream(http, first.url, body) as stream:
        await stream.read_until(b"TEXT_MESSAGE_CONTENT")
        await redis_server.fail_over(replica)
        events = await stream.finish(timeout=20)
    assert events[-1]["type"] in {"RUN_FINISHED", "RUN_ERROR"}, "the stream ends with its terminal event"

    async def runs() -> Reply | None:
        reply = await post(http, second.url, run_body(thread_id="t-shard", text="hello", cwd=str(workspace)))
        ok = reply.status == 200 and reply.events()[-1]["type"] == "RUN_FINISHED"
        return reply if ok else None

    await eventually(runs, "the thread takes runs on its shard's new primary", timeout=15, interval=0.5)
    # Pub/sub after the failover: a cancel from B reaches the run streaming on A.
    slow = run_body(thread_id="t-shard", text="slow 30", cwd=str(workspace))
    async with open_stream(http, first.url, slow) as streaming:
        await streaming.read_until(b"TEXT_MESSAGE_CONTENT")
        session = streaming.session()

        async def cancelled() -> Reply | None:
            reply = await cancel(http, second.url, session["executionId"], "t-shard")
            return reply if reply.status == 200 else None

        await eventually(cancelled, "the cancel is heard across the cluster", timeout=15, interval=0.5)
        stopped = await streaming.finish(timeout=10)
    assert_stopped(stopped)
    assert demo.state.cancel_calls[session["taskId"]] == 1
