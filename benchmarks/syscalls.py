"""Thread hops and socket sends per short run, this tree beside another checkout.

``python -m benchmarks.syscalls [--before DIR] [--runs 40] [--durability process]``

What a short run costs beyond its Python is mostly system calls: each trip
to a worker thread (the workspace check, the record read, each durable
write) is a futex wake of the worker and one byte on the event loop's
self-pipe to wake it back, and each SSE write is a ``sendto``. The CPU
clock of a shared machine cannot show one of them; a count can. Each
adapter (this tree's, then the one in ``DIR``, e.g. ``git worktree add
--detach ../before main``) runs against this tree's demo runtime; after a
few warm-up runs ``strace -f -c`` is attached for ``--runs`` runs of
``firehose 5`` on new threads. Printed per run: ``sendto`` calls split into
wake-ups (one byte to the self-pipe, a hop's return) and the rest (the SSE
writes and the request to the runtime), ``futex`` calls, ``openat``,
``fsync``. strace slows every call: its figures are counts, not time. About
15 s a side.

Then what one hop costs: the workspace check of a run
(:func:`aguiadapter.workspace.resolve_workspace`'s disk part, on a folder
that exists) done inline and through ``asyncio.to_thread`` as a run does
it, in alternating rounds; the process CPU (every thread) per check.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from aguiadapter.workspace import _resolve_on_disk

from .client import run_ok
from .procs import Server, demo_runtime, free_port

_HERE = Path(__file__).resolve().parents[1]
_COUNTED = ("futex", "openat", "fsync", "fdatasync")


async def count(checkout: Path, runtime_url: str, work: Path, runs: int, extra: list[str]) -> Counter[str]:
    """System calls of ``checkout``'s adapter over ``runs`` short runs."""
    work.mkdir(parents=True)
    ws = work / "ws"
    ws.mkdir()
    port = free_port()
    argv = [sys.executable, "-m", "aguiadapter", "--host", "127.0.0.1", "--port", str(port),
            "--a2a-url", runtime_url, "--state-dir", str(work / "state"), *extra]
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    # The checkout first on the path, and its folder the working one: ``-m`` puts the latter first.
    env.update({"PYTHONPATH": str(checkout), "IAC_CODE_AGUI_ALLOWED_CWDS": str(ws),
                "IAC_CODE_AGUI_MAX_NEW_THREADS_PER_USER": "0"})
    server = Server(f"adapter-{checkout.name}", argv, port=port, log_path=work / "adapter.log", env=env,
                    cwd=str(checkout))
    server.start()
    trace = work / "strace.txt"
    try:
        await server.wait_ready(timeout=120)
        for _ in range(5):
            await run_ok(server.url, "firehose 5", str(ws))
        # -yy names each descriptor: the self-pipe's wake-ups are told from the sockets.
        tracer = subprocess.Popen(["strace", "-f", "-yy", "-e", "trace=sendto," + ",".join(_COUNTED),
                                   "-o", str(trace), "-p", str(server.pid)], stderr=subprocess.DEVNULL)
        await asyncio.sleep(1.0)  # attached to every thread
        for _ in range(runs):
            await run_ok(server.url, "firehose 5", str(ws))
        await asyncio.sleep(0.5)
        tracer.send_signal(2)
        tracer.wait()
    finally:
        server.stop(grace=30)
    calls: Counter[str] = Counter()
    for line in trace.read_text().splitlines():
        # "PID  name(args)": strace pads a short pid with a second space.
        name = line.split(None, 1)[-1].split("(", 1)[0]
        if "resumed>" in line or name not in (*_COUNTED, "sendto"):
            continue
        if name == "sendto":
            name = "sendto wake-up" if '"\\0", 1,' in line and "TCP" not in line else "sendto socket"
        calls[name] += 1
    return calls



async def main_async(args: argparse.Namespace) -> int:
    """Count both trees, print the figures per run side by side."""
    work = Path(tempfile.mkdtemp(prefix="aguiadapter-syscalls-"))
    runtime = demo_runtime(_HERE, work)
    runtime.start()
    try:
        await runtime.wait_ready()
        extra = ["--durability", args.durability] if args.durability else []
        trees = {"this tree": _HERE, **({args.before: Path(args.before).resolve()} if args.before else {})}
        counts = {name: await count(tree, runtime.url, work / f"t{i}", args.runs, extra)
                  for i, (name, tree) in enumerate(trees.items())}
    finally:
        runtime.stop()
        shutil.rmtree(work, ignore_errors=True)
    mode = f", --durability {args.durability}" if args.durability else ""
    print(f"{args.runs} short runs (firehose 5, new threads){mode}, system calls per run")
    names = ("sendto socket", "sendto wake-up", *_COUNTED)
    print(f"  {'':16s}" + "".join(f"{name:>16s}" for name in names))
    for tree, calls in counts.items():
        print(f"  {tree[-16:]:16s}" + "".join(f"{calls[name] / args.runs:16.2f}" for name in names))
    inline, hopped = await hop_cost(Path(tempfile.gettempdir()))
    print(f"a workspace check, process CPU: inline {inline:.1f} us, through asyncio.to_thread {hopped:.1f} us "
          f"(the hop {hopped - inline:.1f} us; medians of 6 rounds of 2,000)")
    return 0


async def hop_cost(folder: Path, checks: int = 2000, rounds: int = 6) -> tuple[float, float]:
    """CPU microseconds per workspace check inline and through a worker thread."""
    path = str(folder)
    inline: list[float] = []
    hopped: list[float] = []
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(checks):
            _resolve_on_disk(path, (path,))
        inline.append((time.process_time() - start) / checks * 1e6)
        start = time.process_time()
        for _ in range(checks):
            await asyncio.to_thread(_resolve_on_disk, path, (path,))
        hopped.append((time.process_time() - start) / checks * 1e6)
    return sorted(inline)[rounds // 2], sorted(hopped)[rounds // 2]


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.syscalls", description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default=None, help="another checkout (git worktree add --detach DIR REV)")
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--durability", choices=("fsync", "process"), default=None,
                        help="the adapters' --durability (default: theirs)")
    args = parser.parse_args(argv)
    if shutil.which("strace") is None:
        print("needs strace", file=sys.stderr)
        return 1
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
