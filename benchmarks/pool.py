"""What a pool of runtimes costs, side by side in one run.

``python -m benchmarks.pool [--rounds 5] [--short 30] [--firehose 20000] [--placements 2000]``

1. **A pool of one**: short runs (``firehose 5``, a new thread each, one
   after the other) through ``--a2a-url R`` (a pool of one named
   ``default``: counted in memory only, the path runs took before pools but
   for one lookup) and through ``--runtime one=R`` (a named pool of one:
   each run taken and released in the store's run slots). Per round: the
   adapter's CPU per run and the median wall time per run; the targets in
   turns, the order turning each round.
2. **Placement** of a new thread (``RuntimePool.place`` then ``leave``, in
   this process, three runtimes): with the file store's slots (memory) and
   with the Redis store's slots (a private ``redis-server``: count, take and release, three scripts per
   new thread): microseconds of wall and CPU per new thread.
3. **Events per second with 1, 2 and 4 demo runtimes** behind one adapter:
   ``--concurrency`` clients each run ``firehose N`` on new threads (so
   placement spreads them); events/s at the clients, the adapter's CPU per
   10k events, and the busiest runtime's CPU share (it must not be the limit).

Printed: medians [min-max] over the rounds, and the ratios.
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
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from aguiadapter.pool.pool import RuntimePool
from aguiadapter.pool.settings import RuntimeSpec
from aguiadapter.store.slots import LocalRunSlots, RunSlots

from .client import agui_outcome, run_body, stream
from .procs import RedisServer, Server, free_port, raise_fd_limit, wait_quiet

if TYPE_CHECKING:
    from .harness import Bench


def _spread(values: Sequence[float]) -> str:
    return f"{statistics.median(values):9.3f} [{min(values):.3f}-{max(values):.3f}]"


HERE = Path(__file__).resolve().parent.parent
#: The commit before the pool (and before the thread machine's table): today's short run is held against it.
BEFORE_POOL = "c660a01"


def _demo(work: Path, name: str) -> Server:
    port = free_port()
    return Server(name, [sys.executable, "-m", "aguiadapter.demo", "--port", str(port)], port=port,
                  log_path=work / f"{name}.log")


def _adapter(work: Path, name: str, runtime: Sequence[str], tree: Path = HERE) -> Server:
    """An adapter process of ``tree`` (this checkout by default, or an older one from :func:`tree_of`)."""
    port = free_port()
    argv = [sys.executable, "-m", "aguiadapter", "--port", str(port), "--state-dir", str(work / name / "state"),
            "--allowed-cwd", str(work), "--log-level", "WARNING", "--max-new-threads-per-user", "0", *runtime]
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([str(tree), str(HERE)]))
    return Server(name, argv, port=port, log_path=work / f"{name}.log", env=env, cwd=str(tree))


def tree_of(rev: str, into: Path) -> Path:
    """The package as it was at ``rev`` (``git archive``) in a folder of its own, checked to be the
    one a child process imports (the editable install of another checkout must not win)."""
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(HERE), "archive", rev, "aguiadapter"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    found = subprocess.run([sys.executable, "-c", "import aguiadapter; print(aguiadapter.__file__)"], check=True,
                           capture_output=True, text=True, cwd=str(into),
                           env={**os.environ, "PYTHONPATH": str(into)}).stdout.strip()
    if not Path(found).resolve().is_relative_to(into.resolve()):
        raise RuntimeError(f"a child process imports {found}, not the tree of {rev}")
    return into


async def _start(*servers: Server) -> None:
    for server in servers:
        server.start()
    await asyncio.gather(*(server.wait_ready() for server in servers))


async def _short_runs(adapter: Server, cwd: Path, count: int) -> tuple[float, float]:
    """CPU seconds of the adapter over ``count`` runs, and the median wall ms per run."""
    await wait_quiet([adapter], timeout=2.0)
    cpu0 = adapter.cpu()
    walls = []
    for _ in range(count):
        result = await stream(adapter.url, run_body("firehose 5", cwd=str(cwd)))
        assert result.error is None and result.status == 200, result.error
        assert agui_outcome(result) == "success", (adapter.name, agui_outcome(result), adapter.log_tail())
        walls.append(result.seconds)
    await wait_quiet([adapter], timeout=2.0)
    return adapter.cpu() - cpu0, statistics.median(walls) * 1000


async def pool_of_one(work: Path, rounds: int, count: int, against: Sequence[str] = (BEFORE_POOL,)) -> None:
    """Short runs through this tree's pool of one (``--a2a-url``), its named pool of one, and the
    adapter of each revision in ``against`` (``--a2a-url``, from ``git archive``), in turns.

    ``/proc`` counts CPU in 10 ms ticks and a short run costs a few ms: the CPU
    per run is the total over every round's runs (``rounds * count``), and the
    ratios are those totals' ratios; the wall ratio is the median of the
    per-round ratios of the median run."""
    demo = _demo(work, "runtime-1")
    await _start(demo)
    plain = "this tree, --a2a-url (pool of one)"
    targets = {plain: _adapter(work, "plain", ["--a2a-url", demo.url]),
               "this tree, --runtime one=URL (counted)": _adapter(work, "named", ["--runtime", f"one={demo.url}"])}
    for rev in against:
        targets[f"{rev}, --a2a-url (before pools)"] = _adapter(work, f"rev-{rev}", ["--a2a-url", demo.url],
                                                                tree_of(rev, work / f"tree-{rev}"))
    await _start(*targets.values())
    cpu: dict[str, float] = dict.fromkeys(targets, 0.0)
    cpu_rounds: dict[str, list[float]] = {name: [] for name in targets}
    wall: dict[str, list[float]] = {name: [] for name in targets}
    try:
        for server in targets.values():
            await _short_runs(server, work, 10)  # warm up
        for round_ in range(rounds):
            order = list(targets.items())
            turn = round_ % len(order)
            for name, server in order[turn:] + order[:turn]:
                used, took = await _short_runs(server, work, count)
                cpu[name] += used
                cpu_rounds[name].append(used / count * 1000)
                wall[name].append(took)
    finally:
        for server in (*targets.values(), demo):
            server.stop()
    runs = rounds * count
    print(f"\n1. A pool of one: {count} short runs (firehose 5) per round and target, {rounds} rounds "
          f"({runs} runs each; the order turns each round)")
    print(f"{'target':42} {'adapter CPU ms/run (all runs)':>30} {'per round':>24} {'wall ms/run':>24}")
    for name in targets:
        print(f"{name:42} {cpu[name] / runs * 1000:30.3f} {_spread(cpu_rounds[name]):>24} {_spread(wall[name]):>24}")
    for name in list(targets)[1:]:
        wall_ratio = statistics.median(a / b for a, b in zip(wall[plain], wall[name], strict=True))
        cpu_ratio = f"{cpu[plain] / cpu[name]:.3f}" if cpu[name] else "n/a (not one clock tick: too few runs)"
        print(f"ratio {plain} / {name}: CPU {cpu_ratio} (totals), wall {wall_ratio:.3f} "
              "(median of round ratios)")


async def _placements(slots: RunSlots, count: int) -> tuple[float, float]:
    """Wall and CPU microseconds per new thread placed (then its run left)."""
    pool = RuntimePool([RuntimeSpec(name, f"http://127.0.0.1:9/{name}") for name in ("r1", "r2", "r3")],
                       slots=slots)
    try:
        wall0, cpu0 = time.perf_counter(), time.process_time()
        for _ in range(count):
            _, slot = await pool.place()
            await pool.leave(slot)
        return ((time.perf_counter() - wall0) / count * 1e6, (time.process_time() - cpu0) / count * 1e6)
    finally:
        await pool.close()


async def placement(work: Path, rounds: int, count: int) -> None:
    from aguiadapter.store.redis.store import store_from_url

    executable = shutil.which("redis-server")
    redis = None
    kinds: dict[str, RunSlots] = {"file store (memory)": LocalRunSlots()}
    if executable is not None:
        redis = RedisServer(executable, work / "redis", port=free_port())
        redis.start()
        await redis.wait_ready()
        store = store_from_url(redis.redis_url + f"?prefix=bench-{uuid.uuid4().hex[:6]}:")
        await store.start()
        kinds["redis store (3 scripts)"] = store.run_slots("pool")
    wall: dict[str, list[float]] = {name: [] for name in kinds}
    cpu: dict[str, list[float]] = {name: [] for name in kinds}
    try:
        for _ in range(rounds):
            for name, slots in kinds.items():
                took, used = await _placements(slots, count)
                wall[name].append(took)
                cpu[name].append(used)
    finally:
        if redis is not None:
            await store.close()
            redis.stop()
    print(f"\n2. Placement of a new thread over 3 runtimes ({count} per round, {rounds} rounds)")
    print(f"{'slots':28} {'wall us/thread':>26} {'CPU us/thread':>26}")
    for name in kinds:
        print(f"{name:28} {_spread(wall[name]):>26} {_spread(cpu[name]):>26}")
    if redis is None:
        print("redis-server not on PATH: the Redis store was not measured")


async def spread(work: Path, rounds: int, events: int, concurrency: int) -> None:
    print(f"\n3. Events/s through one adapter: {concurrency} clients, firehose {events} each, on new threads")
    print(f"{'runtimes':>8} {'events/s':>26} {'adapter CPU s/10k events':>26} {'busiest runtime CPU %':>26}")
    for width in (1, 2, 4):
        demos = [_demo(work, f"spread-{width}-{index}") for index in range(width)]
        await _start(*demos)
        adapter = _adapter(work, f"adapter-{width}", [option for index, demo in enumerate(demos)
                                                        for option in ("--runtime", f"r{index}={demo.url}")])
        await _start(adapter)
        rates, per_10k, busiest = [], [], []
        try:
            await stream(adapter.url, run_body("firehose 200", cwd=str(work)))
            for _ in range(rounds):
                await wait_quiet([adapter, *demos], timeout=3.0)
                cpu0, demo0 = adapter.cpu(), [demo.cpu() for demo in demos]
                began = time.perf_counter()
                results = await asyncio.gather(*(stream(adapter.url, run_body(f"firehose {events}", cwd=str(work)))
                                                 for _ in range(concurrency)))
                took = time.perf_counter() - began
                seen = sum(result.events for result in results)
                assert all(result.error is None for result in results), [r.error for r in results]
                await wait_quiet([adapter], timeout=2.0)
                rates.append(seen / took)
                per_10k.append((adapter.cpu() - cpu0) / seen * 10_000)
                busiest.append(max(demo.cpu() - before for demo, before in zip(demos, demo0, strict=True)) / took * 100)
        finally:
            for server in (adapter, *demos):
                server.stop()
        print(f"{width:>8} {_spread(rates):>26} {_spread(per_10k):>26} {_spread(busiest):>26}")


#: The suite's profile -> (rounds, short runs per round, placements per round, firehose, concurrency).
SIZES = {"smoke": (2, 3, 50, 300, 2), "quick": (5, 40, 1000, 5000, 8), "full": (7, 60, 2000, 20_000, 8)}


def reachable(rev: str) -> bool:
    """Whether this checkout's git history holds ``rev`` (a shallow clone may not)."""
    return subprocess.run(["git", "-C", str(HERE), "cat-file", "-e", f"{rev}^{{commit}}"],
                          capture_output=True).returncode == 0


