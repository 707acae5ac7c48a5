"""What the thread machine costs per short run, next to the short run's whole CPU.

``python -m benchmarks.machine_cost [--rounds 7] [--runs 3000] [--short-runs 60] [--against REV]``

A short run takes the machine through admission (``preflight``, ``admit``)
and three transitions (``start_turn``, ``bind_task``, ``finish``), each on a
working copy of the record that is then committed, as the shell does. Per
round, in alternating order, two worker processes do ``--runs`` such short
runs on the machine alone and print the CPU per run:

- **this tree**: the typed events and the one ``TRANSITIONS`` table;
- **REV** (default: the commit before the table, ``c660a01``): its
  python-statemachine declaration taken by its own compiled dispatcher
  (``ThreadRun``), from ``git archive REV``; the same worker also times the
  library's own engine on that declaration (one machine built per run, the
  three transitions sent to it: the form the table was measured against).

Then the adapter of each tree (``python -m aguiadapter``, same order) in
front of the demo runtime does ``--short-runs`` short runs (``firehose 1``,
a new thread each) and the adapter's CPU per run is read from ``/proc``:
the machine's share is its cost per run over this tree's figure (the issue's
bound: 3 %), and the two trees' figures are compared round by round.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .client import agui_outcome, run_body, stream
from .procs import Server, free_port, wait_quiet

HERE = Path(__file__).resolve().parent.parent
STARTING_COMMIT = "c660a01"


# ----------------------------------------------------------------- the worker
def _short_runs_on_the_machine(runs: int) -> dict[str, float]:
    """CPU per short run of the machine of whichever tree is on the path."""
    from aguiadapter.runs.shell import commit, working_copy
    from aguiadapter.threads import admission
    from aguiadapter.threads import machine as tm
    from aguiadapter.threads.record import ThreadRecord

    typed = hasattr(tm, "apply")

    def take(record: ThreadRecord, event: str, *args: Any) -> None:
        draft = working_copy(record)
        if typed:
            kinds = {"start_turn": tm.StartTurn, "bind_task": tm.BindTask, "finish": tm.Finish}
            tm.apply(draft, kinds[event](*args))
        else:
            getattr(tm, event)(tm.restore(draft), *args)
        commit(record, draft)

    def one(index: int) -> None:
        record = ThreadRecord(thread_id=f"t-{index}", context_id="ctx", cwd="/w")
        request = admission.Request(run_id=f"run-{index}", digest="d", cwd="/w", user_id=None, ros_invocation_id="inv",
                             user_message_id="m-1")
        admission.preflight(record, request)
        admission.admit(record, request, 0.0)
        binding = tm.RunBinding(f"run-{index}", "d", "exec", "inv", user_message_id="m-1")
        take(record, "start_turn", binding)
        take(record, "bind_task", "task", "session")
        take(record, "finish", [])

    def engine(index: int) -> None:
        record = ThreadRecord(thread_id=f"t-{index}", context_id="ctx", cwd="/w")
        machine = tm.ThreadMachine(record)
        machine.send("start_turn", binding=tm.RunBinding(f"run-{index}", "d", "exec", "inv"))
        machine.send("bind_task", task_id="task", session_id="session")
        machine.send("finish", usage=[])

    def per_run(work: Any, count: int) -> float:
        for index in range(min(count, 200)):
            work(index)  # warm up
        began = time.process_time()
        for index in range(count):
            work(index)
        return (time.process_time() - began) / count * 1e6

    out = {"machine_us": per_run(one, runs)}
    if not typed and hasattr(tm, "ThreadMachine"):
        out["library_engine_us"] = per_run(engine, max(runs // 10, 50))
    return out


def _worker(runs: int) -> None:
    for key, value in _short_runs_on_the_machine(runs).items():
        print(f"{key} {value:.3f}")


# ------------------------------------------------------------------- the trees
def _tree_of(rev: str, into: Path) -> Path:
    """The package as it was at ``rev`` (``git archive``), in a folder of its own."""
    archive = subprocess.run(["git", "-C", str(HERE), "archive", rev, "aguiadapter"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def _measure(tree: Path, runs: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(HERE)])}
    done = subprocess.run([sys.executable, "-m", "benchmarks.machine_cost", "--worker", "--runs", str(runs)],
                          capture_output=True, text=True, check=True, env=env, cwd=str(tree))
    return {key: float(value) for key, value in (line.split() for line in done.stdout.splitlines())}


# ----------------------------------------------------------- a short run, whole
async def _short_run_cpu(tree: Path, count: int, work: Path) -> float:
    """The CPU per short run (ms) of the adapter of ``tree``, in front of the demo runtime."""
    ws = work / "ws"
    (ws / "bench").mkdir(parents=True, exist_ok=True)
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    env.update({"PYTHONPATH": str(tree), "IAC_CODE_AGUI_ALLOWED_CWDS": str(ws),
                "IAC_CODE_AGUI_MAX_NEW_THREADS_PER_USER": "0"})
    port = free_port()
    runtime = Server("runtime", [sys.executable, "-m", "aguiadapter.demo", "--port", str(port)], port=port,
                     log_path=work / "runtime.log", env=env)
    adapter_port = free_port()
    adapter = Server("adapter", [sys.executable, "-m", "aguiadapter", "--host", "127.0.0.1", "--port",
                                 str(adapter_port), "--a2a-url", runtime.url, "--state-dir", str(work / "state")],
                     port=adapter_port, log_path=work / "adapter.log", env=env)
    try:
        runtime.start()
        await runtime.wait_ready()
        adapter.start()
        await adapter.wait_ready()
        cwd = str(ws / "bench")
        for _ in range(10):
            await stream(adapter.url, run_body("firehose 1", cwd=cwd))
        await wait_quiet([adapter], timeout=3.0)
        before = adapter.cpu()
        for _ in range(count):
            result = await stream(adapter.url, run_body("firehose 1", cwd=cwd))
            if agui_outcome(result) != "success":
                raise RuntimeError(f"a short run failed: {agui_outcome(result)}\n{adapter.log_tail()}")
        await wait_quiet([adapter], timeout=3.0)
        return (adapter.cpu() - before) / count * 1000
    finally:
        adapter.stop()
        runtime.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.machine_cost", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--runs", type=int, default=3000, help="short runs on the machine alone, per worker")
    parser.add_argument("--short-runs", type=int, default=60, help="whole short runs through the adapter, per round")
    parser.add_argument("--against", default=STARTING_COMMIT, help="the revision to compare with")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args.runs)
        return 0
    work = Path(tempfile.mkdtemp(prefix="machine-cost-"))
    try:
        trees = {"this tree": HERE, args.against: _tree_of(args.against, work)}
        samples: dict[str, dict[str, list[float]]] = {name: {} for name in trees}
        whole: dict[str, list[float]] = {name: [] for name in trees}
        for round_ in range(args.rounds):
            names = list(trees) if round_ % 2 == 0 else list(reversed(trees))
            for name in names:
                for key, value in _measure(trees[name], args.runs).items():
                    samples[name].setdefault(key, []).append(value)
            for name in names:
                whole[name].append(asyncio.run(_short_run_cpu(trees[name], args.short_runs, work / f"{round_}-{name}")))
        for name, values in whole.items():
            print(f"{name:>12}: a short run (firehose 1), adapter CPU {statistics.median(values):.2f} ms "
                  f"[{min(values):.2f}-{max(values):.2f}] over {args.rounds} rounds of {args.short_runs}")
        shorts = [a / b for a, b in zip(whole["this tree"], whole[args.against], strict=True)]
        print(f"this tree / {args.against}, a short run's CPU: {statistics.median(shorts):.3f}x "
              "(median of round ratios)")
        short_us = statistics.median(whole["this tree"]) * 1000
        for name, figures in samples.items():
            for key, values in figures.items():
                median = statistics.median(values)
                what = "the machine" if key == "machine_us" else "python-statemachine's engine"
                print(f"{name:>12}: {what} per short run {median:8.1f} us [{min(values):.1f}-{max(values):.1f}]"
                      f" = {median / short_us * 100:5.2f} % of a short run's CPU")
        ours, theirs = samples["this tree"]["machine_us"], samples[args.against]["machine_us"]
        ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
        print(f"this tree / {args.against}, the machine: {statistics.median(ratios):.2f}x (median of round ratios)")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
