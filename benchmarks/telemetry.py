"""9. What metrics and tracing cost: the adapter with each of them on, against it with neither.

Four fresh adapters in front of the shared runtime: no telemetry, ``--metrics``,
tracing (``OTEL_EXPORTER_OTLP_ENDPOINT`` pointing at a small OTLP/HTTP
collector that this process serves on loopback, the SDK's default batching),
and both. In rotating order per round, each does a batch of short runs (cost
per run: wall time at the client, adapter CPU / runs) and one long firehose
run (events/s, CPU per 10k events), which shows that nothing is added per
event. The table divides each target's medians by those of the adapter with no
telemetry. A missing ``otel`` extra turns the tracing columns into
``n/a: reason``.
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs
from aiohttp import web

from .batches import short_run_batch
from .comparison import Comparison
from .harness import Target
from .procs import free_port
from .report import Column, Results

if TYPE_CHECKING:
    from .harness import Bench

PLAIN, METRICS, TRACING, BOTH = "plain", "metrics", "tracing", "both"
TELEMETRY_TARGETS = (PLAIN, METRICS, TRACING, BOTH)
TELEMETRY_LABELS = {
    PLAIN: "adapter, no telemetry",
    METRICS: "--metrics",
    TRACING: "tracing (OTLP)",
    BOTH: "--metrics + tracing",
}
TELEMETRY_COLUMNS: tuple[Column, ...] = (
    Column("per_run_wall_ms", "9. cost per run ({cost_text}): wall", "ms", "lower", 2),
    Column("per_run_cpu_ms", "9. cost per run ({cost_text}): adapter CPU", "ms", "lower", 2),
    Column("throughput_eps", "9. throughput, {firehose} deltas", "events/s", "higher"),
    Column("cpu_s_per_10k", "9. CPU per 10k events", "s", "lower", 3),
)
TELEMETRY_KEYS = tuple(column.key for column in TELEMETRY_COLUMNS)
COMPARISON = Comparison(
    "9.", TELEMETRY_LABELS, TELEMETRY_COLUMNS, {t: PLAIN for t in TELEMETRY_TARGETS if t != PLAIN},
    baseline_names={PLAIN: "no telemetry"},
)


@attrs.define
class Collector:
    """An OTLP/HTTP trace receiver on loopback that only counts what it gets."""

    requests: int = 0
    bytes: int = 0
    runner: web.AppRunner | None = None
    port: int = 0

    async def start(self) -> str:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/traces", self._receive)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        self.port = free_port()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()
        return f"http://127.0.0.1:{self.port}"

    async def _receive(self, request: web.Request) -> web.Response:
        self.requests += 1
        self.bytes += len(await request.read())
        return web.Response(body=b"", content_type="application/x-protobuf")

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


def otel_missing() -> str | None:
    """Why the tracing targets cannot run here, or ``None``."""
    for module in ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http"):
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            return f"the otel extra is not installed (pip install 'aguiadapter[otel]'; no {module})"
    return None


async def measure_telemetry(bench: Bench) -> Results:
    """Run 9. and return its results (targets of :data:`TELEMETRY_TARGETS`)."""
    results = Results(TELEMETRY_TARGETS)
    missing = otel_missing()
    wanted = [PLAIN, METRICS] if missing else list(TELEMETRY_TARGETS)
    if missing:
        for key in (TRACING, BOTH):
            for column in TELEMETRY_KEYS:
                results.na(key, column, missing)
        bench.log(f"  NOTE: tracing not measured: {missing}")
    collector = Collector()
    endpoint = await collector.start()
    started: list[Target] = []
    try:
        for key in wanted:
            state = bench.work / f"state-telemetry-{key}"
            shutil.rmtree(state, ignore_errors=True)
            args = ["--metrics"] if key in (METRICS, BOTH) else []
            env = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_SERVICE_NAME": "aguiadapter-bench"} \
                if key in (TRACING, BOTH) else {}
            server = bench._adapter_server(state, free_port(), name=f"telemetry-{key}", extra_args=args, env_extra=env)
            bench.extra.append(server)
            started.append(Target(key, server, "agui"))
        for target in started:
            target.server.start()
        for target in started:
            await target.server.wait_ready(timeout=60)
            for _ in range(bench.sizes.cost_batch):
                warm = await bench.bounded_run(target, bench.sizes.cost_text)
                if not bench.ok(target, warm):
                    raise RuntimeError(f"warm-up of {TELEMETRY_LABELS[target.key]} failed: "
                                       f"{bench.outcome(target, warm)}")
        await _rounds(bench, results, started)
        results.note(TRACING, "collector", {"requests": collector.requests, "bytes": collector.bytes})
        if not missing and collector.requests == 0:
            results.note(TRACING, "errors", "no span reached the OTLP collector")
    finally:
        for target in started:
            target.server.stop()
        await collector.stop()
    return results


async def _rounds(bench: Bench, results: Results, targets: Sequence[Target]) -> None:
    sizes = bench.sizes
    servers = [t.server for t in targets]
    for rep in range(sizes.cost_rounds):
        for target in bench.rotation(targets, rep):
            await bench.settle(*servers)
            # Work after a run's last event (span export, a store write) counts too.
            await short_run_batch(bench, results, target)
    for rep in range(sizes.reps):
        for target in bench.rotation(targets, rep):
            await bench.settle(*servers)
            cpu0 = target.server.cpu()
            result = await bench.bounded_run(target, f"firehose {sizes.firehose}")
            cpu1 = target.server.cpu()
            if not bench.ok(target, result) or result.texts < sizes.firehose:
                results.note(target.key, "errors", f"throughput: {bench.outcome(target, result)[:160]}")
                continue
            results.add(target.key, "throughput_eps", result.events / result.seconds)
            results.add(target.key, "cpu_s_per_10k", (cpu1 - cpu0) / result.events * 10_000)


def render_telemetry(results: Results, sizes: dict[str, Any]) -> str:
    """The table of 9. and its ratios against no telemetry."""
    return COMPARISON.render(results, {k: f"{v:,}" if isinstance(v, int) else v for k, v in sizes.items()})


def telemetry_json(results: Results, sizes: dict[str, Any]) -> dict[str, Any]:
    """9. in the JSON file."""
    return COMPARISON.json(results, sizes)


def telemetry_notes(results: Results) -> list[str]:
    """9. in words: what each kind of telemetry adds per run and per event."""
    lines = COMPARISON.notes(results, "telemetry")
    collector = results.details.get(TRACING, {}).get("collector")
    if collector:
        lines.append(f"OTLP collector received {collector[0]['requests']} export requests, "
                     f"{collector[0]['bytes']:,} bytes")
    return lines