async def measure_pool(bench: Bench) -> None:
    """21. inside ``python -m benchmarks`` (``--only pool``): the three measures at the suite's
    profile's sizes, the pool of one beside the commit before the pool when git has it; printed."""
    rounds, short, placements, firehose, concurrency = SIZES[bench.sizes.name]
    against = [BEFORE_POOL] if reachable(BEFORE_POOL) else []
    if not against:
        bench.log(f"  21. NOTE: {BEFORE_POOL} is not in this checkout's history: the pool of one is measured "
                  "without the adapter before pools")
    work = bench.work / "pool"
    work.mkdir(parents=True, exist_ok=True)
    await pool_of_one(work, rounds, short, against)
    await placement(work, rounds, placements)
    await spread(work, rounds, firehose, concurrency)


async def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pool", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--short", type=int, default=30, help="short runs per round and target (1.)")
    parser.add_argument("--placements", type=int, default=2000, help="new threads placed per round (2.)")
    parser.add_argument("--firehose", type=int, default=20_000, help="events per run (3.)")
    parser.add_argument("--concurrency", type=int, default=8, help="runs at once (3.)")
    parser.add_argument("--only", default="one,placement,spread")
    parser.add_argument("--against", default=BEFORE_POOL,
                        help="comma-separated revisions whose adapter (--a2a-url) runs beside the pool of one "
                             "(default: the commit before the pool); '' for none")
    args = parser.parse_args(argv)
    raise_fd_limit()
    work = Path(tempfile.mkdtemp(prefix="aguiadapter-bench-pool-"))
    only = set(args.only.split(","))
    try:
        if "one" in only:
            await pool_of_one(work, args.rounds, args.short, [r for r in args.against.split(",") if r])
        if "placement" in only:
            await placement(work, args.rounds, args.placements)
        if "spread" in only:
            await spread(work, args.rounds, args.firehose, args.concurrency)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
