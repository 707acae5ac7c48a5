"""User-space instructions per short run, this tree against another checkout.

``python -m benchmarks.instructions --before DIR [--runs 60] [--text "firehose 5"] [--durability process]``

The CPU clock of a shared machine cannot rank changes of a few percent: an
unchanged tree measures 0.8-1.1x itself under load. Instructions can. Each
adapter (this tree's, then the one in ``DIR``, e.g. ``git worktree add
../before main``) runs under callgrind (``valgrind``) with its
instrumentation off; after a few warm-up runs it is switched on
(``callgrind_control -i on``) for ``--runs`` runs of ``--text`` on new
threads, then off, and the count is read from the dump: every thread of the
process, the kernel's share left out (a system call saved shows only in the
CPU clock). The same tree counts within 0.05 % of itself from one start to
the next. The demo runtime is this tree's, for both. About 30 s a side for
60 short runs; ``--text "firehose 10000" --runs 2`` counts a long run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .client import run_ok
from .procs import Server, demo_runtime, free_port

_HERE = Path(__file__).resolve().parents[1]


async def count(checkout: Path, runtime_url: str, work: Path, runs: int, text: str, extra: list[str]) -> int:
    """Instructions of ``checkout``'s adapter over ``runs`` runs of ``text``."""
    out = work / f"callgrind-{checkout.name}.out"
    ws = work / "ws"
    ws.mkdir(parents=True, exist_ok=True)
    argv = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
            sys.executable, "-m", "aguiadapter", "--host", "127.0.0.1", "--port", str(port := free_port()),
            "--a2a-url", runtime_url, "--state-dir", str(work / f"state-{checkout.name}"), *extra]
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    # The checkout first on the path, and its folder the working one: ``-m`` puts the latter first.
    env.update({"PYTHONPATH": str(checkout), "IAC_CODE_AGUI_ALLOWED_CWDS": str(ws),
                "IAC_CODE_AGUI_MAX_NEW_THREADS_PER_USER": "0"})
    server = Server(f"adapter-{checkout.name}", argv, port=port, log_path=work / f"{checkout.name}.log", env=env,
                    cwd=str(checkout))
    server.start()
    try:
        await server.wait_ready(timeout=300)
        for _ in range(5):
            await run_ok(server.url, text, str(ws))
        subprocess.run(["callgrind_control", "-i", "on", str(server.pid)], check=True, capture_output=True)
        for _ in range(runs):
            await run_ok(server.url, text, str(ws))
        await asyncio.sleep(0.5)
        subprocess.run(["callgrind_control", "-i", "off", str(server.pid)], check=True, capture_output=True)
        subprocess.run(["callgrind_control", "-d", str(server.pid)], check=True, capture_output=True)
    finally:
        server.stop(grace=30)
    totals = [line.split()[1] for dump in sorted(work.glob(f"{out.name}*"))
              for line in dump.read_text().splitlines() if line.startswith("totals:")]
    return sum(int(total) for total in totals)



async def main_async(args: argparse.Namespace) -> int:
    """Count both trees, print the figures and their ratio."""
    work = Path(tempfile.mkdtemp(prefix="aguiadapter-instructions-"))
    runtime = demo_runtime(_HERE, work)
    runtime.start()
    try:
        await runtime.wait_ready()
        extra = ["--durability", args.durability] if args.durability else []
        here = await count(_HERE, runtime.url, work / "here", args.runs, args.text, extra)
        before = await count(Path(args.before).resolve(), runtime.url, work / "before", args.runs, args.text, extra)
    finally:
        runtime.stop()
        shutil.rmtree(work, ignore_errors=True)
    mode = f", --durability {args.durability}" if args.durability else ""
    print(f"{args.runs} runs of {args.text!r}{mode}, user-space instructions per run")
    print(f"  this tree: {here / args.runs:,.0f}")
    print(f"  {args.before}: {before / args.runs:,.0f}")
    print(f"  ratio: {here / before:.3f}x")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.instructions", description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="another checkout (git worktree add DIR REV)")
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--text", default="firehose 5")
    parser.add_argument("--durability", choices=("fsync", "process"), default=None,
                        help="the adapters' --durability (default: theirs)")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("needs valgrind (callgrind)", file=sys.stderr)
        return 1
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
