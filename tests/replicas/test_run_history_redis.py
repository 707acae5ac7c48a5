"""The run history on the Redis store: a thread's older runs move into its
record's hash, and every earlier run id stays used (issue 35, item 1)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import redis.asyncio as aioredis

from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.store.redis.store import RedisSettings, RedisThreadStore
from aguiadapter.store.run_history import RUN_WINDOW, SPILL_AT
from aguiadapter.threads.record import RunEntry, ThreadRecord
from tests.support.adapter import run_body
from tests.support.run_history import add_runs, every_earlier_run_id_is_used

from .conftest import StartReplicas
from .redis_server import RedisServer
from .replicas import error_code, post, stored_record


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


def a_thread_with(runs: int, thread_id: str = "t") -> ThreadRecord:
    """A record holding runs ``r-0`` ... ``r-<runs - 1>``, oldest first."""
    record = ThreadRecord(thread_id=thread_id, context_id="c", cwd="/w")
    for number in range(runs):
        record.runs[f"r-{number}"] = RunEntry(f"d-{number}", "success")
    return record


async def hgets(client: aioredis.Redis) -> int:
    """``HGET`` calls the server has run so far."""
    stats = await client.info("commandstats")
    return int(stats.get("cmdstat_hget", {}).get("calls", 0))


async def test_a_run_id_on_an_old_thread_is_looked_up_by_the_claim_that_admits_it(
    redis_server: RedisServer,
) -> None:
    """A run on an old thread asks Redis no more often than one on a new
    thread: the claim script reads the id's entry in the history, so the
    look-up that judges the id (new, or any earlier one) needs no call of
    its own; once the claim is released, the look-up asks Redis again."""
    store = RedisThreadStore(redis_server.url, RedisSettings())
    await store.start()
    client = aioredis.Redis.from_url(redis_server.url)
    try:
        record = a_thread_with(SPILL_AT + 1)
        (await store.save(record)).stamp(record)
        assert record.earlier_runs > 0
        for run_id, expected in (("r-new", None), ("r-0", RunEntry("d-0", "success"))):
            claim = await store.claim("t", run_id)
            assert claim is not None
            loaded = await store.load("t")
            assert loaded is not None and loaded.earlier_runs > 0 and run_id not in loaded.runs
            before = await hgets(client)
            assert await store.earlier_run("t", run_id) == expected
            assert await hgets(client) == before
            await store.release(claim)
            assert await store.earlier_run("t", run_id) == expected
            assert await hgets(client) == before + 1
    finally:
        await client.aclose()
        await store.close()


async def test_a_run_that_moved_out_after_the_claim_read_the_history_is_still_found(
    redis_server: RedisServer,
) -> None:
    """The claim read the history while the id was still in the record; its
    lease lapsed, and another replica's save moved the id into the hash.
    The record loaded now lacks it: the look-up must not trust what the
    claim read (the id would be taken as new: a repeated run)."""
    slow = RedisThreadStore(redis_server.url, RedisSettings(lease_seconds=0.2))
    other = RedisThreadStore(redis_server.url, RedisSettings())
    await slow.start()
    await other.start()
    try:
        record = a_thread_with(SPILL_AT)
        (await other.save(record)).stamp(record)
        assert record.earlier_runs == 0 and "r-0" in record.runs
        stale = await slow.claim("t", "r-0")
        assert stale is not None
        await asyncio.sleep(0.4)  # the lease lapses
        taken = await other.claim("t", "r-late")
        assert taken is not None
        record.runs["r-late"] = RunEntry("d-late", "success")
        (await other.save(record, taken)).stamp(record)
        assert "r-0" not in record.runs and record.earlier_runs > 0
        loaded = await slow.load("t")
        assert loaded is not None and "r-0" not in loaded.runs
        assert await slow.earlier_run("t", "r-0") == RunEntry("d-0", "success")
        await other.release(taken)
        await slow.release(stale)
    finally:
        await slow.close()
        await other.close()


async def test_two_replicas_racing_with_run_ids_of_an_old_thread(
    tmp_path: Path, start_replicas: StartReplicas, redis_server: RedisServer, http: aiohttp.ClientSession,
    workspace: Path,
) -> None:
    """Two replicas get the same request at once on a thread whose older runs
    are in its history: an earlier run id is a repeat on both (the one that
    does not hold the claim judges it too); a new one runs once, and is then
    a repeat, or a conflict under another request, on either replica."""
    replicas = await start_replicas(2, redis_server.url)
    first = run_body(thread_id="old", text="turn 1", cwd=str(workspace), run_id="run-1")
    assert (await post(http, replicas[0].url, first)).status == 200
    await add_runs(tmp_path / "state", redis_server.url, "old", SPILL_AT + 6)
    stored = await stored_record(redis_server.url, "old")
    assert "run-1" not in stored.runs and stored.earlier_runs > 0
    replies = await asyncio.gather(*(post(http, replica.url, first) for replica in replicas))
    assert [(reply.status, error_code(reply)) for reply in replies] == [(409, "DUPLICATE_RUN_ID")] * 2
    fresh = run_body(thread_id="old", text="slow 1", cwd=str(workspace), run_id="run-new")
    replies = await asyncio.gather(*(post(http, replica.url, fresh) for replica in replicas))
    assert sorted(reply.status for reply in replies) == [200, 409]
    (won,) = [reply for reply in replies if reply.status == 200]
    assert won.events()[-1]["type"] == "RUN_FINISHED"
    (lost,) = [reply for reply in replies if reply.status == 409]
    assert error_code(lost) in {"THREAD_BUSY", "DUPLICATE_RUN_ID"}
    other = run_body(thread_id="old", text="another turn", cwd=str(workspace), run_id="run-new")
    for replica in replicas:
        assert error_code(await post(http, replica.url, fresh)) == "DUPLICATE_RUN_ID"
        assert error_code(await post(http, replica.url, other)) == "RUN_ID_CONFLICT"
