"""Profile the adapter's hot path during firehose runs.

``python -m benchmarks.profile [--tool py-spy|pyinstrument] [--runs 5] [--events 20000]``

Starts the demo runtime and the adapter, samples the adapter process while
it relays ``--runs`` firehose runs of ``--events`` deltas, then prints the
top functions by own time and by total time. ``py-spy`` (the default)
attaches to the running process from outside and costs the adapter nothing;
``pyinstrument`` runs the adapter under its profiler instead. With
``--short`` the runs are short ones (``firehose 5``, as measure 3 of the
suite), to see where a short run's time goes; ``--durability process``
starts the adapter in that mode, ``--target relay`` profiles the minimal
relay instead. With py-spy the samples are also summed by part
(:data:`PARTS`), with the server's CPU per run read from ``/proc``. Neither
tool is a dependency of the project: ``pip install py-spy`` or
``pip install pyinstrument`` first.
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
from .procs import free_port, raise_fd_limit, wait_quiet
from .report import ADAPTER, RELAY
from .suite import Bench

#: Frames under the checkout are shown relative to it, wherever it was cloned.
_CHECKOUT = f"{Path(__file__).resolve().parents[1]}/"

#: The parts a sample is counted for, by the path of a frame's file (a prefix,
#: relative to the checkout or site-packages). A sample counts for the innermost
#: frame of its stack that matches a part, the longest prefix winning: the standard
#: library and asyncio count for their caller (``json`` called by the request's
#: parse is the parse; ``os.fsync`` called by the writer thread is the store),
#: aiohttp called by the adapter is aiohttp. The entry points at the root of the
#: main thread (:data:`_ENTRY`: the CLI's ``main``, the relay's) match nothing, so a
#: stack that matches no part (the event loop running callbacks, executor threads
#: doing stdlib work such as ``os.path.realpath``) is "other".
PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("request parse and digest", ("aguiadapter/protocol/",)),
    ("admission and the run route", ("aguiadapter/web/", "aguiadapter/threads/", "aguiadapter/service/",
                                     "aguiadapter/pool/", "aguiadapter/workspace.py")),
    ("the run's steps (open, apply, close)", ("aguiadapter/runs/",)),
    ("store writes and the writer thread", ("aguiadapter/store/",)),
    ("the relay's per-event path", ("aguiadapter/translate/", "aguiadapter/runs/relaying.py",
                                    "aguiadapter/runs/follow.py", "aguiadapter/a2a/", "aguiadapter/fastjson.py",
                                    "aguiadapter/web/sse.py", "aguiadapter/web/stream_watch.py",
                                    "aguiadapter/store/run_log.py", "benchmarks/relay.py")),
    ("other adapter code", ("aguiadapter/",)),
    ("aiohttp (HTTP server and client)", ("aiohttp/", "multidict/", "yarl/", "propcache/")),
    ("the event loop waiting (select)", ("selectors.py",)),
)
OTHER = "other (asyncio running callbacks, stdlib, threads)"
_ENTRY = frozenset({"main", "<module>", "_run_module_as_main", "_run_code", "run_app"})
_PREFIXES = sorted(((prefix, name) for name, prefixes in PARTS for prefix in prefixes),
                   key=lambda item: -len(item[0]))


def part_of(frames: list[str]) -> tuple[str, str]:
    """The part a stack (outermost frame first, as py-spy writes it) counts for,
    and the function it counts for (the matching frame; the innermost one for "other")."""
    for frame in reversed(frames):
        function, _, where = frame.partition(" (")
        if function in _ENTRY:
            continue
        for prefix, name in _PREFIXES:
            if where.startswith(prefix) or f"/{prefix}" in where:
                return name, _function(frame)
    return OTHER, _function(frames[-1]) if frames else "?"


def parts_of_raw(path: Path, runs: int, rate: int, cpu_ms_per_run: float | None, top: int = 3) -> str:
    """Samples summed by part (:data:`PARTS`): share, and milliseconds of samples per run."""
    counts: collections.Counter[str] = collections.Counter()
    functions: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if stack and count_text.isdigit():
            name, function = part_of([_short(frame) for frame in stack.split(";") if frame])
            counts[name] += int(count_text)
            functions[name][function] += int(count_text)
    samples = sum(counts.values())
    lines = [f"by part ({samples} samples, {runs} runs, {rate} samples/s: ms per run = samples / rate / runs; "
             "a part is the innermost frame matching benchmarks/profile.py's PARTS):"]
    for name in [*(name for name, _ in PARTS), OTHER]:
        share = counts[name] / max(samples, 1)
        lines.append(f"  {100 * share:5.1f}%  {counts[name] / rate / runs * 1000:7.3f} ms/run  {name}")
        for function, count in functions[name].most_common(top):
            lines.append(f"      {100 * count / max(samples, 1):5.1f}%  {function}")
    if cpu_ms_per_run is not None:
        lines.append(f"  server CPU per run over the profiled runs (/proc, process tree): {cpu_ms_per_run:.3f} ms")
    return "\n".join(lines)


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
    bench = Bench(sizes, work, None, keys=(args.target,))
    output = Path(args.out or work / ("profile.txt" if args.tool == "py-spy" else "pyinstrument.txt"))
    text = "firehose 5" if args.short else f"firehose {args.events}"
    spy: subprocess.Popen[bytes] | None = None
    cpu_ms_per_run: float | None = None
    extra = ("--durability", args.durability)
    try:
        if args.tool == "pyinstrument":
            module = "benchmarks.relay" if args.target == RELAY else "aguiadapter"
            launcher = [sys.executable, "-m", "pyinstrument", "-r", "text", "--show-all", "-o", str(output),
                        "-m", module]
            await _start_with(bench, launcher, args.target, extra)
        else:
            await _start_with(bench, None, args.target, extra)
            py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
            spy = subprocess.Popen([py_spy, "record", "--pid", str(bench.targets[0].server.pid), "--rate",
                                    str(args.rate), "--format", "raw", "--output", str(output), "--nonblocking",
                                    *(["--gil"] if args.gil else [])],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            await asyncio.sleep(1.0)
        target: Target = bench.targets[0]
        began, cpu0 = time.perf_counter(), target.server.cpu()
        events = 0
        for _ in range(args.runs):
            result = await bench.one_run(target, text)
            if agui_outcome(result) != "success":
                print(f"run failed: {agui_outcome(result)}", file=sys.stderr)
                return 1
            events += result.events
        seconds = time.perf_counter() - began
        # Work done after a run's last event counts too (as in the suite's measure 3).
        await wait_quiet([target.server], timeout=2.0)
        cpu_ms_per_run = (target.server.cpu() - cpu0) / args.runs * 1000
        print(f"{args.runs} runs, {events:,} events in {seconds:.2f} s ({events / seconds:,.0f} events/s, "
              f"{seconds / args.runs * 1000:.2f} ms a run, {cpu_ms_per_run:.3f} ms of server CPU a run "
              f"while profiled; {target.label}{_mode(args)})")
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
        print()
        print(parts_of_raw(output, args.runs, args.rate, cpu_ms_per_run))
    else:
        print("\n".join(output.read_text().splitlines()[: args.top * 4]))
    print(f"\nfull profile: {output}")
    return 0


def _mode(args: argparse.Namespace) -> str:
    return f", --durability {args.durability}" if args.target == ADAPTER else ""


async def _start_with(bench: Bench, launcher: list[str] | None, key: str, extra: tuple[str, ...]) -> None:
    """Start runtime and the target (possibly under a profiler)."""
    from .procs import Server

    (bench.ws_root / "bench").mkdir(parents=True, exist_ok=True)
    port = free_port()
    bench.runtime = Server("runtime", [sys.executable, "-m", "aguiadapter.demo", "--port", str(port)],
                           port=port, log_path=bench.work / "logs" / "runtime.log")
    bench.runtime.start()
    await bench.runtime.wait_ready()
    if key == RELAY:
        server = bench._relay_server(free_port())
        if launcher is not None:
            server.argv = [*launcher, *server.argv[3:]]
    else:
        server = bench._adapter_server(bench.work / "state-adapter", free_port(), launcher=launcher,
                                       extra_args=extra)
    bench.targets.append(Target(key, server, "agui"))
    server.start()
    await server.wait_ready(timeout=60)
    # Warm up (imports, first thread, caches) before anything is sampled.
    for _ in range(20):
        await bench.one_run(bench.targets[0], "firehose 5")


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tool", choices=("py-spy", "pyinstrument"), default="py-spy")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--short", action="store_true", help="many short runs (firehose 5, as measure 3)")
    parser.add_argument("--durability", choices=("fsync", "process"), default="fsync",
                        help="the adapter's --durability (default fsync, the adapter's default)")
    parser.add_argument("--target", choices=(ADAPTER, RELAY), default=ADAPTER,
                        help="profile the adapter (default) or the minimal relay of benchmarks/relay.py")
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
