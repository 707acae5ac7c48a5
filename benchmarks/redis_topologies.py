"""20. A short run on each Redis topology, and the Sentinel failover gap (issue 32).

``python -m benchmarks.redis_topologies [--quick | --smoke] [--rounds N] [--block N] [--failovers N]``

Everything on loopback, started here (``redis-server``, ``redis-cli``):

- **single primary**: one ``redis-server`` (``--store redis://``);
- **Sentinel**: a primary, one replica and three sentinels
  (``redis-server --sentinel``), reached through the sentinels
  (``--store redis+sentinel://.../bench``), once with ``min_replicas=0``
  and once with ``min_replicas=1`` (each save waits for the replica's
  ``WAIT``): two adapters on the same set, each with its own ``prefix``;
- **Cluster**: six ``redis-server --cluster-enabled yes`` joined by
  ``redis-cli --cluster create --cluster-replicas 1`` (three primaries,
  three replicas; ``--store redis+cluster://``).

No Redis process persists anything (``--save "" --appendonly no``): the
figures are the adapter's and the network's, not a disk's.

1. **Short-run cost**: the four adapters run at once in front of one demo
   runtime; per round, in turn (the order turning each round), each does a
   block of short runs (``firehose 5``, a new thread each, one after the
   other, the suite's short run). Per target: the median block's wall time
   per run, the adapter's CPU per run over all its blocks (``/proc``
   counts in 10 ms ticks: one block alone is too coarse), and the CPU of the
   topology's Redis processes per run. Ratios against the single primary:
   the median of the per-round ratios (wall) and the ratio of the totals (CPU).
2. **Failover gap** (Sentinel, ``min_replicas=0``): the primary is killed
   with ``kill -9``; a client then starts a short run every 0.1 s (each
   bounded by 5 s) until one succeeds. The gap is the seconds from the kill
   to the end of that first successful run. The sentinels call a primary
   down after 1 s without an answer (``down-after-milliseconds 1000``), so
   about 1 s of each gap is that setting; the rest is the vote, the
   promotion and the adapter finding the new primary. The old primary is
   then started again (the sentinels make it a replica) and synced before
   the next failover.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .client import agui_outcome, run_body, stream
from .procs import RedisServer, Server, free_port, wait_quiet

if TYPE_CHECKING:
    from .harness import Bench

SERVICE = "bench"
DOWN_AFTER_MS = 1000
#: profile -> (rounds, runs per block, failovers)
SIZES = {"smoke": (2, 3, 1), "quick": (5, 20, 2), "full": (7, 40, 3)}
SINGLE, SENTINEL0, SENTINEL1, CLUSTER = ("single primary", "sentinel, min_replicas=0",
                                         "sentinel, min_replicas=1", "cluster, 3 primaries")
TARGETS = (SINGLE, SENTINEL0, SENTINEL1, CLUSTER)


# ------------------------------------------------------------------ starters
def _redis(work: Path, name: str, *extra: str) -> RedisServer:
    server = RedisServer(shutil.which("redis-server") or "redis-server", work / name, port=free_port(), name=name)
    server.argv += list(extra)
    return server


async def _ask(port: int, *command: Any) -> Any:
    import redis.asyncio as aioredis

    client = aioredis.Redis(host="127.0.0.1", port=port, socket_timeout=2, socket_connect_timeout=1)
    try:
        return await client.execute_command(*command)  # type: ignore[no-untyped-call]
    finally:
        await client.aclose()


async def _until(what: str, check: Any, timeout: float = 60.0) -> None:
    deadline = time.perf_counter() + timeout
    while True:
        try:
            if await check():
                return
        except OSError:
            pass
        except Exception as exc:  # a server still starting answers with an error: not yet
            if "Connection" not in type(exc).__name__ and "Timeout" not in type(exc).__name__ \
                    and "Busy" not in type(exc).__name__:
                raise
        if time.perf_counter() > deadline:
            raise RuntimeError(f"not after {timeout:.0f} s: {what}")
        await asyncio.sleep(0.1)


def _text(answer: Any) -> str:
    return answer.decode() if isinstance(answer, bytes) else str(answer)


class Sentinels:
    """A primary, one replica and three sentinels on loopback."""

    def __init__(self, work: Path) -> None:
        self.primary = _redis(work, "sentinel-primary")
        self.replica = _redis(work, "sentinel-replica", "--replicaof", "127.0.0.1", str(self.primary.port))
        self.sentinels = []
        for number in range(3):
            folder = work / f"sentinel-{number}"
            folder.mkdir(parents=True)
            port = free_port()
            config = folder / "sentinel.conf"
            config.write_text("\n".join([
                f"port {port}", "bind 127.0.0.1", f"dir {folder}",
                f"sentinel monitor {SERVICE} 127.0.0.1 {self.primary.port} 2",
                f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}",
                f"sentinel failover-timeout {SERVICE} 3000", f"sentinel parallel-syncs {SERVICE} 1", ""]))
            sentinel = RedisServer(shutil.which("redis-server") or "redis-server", folder, port=port,
                                   name=f"sentinel-{number}")
            sentinel.argv = [sentinel.argv[0], str(config), "--sentinel"]
            self.sentinels.append(sentinel)

    @property
    def servers(self) -> list[RedisServer]:
        return [self.primary, self.replica, *self.sentinels]

    def url(self, **options: str) -> str:
        hosts = ",".join(f"127.0.0.1:{sentinel.port}" for sentinel in self.sentinels)
        return f"redis+sentinel://{hosts}/{SERVICE}?" + "&".join(f"{k}={v}" for k, v in options.items())

    async def start(self) -> None:
        for server in self.servers:
            server.start()
            await server.wait_ready()
        await _until("the sentinels know the replica and each other", self._ready)

    async def _ready(self) -> bool:
        for sentinel in self.sentinels:
            if len(await _ask(sentinel.port, "SENTINEL", "REPLICAS", SERVICE)) < 1:
                return False
            if len(await _ask(sentinel.port, "SENTINEL", "SENTINELS", SERVICE)) < 2:
                return False
        return await self.synced()

    async def current_primary(self) -> RedisServer:
        port = int((await _ask(self.sentinels[0].port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE))[1])
        return next(server for server in (self.primary, self.replica) if server.port == port)

    async def synced(self) -> bool:
        primary = await self.current_primary()
        other = self.replica if primary is self.primary else self.primary
        up = dict(await _ask(primary.port, "INFO", "replication"))
        down = dict(await _ask(other.port, "INFO", "replication"))
        return bool(up.get("role") == "master" and up.get("connected_slaves") == 1
                    and down.get("master_link_status") == "up"
                    and up.get("master_repl_offset") == down.get("slave_repl_offset"))

    def stop(self) -> None:
        for server in self.servers:
            server.stop()


class Cluster:
    """Six cluster-mode ``redis-server``: three primaries, three replicas."""

    def __init__(self, work: Path) -> None:
        self.nodes = []
        for number in range(6):
            name = f"cluster-{number}"
            self.nodes.append(_redis(work, name, "--cluster-enabled", "yes", "--cluster-port", str(free_port()),
                                     "--cluster-config-file", str(work / name / "nodes.conf"),
                                     "--cluster-node-timeout", "2000"))

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port},127.0.0.1:{self.nodes[1].port}/"

    async def start(self) -> None:
        for node in self.nodes:
            node.start()
        for node in self.nodes:
            await node.wait_ready()
        cli = shutil.which("redis-cli") or "redis-cli"
        created = await asyncio.to_thread(
            subprocess.run, [cli, "--cluster", "create", *(f"127.0.0.1:{node.port}" for node in self.nodes),
                             "--cluster-replicas", "1", "--cluster-yes"], capture_output=True, timeout=60)
        if created.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {created.stdout.decode()[-1000:]}")
        await _until("every node of the cluster is ok, three replicas linked", self._ready)

    async def _ready(self) -> bool:
        linked = 0
        for node in self.nodes:
            if "cluster_state:ok" not in _text(await _ask(node.port, "CLUSTER", "INFO")):
                return False
            replication = dict(await _ask(node.port, "INFO", "replication"))
            linked += replication.get("role") == "slave" and replication.get("master_link_status") == "up"
        return linked == 3

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


# ------------------------------------------------------------------ measures
def _adapter(work: Path, name: str, runtime_url: str, store: str) -> Server:
    port = free_port()
    argv = [sys.executable, "-m", "aguiadapter", "--port", str(port), "--a2a-url", runtime_url,
            "--state-dir", str(work / name / "state"), "--allowed-cwd", str(work / "workspaces"),
            "--log-level", "warning", "--max-new-threads-per-user", "0", "--store", store]
    return Server(name, argv, port=port, log_path=work / f"{name}.log")


class Side:
    """One target's blocks: wall per run per block, CPU over all blocks."""

    def __init__(self) -> None:
        self.wall_ms: list[float] = []
        self.cpu_s = 0.0
        self.redis_cpu_s = 0.0
        self.cpu_per_round: list[float] = []
        self.runs = 0


