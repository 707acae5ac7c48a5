"""A lost write of the thread record, for every transition that writes, on
Redis: the rows of ``tests/test_lost_writes.py`` against a real
redis-server, whose saves fail from one transition's on until it is back."""

from __future__ import annotations

from pathlib import Path

import pytest

from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.threads.redis_store import RedisSettings, RedisThreadStore
from tests.test_lost_writes import ROWS, Outage, Row, check_row

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
