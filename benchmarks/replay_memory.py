"""14. What slow re-attaches to a large ended run cost in memory, over rounds.

A fresh adapter process (file store, default settings but a run log bound
that keeps the whole run) runs one large run (``firehose 40000``, about 4 MB
of SSE; 300 in the smoke run) to its end. Then, round after round, a batch of clients
re-attach to it from the start and read almost nothing: each has a 4 KiB
receive buffer and stops reading after the status line, as a slow phone or
a stuck tab would. While they hang, the adapter's RSS is sampled; then they
close and, once the adapter is quiet again, its RSS is read once more.

Reported per round: RSS while the readers hang, RSS after they left, and
what each hanging reader pins (RSS while held minus RSS before the round,
divided by the readers). Then 200 connections send half a request (the
request line and part of the headers) and nothing more: how many are still
open 2 s after the header timeout (the adapter runs with 2 s here), and how
many more files the adapter holds then than before them. A replay that copied the run's log per reader
pinned its size per reader, and glibc kept much of it after they closed;
the replay in bounded pieces pins about one piece per reader.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import uuid
from typing import TYPE_CHECKING, Any

import aiohttp

from .client import run_body
from .procs import Server, free_port, wait_quiet
from .report import Results, _table

if TYPE_CHECKING:
    from .harness import Bench

MB = 1024 * 1024
TARGET = "replay"
KEYS = ("rss_base_mb", "log_mb", "rss_held_mb", "rss_after_mb", "pinned_per_reader_kb", "growth_mb",
        "half_sent_open", "server_fds_extra")
LABELS = {
    "rss_base_mb": "RSS after the run, before any re-attach (MB)",
    "log_mb": "the run's SSE bytes (MB)",
    "rss_held_mb": "RSS while the readers hang (MB)",
    "rss_after_mb": "RSS after they left (MB)",
    "pinned_per_reader_kb": "pinned per hanging reader (KB)",
    "growth_mb": "RSS after the last round - before the first (MB)",
    "half_sent_open": "half-sent requests still open after the header timeout + 2 s",
    "server_fds_extra": "adapter's open files then, over its count before them",
}
#: Connections that send half a request line and headers, then nothing; and the
#: header timeout the adapter runs with here (its default is 10 s).
HALF_SENT = 200
HEADER_TIMEOUT = 2.0
HOLD_SECONDS = 1.5


def rounds_of(bench: Bench) -> tuple[int, int]:
    """(rounds, readers per round): 4 x 10 as in the report that found it; 2 x 3 in the smoke run."""
    return (2, 3) if bench.sizes.name == "smoke" else (4, 10)


async def measure_replay_memory(bench: Bench) -> Results:
    """Run 14. and return its results (target ``replay``)."""
    results = Results([TARGET])
    rounds, readers = rounds_of(bench)
    events = 300 if bench.sizes.name == "smoke" else 40_000
    state = bench.work / "state-replay-memory"
    shutil.rmtree(state, ignore_errors=True)
    # The whole run stays in its log (the default bound, 10,000 events, would trim it).
    server = bench._adapter_server(state, free_port(), name="replay-memory",
                                   extra_args=("--run-log-max-events", str(events + 10),
                                               "--header-timeout-seconds", f"{HEADER_TIMEOUT:g}"))
    bench.extra.append(server)
    server.start()
    try:
        await server.wait_ready(timeout=60)
        body = run_body(f"firehose {events}", cwd=bench.cwd)
        async with aiohttp.ClientSession() as session:
            async with session.post(server.url, json=body, headers={"Accept": "text/event-stream"}) as resp:
                raw = await asyncio.wait_for(resp.read(), bench.sizes.run_timeout)
        if b"RUN_FINISHED" not in raw[-2000:]:
            results.note(TARGET, "errors", f"the run did not finish: {raw[-200:]!r}")
            for key in KEYS:
                results.na(TARGET, key, "n/a: the run did not finish")
            return results
        results.add(TARGET, "log_mb", len(raw) / MB)
        path = f"/threads/{body['threadId']}/runs/{body['runId']}/events"
        await wait_quiet([server], timeout=5.0)
        first = server.rss() / MB
        results.add(TARGET, "rss_base_mb", first)
        before = first
        for _ in range(rounds):
            held = await _one_round(server, path, readers)
            await wait_quiet([server], timeout=5.0)
            await asyncio.sleep(0.3)
            after = server.rss() / MB
            results.add(TARGET, "rss_held_mb", held)
            results.add(TARGET, "rss_after_mb", after)
            results.add(TARGET, "pinned_per_reader_kb", max(0.0, held - before) * 1024 / readers)
            before = after
        results.add(TARGET, "growth_mb", before - first)
        await _half_sent(server, results)
        results.note(TARGET, "rounds", f"{rounds} x {readers} readers, held {HOLD_SECONDS:g} s each")
    finally:
        server.stop()
        bench.extra.remove(server)
    return results


async def _half_sent(server: Server, results: Results) -> None:
    """Open ``HALF_SENT`` connections that never finish their headers; count what is still open later."""
    fds_before = _open_files(server.pid)
    connections = []
    try:
        for _ in range(HALF_SENT):
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: applica")
            connections.append((reader, writer))
        await asyncio.sleep(HEADER_TIMEOUT + 2.0)
        still_open = sum(1 for reader, _ in connections if not reader.at_eof())
        results.add(TARGET, "half_sent_open", still_open)
        results.add(TARGET, "server_fds_extra", max(0, _open_files(server.pid) - fds_before))
    finally:
        for _, writer in connections:
            writer.transport.abort()


def _open_files(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


async def _one_round(server: Server, path: str, readers: int) -> float:
    """Open ``readers`` hanging re-attaches, sample RSS while they hang (the peak), close them."""
    writers = []
    try:
        for _ in range(readers):
            writers.append(await _hanging_reader(server.port, path))
        peak = 0.0
        for _ in range(int(HOLD_SECONDS / 0.1)):
            await asyncio.sleep(0.1)
            peak = max(peak, server.rss() / MB)
        return peak
    finally:
        for writer in writers:
            writer.transport.abort()


async def _hanging_reader(port: int, path: str) -> asyncio.StreamWriter:
    """A re-attach from the start whose client reads the status line and then nothing."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=sock, limit=4096)
    request = (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: text/event-stream\r\n"
               f"X-Reader: {uuid.uuid4().hex}\r\n\r\n")
    writer.write(request.encode())
    await writer.drain()
    status = await asyncio.wait_for(reader.readline(), 30)
    if not status.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"re-attach refused: {status!r}")
    writer.transport.pause_reading()  # and never read again
    return writer


def render_replay_memory(results: Results) -> str:
    """The table of 14."""
    header = ["14. slow re-attaches to an ended run", "value (median [min-max] over rounds)"]
    rows = [[LABELS[key], _cell(results.cell(TARGET, key))] for key in KEYS]
    rounds = results.details.get(TARGET, {}).get("rounds")
    if rounds:
        rows.append(["rounds", str(rounds[0] if isinstance(rounds, list) else rounds)])
    return _table(header, rows, max_width=64)


def _cell(cell: dict[str, Any]) -> str:
    if "na" in cell:
        return str(cell["na"])
    return f"{cell['median']:.1f} [{cell['min']:.1f}-{cell['max']:.1f}]"


def replay_memory_json(results: Results) -> dict[str, Any]:
    """14. in the JSON file."""
    return {
        "labels": LABELS,
        "results": {key: results.cell(TARGET, key) for key in KEYS},
        "details": results.details,
    }
