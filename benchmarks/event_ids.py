"""12. What event ids and the run log cost: the adapter with them, against it without.

Fresh adapters in front of the shared runtime: the default (every event of a
run framed with an ``id:`` line and kept in the run's log for the replay
retention; the file store keeps logs in the adapter's memory),
``--replay-retention-seconds 0`` (no log, no ids: the streams of before), and
the same two on the Redis store (the log is a Redis stream: one ``XADD`` per
network write), against a private ``redis-server`` when there is one. In
rotating order per round, each does a batch of short runs (cost per run: wall
time at the client, adapter CPU / runs) and one long firehose run (events/s,
CPU per 10k events); then a re-attach replays that ended run from its first
event (events/s), and the memory the kept logs hold is read: the adapter's RSS
growth per run kept, and Redis's ``used_memory`` growth per run on the Redis
store. The tables divide ids-on by ids-off for each store.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import aiohttp

from .batches import private_redis, short_run_batch
from .client import StreamResult, run_body
from .comparison import Comparison
from .harness import Target
from .procs import RedisServer, free_port
from .report import Column, Results

if TYPE_CHECKING:
    from .harness import Bench

OFF, ON, OFF_REDIS, ON_REDIS = "ids_off", "ids_on", "ids_off_redis", "ids_on_redis"
ID_TARGETS = (OFF, ON, OFF_REDIS, ON_REDIS)
ID_LABELS = {
    OFF: "ids off, file store",
    ON: "ids on (default), file store",
    OFF_REDIS: "ids off, redis store",
    ON_REDIS: "ids on, redis store",
}
#: ids-on target → its ids-off baseline.
PAIRS = {ON: OFF, ON_REDIS: OFF_REDIS}
ID_COLUMNS: tuple[Column, ...] = (
    Column("per_run_wall_ms", "12. cost per run ({cost_text}): wall", "ms", "lower", 2),
    Column("per_run_cpu_ms", "12. cost per run ({cost_text}): adapter CPU", "ms", "lower", 2),
    Column("throughput_eps", "12. throughput, {firehose} deltas", "events/s", "higher"),
    Column("cpu_s_per_10k", "12. CPU per 10k events", "s", "lower", 3),
    Column("wire_bytes_per_event", "12. bytes on the wire per event", "B", "lower", 1),
    Column("replay_eps", "12. re-attach: replay of an ended run's last {replay_events}", "events/s", "higher"),
    Column("log_kb_per_run", "12. memory the kept log holds, per run", "KB", "lower", 1),
)
ID_KEYS = tuple(column.key for column in ID_COLUMNS)
COMPARISON = Comparison("12.", ID_LABELS, ID_COLUMNS, PAIRS)
OFF_ARGS = ("--replay-retention-seconds", "0")
#: How many of a firehose run's last events a re-attach replays: within the
#: default log bound (10,000 events), which the 20,000-delta run exceeds.
REPLAYED = 8000


async def measure_event_ids(bench: Bench) -> Results:
    """Run 12. and return its results (targets of :data:`ID_TARGETS`)."""
    results = Results(ID_TARGETS)
    for key in (OFF, OFF_REDIS):
        results.na(key, "replay_eps", "no log to re-attach to")
    started: list[Target] = []
    redis, problem = await private_redis(bench, "redis-ids")
    try:
        if problem is not None:
            for key in (OFF_REDIS, ON_REDIS):
                for column in ID_KEYS:
                    results.na(key, column, problem)
            bench.log(f"  NOTE: the Redis run log not measured: {problem}")
        wanted = [OFF, ON] if problem is not None else list(ID_TARGETS)
        for key in wanted:
            state = bench.work / f"state-ids-{key}"
            shutil.rmtree(state, ignore_errors=True)
            store = redis.redis_url if key in (OFF_REDIS, ON_REDIS) and redis is not None else None
            args = OFF_ARGS if key in (OFF, OFF_REDIS) else ()
            # Each adapter on the Redis store keeps its keys apart from the other's.
            if store is not None:
                store += f"?prefix=bench-{key}:"
            server = bench._adapter_server(state, free_port(), name=f"ids-{key}", store=store, extra_args=args)
            bench.extra.append(server)
            started.append(Target(key, server, "agui"))
        for target in started:
            target.server.start()
        for target in started:
            await target.server.wait_ready(timeout=60)
            for _ in range(bench.sizes.cost_batch):
                warm = await bench.bounded_run(target, bench.sizes.cost_text)
                if not bench.ok(target, warm):
                    raise RuntimeError(f"warm-up of {ID_LABELS[target.key]} failed: {bench.outcome(target, warm)}")
        await _rounds(bench, results, started, redis)
    finally:
        for target in started:
            target.server.stop()
        if redis is not None:
            redis.stop()
    return results


async def _rounds(bench: Bench, results: Results, targets: Sequence[Target], redis: RedisServer | None) -> None:
    sizes = bench.sizes
    servers = [t.server for t in targets] + ([redis] if redis is not None else [])
    async with aiohttp.ClientSession() as session:
        for rep in range(sizes.cost_rounds):
            for target in bench.rotation(targets, rep):
                await bench.settle(*servers)
                rss0, used0 = target.server.rss(), await _redis_used(redis, target)
                if not await short_run_batch(bench, results, target):
                    continue
                # The logs of these runs are kept for the retention: what they hold.
                if target.key in (OFF, ON):
                    results.add(target.key, "log_kb_per_run", (target.server.rss() - rss0) / sizes.cost_batch / 1024)
                else:
                    used1 = await _redis_used(redis, target)
                    results.add(target.key, "log_kb_per_run", (used1 - used0) / sizes.cost_batch / 1024)
        for rep in range(sizes.reps):
            for target in bench.rotation(targets, rep):
                await bench.settle(*servers)
                body = run_body(f"firehose {sizes.firehose}", cwd=bench.cwd)
                cpu0 = target.server.cpu()
                result = await _bounded(bench, target, body)
                cpu1 = target.server.cpu()
                if not bench.ok(target, result) or result.texts < sizes.firehose:
                    results.note(target.key, "errors", f"throughput: {bench.outcome(target, result)[:160]}")
                    continue
                results.add(target.key, "throughput_eps", result.events / result.seconds)
                results.add(target.key, "cpu_s_per_10k", (cpu1 - cpu0) / result.events * 10_000)
                results.add(target.key, "wire_bytes_per_event", result.bytes / result.events)
                if target.key in PAIRS:
                    await _replay(session, results, target, body, result.events)


async def _bounded(bench: Bench, target: Target, body: dict[str, Any]) -> StreamResult:
    """One run of ``body`` within the profile's time limit (a timeout is an error)."""
    result = StreamResult()
    try:
        return await asyncio.wait_for(bench.one_run(target, "", body=body, result=result), bench.sizes.run_timeout)
    except asyncio.TimeoutError:
        result.error = f"no end after {bench.sizes.run_timeout:g} s"
        return result


