"""Measures 5 (idle streams) and 10-11 (capacity): many open streams of one
process, each sample on a fresh runtime and target (:class:`.harness.Bench`)."""

from __future__ import annotations

import asyncio
import shutil
import statistics
import sys
import time
from typing import TYPE_CHECKING, Any

from .client import (
    StreamResult,
    run_body,
    stream,
)
from .harness import Target
from .procs import Server, fd_limit, free_port, wait_quiet
from .report import (
    ADAPTER,
    ADAPTER_PROCESS,
    BIG_KEYS,
    CAPACITY_KEYS,
    IAC,
    RELAY,
    RUNTIME,
)

MB = 1024 * 1024

if TYPE_CHECKING:
    from .harness import Bench


async def measure_idle(bench: Bench) -> None:
    """5. Many open streams in a slow run: RSS with them open, RSS per stream.

    Each sample uses a fresh runtime and a fresh target process (warmed up
    by one short run), so the RSS before the streams is not inflated by
    earlier measures and no earlier turn still ticks in the runtime.
    """
    count, seconds = bench.sizes.idle_streams, bench.sizes.idle_seconds
    bench.results.na(RUNTIME, "rss_streams_mb", "the runtime is not an AG-UI server")
    bench.results.na(RUNTIME, "rss_per_stream_kb", "the runtime is not an AG-UI server")
    keys = [t.key for t in bench.targets if t.kind == "agui" and t.key != ADAPTER_PROCESS]
    for rep in range(bench.sizes.idle_reps):
        for key in bench.rotation(keys, rep):
            runtime, target = await _fresh_pair(bench, key, f"idle-{rep}")
            try:
                await _idle_sample(bench, target, count, seconds)
            finally:
                target.server.stop()
                runtime.stop()


async def _fresh_pair(bench: Bench, key: str, tag: str, heartbeat: float | None = None) -> tuple[Server, Target]:
    """A new runtime and a new *key* target in front of it, warmed up
    (``heartbeat``: the adapter's heartbeat interval, default its own)."""
    port = free_port()
    runtime = Server(f"runtime-{tag}", [sys.executable, "-m", "aguiadapter.demo", "--port", str(port)],
                     port=port, log_path=bench.work / "logs" / f"runtime-{tag}.log")
    runtime.start()
    await runtime.wait_ready()
    url = runtime.url
    if key == ADAPTER:
        shutil.rmtree(bench.work / f"state-adapter-{tag}", ignore_errors=True)
        server = bench._adapter_server(bench.work / f"state-adapter-{tag}", free_port(), name=f"adapter-{tag}",
                                      a2a_url=url, heartbeat=heartbeat)
    elif key == IAC:
        server = bench._iac_server(free_port(), name=f"iac-code-agui-{tag}", a2a_url=url)
    else:
        server = bench._relay_server(free_port(), name=f"relay-{tag}", a2a_url=url)
    target = Target(key, server, "agui")
    try:
        server.start()
        await server.wait_ready(timeout=120)
        warm = await bench.one_run(target, "firehose 200")
        if not bench.ok(target, warm):
            raise RuntimeError(f"warm-up of a fresh {target.label} failed: {bench.outcome(target, warm)}")
    except BaseException:
        server.stop()
        runtime.stop()
        raise
    return runtime, target


async def _idle_sample(bench: Bench, target: Target, count: int, seconds: float) -> None:
    await wait_quiet([target.server], timeout=5.0)
    base = statistics.median([target.server.rss() for _ in range(3)])
    bench.results.add(target.key, "rss_idle_mb", base / MB)
    begun = time.perf_counter()
    holders = [StreamResult() for _ in range(count)]
    tasks = [asyncio.create_task(bench.one_run(target, f"slow {seconds:g}", result=holder)) for holder in holders]
    # Open = the first text delta arrived: the stream really sits in the slow run.
    # Stop waiting when all are in, or when the count stalled for 5 s
    # (a target that caps its upstream streams never gets them all in).
    limit = bench.sizes.idle_ramp_limit
    best, best_at = 0, begun
    while time.perf_counter() - begun < limit:
        now = time.perf_counter()
        inside = sum(1 for h in holders if h.first_text is not None)
        if inside == count or all(task.done() for task in tasks):
            break
        if inside > best:
            best, best_at = inside, now
        elif best and now - best_at > 5.0:
            break
        await asyncio.sleep(0.1)
    ramp = time.perf_counter() - begun
    await asyncio.sleep(1.0)
    samples = []
    for _ in range(3):
        samples.append(target.server.rss())
        await asyncio.sleep(0.2)
    held = statistics.median(samples)
    opened = sum(1 for h in holders if h.first_event is not None)
    streaming = sum(1 for h, task in zip(holders, tasks, strict=True)
                    if h.first_text is not None and not task.done())
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    fact = {"streams": count, "opened": opened, "streaming": streaming, "ramp_s": round(ramp, 2),
            "heartbeats_seen": sum(h.comments for h in holders)}
    bench.results.note(target.key, "idle", fact)
    if streaming < count:
        bench.results.note(target.key, "errors", f"idle: {streaming} of {count} streams received text "
                          f"within {limit:g} s ({opened} got a first event)")
    if opened:
        bench.results.add(target.key, "rss_streams_mb", held / MB)
        bench.results.add(target.key, "rss_per_stream_kb", (held - base) / opened / 1024)


