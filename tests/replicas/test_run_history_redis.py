"""The run history on the Redis store: a thread's older runs move into its
record's hash, and every earlier run id stays used (issue 35, item 1)."""

from __future__ import annotations

from pathlib import Path

import redis.asyncio as aioredis

from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.store.redis.store import RedisSettings, RedisThreadStore
from aguiadapter.store.run_history import RUN_WINDOW, SPILL_AT
from aguiadapter.threads.record import RunEntry, ThreadRecord
from tests.support.run_history import every_earlier_run_id_is_used

from .redis_server import RedisServer


async def test_run_1_after_1000_runs_across_a_restart(tmp_path: Path, demo: DemoRuntime,
                                                      redis_server: RedisServer) -> None:
    await every_earlier_run_id_is_used(tmp_path, demo.url, store_url=redis_server.url)
    client = aioredis.Redis.from_url(redis_server.url)
    try:
        record_json = await client.hget("aguiadapter:thread:{:long}", "record")
        assert record_json is not None and len(record_json) < 16 * 1024
        assert await client.hexists("aguiadapter:thread:{:long}", "run:run-1")
    finally:
        await client.aclose()


async def test_moved_runs_go_with_the_record_in_one_script(redis_server: RedisServer) -> None:
    """The save that drops runs from the record writes them into its hash
    (one script: both or neither), and the hash's TTL covers them."""
    store = RedisThreadStore(redis_server.url, RedisSettings(retention_days=1))
    await store.start()
    client = aioredis.Redis.from_url(redis_server.url)
    try:
        record = ThreadRecord(thread_id="t", context_id="c", cwd="/w")
        for number in range(SPILL_AT + 1):
            record.runs[f"r-{number}"] = RunEntry(f"d-{number}", "success")
        (await store.save(record)).stamp(record)
        assert "r-0" not in record.runs and record.earlier_runs > 0
        assert await store.earlier_run("t", "r-0") == RunEntry("d-0", "success")
        assert await store.earlier_run("t", "r-unknown") is None
        assert 0 < await client.pttl("aguiadapter:thread:{:t}") <= 86_400_000
        loaded = await store.load("t")
        assert loaded == record
    finally:
        await client.aclose()
        await store.close()


async def test_a_record_in_todays_form_is_converted_on_its_first_save(redis_server: RedisServer) -> None:
    """A record of the version before the history (1,000 runs in itself, no
    ``earlier_runs``) is read as it is; its first save moves the runs out."""
    import json

    from aguiadapter.threads.record import record_to_json

    store = RedisThreadStore(redis_server.url, RedisSettings())
    await store.start()
    client = aioredis.Redis.from_url(redis_server.url)
    try:
        old = ThreadRecord(thread_id="old", context_id="c", cwd="/w", version=3)
        for number in range(1000):
            old.runs[f"r-{number}"] = RunEntry(f"d-{number}", "success")
        raw = json.loads(record_to_json(old))
        del raw["earlier_runs"]
        await client.hset("aguiadapter:thread:{:old}", mapping={"version": 3, "record": json.dumps(raw)})
        loaded = await store.load("old")
        assert loaded is not None and len(loaded.runs) == 1000 and loaded.earlier_runs == 0
        (await store.save(loaded)).stamp(loaded)
        stored = json.loads(await client.hget("aguiadapter:thread:{:old}", "record"))
        assert len(stored["runs"]) == RUN_WINDOW and stored["earlier_runs"] == 1000 - RUN_WINDOW
        assert await store.earlier_run("old", "r-0") == RunEntry("d-0", "success")
        assert await client.hlen("aguiadapter:thread:{:old}") == 3 + 1000 - RUN_WINDOW
    finally:
        await client.aclose()
        await store.close()