async def _short_run(url: str, cwd: str, timeout: float | None = None) -> str:
    try:
        result = await asyncio.wait_for(stream(url, run_body("firehose 5", cwd=cwd)), timeout)
    except asyncio.TimeoutError:
        return "error: no end within the bound"
    return agui_outcome(result)


async def _block(adapter: Server, redis: Sequence[Server], cwd: str, size: int, side: Side) -> None:
    cpu, redis_cpu, began = adapter.cpu(), sum(r.cpu() for r in redis), time.perf_counter()
    for _ in range(size):
        outcome = await _short_run(adapter.url, cwd)
        if outcome != "success":
            raise RuntimeError(f"a short run through {adapter.name} ended {outcome}\n{adapter.log_tail()}")
    side.wall_ms.append((time.perf_counter() - began) * 1000 / size)
    used = adapter.cpu() - cpu
    side.cpu_s += used
    side.cpu_per_round.append(used * 1000 / size)
    side.redis_cpu_s += sum(r.cpu() for r in redis) - redis_cpu
    side.runs += size


async def short_runs(adapters: dict[str, Server], redis: Mapping[str, Sequence[Server]], cwd: str,
                     rounds: int, size: int) -> dict[str, Side]:
    sides = {name: Side() for name in adapters}
    for adapter in adapters.values():  # warm up: connections, scripts loaded
        for _ in range(5):
            await _short_run(adapter.url, cwd)
    await wait_quiet(list(adapters.values()), timeout=5.0)
    names = list(adapters)
    for number in range(rounds):
        for name in names[number % len(names):] + names[:number % len(names)]:
            await _block(adapters[name], redis[name], cwd, size, sides[name])
    return sides


