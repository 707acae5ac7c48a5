"""15. What a thread's history costs: the first page and paging back to the first turn.

A loopback route shaped like iac-code's (``GET /iac-code/execution/state``
and ``GET /iac-code/session/recovery``) serves a synthetic session of
1,000 turns (50 in the smoke run), each a question, reasoning, a reply with
a tool call, the tool's result and a closing reply: about 3 MB, as the real
runtime sends for that many turns. Its body is encoded once, so the route
costs little beyond the transfer: what is measured is the adapter's own work
(the read, the projection to AG-UI messages, the page and its JSON).

One adapter process reads the transcript on every request
(``--history-cache-seconds 0``), another keeps it 5 s (the default). Each
asks ``GET /threads/{id}/messages?limit=20`` for the newest page, then
follows ``before`` to the first turn. Reported: wall time and the adapter's
CPU per call, bytes per page, and the whole walk back.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web

from .procs import free_port
from .report import Results, _table
from .statefiles import make_state_dir

if TYPE_CHECKING:
    from .harness import Bench

TARGETS = ("cold", "warm")
TARGET_LABELS = {"cold": "read on every request (cache 0 s)", "warm": "kept 5 s (default)"}
KEYS = ("transcript_mb", "first_ms", "first_cpu_ms", "page_ms", "page_cpu_ms", "page_kb", "walk_s", "calls")
LABELS = {
    "transcript_mb": "transcript served by the runtime (MB)",
    "first_ms": "newest page: wall per call (ms)",
    "first_cpu_ms": "newest page: adapter CPU per call (ms)",
    "page_ms": "paging back: wall per call (ms)",
    "page_cpu_ms": "paging back: adapter CPU per call (ms)",
    "page_kb": "bytes per page (KB)",
    "walk_s": "newest page to the first turn: total (s)",
    "calls": "calls to reach the first turn",
}
LIMIT = 20
THREAD = "bench-stored-0000000"


def synthetic_transcript(turns: int) -> list[dict[str, Any]]:
    """A session of ``turns`` turns in iac-code's row format (about 3 KB a turn)."""
    rows: list[dict[str, Any]] = []
    for n in range(turns):
        call = f"call_{n:024d}"
        rows += [
            {"role": "user", "content": f"Question {n}: " + "please look at the stack again. " * 6, "metadata": {}},
            {"role": "assistant", "metadata": {}, "content": [
                {"type": "thinking", "thinking": "Let me check the resources first. " * 9, "provider_metadata": {}},
                {"type": "text", "text": "I will list the resources of the stack. " * 7},
                {"type": "tool_use", "id": call, "name": "bash", "input": {"command": f"aliyun ros ListStacks --n {n}"},
                 "provider_metadata": {}},
            ]},
            {"role": "user", "metadata": {}, "content": [
                {"type": "tool_result", "tool_use_id": call, "is_error": False, "metadata": {},
                 "content": json.dumps({"Stacks": [{"StackId": f"stack-{n}-{i}", "Status": "CREATE_COMPLETE"}
                                                   for i in range(16)]})},
            ]},
            {"role": "assistant", "metadata": {}, "content": [
                {"type": "text", "text": f"Turn {n}: every stack is complete. " * 12},
            ]},
        ]
    return rows


def _runtime_app(body: bytes) -> web.Application:
    """The two routes of iac-code the reader calls, and ``/health``."""

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def execution(request: web.Request) -> web.Response:
        return web.json_response({"executionId": "exec-bench", "contextId": request.query.get("contextId")})

    async def recovery(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="application/json")

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/iac-code/execution/state", execution)
    app.router.add_get("/iac-code/session/recovery", recovery)
    return app


async def measure_history(bench: Bench) -> Results:
    """Run 15. and return its results (targets ``cold`` and ``warm``)."""
    results = Results(list(TARGETS))
    turns = 50 if bench.sizes.name == "smoke" else 1000
    reps = 1 if bench.sizes.name == "smoke" else 3
    body = json.dumps({"contextId": "ctx", "executionId": "exec-bench",
                       "messages": synthetic_transcript(turns)}).encode()
    runner = web.AppRunner(_runtime_app(body), access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        for target in TARGETS:
            results.add(target, "transcript_mb", len(body) / 1024 / 1024)
            await _one_adapter(bench, results, target, f"http://127.0.0.1:{port}/", reps)
        results.note("cold", "turns", turns)
    finally:
        await runner.cleanup()
    return results


async def _one_adapter(bench: Bench, results: Results, target: str, runtime_url: str, reps: int) -> None:
    state = bench.work / f"state-history-{target}"
    shutil.rmtree(state, ignore_errors=True)
    make_state_dir(state, 1, bench.cwd)
    cache = "0" if target == "cold" else "5"
    server = bench._adapter_server(state, free_port(), name=f"history-{target}", a2a_url=runtime_url,
                                   extra_args=("--history-cache-seconds", cache))
    bench.extra.append(server)
    server.start()
    try:
        await server.wait_ready(timeout=60)
        async with aiohttp.ClientSession() as session:
            for rep in range(reps):
                if target == "warm" and rep:
                    await asyncio.sleep(5.1)  # the kept transcript expires: each walk starts cold
                await _walk(server, session, results, target)
    finally:
        server.stop()
        bench.extra.remove(server)


async def _walk(server: Any, session: aiohttp.ClientSession, results: Results, target: str) -> None:
    """The newest page, then every older one; one sample per call."""
    before: str | None = None
    calls = 0
    began = time.perf_counter()
    while True:
        query = f"?limit={LIMIT}" + (f"&before={before}" if before else "")
        cpu = server.cpu()
        started = time.perf_counter()
        async with session.get(f"{server.url}threads/{THREAD}/messages{query}") as resp:
            raw = await resp.read()
            if resp.status != 200:
                results.note(target, "errors", f"HTTP {resp.status}: {raw[:200]!r}")
                return
        wall_ms = (time.perf_counter() - started) * 1000
        cpu_ms = (server.cpu() - cpu) * 1000
        calls += 1
        results.add(target, "first_ms" if calls == 1 else "page_ms", wall_ms)
        results.add(target, "first_cpu_ms" if calls == 1 else "page_cpu_ms", cpu_ms)
        results.add(target, "page_kb", len(raw) / 1024)
        before = json.loads(raw)["before"]
        if before is None:
            break
    results.add(target, "walk_s", time.perf_counter() - began)
    results.add(target, "calls", calls)


def render_history(results: Results) -> str:
    """The table of 15."""
    turns = results.details.get("cold", {}).get("turns")
    turns = turns[0] if isinstance(turns, list) else turns
    header = [f"15. history of a {turns}-turn thread, {LIMIT} turns a page",
              *(TARGET_LABELS[target] for target in TARGETS)]
    rows = [[LABELS[key], *(_cell(results.cell(target, key)) for target in TARGETS)] for key in KEYS]
    return _table(header, rows, max_width=40)


def _cell(cell: dict[str, Any]) -> str:
    if "na" in cell:
        return str(cell["na"])
    if "median" not in cell:
        return "n/a: not measured"
    return f"{cell['median']:.2f} [{cell['min']:.2f}-{cell['max']:.2f}]"


def history_json(results: Results) -> dict[str, Any]:
    """15. in the JSON file."""
    return {
        "labels": LABELS,
        "targets": TARGET_LABELS,
        "results": {target: {key: results.cell(target, key) for key in KEYS} for target in TARGETS},
        "details": results.details,
    }
