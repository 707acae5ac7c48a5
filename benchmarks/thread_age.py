"""19. What a run costs on an old thread and on a full store (issue 35, item 2).

``python -m benchmarks.thread_age [--quick | --smoke] [--store file|redis|both] [--durability fsync|process]``

Side by side in one process, against one demo runtime process
(``python -m aguiadapter.demo``; each run ``firehose 5``: a short run):

- **age**: one adapter; a thread first gets ``--earlier`` runs (1,000; each
  a real run through the adapter), then rounds of a block of runs on that
  thread and a block of runs on new threads, in turn (the order turns each
  round). Per block: the client's wall time per run and the adapter's CPU
  per run (``utime + stime`` of its process tree). Reported: the medians
  over the rounds, ``old / new`` (target: within 10 %), and the size of the
  old thread's record.
- **size**: two adapters at once, one on an empty store and one on a store
  that already holds ``--threads`` (100,000) idle threads (file store:
  record files written as the adapter writes them; Redis: the record hashes
  and the owner's list, written with a pipeline), rounds of blocks of runs on
  new threads on each, in turn. Reported: the same medians and
  ``full / empty`` (target: within 10 %).

With ``--store redis`` (or ``both``) a private ``redis-server`` (no
persistence) on a free loopback port holds the Redis adapters' records, each
on a database of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aguiadapter.store.file.store import thread_file_name

from .client import agui_outcome, new_id, run_body, stream
from .procs import RedisServer, Server, free_port, wait_quiet
from .statefiles import make_state_dir, sample_record

if TYPE_CHECKING:
    from .harness import Bench

SIZES = {"smoke": (10, 3, 2, 100), "quick": (1000, 40, 7, 100_000), "full": (1000, 50, 11, 100_000)}


class Block:
    """Wall and CPU per run of the blocks of one side: the median block's
    wall time per run, and the CPU of all its blocks over all their runs
    (``/proc`` counts CPU in clock ticks: one block alone is too coarse)."""

    def __init__(self) -> None:
        self.wall_ms: list[float] = []
        self.cpu_s = 0.0
        #: The demo runtime's CPU meanwhile (its work per run may grow with a context's length).
        self.runtime_cpu_s = 0.0
        self.runs = 0

    def row(self) -> tuple[float, float]:
        return statistics.median(self.wall_ms), self.cpu_s * 1000 / self.runs


async def one_run(url: str, cwd: str, thread_id: str) -> None:
    result = await stream(url, run_body("firehose 5", cwd=cwd, thread_id=thread_id))
    outcome = agui_outcome(result)
    if outcome != "success":
        raise RuntimeError(f"a run on {thread_id} ended {outcome}")


async def block(server: Server, cwd: str, threads: Sequence[str], into: Block, runtime: Server) -> None:
    """Runs one after the other on ``threads`` (one each); one sample per block."""
    cpu, runtime_cpu, began = server.cpu(), runtime.cpu(), time.perf_counter()
    for thread_id in threads:
        await one_run(server.url, cwd, thread_id)
    into.wall_ms.append((time.perf_counter() - began) * 1000 / len(threads))
    into.cpu_s += server.cpu() - cpu
    into.runtime_cpu_s += runtime.cpu() - runtime_cpu
    into.runs += len(threads)


def adapter(name: str, runtime_url: str, state: Path, store_url: str | None, durability: str,
            work: Path) -> Server:
    argv = [sys.executable, "-m", "aguiadapter", "--port", "0", "--a2a-url", runtime_url,
            "--state-dir", str(state), "--allowed-cwd", str(work / "workspaces"), "--log-level", "warning",
            "--max-new-threads-per-user", "0"]
    if store_url:
        argv += ["--store", store_url]
    else:
        argv += ["--durability", durability]
    port = free_port()
    argv[argv.index("--port") + 1] = str(port)
    return Server(name, argv, port=port, log_path=work / f"{name}.log")


async def measure_age(server: Server, runtime: Server, cwd: str, earlier: int, size: int,
                      rounds: int) -> dict[str, Any]:
    old = new_id("old-thread")
    for _ in range(earlier):
        await one_run(server.url, cwd, old)
    sides = {"old thread": Block(), "new threads": Block()}
    for number in range(rounds):
        order = ["old thread", "new threads"] if number % 2 == 0 else ["new threads", "old thread"]
        for side in order:
            threads = [old] * size if side == "old thread" else [new_id("new") for _ in range(size)]
            await block(server, cwd, threads, sides[side], runtime)
    old_side, new_side = sides["old thread"], sides["new threads"]
    return {"old": old_side.row(), "new": new_side.row(), "thread": old,
            "runtime_cpu_ms": (old_side.runtime_cpu_s * 1000 / old_side.runs,
                               new_side.runtime_cpu_s * 1000 / new_side.runs)}


async def measure_size(empty: Server, full: Server, runtime: Server, cwd: str, size: int,
                       rounds: int) -> dict[str, Any]:
    sides = {"empty": Block(), "full": Block()}
    servers = {"empty": empty, "full": full}
    for number in range(rounds):
        for side in (["empty", "full"] if number % 2 == 0 else ["full", "empty"]):
            await block(servers[side], cwd, [new_id("new") for _ in range(size)], sides[side], runtime)
    return {"empty": sides["empty"].row(), "full": sides["full"].row()}


async def fill_redis(url: str, count: int, cwd: str) -> None:
    """``count`` idle threads in the Redis store's own layout (its key helper)."""
    import redis.asyncio as aioredis

    from aguiadapter.store.redis.store import DEFAULT_PREFIX, Keys
    from aguiadapter.threads.listing import owner_id, owner_of, summary_of
    from aguiadapter.threads.record import record_to_json

    keys = Keys(DEFAULT_PREFIX)
    client = aioredis.Redis.from_url(url)
    try:
        for start in range(0, count, 1000):
            async with client.pipeline(transaction=False) as pipe:
                for index in range(start, min(count, start + 1000)):
                    record = sample_record(index, cwd)
                    summary = summary_of(record)
                    pipe.hset(keys.thread(record.key), mapping={
                        "version": record.version, "record": record_to_json(record), "summary": summary.to_json()})
                    pipe.zadd(keys.thread_list(owner_id(owner_of(record))), {record.key: summary.updated_at})
                await pipe.execute()
    finally:
        await client.aclose()


