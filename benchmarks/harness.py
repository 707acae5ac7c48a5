"""What the measures share with the suite that runs them: the sizes of a
profile, a server under test, the setup's interface, whether Redis is here.

The measure modules (batches, telemetry, event ids, shutdown) import this,
never :mod:`.suite`, which imports them: no import cycle.
"""

from __future__ import annotations

import asyncio
import importlib.util
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import attrs

from .client import StreamResult
from .procs import Server
from .report import TARGET_LABELS, Results


@attrs.frozen
class Sizes:
    """How much each measure does."""

    name: str
    reps: int
    firehose: int
    short_text: str
    short_rounds: int
    short_batch: int
    conc_levels: tuple[int, int]
    conc_events: int
    conc_reps: int
    idle_streams: int
    idle_seconds: float
    idle_reps: int
    idle_ramp_limit: float
    startup_files: tuple[int, int, int]
    startup_reps: int
    interrupt_reps: int
    warmup: int
    run_timeout: float
    cost_rounds: int = 2
    cost_batch: int = 3
    cost_text: str = "firehose 1"
    #: Idle capacity (10.): streams on a silent runtime, how long they wait, repetitions.
    cap_streams: int = 5
    cap_hold: float = 3.0
    cap_reps: int = 1
    #: The heartbeat interval of the adapter in 10. and 11. (the default, 15 s, in full runs).
    cap_heartbeat: float = 1.0
    #: 10.: the one-process capacity check (adapter only).
    big_streams: int = 8
    big_hold: float = 3.0
    #: Streams being opened at once (a client that opens thousands at the same
    #: instant measures the kernel's listen backlog, not the server).
    open_in_flight: int = 64
    cap_ramp_limit: float = 10.0
    #: 15.: the threads of the one user whose list is read.
    list_threads: int = 10_000

    def public(self) -> dict[str, Any]:
        """The sizes named in column labels and in the JSON."""
        return {
            "profile": self.name,
            "firehose": self.firehose,
            "reps": self.reps,
            "short_text": self.short_text,
            "short_rounds": self.short_rounds,
            "short_batch": self.short_batch,
            "conc_low": self.conc_levels[0],
            "conc_high": self.conc_levels[1],
            "conc_events_per_run": self.conc_events,
            "conc_reps": self.conc_reps,
            "idle_streams": self.idle_streams,
            "idle_seconds": self.idle_seconds,
            "idle_reps": self.idle_reps,
            "idle_ramp_limit_s": self.idle_ramp_limit,
            "files_empty": self.startup_files[0],
            "files_mid": self.startup_files[1],
            "files_large": self.startup_files[2],
            "startup_reps": self.startup_reps,
            "interrupt_reps": self.interrupt_reps,
            "cost_text": self.cost_text,
            "cost_rounds": self.cost_rounds,
            "cost_batch": self.cost_batch,
            "cap_streams": self.cap_streams,
            "cap_hold_s": self.cap_hold,
            "cap_reps": self.cap_reps,
            "cap_heartbeat_s": self.cap_heartbeat,
            "big_streams": self.big_streams,
            "big_hold_s": self.big_hold,
            "open_in_flight": self.open_in_flight,
            "list_threads": self.list_threads,
        }


PROFILES = {
    "full": Sizes("full", reps=7, firehose=20_000, short_text="firehose 5", short_rounds=7, short_batch=30,
                  conc_levels=(50, 200), conc_events=500, conc_reps=3,
                  idle_streams=1000, idle_seconds=120.0, idle_reps=3, idle_ramp_limit=45.0,
                  startup_files=(0, 10_000, 100_000), startup_reps=9, interrupt_reps=7,
                  warmup=2000, run_timeout=300.0, cost_rounds=7, cost_batch=80,
                  cap_streams=2000, cap_hold=40.0, cap_reps=3, cap_heartbeat=15.0,
                  big_streams=10_000, big_hold=20.0, cap_ramp_limit=120.0),
    "quick": Sizes("quick", reps=3, firehose=20_000, short_text="firehose 5", short_rounds=3, short_batch=30,
                   conc_levels=(50, 200), conc_events=500, conc_reps=2,
                   idle_streams=1000, idle_seconds=120.0, idle_reps=1, idle_ramp_limit=45.0,
                   startup_files=(0, 10_000, 100_000), startup_reps=3, interrupt_reps=3,
                   warmup=1000, run_timeout=180.0, cost_rounds=4, cost_batch=50,
                   cap_streams=2000, cap_hold=40.0, cap_reps=1, cap_heartbeat=15.0,
                   big_streams=10_000, big_hold=20.0, cap_ramp_limit=120.0),
    "smoke": Sizes("smoke", reps=2, firehose=300, short_text="firehose 5", short_rounds=2, short_batch=3,
                   conc_levels=(3, 6), conc_events=20, conc_reps=1,
                   idle_streams=5, idle_seconds=10.0, idle_reps=1, idle_ramp_limit=5.0,
                   startup_files=(0, 10, 100), startup_reps=1, interrupt_reps=1,
                   warmup=50, run_timeout=60.0, cost_rounds=2, cost_batch=3, list_threads=250),
}
@attrs.define
class Target:
    """One server under test."""

    key: str
    server: Server
    kind: str  # "agui" or "a2a"

    @property
    def label(self) -> str:
        """Human name."""
        return TARGET_LABELS[self.key]


class Bench(Protocol):
    """The running setup, as the measures use it (:class:`.suite.Bench`)."""

    sizes: Sizes
    work: Path
    cwd: str
    extra: list[Any]
    targets: list[Target]
    results: Results

    def log(self, *args: Any) -> None:
        """Print a progress line."""

    def _adapter_server(self, state_dir: Path, port: int, name: str = "adapter",
                        launcher: Sequence[str] | None = None, a2a_url: str | None = None,
                        store: str | None = None, extra_args: Sequence[str] = (),
                        env_extra: dict[str, str] | None = None, heartbeat: float | None = None) -> Server:
        """An adapter process (not started)."""

    def _iac_server(self, port: int, name: str = "iac-code-agui", a2a_url: str | None = None) -> Server:
        """An ``iac-code agui`` process (not started)."""

    def _relay_server(self, port: int, name: str = "relay", a2a_url: str | None = None) -> Server:
        """A minimal relay process (not started)."""

    async def one_run(self, target: Target, text: str, *, keep_body: bool = False,
                      opened: asyncio.Event | None = None, result: StreamResult | None = None,
                      body: dict[str, Any] | None = None) -> StreamResult:
        """One run on a fresh thread."""

    async def bounded_run(self, target: Target, text: str) -> StreamResult:
        """One run with the profile's time limit."""

    def outcome(self, target: Target, result: StreamResult) -> str:
        """How a run ended."""

    def ok(self, target: Target, result: StreamResult) -> bool:
        """Whether a run ended normally."""

    def rotation(self, items: Sequence[Any], rep: int) -> list[Any]:
        """*items* rotated by *rep*."""

    async def settle(self, *servers: Server) -> None:
        """Let the servers go quiet."""


def redis_unavailable() -> str | None:
    """Why the Redis-store target cannot run here, or ``None``."""
    if shutil.which("redis-server") is None:
        return "redis-server not found on PATH (apt-get install redis-server)"
    try:
        found = importlib.util.find_spec("redis") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return "the redis package is not installed (pip install 'aguiadapter[redis]')"
    return None
