"""22. The floor under issue 35's per-run targets: what a relay that keeps a record reaches.

``python -m benchmarks.floor [--quick | --smoke] [--iac-venv DIR] [--skip-iac]``

Measure 3. of the suite (short runs, ``firehose 5``, a new thread each,
sequential batches, the targets in rotating order each round: medians of
the client's times, the server's CPU per run from ``/proc``), with two more
targets beside the adapter in both durability modes, ``iac-code agui`` and
the minimal relay:

- **relay + record, process**: the minimal relay that also replaces a
  thread's small JSON record before it sends the turn to the runtime and
  again before ``RUN_FINISHED`` (``python -m benchmarks.relay
  --record-writes process``): the two writes a turn's recovery needs, into
  the page cache, made on the event loop;
- **relay + record, fsync**: the same, each write synced with its folder
  (``--record-writes fsync``).

They do nothing else a server of the reference must do: no validation, no
idempotency, no thread list, no interrupts, no heartbeats, no event log, no
log line. What they reach is therefore a floor for the adapter: a target
that even they miss cannot be met by any adapter built on the same parts
(Python, aiohttp, the same runtime and client). The table prints every
target's ratio to ``iac-code agui`` beside the issue's limits.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from . import iacenv
from .harness import PROFILES, Target
from .procs import Server, free_port, raise_fd_limit
from .report import (
    ADAPTER,
    ADAPTER_PROCESS,
    FLOOR_FSYNC,
    FLOOR_PROCESS,
    IAC,
    RELAY,
    TARGET_LABELS,
    Results,
    write_json,
)
from .suite import Bench, _load_average

#: The issue's per-run limits (target / iac-code agui), and which target each is for.
LIMITS = (
    ("first text of a short run", "ttft_ms", ((ADAPTER, 0.5), (ADAPTER_PROCESS, 0.35))),
    ("a short run end to end", "short_run_ms", ((ADAPTER, 0.5),)),
    ("server CPU per short run", "short_cpu_ms", ((ADAPTER, 0.35), (ADAPTER_PROCESS, 0.3))),
)
#: Which floor stands beside which adapter.
FLOOR_OF = {ADAPTER: FLOOR_FSYNC, ADAPTER_PROCESS: FLOOR_PROCESS}
ORDER = (ADAPTER, FLOOR_FSYNC, ADAPTER_PROCESS, FLOOR_PROCESS, RELAY, IAC)
COLUMNS = (("first event (ms)", "ttfe_ms"), ("first text (ms)", "ttft_ms"), ("whole run (ms)", "short_run_ms"),
           ("server CPU per run (ms)", "short_cpu_ms"))


def _floor_server(bench: Bench, key: str, mode: str) -> Server:
    return bench._relay_server(free_port(), name=key, extra_args=(
        "--record-writes", mode, "--state-dir", str(bench.work / f"state-{key}")))


async def measure(bench: Bench) -> None:
    """Start the two floors beside the bench's targets, then measure 3. on them all."""
    floors = [Target(FLOOR_PROCESS, _floor_server(bench, FLOOR_PROCESS, "process"), "agui"),
              Target(FLOOR_FSYNC, _floor_server(bench, FLOOR_FSYNC, "fsync"), "agui")]
    for target in floors:
        target.server.start()
        bench.targets.append(target)
    for target in floors:
        await target.server.wait_ready(timeout=60)
        result = await bench.one_run(target, f"firehose {bench.sizes.warmup}")
        if bench.outcome(target, result) != "success":
            raise RuntimeError(f"warm-up of {target.label} failed: {bench.outcome(target, result)}\n"
                               f"{target.server.log_tail()}")
    await bench.measure_ttf()


def _median(results: Results, key: str, column: str) -> float | None:
    cell = results.cell(key, column)
    return cell.get("median")


def render(results: Results) -> str:
    """The medians [min-max], each target's ratio to iac-code agui, and the limits."""
    keys = [key for key in ORDER if key in results.targets]
    lines = [f"{'short run (firehose 5)':<26}" + "".join(f" | {TARGET_LABELS[k]:<31}" for k in keys)]
    lines.append("-" * len(lines[0]))
    for title, column in COLUMNS:
        cells = []
        for key in keys:
            cell = results.cell(key, column)
            text = cell["na"][:31] if "na" in cell else f"{cell['median']:.2f} [{cell['min']:.2f}-{cell['max']:.2f}]"
            iac = _median(results, IAC, column)
            if "median" in cell and iac and key != IAC:
                text += f" ({cell['median'] / iac:.3f}x)"
            cells.append(text)
        lines.append(f"{title:<26}" + "".join(f" | {text:<31}" for text in cells))
    lines.append("")
    lines.append("issue 35's limits (x iac-code agui): the adapter, and the floor beside it")
    for title, column, limits in LIMITS:
        iac = _median(results, IAC, column)
        for key, limit in limits:
            floor = FLOOR_OF[key]
            parts = []
            for who in (key, floor):
                value = _median(results, who, column)
                if value is None or not iac:
                    parts.append(f"{TARGET_LABELS[who]}: n/a")
                    continue
                ratio = value / iac
                verdict = "within" if ratio <= limit else f"{ratio / limit:.2f}x the limit"
                parts.append(f"{TARGET_LABELS[who]} {ratio:.3f}x ({verdict})")
            lines.append(f"- {TARGET_LABELS[key]}, {title} <= {limit:g}x: " + "; ".join(parts))
    return "\n".join(lines)


async def run(argv: Sequence[str] | None = None) -> int:
    """Run the measure; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.floor", description=__doc__.splitlines()[0])
    profile = parser.add_mutually_exclusive_group()
    profile.add_argument("--quick", action="store_true", help="3 rounds of 30 runs per target (default: 7 of 30)")
    profile.add_argument("--smoke", action="store_true", help="tiny sizes: checks that the measure runs")
    parser.add_argument("--iac-venv", help="iac-code agui's virtualenv (created on first use)")
    parser.add_argument("--skip-iac", action="store_true", help="no iac-code agui: no ratios, no limits judged")
    parser.add_argument("--out", type=Path, help="JSON file for the samples")
    args = parser.parse_args(argv)
    sizes = PROFILES["smoke" if args.smoke else "quick" if args.quick else "full"]
    load_start = _load_average()
    iac_venv = None if args.skip_iac else iacenv.ensure(args.iac_venv, log=print)
    raise_fd_limit()
    work = Path(tempfile.mkdtemp(prefix="aguiadapter-floor-"))
    keys = (ADAPTER, ADAPTER_PROCESS, RELAY) + ((IAC,) if iac_venv is not None else ())
    bench = Bench(sizes, work, iac_venv, keys=keys)
    bench.results = Results([*keys, FLOOR_PROCESS, FLOOR_FSYNC])
    began = time.perf_counter()
    try:
        await bench.start()
        await measure(bench)
    finally:
        await bench.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(render(bench.results))
    print(f"\nload average (1, 5, 15 min): {load_start} at the start, {_load_average()} at the end, "
          f"on {os.cpu_count()} cores; {time.perf_counter() - began:.0f} s")
    if args.out is not None:
        write_json(args.out, {key: {column: bench.results.cell(key, column) for _, column in COLUMNS}
                              for key in bench.results.targets})
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m benchmarks.floor``."""
    return asyncio.run(run(argv))


if __name__ == "__main__":
    sys.exit(main())
