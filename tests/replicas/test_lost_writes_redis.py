"""A lost write of the thread record, for every transition that writes, on
Redis: the rows of ``tests/test_lost_writes.py`` against a real
redis-server, whose saves fail from one transition's on until it is back."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.threads.record import RunPhase, ThreadRecord
from aguiadapter.store.redis.store import RedisSettings, RedisThreadStore
from aguiadapter.web.keys import SERVICE
from tests.support.adapter import Reply, run_body
from tests.support.reattach import read_then_cut, reattach
from tests.test_lost_writes import (
    ROWS,
    Case,
    Outage,
    Row,
    Trip,
    as_stored,
    check_row,
    finishes_once_free,
    last_seen,
    serve,
)

from .redis_server import RedisServer


class RedisOutage(Outage, RedisThreadStore):
    """The Redis store, while Redis refuses every write."""


@pytest.mark.parametrize("row", ROWS, ids=[row.transition for row in ROWS])
async def test_a_lost_write_on_redis_ends_the_stream_keeps_the_record_and_heals(
    row: Row, redis_server: RedisServer, demo: DemoRuntime, workspace: Path, tmp_path: Path
) -> None:
    store = RedisOutage(redis_server.url, RedisSettings(prefix="lost-writes"))
    try:
        await check_row(row, store, tmp_path / "state", demo, workspace)
    finally:
        await store.close()


# ------------------------------------------------ a run left to another replica
GRACE = 3.0


class Pair:
    """Two in-process replicas on one Redis; the first one drains, the
    client re-attaches to the second, which adopts the run."""

    def __init__(self, first: Any, second: Any, stores: tuple[RedisOutage, RedisOutage]) -> None:
        self.first, self.second, self.stores = first, second, stores

    async def close(self) -> None:
        for adapter in (self.first, self.second):
            await adapter.close()
        for store in self.stores:
            await store.close()


async def pair(redis_server: RedisServer, demo: DemoRuntime, tmp_path: Path) -> Pair:
    stores = (RedisOutage(redis_server.url, RedisSettings(prefix="handoff")),
              RedisOutage(redis_server.url, RedisSettings(prefix="handoff")))
    adapters = [
        await serve(store, tmp_path / f"state-{index}", demo.url, disconnect_grace_seconds=GRACE)
        for index, store in enumerate(stores)
    ]
    return Pair(adapters[0], adapters[1], stores)


HANDED_OFF = RunPhase.HANDED_OFF


def hands_off(stored: ThreadRecord | None, new: ThreadRecord) -> bool:
    return stored is not None and stored.run_phase is not HANDED_OFF and new.run_phase is HANDED_OFF


def adopts(stored: ThreadRecord | None, new: ThreadRecord) -> bool:
    return stored is not None and stored.run_phase is HANDED_OFF and new.run_phase is not HANDED_OFF


@pytest.mark.parametrize(("transition", "trips", "faulty"), [("hand_off", hands_off, 0), ("adopt", adopts, 1)])
async def test_a_lost_write_of_a_run_left_to_another_replica_ends_its_stream_and_heals(
    transition: str, trips: Trip, faulty: int,
    redis_server: RedisServer, demo: DemoRuntime, workspace: Path, tmp_path: Path,
) -> None:
    """The first replica drains (a rolling restart) while a run streams; the
    client re-attaches to the second. The save of the handoff (on the
    first) or of the adoption (on the second) fails, and Redis stays down
    for both until it is back: the re-attached stream ends with
    STATE_PERSISTENCE_FAILED, nothing of the record changed, the task is
    cancelled (nobody relays it any more), and a new turn works once
    Redis is back and the run's grace has passed."""
    both = await pair(redis_server, demo, tmp_path)
    try:
        body = run_body(thread_id=f"handoff-{transition}", text="slow 10", cwd=str(workspace))
        failing, other = both.stores[faulty], both.stores[1 - faulty]
        failing.trips = trips
        other.trips = lambda stored, new: failing.full  # one Redis: down for both
        half = await read_then_cut(both.first.url, body, events=4)
        service = both.first.app.get(SERVICE)
        assert service is not None
        draining = asyncio.create_task(service.drain(asyncio.Event()))
        status, rest = await reattach(both.second.url, body["threadId"],
                                      body["runId"], half.last_id)
        assert status == 200
        assert failing.full, f"the save of {transition} was never attempted"
        assert last_seen(Reply(200, {}, half.raw + rest)) == ("RUN_ERROR", "STATE_PERSISTENCE_FAILED")
        stored = as_stored(await failing.load(body["threadId"]))
        assert stored == as_stored(failing.kept), "the stored record changed after a lost write"
        assert demo.state.total_cancel_calls > 0, "the task goes on with nobody to relay it"
        for store in both.stores:
            store.heal()
        second = Case(both.second, both.stores[1], demo, workspace, thread_id=body["threadId"])
        await finishes_once_free(second)
        await draining
    finally:
        await both.close()
