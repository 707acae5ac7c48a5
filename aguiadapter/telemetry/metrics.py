"""The Prometheus metrics of one adapter app, on prometheus-client.

Each app has a registry of its own (several adapters can live in one
process), holding the standard process, platform and GC collectors and the
families below. Everything is counted per run, per refusal or per runtime
request, never per event. No label names a thread, a user or a secret: the
labels are an outcome, an error code or an A2A method, all from short fixed
lists.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.exposition import choose_encoder
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from ..version import __version__

#: How a run can end (the ``outcome`` label of the run families).
RUN_OUTCOMES: Final = ("success", "interrupt", "error", "cancelled", "disconnected", "reported", "handed_off")
#: The runtime requests the adapter makes (the ``method`` label): JSON-RPC
#: methods, and the plain routes of iac-code by HTTP method and path.
A2A_METHODS: Final = (
    "SendStreamingMessage",
    "SendMessage",
    "SubscribeToTask",
    "GetTask",
    "CancelTask",
    "POST /iac-code/session/ensure-restored",
    "GET /iac-code/pipeline/state",
    "GET /health",
)

#: Seconds to the runtime's first event: a scripted runtime answers in
#: milliseconds, a model's first token takes seconds.
FIRST_EVENT_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: Seconds a run streams: an interrupt ends in milliseconds, an agent turn can take an hour.
RUN_DURATION_BUCKETS: Final = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0)
#: Seconds to the runtime's answer to one request (for a stream: its response headers).
A2A_REQUEST_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: AG-UI events written to the client per run.
RUN_EVENTS_BUCKETS: Final = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 25_000, 100_000)


class AdapterMetrics:
    """The registry of one app and the families the adapter moves."""

    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        GCCollector(registry=registry)
        Info("aguiadapter_build", "The adapter's version.", registry=registry).info({"version": __version__})
        self.runs_started = Counter(
            "aguiadapter_runs_started", "Runs admitted and started.", registry=registry
        )
        self.runs = Counter(
            "aguiadapter_runs",
            "Runs ended, by outcome: success, interrupt (waits for answers), error (RUN_ERROR), "
            "cancelled (cancel route or shutdown), disconnected (the client left), "
            "reported (a retried answer was told how the run that carried it had ended), "
            "handed_off (left running at shutdown for another replica to adopt).",
            ["outcome"],
            registry=registry,
        )
        self.run_errors = Counter(
            "aguiadapter_run_errors", "Runs that ended with RUN_ERROR, by its code.", ["code"], registry=registry
        )
        self.refusals = Counter(
            "aguiadapter_refusals",
            "Requests answered with an HTTP error before any stream, by error code.",
            ["code"],
            registry=registry,
        )
        self.events_relayed = Counter(
            "aguiadapter_events_relayed", "AG-UI events written to clients.", registry=registry
        )
        def histogram(name: str, documentation: str, buckets: Sequence[float], *labels: str) -> Histogram:
            return Histogram(name, documentation, labels, registry=registry, buckets=buckets)

        self.first_event = histogram(
            "aguiadapter_first_event_seconds",
            "Time from a run's start to the first event the runtime sent for it.", FIRST_EVENT_BUCKETS,
        )
        self.run_duration = histogram(
            "aguiadapter_run_duration_seconds",
            "Time from a run's start to its end, by outcome.", RUN_DURATION_BUCKETS, "outcome",
        )
        self.run_events = histogram(
            "aguiadapter_run_events", "AG-UI events written to the client per run.", RUN_EVENTS_BUCKETS
        )
        self.a2a_request = histogram(
            "aguiadapter_a2a_request_seconds",
            "Time until the A2A runtime answered a request (a stream: its response headers), by method.",
            A2A_REQUEST_BUCKETS, "method",
        )
        self.active_runs = Gauge(
            "aguiadapter_active_runs", "Runs streaming from this process right now.", registry=registry
        )
        self.pending_here = Gauge(
            "aguiadapter_pending_interrupt_threads",
            "Threads waiting for interrupt answers that this process announced "
            "(with the file store: every waiting thread of its state folder).",
            registry=registry,
        )
        self.pending_shared = Gauge(
            "aguiadapter_store_pending_interrupt_threads",
            "Threads waiting for interrupt answers in the whole store (with Redis: every replica's).",
            registry=registry,
        )
        # The runtime pool (aguiadapter.pool), by runtime name.
        self.runtime_up = Gauge(
            "aguiadapter_runtime_up", "1 while the runtime's last health probe answered, else 0.", ["runtime"],
            registry=registry,
        )
        self.runtime_active_runs = Gauge(
            "aguiadapter_runtime_active_runs",
            "Active runs on the runtime, every replica's (read from the store at scrape time).", ["runtime"],
            registry=registry,
        )
        self.placements = Counter(
            "aguiadapter_runtime_placements", "New threads pinned to the runtime.", ["runtime"], registry=registry
        )
        # Apart from aguiadapter_run_errors, whose series a pool of one keeps as they were.
        self.runtime_run_errors = Counter(
            "aguiadapter_runtime_run_errors",
            "Runs on the runtime that ended with RUN_ERROR, by its code (in a pool of several runtimes).",
            ["runtime", "code"], registry=registry,
        )
        self.runtime_refusals = Counter(
            "aguiadapter_runtime_refusals",
            "Runs refused for want of a runtime, by reason: no_runtime (none reachable and not draining), "
            "runtimes_full (all at capacity), unreachable or full (the thread's own runtime).",
            ["reason"], registry=registry,
        )
        # Known label values start at zero, so rates and dashboards see them before the first run.
        for outcome in RUN_OUTCOMES:
            self.runs.labels(outcome)
            self.run_duration.labels(outcome)
        for method in A2A_METHODS:
            self.a2a_request.labels(method)

    def run_started(self) -> None:
        """A run begins streaming."""
        self.runs_started.inc()
        self.active_runs.inc()

    def run_ended(
        self, outcome: str, error_code: str | None, seconds: float, events: int | None, runtime: str | None = None
    ) -> None:
        """A run ended (:meth:`run_left` follows when it lets go of its stream);
        ``runtime``: the pool runtime it ran on, in a pool of several."""
        self.runs.labels(outcome).inc()
        self.run_duration.labels(outcome).observe(seconds)
        if error_code is not None and outcome in ("error", "cancelled"):
            self.run_errors.labels(error_code).inc()
            if runtime is not None:
                self.runtime_run_errors.labels(runtime, error_code).inc()
        if events is not None:
            self.events_relayed.inc(events)
            self.run_events.observe(events)

    def run_left(self) -> None:
        """A run no longer streams."""
        self.active_runs.dec()

    def set_pending(self, here: float, shared: float) -> None:
        """The pending-interrupt gauges, read from the store at scrape time."""
        self.pending_here.set(here)
        self.pending_shared.set(shared)

    def exposition(self, accept: str) -> tuple[bytes, str]:
        """The registry in the format the scraper asked for (``Accept``), and its content type."""
        encode, content_type = choose_encoder(accept)
        return encode(self.registry), content_type
