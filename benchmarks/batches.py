"""What several measures share: a private redis-server, a batch of short runs."""

from __future__ import annotations

import shutil
import statistics
from typing import TYPE_CHECKING

from .harness import redis_unavailable
from .procs import RedisServer, free_port, wait_quiet
from .report import Results

if TYPE_CHECKING:
    from .harness import Bench, Target


async def private_redis(bench: Bench, name: str) -> tuple[RedisServer | None, str | None]:
    """A started ``redis-server`` of the measure's own (stopped with the bench
    after a failure), or why there is none."""
    problem = redis_unavailable()
    if problem is not None:
        return None, problem
    executable = shutil.which("redis-server")
    assert executable is not None
    redis = RedisServer(executable, bench.work / name, port=free_port(), name=name)
    bench.extra.append(redis)
    try:
        redis.start()
        await redis.wait_ready()
    except (OSError, RuntimeError) as exc:
        redis.stop()
        return None, f"redis-server did not start ({str(exc)[:160]})"
    return redis, None


async def short_run_batch(bench: Bench, results: Results, target: Target) -> bool:
    """One batch of the profile's short runs on new threads: the median wall
    time and the adapter's CPU per run (read after it went quiet, so work
    after a run's last event counts too). ``False`` when a run failed."""
    sizes = bench.sizes
    cpu0 = target.server.cpu()
    walls = []
    for _ in range(sizes.cost_batch):
        result = await bench.bounded_run(target, sizes.cost_text)
        if bench.ok(target, result):
            walls.append(result.seconds)
    await wait_quiet([target.server], timeout=2.0)
    cpu1 = target.server.cpu()
    if len(walls) < sizes.cost_batch:
        results.note(target.key, "errors", f"cost per run: {sizes.cost_batch - len(walls)} failed")
        return False
    results.add(target.key, "per_run_wall_ms", statistics.median(walls) * 1000)
    results.add(target.key, "per_run_cpu_ms", (cpu1 - cpu0) / sizes.cost_batch * 1000)
    return True
