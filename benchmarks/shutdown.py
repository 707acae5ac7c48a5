"""13. How fast the adapter exits on a signal, with and without a stream open.

Each case starts a fresh adapter process (``python -m aguiadapter``, as a
container runs it) in front of the shared runtime, optionally opens one run
(``slow 30``) and waits for its first text delta, then sends the signal and
times, from the signal to the process's exit (polled every 5 ms):

- SIGTERM with nothing streaming, on the file store;
- SIGTERM with one stream, file store (the stream ends as a stop,
  ``RUN_FINISHED`` with the cancelled outcome, and its runtime task is cancelled);
- SIGINT (Ctrl-C) with one stream, file store;
- SIGTERM with nothing streaming, Redis store with ``--disconnect-grace-seconds 30``;
- SIGTERM with one stream, Redis store and a 30 s grace, a second replica
  beside it: the stopping replica closes the stream, the client re-attaches
  on the other one with its last event id, the stopping replica hands the run
  over and exits (a rolling restart). Also timed: SIGTERM to the first byte
  of the re-attached stream, and whether the rest of the answer arrived.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import time
from typing import TYPE_CHECKING, Any

import aiohttp

from .batches import private_redis
from .client import run_body
from .procs import RedisServer, Server, free_port
from .report import Results, _table

if TYPE_CHECKING:
    from .harness import Bench

IDLE, STREAM, CTRL_C, REDIS_IDLE, HANDOFF = "sigterm_idle", "sigterm_stream", "sigint_stream", "redis_idle", "handoff"
CASES = (IDLE, STREAM, CTRL_C, REDIS_IDLE, HANDOFF)
CASE_LABELS = {
    IDLE: "SIGTERM, nothing streaming (file store)",
    STREAM: "SIGTERM, one stream (file store)",
    CTRL_C: "SIGINT (Ctrl-C), one stream (file store)",
    REDIS_IDLE: "SIGTERM, nothing streaming (redis, grace 30 s)",
    HANDOFF: "SIGTERM, one stream handed to a 2nd replica (redis, grace 30 s)",
}
GRACE = ("--disconnect-grace-seconds", "30")


async def measure_shutdown(bench: Bench) -> Results:
    """Run 13. and return its results (one target per case, column ``exit_s``)."""
    results = Results(CASES)
    redis, problem = await private_redis(bench, "redis-shutdown")
    if problem is not None:
        for case in (REDIS_IDLE, HANDOFF):
            results.na(case, "exit_s", problem)
    try:
        async with aiohttp.ClientSession() as session:
            for rep in range(max(bench.sizes.reps, 3)):
                cases = [IDLE, STREAM, CTRL_C] + ([REDIS_IDLE, HANDOFF] if problem is None else [])
                for case in bench.rotation(cases, rep):
                    await _one(bench, session, results, case, redis, f"{case}-{rep}")
    finally:
        if redis is not None:
            redis.stop()
    return results


async def _one(bench: Bench, session: aiohttp.ClientSession, results: Results, case: str,
               redis: RedisServer | None, tag: str) -> None:
    on_redis = case in (REDIS_IDLE, HANDOFF)
    store = f"{redis.redis_url}?prefix=bench-{tag}:" if on_redis and redis is not None else None
    servers = [_adapter(bench, f"{tag}-a", store)]
    if case == HANDOFF:
        servers.append(_adapter(bench, f"{tag}-b", store))
    try:
        for server in servers:
            server.start()
        for server in servers:
            await server.wait_ready(timeout=60)
        if case in (IDLE, REDIS_IDLE):
            results.add(case, "exit_s", await _signal_and_time(servers[0], signal.SIGTERM))
            return
        body = run_body("slow 30", cwd=bench.cwd)
        async with session.post(servers[0].url, json=body, headers={"Accept": "text/event-stream"}) as resp:
            raw = b""
            while b"TEXT_MESSAGE_CONTENT" not in raw:
                raw += await asyncio.wait_for(resp.content.readany(), 30)
            sig = signal.SIGINT if case == CTRL_C else signal.SIGTERM
            sent = time.perf_counter()
            servers[0].proc.send_signal(sig)  # type: ignore[union-attr]
            raw += await asyncio.wait_for(resp.read(), 60)
        if case != HANDOFF:
            results.add(case, "exit_s", await _wait_exit(servers[0], sent))
            if b'"outcome":{"type":"cancelled"}' not in raw:  # AG-UI 1.0's stop (the default profile)
                results.note(case, "errors", f"the stream did not end as a stop: {raw[-200:]!r}")
            return
        last_id = _last_id(raw)
        url = f"{servers[1].url}threads/{body['threadId']}/runs/{body['runId']}/events"
        async with session.get(url, headers={"Accept": "text/event-stream", "Last-Event-ID": last_id}) as again:
            await again.content.readany()
            results.add(case, "reattach_first_byte_s", time.perf_counter() - sent)
            exit_s = await _wait_exit(servers[0], sent)
            rest = await asyncio.wait_for(again.read(), 60)
        results.add(case, "exit_s", exit_s)
        if b'"type":"RUN_FINISHED"' not in rest:
            results.note(case, "errors", f"the re-attached stream did not finish: {rest[-200:]!r}")
    finally:
        for server in servers:
            server.stop()


def _adapter(bench: Bench, tag: str, store: str | None) -> Server:
    state = bench.work / f"state-shutdown-{tag}"
    shutil.rmtree(state, ignore_errors=True)
    return bench._adapter_server(state, free_port(), name=f"shutdown-{tag}", store=store,
                                 extra_args=GRACE if store is not None else ())


def _last_id(raw: bytes) -> str:
    ids = [line[4:] for line in raw.decode().split("\n") if line.startswith("id: ")]
    return ids[-1] if ids else ""


async def _signal_and_time(server: Server, sig: int) -> float:
    sent = time.perf_counter()
    server.proc.send_signal(sig)  # type: ignore[union-attr]
    return await _wait_exit(server, sent)


async def _wait_exit(server: Server, sent: float, timeout: float = 60.0) -> float:
    """Seconds from ``sent`` to the process's exit (polled every 5 ms)."""
    assert server.proc is not None
    while server.proc.poll() is None:
        if time.perf_counter() - sent > timeout:
            raise RuntimeError(f"{server.name} still running {timeout:.0f} s after the signal")
        await asyncio.sleep(0.005)
    return time.perf_counter() - sent


def render_shutdown(results: Results) -> str:
    """The table of 13."""
    header = ["13. signal -> exit (median [min-max])", "exit (s)", "re-attached, first byte (s)"]
    rows = []
    for case in CASES:
        rows.append([CASE_LABELS[case], _seconds(results.cell(case, "exit_s")),
                     _seconds(results.cell(case, "reattach_first_byte_s")) if case == HANDOFF else ""])
    return _table(header, rows, max_width=64)


def _seconds(cell: dict[str, Any]) -> str:
    if "na" in cell:
        return str(cell["na"])
    return f"{cell['median']:.3f} [{cell['min']:.3f}-{cell['max']:.3f}]"


def shutdown_json(results: Results) -> dict[str, Any]:
    """13. in the JSON file."""
    return {
        "cases": CASE_LABELS,
        "results": {case: {key: results.cell(case, key) for key in ("exit_s", "reattach_first_byte_s")}
                    for case in CASES},
        "medians_s": {case: results.median(case, "exit_s") for case in CASES},
        "details": results.details,
    }
