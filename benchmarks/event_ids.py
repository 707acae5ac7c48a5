"""What event ids and the run log cost: the adapter with them on and off.

``python -m benchmarks.event_ids [--deltas N] [--runs R]`` starts the demo
runtime and two adapters on loopback, side by side: the default (every event
framed with an ``id:`` line and kept in the run's log for the replay
retention) and ``--replay-retention-seconds 0`` (no log, no ids). Each gets
R ``firehose N`` runs in turn; the table shows the relay rate (events per
second, median) and the adapter's resident memory after the runs, when the
logs of all of them are still kept (file store: in its memory).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp

_BANNER = re.compile(rb"listening on http://127\.0\.0\.1:(\d+)/")


async def _start(args: list[str], log: Path, pattern: re.Pattern[bytes]) -> tuple[subprocess.Popen[bytes], int]:
    with open(log, "wb") as out:
        process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    for _ in range(300):
        await asyncio.sleep(0.05)
        match = pattern.search(log.read_bytes())
        if match:
            return process, int(match.group(1))
        if process.poll() is not None:
            raise RuntimeError(log.read_text())
    raise RuntimeError(f"{args[2]} did not start")


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def _run(session: aiohttp.ClientSession, url: str, cwd: str, deltas: int) -> tuple[int, float, int]:
    body = {"threadId": f"t-{uuid.uuid4()}", "runId": "r1", "messages": [{"id": "m1", "role": "user",
            "content": f"firehose {deltas}"}], "forwardedProps": {"iacCode": {"schemaVersion": 1,
            "rosInvocationId": "inv", "cwd": cwd}}}
    began = time.perf_counter()
    async with session.post(url, data=json.dumps(body), headers={"Content-Type": "application/json"}) as resp:
        events = ids = 0
        async for chunk in resp.content.iter_any():
            events += chunk.count(b"data: ")
            ids += chunk.count(b"id: ")
    return events, time.perf_counter() - began, ids


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--deltas", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=5)
    options = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-ids-"))
    cwd = scratch / "ws"
    cwd.mkdir()
    python = sys.executable
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    runtime, rport = await _start([python, "-m", "aguiadapter.demo", "--port", str(free)], scratch / "runtime.log",
                                  re.compile(rb"127\.0\.0\.1:(\d+)"))
    targets = {"ids on (default)": [], "ids off (--replay-retention-seconds 0)": ["--replay-retention-seconds", "0"]}
    started = {}
    try:
        for name, extra in targets.items():
            folder = scratch / str(len(started))
            started[name] = await _start(
                [python, "-m", "aguiadapter", "--port", "0", "--state-dir", str(folder), "--a2a-url",
                 f"http://127.0.0.1:{rport}/", "--allowed-cwd", str(scratch), "--log-level", "WARNING", *extra],
                scratch / f"adapter-{len(started)}.log", _BANNER)
        rates: dict[str, list[float]] = {name: [] for name in targets}
        before = {name: _rss_kib(process.pid) for name, (process, _) in started.items()}
        async with aiohttp.ClientSession() as session:
            for _ in range(options.runs):
                for name, (_, port) in started.items():  # in turn: drift spreads over both
                    events, seconds, ids = await _run(session, f"http://127.0.0.1:{port}/", str(cwd), options.deltas)
                    assert (ids == events) == name.startswith("ids on"), (name, ids, events)
                    rates[name].append(events / seconds)
        print(f"firehose {options.deltas}, {options.runs} runs each")
        print(f"{'target':42} {'events/s (median)':>18} {'RSS before':>11} {'RSS after':>10}")
        for name, (process, _) in started.items():
            print(f"{name:42} {statistics.median(rates[name]):18,.0f} {before[name]:9d} K {_rss_kib(process.pid):8d} K")
        on, off = (statistics.median(rates[name]) for name in targets)
        print(f"ids on / ids off: {on / off:.3f} of the rate")
    finally:
        for process, _ in started.values():
            process.terminate()
            process.wait(10)
        runtime.terminate()
        runtime.wait(10)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    asyncio.run(main())
