"""16. ``GET /threads`` when one user has 10,000 threads (200 in the smoke run), file store and Redis.

The threads are written through the store itself (``save``, as runs write
them: the record and its list marker), in the bench's own process, for one
``userId`` (open mode, listed with ``?userId=``); one in ten is terminal, the
rest idle. Then an adapter process (``python -m aguiadapter``) is started on
that state folder, or that Redis database, and timed from a client on
loopback, per call (wall time of the whole request, body read):

- the first page (``limit=50``) right after the process started (the file
  store then reads the user's markers and their records, once);
- the first page again, and a deep page (``limit=50`` from the walk's
  last cursor: after 9,800 of 10,000 threads), each the median of 20 calls;
- a page with a state filter nothing matches (``state=interrupted``): the
  worst case, it looks at the most entries a call may (2,000);
- every thread, walked ``limit=200`` at a time (checked: each once);
- how long the event loop stalls while the first call reads and sorts the
  user's list: the slowest ``GET /capabilities`` (a constant answer) of a
  client asking again and again while that first page is built, next to
  the median of the same request when the server is idle. The file store
  reads and sorts on its executor, so the two stay close; a list built on
  the loop (one ``insort`` per thread, as before issue 34) showed 3.4 s at
  100,000 threads here.

Bytes per page are the body's bytes (``limit=50``).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

from aguiadapter.threads.record import ThreadRecord, ThreadState
from aguiadapter.store.contract import ThreadStore

from .batches import private_redis
from .procs import free_port
from .report import Results, _table

if TYPE_CHECKING:
    from .harness import Bench

FILE, REDIS = "list_file", "list_redis"
TARGETS = (FILE, REDIS)
TARGET_NAMES = {FILE: "file store", REDIS: "redis store"}
KEYS = ("cold_first_ms", "stall_ms", "idle_ms", "first_ms", "deep_ms", "filtered_ms", "walk_s", "page_bytes")
LABELS = {
    "cold_first_ms": "first page, first call after start (ms)",
    "stall_ms": "another request during that first call, slowest (ms)",
    "idle_ms": "the same request, server idle (ms)",
    "first_ms": "first page (ms)",
    "deep_ms": "deep page: after the walk's last cursor (ms)",
    "filtered_ms": "state filter matching nothing (ms)",
    "walk_s": "every thread, 200 a page (s)",
    "page_bytes": "bytes per page of 50",
}
USER = "bench-list-user"
PAGE = 50
#: Calls per batch for the warm page times.
CALLS = 20


async def measure_thread_list(bench: Bench) -> Results:
    """Run 16. and return its results (one target per store)."""
    results = Results(TARGETS)
    count = bench.sizes.list_threads
    results.note(FILE, "threads", count)
    state = bench.work / "state-thread-list"
    shutil.rmtree(state, ignore_errors=True)
    from aguiadapter.store.file.store import FileThreadStore

    await _fill(FileThreadStore(state, retention_days=0), count, bench.cwd)
    redis, problem = await private_redis(bench, "redis-thread-list")
    try:
        store_url = None
        if redis is not None:
            from aguiadapter.store.redis.store import store_from_url

            store_url = f"{redis.redis_url}?prefix=bench-list:"
            await _fill(store_from_url(store_url), count, bench.cwd)
        else:
            for key in KEYS:
                results.na(REDIS, key, problem or "no redis")
        for rep in range(max(bench.sizes.reps, 2)):
            for target in bench.rotation([FILE] + ([REDIS] if store_url else []), rep):
                await _one(bench, results, target, state, store_url if target == REDIS else None, count, rep)
    finally:
        if redis is not None:
            redis.stop()
    return results


async def _fill(store: ThreadStore, count: int, cwd: str) -> None:
    await store.start()
    try:
        for start in range(0, count, 32):
            batch = []
            for index in range(start, min(count, start + 32)):
                state = ThreadState.TERMINAL if index % 10 == 0 else ThreadState.IDLE
                batch.append(ThreadRecord(thread_id=f"bench-list-{index:06d}", context_id=f"ctx-{index}", cwd=cwd,
                                          user_id=USER, state=state,
                                          last_error="EXECUTION_LOST" if state is ThreadState.TERMINAL else None))
            await asyncio.gather(*(store.save(record) for record in batch))
    finally:
        await store.close()


async def _one(bench: Bench, results: Results, target: str, state: Path, store_url: str | None, count: int,
               rep: int) -> None:
    server = bench._adapter_server(state, free_port(), name=f"{target}-{rep}", store=store_url)
    try:
        server.start()
        await server.wait_ready(timeout=60)
        async with aiohttp.ClientSession() as session:
            base = f"{server.url}threads?userId={USER}"
            done = asyncio.Event()
            poller = asyncio.create_task(_poll(session, f"{server.url}capabilities", done))
            try:
                seconds, _, _ = await _get(session, f"{base}&limit={PAGE}")
            finally:
                done.set()
            results.add(target, "cold_first_ms", seconds * 1000)
            results.add(target, "stall_ms", max(await poller) * 1000)
            idle = [(await _get(session, f"{server.url}capabilities"))[0] for _ in range(CALLS)]
            results.add(target, "idle_ms", sorted(idle)[len(idle) // 2] * 1000)
            walked, last, walk_s = await _walk(session, base)
            if walked != count:
                results.note(target, "errors", f"the walk listed {walked} threads once each, not {count}")
            results.add(target, "walk_s", walk_s)
            deep = f"{base}&limit={PAGE}" + (f"&cursor={last}" if last else "")
            for key, url in (("first_ms", f"{base}&limit={PAGE}"), ("deep_ms", deep),
                             ("filtered_ms", f"{base}&limit={PAGE}&state=interrupted")):
                times = []
                for _ in range(CALLS):
                    seconds, size, _ = await _get(session, url)
                    times.append(seconds)
                    if key == "first_ms":
                        results.note(target, "page_bytes_seen", size)
                results.add(target, key, sorted(times)[len(times) // 2] * 1000)
            _, size, _ = await _get(session, f"{base}&limit={PAGE}")
            results.add(target, "page_bytes", float(size))
    finally:
        server.stop()


async def _get(session: aiohttp.ClientSession, url: str) -> tuple[float, int, dict[str, Any]]:
    began = time.perf_counter()
    async with session.get(url) as resp:
        body = await resp.read()
        if resp.status != 200:
            raise RuntimeError(f"GET {url}: {resp.status} {body[:300]!r}")
    seconds = time.perf_counter() - began
    return seconds, len(body), json.loads(body)


async def _poll(session: aiohttp.ClientSession, url: str, done: asyncio.Event) -> list[float]:
    """The time of each call of ``url``, one after the other, until ``done`` (at least one)."""
    times: list[float] = []
    while not times or not done.is_set():
        times.append((await _get(session, url))[0])
    return times


async def _walk(session: aiohttp.ClientSession, base: str) -> tuple[int, str | None, float]:
    """Every thread, 200 a page: how many (each once), the walk's last cursor, and the time."""
    seen: list[str] = []
    cursor: str | None = None
    last: str | None = None
    began = time.perf_counter()
    while True:
        _, _, page = await _get(session, f"{base}&limit=200" + (f"&cursor={cursor}" if cursor else ""))
        seen += [item["threadId"] for item in page["threads"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
        last = cursor
    seconds = time.perf_counter() - began
    return (len(seen) if len(set(seen)) == len(seen) else -1), last, seconds


def render_thread_list(results: Results) -> str:
    """The table of 16."""
    threads = results.details.get(FILE, {}).get("threads", ["?"])
    header = [f"16. GET /threads, one user with {threads[0]:,} threads" if isinstance(threads[0], int)
              else "16. GET /threads", *(TARGET_NAMES[t] for t in TARGETS)]
    rows = [[LABELS[key], *(_cell(results.cell(target, key), key) for target in TARGETS)] for key in KEYS]
    return _table(header, rows, max_width=64)


def _cell(cell: dict[str, Any], key: str) -> str:
    if "na" in cell:
        return str(cell["na"])
    if key == "page_bytes":
        return f"{cell['median']:,.0f}"
    return f"{cell['median']:.2f} [{cell['min']:.2f}-{cell['max']:.2f}]"


def thread_list_json(results: Results) -> dict[str, Any]:
    """16. in the JSON file."""
    return {
        "labels": LABELS,
        "results": {target: {key: results.cell(target, key) for key in KEYS} for target in TARGETS},
        "details": results.details,
    }