async def failover_gap(sentinels: Sentinels, adapter: Server, cwd: str) -> dict[str, Any]:
    """Kill -9 the primary; seconds until a short run through ``adapter`` succeeds again."""
    victim = await sentinels.current_primary()
    assert victim.proc is not None
    outcome = await _short_run(adapter.url, cwd, 10.0)
    if outcome != "success":
        raise RuntimeError(f"before the failover a short run ended {outcome}")
    victim.proc.kill()  # kill -9, by its own pid
    killed = time.perf_counter()
    victim.proc.wait()
    failures: dict[str, int] = {}
    while True:
        tried = time.perf_counter()
        outcome = await _short_run(adapter.url, cwd, 5.0)
        if outcome == "success":
            gap = time.perf_counter() - killed
            break
        code = re.search(r"[A-Z][A-Z_]{5,}", outcome)
        key = code.group(0) if code else outcome[:60]
        failures[key] = failures.get(key, 0) + 1
        if time.perf_counter() - killed > 60:
            raise RuntimeError(f"no run succeeded within 60 s of the kill: {failures}")
        await asyncio.sleep(max(0.0, 0.1 - (time.perf_counter() - tried)))
    promoted = await sentinels.current_primary()
    victim.start()  # the sentinels make the old primary a replica of the new one
    await victim.wait_ready()
    await _until("the old primary is a synced replica", sentinels.synced)
    return {"gap_s": gap, "failed_attempts": failures, "promoted": promoted.name}


def _spread(values: Sequence[float], digits: int = 2) -> str:
    return f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}-{max(values):.{digits}f}]"


def _ratio(value: float, base: float) -> str:
    """``value / base``, or why not (a smoke-sized block may not last one 10 ms clock tick)."""
    return f"{value / base:.3f}" if base else "n/a: 0 ticks"


