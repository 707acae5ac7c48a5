"""``python -m benchmarks``: run every measure side by side and report.

One demo runtime (firehose mode) serves every target. The targets run as
separate processes on loopback: this adapter, ``iac-code agui`` from its own
virtualenv, and the minimal relay of :mod:`benchmarks.relay`; the runtime is
also measured alone with a raw A2A client. Each measure repeats its runs with
the targets in a rotating order, so drift on a shared machine spreads over
all of them; medians with min and max are reported, and the targets are
judged only by ratios of medians from the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp

from . import iacenv
from .client import (
    A2A_HEADERS,
    A2A_TEXT_MARK,
    StreamResult,
    a2a_body,
    a2a_outcome,
    agui_outcome,
    run_body,
    stream,
)
from .event_ids import event_ids_json, event_ids_notes, render_event_ids
from .harness import PROFILES, Sizes, Target, redis_unavailable
from .procs import RedisServer, Server, fd_limit, free_port, raise_fd_limit, wait_quiet
from .report import (
    ADAPTER,
    ADAPTER_PROCESS,
    ADAPTER_REDIS,
    COLUMN_KEYS,
    IAC,
    PROCESS_KEYS,
    RELAY,
    RUNTIME,
    STORE_KEYS,
    TARGET_LABELS,
    Results,
    percentile,
    render,
    to_json,
    write_json,
)
from .history import history_json, render_history
from .image_attack import image_attack_json, render_image_attack
from .replay_memory import render_replay_memory, replay_memory_json
from .shutdown import render_shutdown, shutdown_json
from .statefiles import make_state_dir
from .telemetry import render_telemetry, telemetry_json, telemetry_notes
from .thread_list import render_thread_list, thread_list_json
from .thread_age import measure_thread_age
from .redis_topologies import measure_redis_topologies
from .pool import measure_pool

MB = 1024 * 1024


MEASURES = ("rss", "ttf", "throughput", "interrupt", "concurrency", "store", "telemetry", "startup", "idle",
            "capacity", "ids", "shutdown", "replay", "history", "threadlist", "images", "age", "topologies", "pool")
# What makes iac-code quiet and keeps it off the network.
QUIET_ENV = {"DISABLE_TELEMETRY": "1", "IAC_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "OTEL_SDK_DISABLED": "true"}


class Bench:
    """The running setup: runtime, targets, client session and results."""

    def __init__(self, sizes: Sizes, work: Path, iac_venv: Path | None, log=print,  # type: ignore[no-untyped-def]
                 keys: Sequence[str] = (ADAPTER, ADAPTER_PROCESS, IAC, RELAY, RUNTIME)) -> None:
        self.keys = tuple(keys)
        self.sizes = sizes
        self.work = work
        self.iac_venv = iac_venv
        self.log = log
        self.ws_root = work / "ws"
        self.cwd = str(self.ws_root / "bench")
        self.runtime: Server | None = None
        self.targets: list[Target] = []
        self.results = Results([ADAPTER, ADAPTER_PROCESS, ADAPTER_REDIS, IAC, RELAY, RUNTIME])
        for column in COLUMN_KEYS:
            if column not in PROCESS_KEYS:
                self.results.na(ADAPTER_PROCESS, column, "default durability only: this measure does not turn on "
                                "the synced writes (see PROCESS_KEYS in benchmarks/report.py)")
        self.cleanup: list[asyncio.Task[None]] = []
        self.relay_args: list[str] = []
        # Servers started by one measure (stopped by it, and again by stop() after a failure).
        self.extra: list[Server] = []
        self.redis_meta: dict[str, Any] = {"measured": False}
        #: 9. (what metrics and tracing cost), when measured.
        self.telemetry: Results | None = None
        #: 12. (what event ids and run logs cost), when measured.
        self.event_ids: Results | None = None
        #: 13. (how fast the process exits on a signal), when measured.
        self.shutdown: Results | None = None
        #: 14. (RSS over rounds of slow re-attaches), when measured.
        self.replay_memory: Results | None = None
        #: 15. (what a thread's history costs), when measured.
        self.history: Results | None = None
        #: 16. (GET /threads of a user with many threads), when measured.
        self.thread_list: Results | None = None
        #: 17. (image bombs, gzipped), when measured.
        self.image_attack: Results | None = None

    # ------------------------------------------------------------ processes
    def _adapter_server(self, state_dir: Path, port: int, name: str = "adapter",
                        launcher: Sequence[str] | None = None, a2a_url: str | None = None,
                        store: str | None = None, extra_args: Sequence[str] = (),
                        env_extra: dict[str, str] | None = None, heartbeat: float | None = None) -> Server:
        launcher = launcher or [sys.executable, "-m", "aguiadapter"]
        argv = [*launcher, "--host", "127.0.0.1", "--port", str(port),
                "--a2a-url", a2a_url or self.runtime_url, "--state-dir", str(state_dir), *extra_args]
        if store is not None:
            argv += ["--store", store]
        if heartbeat is not None:
            argv += ["--heartbeat-seconds", f"{heartbeat:g}"]
        # Tracing only where a measure asks for it, whatever this shell's OTEL_* say.
        env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
        # The bench starts thousands of threads a minute, as iac-code agui lets it: no cap on new threads.
        env.update({"IAC_CODE_AGUI_ALLOWED_CWDS": str(self.ws_root), "IAC_CODE_AGUI_MAX_NEW_THREADS_PER_USER": "0",
                    **(env_extra or {})})
        return Server(name, argv, port=port, log_path=self.work / "logs" / f"{name}.log", env=env)

    def _iac_server(self, port: int, name: str = "iac-code-agui", a2a_url: str | None = None) -> Server:
        assert self.iac_venv is not None
        state = self.work / f"state-{name}"
        shutil.rmtree(state, ignore_errors=True)
        home = self.work / "iac-home"
        home.mkdir(parents=True, exist_ok=True)
        argv = [str(iacenv.executable(self.iac_venv)), "agui", "--host", "127.0.0.1", "--port", str(port),
                "--a2a-url", a2a_url or self.runtime_url, "--state-dir", str(state)]
        env = {**os.environ, **QUIET_ENV, "HOME": str(home), "IAC_CODE_AGUI_ALLOWED_CWDS": str(self.ws_root)}
        for leaked in ("IAC_CODE_AGUI_AUTH_TOKEN", "IAC_CODE_AGUI_A2A_TOKEN", "VIRTUAL_ENV", "PYTHONPATH"):
            env.pop(leaked, None)
        return Server(name, argv, port=port, log_path=self.work / "logs" / f"{name}.log", env=env,
                      cwd=str(self.work))

    def _relay_server(self, port: int, name: str = "relay", a2a_url: str | None = None,
                      extra_args: Sequence[str] = ()) -> Server:
        argv = [sys.executable, "-m", "benchmarks.relay", "--port", str(port), "--a2a-url",
                a2a_url or self.runtime_url, *self.relay_args, *extra_args]
        here = str(Path(__file__).resolve().parent.parent)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))}
        return Server(name, argv, port=port, log_path=self.work / "logs" / f"{name}.log", env=env)

    @property
    def runtime_url(self) -> str:
        """The demo runtime's JSON-RPC endpoint."""
        assert self.runtime is not None
        return self.runtime.url

    async def start(self) -> None:
        """Start the runtime and every target; warm each one up."""
        (self.ws_root / "bench").mkdir(parents=True, exist_ok=True)
        port = free_port()
        self.runtime = Server("runtime", [sys.executable, "-m", "aguiadapter.demo", "--port", str(port)],
                              port=port, log_path=self.work / "logs" / "runtime.log")
        self.runtime.start()
        await self.runtime.wait_ready()
        if ADAPTER in self.keys:
            self.targets.append(Target(ADAPTER, self._adapter_server(self.work / "state-adapter", free_port()), "agui"))
        if ADAPTER_PROCESS in self.keys:
            server = self._adapter_server(self.work / "state-adapter-process", free_port(), name="adapter-process",
                                          extra_args=("--durability", "process"))
            self.targets.append(Target(ADAPTER_PROCESS, server, "agui"))
        if IAC in self.keys and self.iac_venv is not None:
            self.targets.append(Target(IAC, self._iac_server(free_port()), "agui"))
        if RELAY in self.keys:
            self.targets.append(Target(RELAY, self._relay_server(free_port()), "agui"))
        if RUNTIME in self.keys:
            self.targets.append(Target(RUNTIME, self.runtime, "a2a"))
        for target in self.targets:
            if target.key != RUNTIME:
                target.server.start()
        for target in self.targets:
            seconds = await target.server.wait_ready(timeout=120)
            self.log(f"  {target.label:<29} pid {target.server.pid:<7} {target.server.url}  ready in {seconds:.2f} s")
        for target in self.targets:
            result = await self.one_run(target, f"firehose {self.sizes.warmup}")
            if self.outcome(target, result) not in ("success", "TASK_STATE_INPUT_REQUIRED"):
                raise RuntimeError(f"warm-up of {target.label} failed: {self.outcome(target, result)}\n"
                                   f"{target.server.log_tail()}")

    async def stop(self) -> None:
        """Stop everything this bench started."""
        for server in (t.server for t in self.targets if t.key != RUNTIME):
            server.stop()
        for server in self.extra:
            server.stop()
        if self.runtime is not None:
            self.runtime.stop()
        if self.cleanup:
            await asyncio.gather(*self.cleanup, return_exceptions=True)

    # --------------------------------------------------------------- helpers
    async def one_run(self, target: Target, text: str, *, keep_body: bool = False,
                      opened: asyncio.Event | None = None, result: StreamResult | None = None,
                      body: dict[str, Any] | None = None) -> StreamResult:
        """One run on a fresh thread (or one raw A2A turn on a fresh context)."""
        if target.kind == "a2a":
            return await stream(target.server.url, body or a2a_body(text, cwd=self.cwd),
                                headers=A2A_HEADERS, text_mark=A2A_TEXT_MARK, keep_body=keep_body,
                                opened=opened, result=result)
        return await stream(target.server.url, body or run_body(text, cwd=self.cwd),
                            keep_body=keep_body, opened=opened, result=result)

    async def bounded_run(self, target: Target, text: str) -> StreamResult:
        """:meth:`one_run` with the profile's time limit (a timeout is an error, not a crash)."""
        result = StreamResult()
        try:
            return await asyncio.wait_for(self.one_run(target, text, result=result), self.sizes.run_timeout)
        except asyncio.TimeoutError:
            result.error = f"no end after {self.sizes.run_timeout:g} s"
            return result

    @staticmethod
    def outcome(target: Target, result: StreamResult) -> str:
        """How a run ended."""
        return a2a_outcome(result) if target.kind == "a2a" else agui_outcome(result)

    def ok(self, target: Target, result: StreamResult) -> bool:
        """Whether a run ended normally (noted in the details when not)."""
        outcome = self.outcome(target, result)
        good = outcome in ("success", "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_COMPLETED")
        if not good:
            self.results.note(target.key, "errors", outcome[:300])
        return good

    def rotation(self, items: Sequence[Any], rep: int) -> list[Any]:
        """*items* rotated by *rep* (interleaving that cancels drift)."""
        shift = rep % len(items)
        return [*items[shift:], *items[:shift]]

    async def settle(self, *servers: Server) -> None:
        """Let the runtime and the given servers go quiet before a timed run."""
        assert self.runtime is not None
        await wait_quiet([self.runtime, *servers], timeout=5.0)

    # -------------------------------------------------------------- measures
    async def measure_rss(self) -> None:
        """5a. RSS of each server, idle, after its warm-up run."""
        for target in self.targets:
            samples = []
            for _ in range(5):
                samples.append(target.server.rss() / MB)
                await asyncio.sleep(0.1)
            for value in samples:
                self.results.add(target.key, "rss_idle_mb", value)

    async def measure_ttf(self) -> None:
        """3. Short runs: time to the first event, to the first text delta, to
        the end, and the server's CPU per run.

        Each round runs a batch of sequential short runs (a new thread each)
        on every target in rotating order; per batch, the medians of the
        client's times, and the CPU the server's process tree used over the
        batch (read once it went quiet again) divided by the runs.
        """
        batch = self.sizes.short_batch
        for rep in range(self.sizes.short_rounds):
            for target in self.rotation(self.targets, rep):
                await self.settle(target.server)
                cpu0 = target.server.cpu()
                ttfe, ttft, walls = [], [], []
                for _ in range(batch):
                    result = await self.bounded_run(target, self.sizes.short_text)
                    if not self.ok(target, result) or result.ttft is None or result.ttfe is None:
                        continue
                    ttfe.append(result.ttfe)
                    ttft.append(result.ttft)
                    walls.append(result.seconds)
                await wait_quiet([target.server], timeout=2.0)
                cpu1 = target.server.cpu()
                if len(walls) < batch:
                    self.results.note(target.key, "errors", f"short runs: {batch - len(walls)} of {batch} failed")
                    continue
                self.results.add(target.key, "ttfe_ms", statistics.median(ttfe) * 1000)
                self.results.add(target.key, "ttft_ms", statistics.median(ttft) * 1000)
                self.results.add(target.key, "short_run_ms", statistics.median(walls) * 1000)
                self.results.add(target.key, "short_cpu_ms", (cpu1 - cpu0) / batch * 1000)

    async def measure_throughput(self) -> None:
        """1. and 2. One long firehose run: events/s at the client, CPU per 10k events."""
        n = self.sizes.firehose
        assert self.runtime is not None
        # Not --durability process: a long run's three writes are lost among its 20,000 events.
        targets = [target for target in self.targets if target.key != ADAPTER_PROCESS]
        for rep in range(self.sizes.reps):
            for target in self.rotation(targets, rep):
                await self.settle(target.server)
                cpu0, rt0, client0 = target.server.cpu(), self.runtime.cpu(), time.process_time()
                result = await self.bounded_run(target, f"firehose {n}")
                cpu1, rt1, client1 = target.server.cpu(), self.runtime.cpu(), time.process_time()
                if not self.ok(target, result):
                    continue
                if result.texts < n:
                    self.results.note(target.key, "errors", f"only {result.texts} of {n} text deltas arrived")
                    continue
                self.results.add(target.key, "throughput_eps", result.events / result.seconds)
                self.results.add(target.key, "cpu_s_per_10k", (cpu1 - cpu0) / result.events * 10_000)
                self.results.add(target.key, "runtime_busy_pct", (rt1 - rt0) / result.seconds * 100)
                self.results.note(target.key, "throughput_client_cpu_pct",
                                  round((client1 - client0) / result.seconds * 100, 1))
                self.results.note(target.key, "throughput_events", result.events)

    async def measure_concurrency(self) -> None:
        """4. Many simultaneous runs on distinct threads: total events/s, p50/p99 completion."""
        n = self.sizes.conc_events
        for level, prefix in zip(self.sizes.conc_levels, ("conc_low", "conc_high"), strict=True):
            for rep in range(self.sizes.conc_reps):
                for target in self.rotation(self.targets, rep):
                    await self.settle(target.server)
                    peak = _PeakRss(target.server)
                    start = time.perf_counter()
                    runs = [self.one_run(target, f"firehose {n}") for _ in range(level)]
                    try:
                        results = await asyncio.wait_for(asyncio.gather(*runs), self.sizes.run_timeout)
                    except asyncio.TimeoutError:
                        self.results.note(target.key, "errors", f"{level} runs: over {self.sizes.run_timeout} s")
                        continue
                    finally:
                        highest = await peak.stop()
                    good = [r for r in results if self.ok(target, r) and r.texts >= n]
                    if len(good) < level:
                        self.results.note(target.key, "errors", f"{level} runs: {level - len(good)} failed")
                        continue
                    done = [r.ended - start for r in good]
                    events = sum(r.events for r in good)
                    self.results.add(target.key, f"{prefix}_eps", events / max(done))
                    self.results.add(target.key, f"{prefix}_p50_s", percentile(done, 0.50))
                    self.results.add(target.key, f"{prefix}_p99_s", percentile(done, 0.99))
                    self.results.add(target.key, f"{prefix}_peak_rss_mb", highest / MB)

    async def measure_idle(self) -> None:
        """5. Many open streams in a slow run: RSS per stream (see benchmarks/capacity.py)."""
        from .capacity import measure_idle

        await measure_idle(self)

    async def measure_capacity(self) -> None:
        """10. and 11. Streams waiting on a silent runtime (see benchmarks/capacity.py)."""
        from .capacity import measure_capacity

        await measure_capacity(self)

    async def measure_interrupt(self) -> None:
        """7. permission → interrupt → resume (allow_once) → success, against the runtime's own round trip."""
        self.results.na(RELAY, "interrupt_rt_ms", "the minimal relay keeps no state and cannot resume")
        self.results.na(RELAY, "interrupt_added_ms", "the minimal relay keeps no state and cannot resume")
        self.results.na(RUNTIME, "interrupt_added_ms", "this is the runtime's own round trip")
        broken: set[str] = set()
        for rep in range(self.sizes.interrupt_reps):
            for target in self.rotation(self.targets, rep):
                if target.key == RELAY or target.key in broken:
                    continue
                await asyncio.sleep(0.02)
                trip = self._raw_interrupt(target) if target.kind == "a2a" else self._agui_interrupt(target)
                try:
                    elapsed, problem = await asyncio.wait_for(trip, self.sizes.run_timeout)
                except asyncio.TimeoutError:
                    elapsed, problem = 0.0, f"n/a: no end within {self.sizes.run_timeout:g} s"
                if problem is not None:
                    broken.add(target.key)
                    self.results.na(target.key, "interrupt_rt_ms", problem)
                    self.results.na(target.key, "interrupt_added_ms", problem)
                    continue
                self.results.add(target.key, "interrupt_rt_ms", elapsed * 1000)
        own = self.results.median(RUNTIME, "interrupt_rt_ms")
        for key in (ADAPTER, ADAPTER_PROCESS, IAC):
            for value in self.results.samples[key].get("interrupt_rt_ms", []):
                if own is None:
                    self.results.na(key, "interrupt_added_ms", "the runtime's own round trip is unknown")
                else:
                    self.results.add(key, "interrupt_added_ms", value - own)

    async def _raw_interrupt(self, target: Target) -> tuple[float, str | None]:
        started = time.perf_counter()
        first = await self.one_run(target, "permission", keep_body=True)
        envelope = None
        for event in first.events_of():
            update = (event.get("result") or {}).get("statusUpdate") or {}
            envelope = ((update.get("metadata") or {}).get("iac_code") or {}).get("input") or envelope
        if envelope is None:
            return 0.0, f"n/a: the runtime sent no interrupt ({a2a_outcome(first)})"
        answer = {"schemaVersion": 1, "kind": "permission", "requestTaskId": envelope["requestTaskId"],
                  "inputId": envelope["inputId"], "toolUseId": envelope["toolUseId"], "decision": "allow_once"}
        body = a2a_body("", cwd=self.cwd, task_id=envelope["requestTaskId"], context_id=envelope["contextId"],
                        parts=[{"data": answer}])
        second = await self.one_run(target, "", body=body, keep_body=True)
        elapsed = time.perf_counter() - started
        if not self.ok(target, second):
            return 0.0, f"n/a: the runtime refused the answer ({a2a_outcome(second)})"
        return elapsed, None

    async def _agui_interrupt(self, target: Target) -> tuple[float, str | None]:
        body = run_body("permission", cwd=self.cwd)
        started = time.perf_counter()
        first = await self.one_run(target, "", body=body, keep_body=True)
        last = first.last_event if isinstance(first.last_event, dict) else {}
        interrupts = (last.get("outcome") or {}).get("interrupts") or []
        if agui_outcome(first) != "interrupt" or not interrupts:
            return 0.0, f"n/a: no interrupt came back ({agui_outcome(first)})"
        resume = [{"interruptId": interrupts[0]["id"], "status": "resolved", "payload": {"decision": "allow_once"}}]
        again = {**body, "runId": f"{body['runId']}-resume", "resume": resume}
        second = await self.one_run(target, "", body=again, keep_body=True)
        elapsed = time.perf_counter() - started
        outcome = agui_outcome(second)
        if outcome != "success":
            why = outcome.removeprefix("error: ").removeprefix("RUN_ERROR ")
            return 0.0, f"n/a: resume not available ({why[:160]})"
        return elapsed, None

    async def measure_store(self) -> None:
        """8. Cost per run with ``--store redis://...`` against the default file store.

        Two fresh adapters on fresh state (one per store) in front of the shared
        runtime, and a private ``redis-server`` in the scratch folder. Each
        round runs a batch of short runs (a new thread each) on one, then the
        other, in rotating order: the median wall time of the batch and the
        adapter's CPU seconds over the batch / runs. Anything missing on the
        Redis side turns its column into ``n/a: reason``; nothing here crashes
        the suite for it.
        """
        for key in (IAC, RELAY, RUNTIME):
            for column in STORE_KEYS:
                self.results.na(key, column, "adapter only")
        for column in COLUMN_KEYS:
            if column not in STORE_KEYS:
                self.results.na(ADAPTER_REDIS, column, "cost per run (8.) only")
        redis: RedisServer | None = None
        started: list[Target] = []
        try:
            problem = redis_unavailable()
            if problem is None:
                executable = shutil.which("redis-server")
                assert executable is not None
                self.redis_meta["redis_server"] = redis_server_version(executable)
                redis = RedisServer(executable, self.work / "redis", port=free_port())
                self.extra.append(redis)
                try:
                    redis.start()
                    await redis.wait_ready()
                    self.log(f"  redis-server    pid {redis.pid:<7} {redis.redis_url}")
                except (OSError, RuntimeError) as exc:
                    problem = f"redis-server did not start ({str(exc)[:160]})"
            if problem is not None:
                # The file store is still measured: the baseline is worth having.
                self._store_na(problem)
            stores = [(ADAPTER, "file", None)]
            if problem is None and redis is not None:
                stores.append((ADAPTER_REDIS, "redis", redis.redis_url))
            for key, tag, store in stores:
                state = self.work / f"state-store-{tag}"
                shutil.rmtree(state, ignore_errors=True)
                server = self._adapter_server(state, free_port(), name=f"store-adapter-{tag}", store=store)
                self.extra.append(server)
                started.append(Target(key, server, "agui"))
            for target in started:
                target.server.start()
            pair = []
            for target in started:
                try:
                    await self._store_warm_up(target)
                except RuntimeError as exc:
                    if target.key == ADAPTER:
                        raise
                    target.server.stop()
                    self._store_na(f"the adapter with the Redis store failed ({str(exc)[:160]}; "
                                   f"log: {target.server.log_tail(2)[-160:]})")
                    continue
                pair.append(target)
            self.redis_meta["measured"] = any(t.key == ADAPTER_REDIS for t in pair)
            await self._store_rounds(pair, redis if self.redis_meta["measured"] else None)
        finally:
            for target in started:
                target.server.stop()
            if redis is not None:
                redis.stop()

    async def _store_warm_up(self, target: Target) -> None:
        await target.server.wait_ready(timeout=60)
        warm = [await self.bounded_run(target, self.sizes.cost_text) for _ in range(self.sizes.cost_batch)]
        failed = [self.outcome(target, r) for r in warm if not self.ok(target, r)]
        if failed:
            raise RuntimeError(f"warm-up runs failed: {failed[0][:160]}")

    async def _store_rounds(self, pair: Sequence[Target], redis: RedisServer | None) -> None:
        batch = self.sizes.cost_batch
        others: list[Server] = [redis] if redis is not None else []
        for rep in range(self.sizes.cost_rounds):
            for target in self.rotation(pair, rep):
                await self.settle(*(t.server for t in pair), *others)
                cpu0, redis0 = target.server.cpu(), redis.cpu() if redis is not None else 0.0
                walls = []
                for _ in range(batch):
                    result = await self.bounded_run(target, self.sizes.cost_text)
                    if self.ok(target, result):
                        walls.append(result.seconds)
                # Work the adapter does after a run's last event counts too.
                await wait_quiet([target.server], timeout=2.0)
                cpu1, redis1 = target.server.cpu(), redis.cpu() if redis is not None else 0.0
                if len(walls) < batch:
                    self.results.note(target.key, "errors", f"cost per run: {batch - len(walls)} of {batch} failed")
                    continue
                self.results.add(target.key, "per_run_wall_ms", statistics.median(walls) * 1000)
                self.results.add(target.key, "per_run_cpu_ms", (cpu1 - cpu0) / batch * 1000)
                if target.key == ADAPTER_REDIS:
                    redis_ms = round((redis1 - redis0) / batch * 1000, 3)
                    self.results.note(target.key, "redis_server_cpu_ms_per_run", redis_ms)

    def _store_na(self, reason: str) -> None:
        """The Redis-store column cannot be measured: say why, in every cell."""
        self.redis_meta["reason"] = reason
        self.log(f"  NOTE: Redis store not measured: {reason}")
        for column in COLUMN_KEYS:
            self.results.na(ADAPTER_REDIS, column, reason)

    async def measure_telemetry(self) -> None:
        """9. The adapter with metrics, tracing, both and neither (see benchmarks/telemetry.py)."""
        from .telemetry import measure_telemetry

        self.telemetry = await measure_telemetry(self)

    async def measure_ids(self) -> None:
        """12. The adapter with event ids and run logs, against it without (see benchmarks/event_ids.py)."""
        from .event_ids import measure_event_ids

        self.event_ids = await measure_event_ids(self)

    async def measure_replay(self) -> None:
        """14. RSS over rounds of slow re-attaches to an ended run (see benchmarks/replay_memory.py)."""
        from .replay_memory import measure_replay_memory

        self.replay_memory = await measure_replay_memory(self)

    async def measure_history(self) -> None:
        """15. The newest history page and paging back to the first turn (see benchmarks/history.py)."""
        from .history import measure_history

        self.history = await measure_history(self)
    async def measure_threadlist(self) -> None:
        """16. GET /threads of one user with 10,000 threads (see benchmarks/thread_list.py)."""
        from .thread_list import measure_thread_list

        self.thread_list = await measure_thread_list(self)

    async def measure_images(self) -> None:
        """17. Peak RSS under gzipped image bombs, and another user's run (see benchmarks/image_attack.py)."""
        from .image_attack import measure_image_attack

        self.image_attack = await measure_image_attack(self)

    async def measure_shutdown(self) -> None:
        """13. Seconds from SIGTERM or SIGINT to exit (see benchmarks/shutdown.py)."""
        from .shutdown import measure_shutdown

        self.shutdown = await measure_shutdown(self)

    async def measure_startup(self) -> None:
        """6. Spawn → first ``GET /health`` 200, with 0 / mid / many thread files (adapter)."""
        empty, mid, large = self.sizes.startup_files
        dirs = {}
        for count in sorted({empty, mid, large}):
            began = time.perf_counter()
            dirs[count] = make_state_dir(self.work / f"startup-state-{count}", count, self.cwd)
            if count:
                self.log(f"    made {count:,} thread files in {time.perf_counter() - began:.1f} s")
        keys = {empty: "startup_empty_ms", mid: "startup_mid_ms", large: "startup_large_ms"}
        cases: list[tuple[str, str, Any]] = [(ADAPTER, keys[c], c) for c in (empty, mid, large)]
        present = {t.key for t in self.targets}
        if IAC in present:
            cases.append((IAC, "startup_empty_ms", None))
        cases.append((RELAY, "startup_empty_ms", None))
        for key in (IAC, RELAY):
            for column in ("startup_mid_ms", "startup_large_ms"):
                self.results.na(key, column, "its state is not in the adapter's record format")
        for column in ("startup_empty_ms", "startup_mid_ms", "startup_large_ms"):
            self.results.na(RUNTIME, column, "the shared runtime is not restarted")
        # One unmeasured start of each kind first: byte-code caches, page cache.
        for rep in range(-1, self.sizes.startup_reps):
            for key, column, count in self.rotation(cases, max(rep, 0)):
                server = self._startup_server(key, count, dirs)
                try:
                    server.start()
                    seconds = await server.wait_ready(timeout=120, interval=0.002)
                finally:
                    server.stop()
                if rep >= 0:
                    self.results.add(key, column, seconds * 1000)
        # Removing 100,000 files takes a while on some disks: it goes on in a
        # thread during the next measure (which reads RSS, not timings).
        for count, folder in dirs.items():
            if count:
                self.cleanup.append(asyncio.create_task(asyncio.to_thread(shutil.rmtree, folder, True)))

    def _startup_server(self, key: str, count: int | None, dirs: dict[int, Path]) -> Server:
        port = free_port()
        if key == ADAPTER:
            assert count is not None
            return self._adapter_server(dirs[count], port, name=f"startup-adapter-{count}")
        if key == IAC:
            return self._iac_server(port, name="startup-iac")
        return self._relay_server(port, name="startup-relay")