async def measure_capacity(bench: Bench) -> None:
    """10. and 11. Streams waiting on a silent runtime (``silent``: one text
    delta, then nothing): how long it takes to open them all, memory per
    stream, CPU while they wait, and whether heartbeats still go out.

    10. runs every AG-UI target with ``cap_streams`` streams; 11. runs the
    adapter alone with ``big_streams`` (10,000 in a full run) to show that
    one process holds them. Each sample has a fresh runtime and target.
    Streams are opened ``open_in_flight`` at a time: a stream leaves that
    window once its first text delta arrived (it then really waits in
    the runtime's silence).
    """
    sizes = bench.sizes
    for key in (RUNTIME,):
        for column in CAPACITY_KEYS + BIG_KEYS:
            bench.results.na(key, column, "the runtime is not an AG-UI server")
    for key in (IAC, RELAY):
        for column in BIG_KEYS:
            bench.results.na(key, column, "adapter only (the target is that one adapter process holds them)")
    keys = [t.key for t in bench.targets if t.kind == "agui" and t.key != ADAPTER_PROCESS]
    unable: set[str] = set()
    for rep in range(sizes.cap_reps):
        for key in bench.rotation(keys, rep):
            if key in unable:
                continue
            fact = await _capacity_run(bench, key, f"cap-{rep}", sizes.cap_streams, sizes.cap_hold, "cap")
            if fact["streaming"] < fact["streams"]:
                # A target that cannot hold the load will not next time either.
                unable.add(key)
    if ADAPTER in keys:
        count = sizes.big_streams
        # Each stream is two sockets in the adapter (client and runtime).
        fits = (fd_limit() - 256) // 2
        if fits < count:
            bench.results.note(ADAPTER, "big_reduced", {"wanted": count, "measured": fits,
                                                       "fd_limit": fd_limit()})
            count = fits
        await _capacity_run(bench, ADAPTER, "big", count, sizes.big_hold, "big")


async def _capacity_run(bench: Bench, key: str, tag: str, count: int, hold: float, prefix: str) -> dict[str, Any]:
    heartbeat = bench.sizes.cap_heartbeat
    runtime, target = await _fresh_pair(bench, key, tag, heartbeat=heartbeat)
    try:
        return await _capacity_sample(bench, target, count, hold, prefix)
    finally:
        target.server.stop()
        runtime.stop()


async def _capacity_sample(bench: Bench, target: Target, count: int, hold: float, prefix: str) -> dict[str, Any]:
    sizes = bench.sizes
    await wait_quiet([target.server], timeout=5.0)
    base = statistics.median([target.server.rss() for _ in range(3)])
    # The runtime stays silent well past the ramp and the hold.
    text = f"silent {sizes.cap_ramp_limit + hold + 60:g}"
    holders = [StreamResult() for _ in range(count)]
    window = asyncio.Semaphore(sizes.open_in_flight)
    began = time.perf_counter()

    async def one(holder: StreamResult) -> None:
        texted = asyncio.Event()
        await window.acquire()
        run = asyncio.create_task(_capacity_stream(bench, target, text, holder, texted))
        waiter = asyncio.create_task(texted.wait())
        try:
            await asyncio.wait([run, waiter], return_when=asyncio.FIRST_COMPLETED)
        finally:
            window.release()
            waiter.cancel()
        await run

    tasks = [asyncio.create_task(one(holder)) for holder in holders]
    best, best_at = 0, began
    while time.perf_counter() - began < sizes.cap_ramp_limit:
        inside = sum(1 for h in holders if h.first_text is not None)
        if inside == count or all(task.done() for task in tasks):
            break
        now = time.perf_counter()
        if inside > best:
            best, best_at = inside, now
        elif now - best_at > 5.0:
            break
        await asyncio.sleep(0.05)
    texts = [h.first_text for h in holders if h.first_text is not None]
    all_in = len(texts) == count
    opened_s = (max(texts) - began) if texts else None
    # Let the last admissions settle, then watch the waiting streams.
    await asyncio.sleep(1.0)
    comments0 = [h.comments for h in holders]
    cpu0, at0 = target.server.cpu(), time.perf_counter()
    await asyncio.sleep(hold)
    cpu1, at1 = target.server.cpu(), time.perf_counter()
    held = statistics.median([target.server.rss() for _ in range(3)])
    streaming = sum(1 for h, task in zip(holders, tasks, strict=True)
                    if h.first_text is not None and not task.done())
    beats = [h.comments - c0 for h, c0 in zip(holders, comments0, strict=True) if h.first_text is not None]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    errors = [h.error for h in holders if h.error][:3]
    fact = {"streams": count, "streaming": streaming, "opened_s": None if opened_s is None else round(opened_s, 2),
            "hold_s": hold, "heartbeat_s": bench.sizes.cap_heartbeat if target.key == ADAPTER else None,
            "heartbeats_min": min(beats) if beats else 0, "heartbeats_total": sum(beats), "errors": errors}
    bench.results.note(target.key, prefix, fact)
    bench.results.add(target.key, f"{prefix}_streaming_frac", streaming / count)
    if not all_in or streaming < count:
        why = (f"held {streaming} of {count} streams (the others got no text within "
               f"{sizes.cap_ramp_limit:g} s or ended)")
        bench.results.note(target.key, "errors", f"capacity: {why}")
        for column in (f"{prefix}_open_s", f"{prefix}_rss_per_stream_kb", f"{prefix}_idle_cores"):
            bench.results.na(target.key, column, why)
        return fact
    bench.results.add(target.key, f"{prefix}_open_s", opened_s or 0.0)
    bench.results.add(target.key, f"{prefix}_rss_per_stream_kb", (held - base) / count / 1024)
    bench.results.add(target.key, f"{prefix}_idle_cores", (cpu1 - cpu0) / (at1 - at0))
    bench.results.add(target.key, f"{prefix}_heartbeats_min", float(min(beats)))
    return fact


async def _capacity_stream(
    bench: Bench, target: Target, text: str, holder: StreamResult, texted: asyncio.Event
) -> None:
    await stream(target.server.url, run_body(text, cwd=bench.cwd), result=holder, texted=texted)