def render(sides: dict[str, Side], gaps: list[dict[str, Any]], size: int) -> list[str]:
    base = sides[SINGLE]
    lines = [f"20. A short run (firehose 5, a new thread) per Redis topology: {len(base.wall_ms)} rounds of {size}",
             f"{'target':28} {'wall ms/run':>22} {'adapter CPU ms/run':>19} {'Redis CPU ms/run':>17}"
             f" {'wall / single':>14} {'CPU / single':>13}"]
    for name, side in sides.items():
        walls = [a / b for a, b in zip(side.wall_ms, base.wall_ms, strict=True)]
        cpu = side.cpu_s * 1000 / side.runs
        lines.append(f"{name:28} {_spread(side.wall_ms):>22} {cpu:19.2f} {side.redis_cpu_s * 1000 / side.runs:17.2f}"
                     f" {statistics.median(walls):14.3f} {_ratio(side.cpu_s, base.cpu_s):>13}")
    if gaps:
        values = [gap["gap_s"] for gap in gaps]
        lines.append(f"20. Failover gap (Sentinel, kill -9 of the primary until a run succeeds again): "
                     f"{_spread(values)} s over {len(values)} failovers (down-after-milliseconds {DOWN_AFTER_MS}); "
                     f"refused attempts meanwhile: {[gap['failed_attempts'] for gap in gaps]}")
    return lines


async def run(profile: str, rounds: int | None = None, block: int | None = None,
              failovers: int | None = None) -> dict[str, Any]:
    default_rounds, default_block, default_failovers = SIZES[profile]
    rounds, block = rounds or default_rounds, block or default_block
    failovers = default_failovers if failovers is None else failovers
    work = Path(tempfile.mkdtemp(prefix="bench-redis-topologies-"))
    cwd = work / "workspaces" / "ws"
    cwd.mkdir(parents=True)
    runtime_port = free_port()
    runtime = Server("runtime", [sys.executable, "-m", "aguiadapter.demo", "--port", str(runtime_port)],
                     port=runtime_port, log_path=work / "runtime.log")
    single = _redis(work, "single")
    sentinels = Sentinels(work)
    cluster = Cluster(work)
    adapters: dict[str, Server] = {}
    try:
        runtime.start()
        single.start()
        await single.wait_ready()
        await asyncio.gather(runtime.wait_ready(), sentinels.start(), cluster.start())
        stores = {SINGLE: single.redis_url, SENTINEL0: sentinels.url(prefix="bench0:"),
                  SENTINEL1: sentinels.url(prefix="bench1:", min_replicas="1"), CLUSTER: cluster.url}
        adapters = {name: _adapter(work, f"adapter-{number}", runtime.url, store)
                    for number, (name, store) in enumerate(stores.items())}
        for adapter in adapters.values():
            adapter.start()
        for adapter in adapters.values():
            await adapter.wait_ready()
        redis = {SINGLE: [single], SENTINEL0: sentinels.servers, SENTINEL1: sentinels.servers,
                 CLUSTER: cluster.nodes}
        sides = await short_runs(adapters, redis, str(cwd), rounds, block)
        gaps = [await failover_gap(sentinels, adapters[SENTINEL0], str(cwd)) for _ in range(failovers)]
    finally:
        for adapter in adapters.values():
            adapter.stop()
        runtime.stop()
        single.stop()
        sentinels.stop()
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    lines = render(sides, gaps, block)
    for line in lines:
        print(line, flush=True)
    return {"lines": lines, "gaps": gaps,
            "sides": {name: {"wall_ms": side.wall_ms, "cpu_ms_per_run": side.cpu_s * 1000 / side.runs,
                             "redis_cpu_ms_per_run": side.redis_cpu_s * 1000 / side.runs}
                      for name, side in sides.items()}}


def unavailable() -> str | None:
    """Why the topologies cannot be started here, or ``None``."""
    from .harness import redis_unavailable

    if shutil.which("redis-cli") is None:
        return "redis-cli not found on PATH (it joins the cluster)"
    return redis_unavailable()


async def measure_redis_topologies(bench: Bench) -> None:
    """20. inside ``python -m benchmarks`` (``--only topologies``): the suite's profile; the figures are printed."""
    reason = unavailable()
    if reason is not None:
        bench.log(f"  20. Redis topologies not measured: {reason}")
        return
    await run(bench.sizes.name)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.redis_topologies",
                                     description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--quick", dest="profile", action="store_const", const="quick")
    group.add_argument("--smoke", dest="profile", action="store_const", const="smoke")
    parser.set_defaults(profile="full")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--block", type=int, default=None, help="short runs per block")
    parser.add_argument("--failovers", type=int, default=None)
    args = parser.parse_args(argv)
    reason = unavailable()
    if reason is not None:
        print(f"cannot run: {reason}", file=sys.stderr)
        return 2
    asyncio.run(run(args.profile, args.rounds, args.block, args.failovers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
