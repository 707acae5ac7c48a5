"""Synced writes per short run, and what they cost, side by side in one run.

``python -m benchmarks.synced_writes [--against main] [--rounds 8] [--runs 30] [--durability process]``

Two adapter processes against one demo runtime, both ``--durability fsync``
(or ``--durability``'s mode) on the file store: this tree, and the package as it was at ``--against``
(``git archive``, as :mod:`benchmarks.pool` runs an older revision). Short
runs (``firehose 5``, a new thread each, one after the other) in
alternating rounds, the order turning each round. Printed per target:

- fsync and fdatasync calls per short run, counted by ``strace -f -c`` on
  the adapter process over a block of runs apart from the timed rounds
  (strace slows every system call; its figures are counts only);
- the first text (to the first text delta) and the whole run, medians of
  the per-round medians, and the adapter's CPU per run (``/proc`` ticks
  summed over every round's runs);
- the ratios this tree / the other, and the load average before and after;
- with ``--burst N``, each round also starts ``N`` short runs at once per
  target: the median and 99th percentile of their completion times (what
  writes made on the event loop, ``--durability process``, cost the other
  runs that wait on the loop meanwhile), medians over the rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import signal
import statistics
import subprocess
import tempfile
from pathlib import Path

from .client import agui_outcome, run_body, stream
from .pool import _adapter, _demo, _start, tree_of
from .procs import Server, wait_quiet

_CALLS = re.compile(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(fsync|fdatasync)\s*$", re.M)


async def _runs(adapter: Server, cwd: Path, count: int) -> tuple[float, list[float], list[float]]:
    """The adapter's CPU seconds over ``count`` short runs, and each run's first text and wall (ms)."""
    await wait_quiet([adapter], timeout=2.0)
    cpu0 = adapter.cpu()
    firsts, walls = [], []
    for _ in range(count):
        result = await stream(adapter.url, run_body("firehose 5", cwd=str(cwd)))
        assert result.error is None and result.status == 200, result.error
        assert agui_outcome(result) == "success", (adapter.name, agui_outcome(result), adapter.log_tail())
        assert result.ttft is not None
        firsts.append(result.ttft * 1000)
        walls.append(result.seconds * 1000)
    await wait_quiet([adapter], timeout=2.0)
    return adapter.cpu() - cpu0, firsts, walls


async def _burst(adapter: Server, cwd: Path, count: int) -> tuple[float, float]:
    """``count`` short runs started at once: the median and 99th percentile of their completion (ms)."""
    await wait_quiet([adapter], timeout=2.0)
    results = await asyncio.gather(*(stream(adapter.url, run_body("firehose 5", cwd=str(cwd)))
                                     for _ in range(count)))
    for result in results:
        assert result.error is None and agui_outcome(result) == "success", (adapter.name, result.error)
    walls = sorted(result.seconds * 1000 for result in results)
    return statistics.median(walls), walls[min(len(walls) - 1, int(len(walls) * 0.99))]


async def _syncs_per_run(adapter: Server, cwd: Path, count: int, work: Path) -> dict[str, float]:
    """fsync and fdatasync calls per short run, by ``strace -f -c`` attached to the adapter."""
    out = work / f"strace-{adapter.name}.txt"
    tracer = subprocess.Popen(["strace", "-f", "-c", "-e", "trace=fsync,fdatasync", "-o", str(out),
                               "-p", str(adapter.pid)], stderr=subprocess.DEVNULL)
    try:
        await asyncio.sleep(1.0)  # attached to every thread
        await _runs(adapter, cwd, count)
    finally:
        tracer.send_signal(signal.SIGINT)
        tracer.wait(timeout=10)
    calls = {"fsync": 0.0, "fdatasync": 0.0}
    for number, name in _CALLS.findall(out.read_text()):
        calls[name] = int(number) / count
    return calls


async def main(against: str, rounds: int, runs: int, durability: str = "fsync", burst: int = 0) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-synced-"))
    try:
        demo = _demo(work, "runtime")
        await _start(demo)
        mine, other = "this tree", f"{against}"
        targets = {
            mine: _adapter(work, "this", ["--a2a-url", demo.url, "--durability", durability]),
            other: _adapter(work, "other", ["--a2a-url", demo.url, "--durability", durability],
                            tree_of(against, work / "tree-other")),
        }
        await _start(*targets.values())
        load0 = os.getloadavg()
        try:
            calls = {}
            if shutil.which("strace"):
                for name, server in targets.items():
                    calls[name] = await _syncs_per_run(server, work, 20, work)
            for server in targets.values():
                await _runs(server, work, 10)  # warm up
            cpu = dict.fromkeys(targets, 0.0)
            first: dict[str, list[float]] = {name: [] for name in targets}
            wall: dict[str, list[float]] = {name: [] for name in targets}
            bursts: dict[str, list[tuple[float, float]]] = {name: [] for name in targets}
            for round_ in range(rounds):
                order = list(targets.items())
                if round_ % 2:
                    order.reverse()
                for name, server in order:
                    used, firsts, walls = await _runs(server, work, runs)
                    cpu[name] += used
                    first[name].append(statistics.median(firsts))
                    wall[name].append(statistics.median(walls))
                    if burst:
                        bursts[name].append(await _burst(server, work, burst))
        finally:
            for server in (*targets.values(), demo):
                server.stop()
        load1 = os.getloadavg()
        total = rounds * runs
        print(f"\nShort runs (firehose 5, new threads, --durability {durability}): {rounds} rounds of {runs} runs per "
              f"target, alternating; load average {load0[0]:.2f} before, {load1[0]:.2f} after")
        print(f"{'target':14} {'fsync/run':>10} {'fdatasync/run':>14} {'first text ms':>14} {'run ms':>9} "
              f"{'CPU ms/run':>11}")
        for name in targets:
            counted = calls.get(name, {})
            fsyncs, fdatasyncs = counted.get("fsync", float("nan")), counted.get("fdatasync", float("nan"))
            print(f"{name:14} {fsyncs:10.2f} {fdatasyncs:14.2f} "
                  f"{statistics.median(first[name]):14.3f} {statistics.median(wall[name]):9.3f} "
                  f"{cpu[name] / total * 1000:11.3f}")
        ratio_first = statistics.median(a / b for a, b in zip(first[mine], first[other], strict=True))
        ratio_wall = statistics.median(a / b for a, b in zip(wall[mine], wall[other], strict=True))
        ratio_cpu = f"{cpu[mine] / cpu[other]:.3f}" if cpu[other] else "n/a"
        print(f"ratio {mine} / {other}: first text {ratio_first:.3f}, run {ratio_wall:.3f} (medians of round "
              f"ratios), CPU {ratio_cpu} (totals)")
        if burst:
            for name in targets:
                p50s, p99s = zip(*bursts[name], strict=True)
                print(f"{burst} runs at once, {name:10}: completion p50 {statistics.median(p50s):8.1f} ms, "
                      f"p99 {statistics.median(p99s):8.1f} ms (medians over the rounds)")
            for column, figure in enumerate(("p50", "p99")):
                ratio = statistics.median(a[column] / b[column]
                                          for a, b in zip(bursts[mine], bursts[other], strict=True))
                print(f"ratio {mine} / {other}, {burst} at once, {figure}: {ratio:.3f} (median of round ratios)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", default="main", help="the revision to hold this tree against (default main)")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--runs", type=int, default=30, help="short runs per round and target")
    parser.add_argument("--durability", choices=("fsync", "process"), default="fsync")
    parser.add_argument("--burst", type=int, default=0, help="short runs at once per round and target (0: none)")
    arguments = parser.parse_args()
    asyncio.run(main(arguments.against, arguments.rounds, arguments.runs, arguments.durability, arguments.burst))