def _ratio(a: tuple[float, float], b: tuple[float, float]) -> str:
    return f"wall {a[0]:.2f} / {b[0]:.2f} ms = {a[0] / b[0]:.3f}x, CPU {a[1]:.2f} / {b[1]:.2f} ms = {a[1] / b[1]:.3f}x"


async def run(args: argparse.Namespace) -> dict[str, Any]:
    earlier, size, rounds, threads = SIZES[args.profile]
    stores = ["file", "redis"] if args.store == "both" else [args.store]
    work = Path(tempfile.mkdtemp(prefix="bench-thread-age-"))
    cwd = str(work / "workspaces" / "ws")
    Path(cwd).mkdir(parents=True)
    runtime_port = free_port()
    runtime = Server("runtime", [sys.executable, "-m", "aguiadapter.demo", "--port", str(runtime_port)],
                     port=runtime_port, log_path=work / "runtime.log")
    started: list[Server] = [runtime]
    redis: RedisServer | None = None
    report: dict[str, Any] = {"profile": args.profile, "durability": args.durability, "earlier_runs": earlier,
                              "block": size, "rounds": rounds, "threads": threads}
    try:
        runtime.start()
        await runtime.wait_ready()
        if "redis" in stores:
            redis_port = free_port()
            redis = RedisServer(shutil.which("redis-server") or "redis-server", work / "redis", port=redis_port)
            started.append(redis)
            redis.start()
            await redis.wait_ready()
        for store in stores:
            url = {db: f"redis://127.0.0.1:{redis.port}/{db}" for db in (0, 1, 2)} if redis and store == "redis" \
                else {0: None, 1: None, 2: None}
            # Age: one adapter.
            aged = adapter(f"adapter-{store}-age", runtime.url, work / f"state-{store}-age", url[0],
                           args.durability, work)
            started.append(aged)
            aged.start()
            await aged.wait_ready()
            await wait_quiet([aged, runtime])
            age = await measure_age(aged, runtime, cwd, earlier, size, rounds)
            aged.stop()
            if store == "file":
                record = work / f"state-{store}-age" / "threads" / thread_file_name(age["thread"])
                age["record_bytes"] = record.stat().st_size
            report[f"{store}_age"] = age
            print(f"19. age, {store} store: old thread after {earlier} runs vs new threads: "
                  f"{_ratio(age['old'], age['new'])}" + (
                      f"; the old thread's record {age['record_bytes'] / 1024:.1f} KB" if "record_bytes" in age
                      else "") + "; the demo runtime's CPU per run meanwhile {:.2f} / {:.2f} ms".format(
                          *age["runtime_cpu_ms"]), flush=True)
            # Size: two adapters, an empty store and a full one.
            full_state = (args.full_state or work) / f"state-{store}-full"
            if store == "file":
                make_state_dir(full_state, threads, cwd)
            else:
                assert url[2] is not None
                await fill_redis(url[2], threads, cwd)
            empty = adapter(f"adapter-{store}-empty", runtime.url, work / f"state-{store}-empty", url[1],
                            args.durability, work)
            full = adapter(f"adapter-{store}-full", runtime.url, full_state, url[2], args.durability, work)
            started += [empty, full]
            for server in (empty, full):
                server.start()
            for server in (empty, full):
                await server.wait_ready()
            await wait_quiet([empty, full, runtime])
            sized = await measure_size(empty, full, runtime, cwd, size, rounds)
            report[f"{store}_size"] = sized
            print(f"19. size, {store} store: {threads} threads vs an empty store: "
                  f"{_ratio(sized['full'], sized['empty'])}", flush=True)
            for server in (empty, full):
                server.stop()
    finally:
        for server in reversed(started):
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
    return report


async def measure_thread_age(bench: Bench) -> None:
    """18. inside ``python -m benchmarks`` (``--only age``): the suite's
    profile, both stores when Redis can run here; the figures are printed."""
    from .harness import redis_unavailable

    store = "file" if redis_unavailable() else "both"
    await run(argparse.Namespace(profile=bench.sizes.name, store=store, durability="fsync", full_state=None))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.thread_age", description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--quick", dest="profile", action="store_const", const="quick")
    group.add_argument("--smoke", dest="profile", action="store_const", const="smoke")
    parser.set_defaults(profile="full")
    parser.add_argument("--store", choices=("file", "redis", "both"), default="both")
    parser.add_argument("--durability", choices=("fsync", "process"), default="fsync")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here too")
    parser.add_argument("--full-state", type=Path, default=None,
                        help="keep the file store of --threads threads in this folder, and reuse it next time "
                        "(writing and deleting 100,000 files takes minutes)")
    args = parser.parse_args(argv)
    report = asyncio.run(run(args))
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
