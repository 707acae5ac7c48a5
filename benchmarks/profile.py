"""Profile the adapter's hot path during firehose runs.

``python -m benchmarks.profile [--tool py-spy|pyinstrument] [--runs 5] [--events 20000]``

Starts the demo runtime and the adapter, samples the adapter process while
it relays ``--runs`` firehose runs of ``--events`` deltas, then prints the
top functions by own time and by total time. ``py-spy`` (the default)
attaches to the running process from outside and costs the adapter nothing;
``pyinstrument`` runs the adapter under its profiler instead. With
``--short`` the runs are short ones (``firehose 20``), to see where time to
the first event goes. Neither tool is a dependency of the project:
``pip install py-spy`` or ``pip install pyinstrument`` first.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .client import agui_outcome
from .harness import PROFILES, Target
from .procs import free_port, raise_fd_limit
from .report import ADAPTER
from .suite import Bench

#: Frames under the checkout are shown relative to it, wherever it was cloned.
_CHECKOUT = f"{Path(__file__).resolve().parents[1]}/"


def top_of_raw(path: Path, limit: int = 25) -> str:
    """Own time by line and by function, total time by function, from py-spy's ``raw`` output."""
    own_line: collections.Counter[str] = collections.Counter()
    own_func: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_short(frame) for frame in stack.split(";") if frame]
        if not frames:
            continue
        samples += count
        own_line[frames[-1]] += count
        own_func[_function(frames[-1])] += count
        for frame in {_function(frame) for frame in frames}:
            total[frame] += count
    lines = [f"{samples} samples of the adapter process (all threads)"]
    tables = (("own time, by function", own_func), ("own time, by line", own_line),
              ("total time (with callees), by function", total))
    for title, counter in tables:
        lines.append(f"\ntop {limit} by {title}:")
        for frame, count in counter.most_common(limit):
            lines.append(f"  {100 * count / max(samples, 1):5.1f}%  {frame}")
    return "\n".join(lines)


def _short(frame: str) -> str:
    # "name (path/to/site-packages/pkg/mod.py:123)" -> "name (pkg/mod.py:123)"
    name, _, where = frame.partition(" (")
    where = where.rstrip(")")
    for marker in ("site-packages/", _CHECKOUT):
        if marker in where:
            where = where.split(marker, 1)[1]
    if "/lib/python3" in where:
        where = where.split("/lib/python3", 1)[1].split("/", 1)[-1]
    return f"{name} ({where})" if where else name


def _function(frame: str) -> str:
    # Drop the line number: "name (mod.py:123)" -> "name (mod.py)".
    head, sep, tail = frame.rpartition(":")
    return f"{head})" if sep and tail.rstrip(")").isdigit() else frame


async def profile(args: argparse.Namespace) -> int:
    """Run the chosen profiler around the adapter."""
    raise_fd_limit()
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="aguiadapter-profile-"))
    sizes = PROFILES["smoke"]
    bench = Bench(sizes, work, None, keys=(ADAPTER,))
    output = Path(args.out or work / ("profile.txt" if args.tool == "py-spy" else "pyinstrument.txt"))
    text = "firehose 20" if args.short else f"firehose {args.events}"
    spy: subprocess.Popen[bytes] | None = None
    try:
        if args.tool == "pyinstrument":
            launcher = [sys.executable, "-m", "pyinstrument", "-r", "text", "--show-all", "-o", str(output),
                        "-m", "aguiadapter"]
            await _start_with(bench, launcher)
        else:
            await _start_with(bench, None)
            py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
            spy = subprocess.Popen([py_spy, "record", "--pid", str(bench.targets[0].server.pid), "--rate",
                                    str(args.rate), "--format", "raw", "--output", str(output), "--nonblocking",
                                    *(["--gil"] if args.gil else [])],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            await asyncio.sleep(1.0)
        target: Target = bench.targets[0]
        began = time.perf_counter()
        events = 0
        for _ in range(args.runs):
            result = await bench.one_run(target, text)
            if agui_outcome(result) != "success":
                print(f"run failed: {agui_outcome(result)}", file=sys.stderr)
                return 1
            events += result.events
        seconds = time.perf_counter() - began
        print(f"{args.runs} runs, {events:,} events in {seconds:.2f} s ({events / seconds:,.0f} events/s "
              f"while profiled)")
    finally:
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            try:
                spy.wait(30)
            except subprocess.TimeoutExpired:
                spy.kill()
        await bench.stop()
    if args.tool == "py-spy":
        if not output.exists():
            print("py-spy wrote nothing (is it installed, may it ptrace?)", file=sys.stderr)
            return 1
        print(top_of_raw(output, args.top))
    else:
        print("\n".join(output.read_text().splitlines()[: args.top * 4]))
    print(f"\nfull profile: {output}")
    return 0


async def _start_with(bench: Bench, launcher: list[str] | None) -> None:
    """Start runtime and adapter (the adapter possibly under a profiler)."""
    from .procs import Server

    (bench.ws_root / "bench").mkdir(parents=True, exist_ok=True)
    port = free_port()
    bench.runtime = Server("runtime", [sys.executable, "-m", "aguiadapter.demo", "--port", str(port)],
                           port=port, log_path=bench.work / "logs" / "runtime.log")
    bench.runtime.start()
    await bench.runtime.wait_ready()
    server = bench._adapter_server(bench.work / "state-adapter", free_port(), launcher=launcher)
    bench.targets.append(Target(ADAPTER, server, "agui"))
    server.start()
    await server.wait_ready(timeout=60)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tool", choices=("py-spy", "pyinstrument"), default="py-spy")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--short", action="store_true", help="many short runs (time to first event)")
    parser.add_argument("--rate", type=int, default=1000, help="py-spy samples per second")
    parser.add_argument("--gil", action="store_true", help="py-spy: only the thread holding the GIL (CPU in Python)")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--out", default=None)
    parser.add_argument("--work-dir", default=None)
    args = parser.parse_args(argv)
    if args.short and args.runs == 5:
        args.runs = 300
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    return asyncio.run(profile(args))


if __name__ == "__main__":
    sys.exit(main())