async def _replay(session: aiohttp.ClientSession, results: Results, target: Target, body: dict[str, Any],
                  events: int) -> None:
    """Re-attach to the ended run after its first events and read the rest
    (the default log bound keeps the newest 10,000 events of a longer run;
    a cursor before them would be refused with 410 EVENTS_TRUNCATED)."""
    cursor = max(events - REPLAYED, 0)
    url = f"{target.server.url}threads/{body['threadId']}/runs/{body['runId']}/events"
    headers = {"Accept": "text/event-stream", "Last-Event-ID": str(cursor)}
    began = time.perf_counter()
    async with session.get(url, headers=headers) as resp:
        raw = await resp.read()
    seconds = time.perf_counter() - began
    replayed = raw.count(b"\ndata: ") + raw.startswith(b"data: ")
    if resp.status != 200 or replayed != events - cursor:
        results.note(target.key, "errors", f"replay: HTTP {resp.status}, {replayed} of {events - cursor} events")
        return
    results.add(target.key, "replay_eps", replayed / seconds)


async def _redis_used(redis: RedisServer | None, target: Target) -> int:
    """Redis's ``used_memory`` (bytes), for the targets on the Redis store."""
    if redis is None or target.key in (OFF, ON):
        return 0
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(redis.redis_url)
    try:
        info = await client.info("memory")
    finally:
        await client.aclose()
    return int(info["used_memory"])


def render_event_ids(results: Results, sizes: dict[str, Any]) -> str:
    """The table of 12. and its ratios, ids on / ids off."""
    fills = {k: f"{v:,}" if isinstance(v, int) else v for k, v in sizes.items()}
    fills["replay_events"] = f"{min(REPLAYED, int(sizes.get('firehose') or 0)):,}"
    return COMPARISON.render(results, fills)


def event_ids_json(results: Results, sizes: dict[str, Any]) -> dict[str, Any]:
    """12. in the JSON file."""
    return COMPARISON.json(results, sizes)


def event_ids_notes(results: Results) -> list[str]:
    """12. in words."""
    return COMPARISON.notes(results, "event ids")