class _PeakRss:
    """The highest RSS of a server's process tree while it runs, sampled every 10 ms."""

    def __init__(self, server: Server, interval: float = 0.01) -> None:
        self.server = server
        self.interval = interval
        self.highest = server.rss()
        self._task = asyncio.create_task(self._sample())

    async def _sample(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            self.highest = max(self.highest, self.server.rss())

    async def stop(self) -> int:
        """Stop sampling; the highest RSS seen, in bytes."""
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        return max(self.highest, self.server.rss())


def redis_server_version(executable: str) -> str:
    """``redis-server --version`` (first line), or why it could not be read."""
    try:
        done = subprocess.run([executable, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown ({exc})"
    return done.stdout.strip().splitlines()[0] if done.stdout.strip() else "unknown"


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Benchmark the adapter against iac-code agui and a minimal relay, side by side.",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="fewer repetitions (about half the time)")
    mode.add_argument("--smoke", action="store_true", help="tiny sizes, no judgement: checks that it all runs")
    parser.add_argument("--out", type=Path, default=None,
                        help="JSON file to write (default benchmarks/results/bench-<profile>-<time>.json)")
    parser.add_argument("--iac-venv", default=None,
                        help=f"virtualenv with iac-code[agui]=={iacenv.IAC_CODE_VERSION} (default "
                             f"${iacenv.ENV_VAR} or {iacenv.default_location()}; created when missing)")
    parser.add_argument("--skip-iac", action="store_true",
                        help="leave iac-code agui out (no ratios against it; for debugging only)")
    parser.add_argument("--only", default=None, help=f"comma-separated subset of {','.join(MEASURES)}")
    parser.add_argument("--relay-per-event-writes", action="store_true",
                        help="make the minimal relay write each event on its own (default: one write per chunk)")
    parser.add_argument("--work-dir", type=Path, default=None, help="scratch folder (default: a new temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder (logs, state files)")
    return parser.parse_args(argv)


def _find_iac(args: argparse.Namespace, profile: str, log) -> tuple[Path | None, str | None]:  # type: ignore[no-untyped-def]
    if args.skip_iac:
        return None, "iac-code agui target SKIPPED (--skip-iac): no ratios against it"
    if profile == "smoke":
        venv = iacenv.find(args.iac_venv)
        if venv is None:
            where = iacenv.chosen_location(args.iac_venv)
            return None, (f"iac-code agui target SKIPPED (smoke mode, no venv at {where}; "
                          "a full or --quick run creates it)")
        return venv, None
    return iacenv.ensure(args.iac_venv, log=log), None


def _meta(sizes: Sizes, iac_venv: Path | None, skipped: str | None, began: float) -> dict[str, Any]:
    import aguiadapter

    versions = iacenv.installed_versions(iac_venv) if iac_venv is not None else None
    return {
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(began)),
        "duration_s": round(time.time() - began, 1),
        "profile": sizes.name,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "aguiadapter": aguiadapter.__version__,
        "aiohttp": aiohttp.__version__,
        "iac_code": versions,
        "iac_code_skipped": skipped,
        "method": "median [min-max] per target; targets interleaved in rotating order; ratios of medians "
                  "from this run only; CPU from /proc/<pid>/stat utime+stime of the server's process tree; "
                  "RSS from /proc/<pid>/statm",
    }


async def run(argv: Sequence[str] | None = None) -> int:
    """Run the suite; returns the exit status."""
    args = _parse(argv)
    profile = "smoke" if args.smoke else "quick" if args.quick else "full"
    sizes = PROFILES[profile]
    only = set(args.only.split(",")) if args.only else set(MEASURES)
    unknown = only - set(MEASURES)
    if unknown:
        print(f"unknown measure(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    began = time.time()

    def log(text: str) -> None:
        print(text, flush=True)

    load_start = _load_average()
    log(f"load average at start: {load_start} on {os.cpu_count()} cores (other work on the machine adds noise)")
    iac_venv, skipped = _find_iac(args, profile, log)
    if skipped:
        log(f"NOTE: {skipped}")
    raise_fd_limit()
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="aguiadapter-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    log(f"benchmark profile {profile}; scratch {work}")
    bench = Bench(sizes, work, iac_venv, log=log)
    if args.relay_per_event_writes:
        bench.relay_args.append("--per-event-writes")
    if iac_venv is None:
        for column in COLUMN_KEYS:
            bench.results.na(IAC, column, skipped or "skipped")
    try:
        await bench.start()
        steps = [
            ("rss", bench.measure_rss), ("ttf", bench.measure_ttf), ("throughput", bench.measure_throughput),
            ("interrupt", bench.measure_interrupt), ("concurrency", bench.measure_concurrency),
            ("store", bench.measure_store), ("telemetry", bench.measure_telemetry),
            ("startup", bench.measure_startup), ("idle", bench.measure_idle), ("capacity", bench.measure_capacity),
            ("ids", bench.measure_ids), ("shutdown", bench.measure_shutdown), ("replay", bench.measure_replay),
            ("history", bench.measure_history),
            ("threadlist", bench.measure_threadlist),
            ("images", bench.measure_images),
            ("age", functools.partial(measure_thread_age, bench)),  # 19. benchmarks/thread_age.py
            ("topologies", functools.partial(measure_redis_topologies, bench)),  # 20. benchmarks/redis_topologies.py
            ("pool", functools.partial(measure_pool, bench)),  # 21. benchmarks/pool.py
        ]
        for name, step in steps:
            if name not in only:
                continue
            step_began = time.perf_counter()
            log(f"- {name} ...")
            await step()
            log(f"  {name} done in {time.perf_counter() - step_began:.1f} s")
    finally:
        await bench.stop()
        if not args.keep and args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    meta = _meta(sizes, iac_venv, skipped, began)
    meta["load_average_start"], meta["load_average_end"] = load_start, _load_average()
    meta["fd_limit"] = fd_limit()
    meta["relay_writes"] = "one per event" if args.relay_per_event_writes else "one per network chunk"
    meta["redis_store"] = {**bench.redis_meta, "redis_args": '--save "" --appendonly no (no persistence)'}
    document = to_json(bench.results, sizes.public(), meta)
    if bench.telemetry is not None:
        document["telemetry"] = telemetry_json(bench.telemetry, sizes.public())
    if bench.event_ids is not None:
        document["event_ids"] = event_ids_json(bench.event_ids, sizes.public())
    if bench.shutdown is not None:
        document["shutdown"] = shutdown_json(bench.shutdown)
    if bench.replay_memory is not None:
        document["replay_memory"] = replay_memory_json(bench.replay_memory)
    if bench.history is not None:
        document["history"] = history_json(bench.history)
    if bench.thread_list is not None:
        document["thread_list"] = thread_list_json(bench.thread_list)
    if bench.image_attack is not None:
        document["image_attack"] = image_attack_json(bench.image_attack)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = args.out or Path(__file__).resolve().parent / "results" / f"bench-{profile}-{stamp}.json"
    write_json(out, document)
    print()
    print(render(bench.results, sizes.public()))
    print()
    if bench.telemetry is not None:
        print(render_telemetry(bench.telemetry, sizes.public()))
        print()
        for line in telemetry_notes(bench.telemetry):
            print(line)
    if bench.event_ids is not None:
        print(render_event_ids(bench.event_ids, sizes.public()))
        print()
        for line in event_ids_notes(bench.event_ids):
            print(line)
    if bench.shutdown is not None:
        print(render_shutdown(bench.shutdown))
        print()
    if bench.replay_memory is not None:
        print(render_replay_memory(bench.replay_memory))
        print()
    if bench.history is not None:
        print(render_history(bench.history))
    if bench.thread_list is not None:
        print(render_thread_list(bench.thread_list))
        print()
    if bench.image_attack is not None:
        print(render_image_attack(bench.image_attack))
        print()
    for line in _notes(bench.results):
        print(line)
    errors = {t: d.get("errors") for t, d in bench.results.details.items() if d.get("errors")}
    for target, problems in errors.items():
        print(f"errors seen for {TARGET_LABELS[target]} ({len(problems)}): {problems[:3]}")
    if skipped:
        print(f"NOTE: {skipped}")
    if bench.redis_meta.get("reason"):
        print(f"NOTE: Redis store not measured: {bench.redis_meta['reason']}")
    print(f"load average (1, 5, 15 min): {meta['load_average_start']} at the start, "
          f"{meta['load_average_end']} at the end, on {os.cpu_count()} cores")
    print(f"JSON written to {out}")
    print(f"total time {meta['duration_s']:.0f} s")
    return 0


def _load_average() -> str:
    """``1 5 15`` minute load averages (how busy the machine was)."""
    try:
        return " ".join(f"{value:.2f}" for value in os.getloadavg())
    except OSError:
        return "unknown"


def _notes(results: Results) -> list[str]:
    """Facts behind the numbers: idle-stream ramp, client load."""
    lines = []
    for target, details in results.details.items():
        for fact in details.get("idle", []):
            lines.append(
                f"idle streams, {TARGET_LABELS[target]}: {fact['streaming']}/{fact['streams']} in the slow run "
                f"(first text received) after {fact['ramp_s']} s, {fact['opened']} with a first event, "
                f"{fact['heartbeats_seen']} heartbeats seen"
            )
    for target, details in results.details.items():
        for prefix, title in (("cap", "silent streams"), ("big", "silent streams, one process")):
            for fact in details.get(prefix, []):
                lines.append(
                    f"{title}, {TARGET_LABELS[target]}: {fact['streaming']}/{fact['streams']} held, all open after "
                    f"{fact['opened_s']} s, then {fact['hold_s']:g} s of waiting: heartbeats per stream min "
                    f"{fact['heartbeats_min']}, total {fact['heartbeats_total']}"
                    + (f"; errors {fact['errors']}" if fact["errors"] else "")
                )
        for reduced in details.get("big_reduced", []):
            lines.append(f"11. measured {reduced['measured']:,} streams, not {reduced['wanted']:,}: the open-files "
                         f"limit here is {reduced['fd_limit']:,} and each stream needs two sockets in the adapter")
    for other in (IAC, RELAY):
        for key in ("throughput_eps", "cpu_s_per_10k"):
            paired = results.paired_ratios(ADAPTER, other, key)
            if paired:
                lines.append(f"paired per-round ratio adapter / {TARGET_LABELS[other]}, {key}: median "
                             f"{statistics.median(paired):.2f} [{min(paired):.2f}-{max(paired):.2f}] over "
                             f"{len(paired)} rounds")
    for key in STORE_KEYS:
        paired = results.paired_ratios(ADAPTER_REDIS, ADAPTER, key)
        if paired:
            lines.append(f"paired per-round ratio redis store / file store, {key}: median "
                         f"{statistics.median(paired):.2f} [{min(paired):.2f}-{max(paired):.2f}] over "
                         f"{len(paired)} rounds")
    redis_cpu = results.details.get(ADAPTER_REDIS, {}).get("redis_server_cpu_ms_per_run")
    if redis_cpu:
        lines.append(f"redis-server CPU per run (not in the adapter's numbers): median "
                     f"{statistics.median(redis_cpu):.2f} ms")
    client = {t: statistics.median(d["throughput_client_cpu_pct"]) for t, d in results.details.items()
              if d.get("throughput_client_cpu_pct")}
    if client:
        shown = ", ".join(f"{TARGET_LABELS[t]} {v:.0f}%" for t, v in client.items())
        lines.append(f"load client CPU during 1. (median, % of a core): {shown}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point."""
    try:
        return asyncio.run(run(argv))
    except KeyboardInterrupt:
        return 130
