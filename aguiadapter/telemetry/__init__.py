"""What an adapter app tells its operators: Prometheus metrics and OpenTelemetry traces.

The thread core, the web edge and the A2A client report through one
:class:`Telemetry` per app, with a few calls per run and per runtime request,
never per event:

- ``with telemetry.run(thread_id=..., run_id=..., execution_id=..., resume=...) as report:``
  around a run; ``report.first_event()`` when the runtime's first event
  arrives; ``report.ended(how, task_id=..., events=...)`` with how it ended;
- ``telemetry.refused(code)`` for a request answered with an HTTP error;
- ``endpoint = telemetry.a2a_endpoint(url)`` once per A2A client, then
  ``with endpoint.call("GetTask") as call:`` around each request, which sends
  ``call.headers(base)`` (with the W3C trace context when tracing is on) and
  reports ``call.answered(status)``.

Metrics (:mod:`.metrics`, prometheus-client) are kept when the app serves
them. Traces (:mod:`.tracing`) need a tracer provider and the ``otel``
extra; without a provider, OpenTelemetry is never imported.

May import: errors, version.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Final, Literal
from urllib.parse import urlsplit

from ..errors import ErrorCode

if TYPE_CHECKING:
    from aiohttp.typedefs import Middleware
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
    from opentelemetry.trace import TracerProvider

    from .metrics import AdapterMetrics
    from .tracing import CallSpan, RunSpan, Tracing

__all__ = [
    "A2ACall",
    "A2AEndpoint",
    "RunReport",
    "Telemetry",
    "run_outcome",
    "tracer_provider_from_env",
    "tracing_wanted",
]

RunOutcome = Literal["success", "interrupt", "error", "cancelled", "disconnected", "reported", "handed_off"]
_PLAIN_OUTCOMES: Final[dict[str, RunOutcome]] = {
    "success": "success",
    "interrupt": "interrupt",
    "disconnected": "disconnected",
    # A retried answer told how the earlier run that carried it ended: this
    # run sent nothing to the runtime, so it counts apart from the runs that
    # did (the end it reported is that earlier run's, not this one's).
    "report": "reported",
    # Shutdown left the run to the replica its client re-attaches to: that
    # one counts it again, by how it ends.
    "handed_off": "handed_off",
}


def run_outcome(ended: str) -> tuple[RunOutcome, str | None]:
    """The outcome and error code of a run, from the word its log line uses:
    ``success``, ``interrupt``, ``disconnected``, ``report``, ``handed_off``, or the code of
    its ``RUN_ERROR``. A run that follows a task (a retried answer the runtime
    had taken) ends with one of these words like any other run."""
    plain = _PLAIN_OUTCOMES.get(ended)
    if plain is not None:
        return plain, None
    code = ended if ended in ErrorCode.__members__ else None
    return ("cancelled" if code == ErrorCode.CANCELLED.name else "error"), code


class Telemetry:
    """The metrics and traces of one adapter app (either may be absent)."""

    def __init__(
        self, metrics: AdapterMetrics | None = None, tracing: Tracing | None = None, runtime: str | None = None
    ) -> None:
        self.metrics = metrics
        self.tracing = tracing
        #: The pool runtime whose runs report here (their spans carry ``agui.runtime``).
        self.runtime = runtime

    def for_runtime(self, runtime: str) -> Telemetry:
        """The same metrics and traces, for the runs on the pool runtime ``runtime``."""
        return Telemetry(self.metrics, self.tracing, runtime)

    @classmethod
    def create(cls, *, metrics: bool = False, tracer_provider: TracerProvider | None = None) -> Telemetry:
        """Metrics when ``metrics``; traces when a tracer provider is given."""
        kept = None
        if metrics:
            from .metrics import AdapterMetrics

            kept = AdapterMetrics()
        tracing = None
        if tracer_provider is not None:
            from .tracing import Tracing

            tracing = Tracing(tracer_provider)
        return cls(kept, tracing)

    def run(self, *, thread_id: str, run_id: str, execution_id: str, resume: bool) -> RunReport:
        """The report of one run; use it as a ``with`` block around the run."""
        attributes: dict[str, str | bool] = {
            "agui.thread_id": thread_id,
            "agui.run_id": run_id,
            "agui.execution_id": execution_id,
            "agui.resume": resume,
        }
        if self.runtime is not None:
            attributes["agui.runtime"] = self.runtime
        return RunReport(self, attributes)

    def refused(self, code: ErrorCode) -> None:
        """A request was answered with an HTTP error (before any stream)."""
        if self.metrics is not None:
            self.metrics.refusals.labels(code.name).inc()
        if self.tracing is not None:
            self.tracing.refused(code.name)

    def runtime_health(self, runtime: str, up: bool) -> None:
        """A pool runtime's health probe answered (``up``) or not."""
        if self.metrics is not None:
            self.metrics.runtime_up.labels(runtime).set(1.0 if up else 0.0)

    def placed(self, runtime: str) -> None:
        """A new thread was pinned to ``runtime``."""
        if self.metrics is not None:
            self.metrics.placements.labels(runtime).inc()

    def count_refusal(self, reason: str) -> None:
        """A run was refused for want of a runtime (see ``aguiadapter_runtime_refusals``)."""
        if self.metrics is not None:
            self.metrics.runtime_refusals.labels(reason).inc()

    def runtime_load(self, runtime: str, active: float) -> None:
        """A pool runtime's active runs, every replica's (at scrape time)."""
        if self.metrics is not None:
            self.metrics.runtime_active_runs.labels(runtime).set(active)

    def a2a_endpoint(self, url: str) -> A2AEndpoint:
        """What an A2A client reports its requests to ``url`` through."""
        return A2AEndpoint(self, url)

    def middlewares(self) -> tuple[Middleware, ...]:
        """The app's request middlewares (a SERVER span per request when tracing)."""
        return () if self.tracing is None else (self.tracing.server_middleware(),)


#: What a client made without an app's telemetry reports to: nothing.
QUIET: Final = Telemetry()


class RunReport:
    """Metrics and the ``agui.run`` span of one run."""

    __slots__ = ("_attributes", "_done", "_first", "_span", "_started", "_telemetry")

    def __init__(self, telemetry: Telemetry, attributes: dict[str, str | bool]) -> None:
        self._telemetry = telemetry
        self._attributes = attributes
        self._started = 0.0
        self._first = False
        self._done = False
        self._span: RunSpan | None = None

    def __enter__(self) -> RunReport:
        return self.begin()

    def begin(self) -> RunReport:
        """The run is open: it counts, under its span, until :meth:`leave`."""
        self._started = time.monotonic()
        telemetry = self._telemetry
        if telemetry.metrics is not None:
            telemetry.metrics.run_started()
        if telemetry.tracing is not None:
            self._span = telemetry.tracing.start_run(self._attributes)
        return self

    def first_event(self) -> None:
        """The runtime's first event for this run arrived (later calls are ignored)."""
        if self._first:
            return
        self._first = True
        metrics = self._telemetry.metrics
        if metrics is not None:
            metrics.first_event.observe(time.monotonic() - self._started)
        if self._span is not None:
            self._span.first_event()

    def ended(self, how: str, *, task_id: str | None = None, events: int | None = None) -> None:
        """How the run ended (see :func:`run_outcome`), its A2A task and the events it wrote."""
        if self._done:
            return
        self._done = True
        outcome, code = run_outcome(how)
        metrics = self._telemetry.metrics
        if metrics is not None:
            metrics.run_ended(outcome, code, time.monotonic() - self._started, events, self._telemetry.runtime)
        if self._span is not None:
            self._span.end(outcome, code, task_id, events)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.leave()

    def leave(self) -> None:
        """The run's work is over (an end not reported yet counts as unknown)."""
        self.ended("unknown")
        metrics = self._telemetry.metrics
        if metrics is not None:
            metrics.run_left()
        if self._span is not None:
            self._span.leave()
            self._span = None


class A2AEndpoint:
    """Reports the requests of one A2A client."""

    __slots__ = ("_server", "_telemetry")

    def __init__(self, telemetry: Telemetry, url: str) -> None:
        self._telemetry = telemetry
        parts = urlsplit(url)
        self._server: dict[str, str | int] = {"server.address": parts.hostname or ""}
        if parts.port is not None:
            self._server["server.port"] = parts.port
        if telemetry.runtime is not None:  # a client of a pool's named runtime
            self._server["agui.runtime"] = telemetry.runtime

    def call(self, method: str, *, http: str | None = None, traced: bool = True) -> A2ACall:
        """One request: a JSON-RPC ``method``, or for a plain route ``http``
        (its HTTP method) with ``method`` the path, e.g. ``call("/health", http="GET")``;
        ``traced=False``: timed, but no span (the health probe)."""
        telemetry = self._telemetry
        name = method if http is None else f"{http} {method}"
        span = None
        if telemetry.tracing is not None and traced:
            attributes = dict(self._server)
            if http is None:
                attributes.update({"rpc.system": "jsonrpc", "rpc.method": method, "rpc.jsonrpc.version": "2.0"})
            else:
                attributes.update({"http.request.method": http, "url.path": method})
            span = telemetry.tracing.start_call(name, attributes)
        return A2ACall(telemetry.metrics, name, span)


class A2ACall:
    """One runtime request: its latency and its span."""

    __slots__ = ("_answered", "_metrics", "_name", "_span", "_started")

    def __init__(self, metrics: AdapterMetrics | None, name: str, span: CallSpan | None) -> None:
        self._metrics = metrics
        self._name = name
        self._span = span
        self._answered = False
        self._started = time.monotonic()

    def headers(self, base: Mapping[str, str]) -> Mapping[str, str]:
        """The headers to send: ``base``, plus the trace context when tracing."""
        return base if self._span is None else self._span.headers(base)

    def answered(self, status: int) -> None:
        """The runtime answered (for a stream: its response headers arrived)."""
        if self._answered:
            return
        self._answered = True
        if self._metrics is not None:
            self._metrics.a2a_request.labels(self._name).observe(time.monotonic() - self._started)
        if self._span is not None:
            self._span.answered(status)

    def end(self, exc: BaseException | None = None) -> None:
        """The request is over (``exc``: what it failed with)."""
        span, self._span = self._span, None
        if span is not None:
            span.end(exc)

    def __enter__(self) -> A2ACall:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.end(exc)


# ------------------------------------------------------------- from OTEL_*
_TRUE: Final = frozenset({"true", "1", "yes", "on"})


def tracing_wanted(env: Mapping[str, str]) -> str | None:
    """The variable that turns tracing on, or ``None`` when it stays off.

    On when ``OTEL_TRACES_EXPORTER`` names an exporter other than ``none``,
    or, without it, when ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set; always off when
    ``OTEL_SDK_DISABLED`` is true. (The specification's default exporter,
    ``otlp``, is not enough on its own: a server that nobody configured
    sends nothing anywhere.)
    """
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() in _TRUE:
        return None
    exporters = env.get("OTEL_TRACES_EXPORTER", "").strip()
    if exporters:
        names = {name.strip().lower() for name in exporters.split(",")} - {""}
        return None if names <= {"none"} else "OTEL_TRACES_EXPORTER"
    for name in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        if env.get(name, "").strip():
            return name
    return None


def tracer_provider_from_env(env: Mapping[str, str]) -> SdkTracerProvider | None:
    """The tracer provider the ``OTEL_*`` variables ask for, or ``None``.

    Raises ``RuntimeError`` with one line to show when they ask for tracing
    that cannot work here (the ``otel`` extra missing, an unknown exporter).
    """
    variable = tracing_wanted(env)
    if variable is None:
        return None
    try:
        from .tracing import provider_from_env
    except ImportError as exc:
        raise RuntimeError(
            f"{variable} is set, but tracing needs the otel extra: pip install 'aguiadapter[otel]' ({exc})"
        ) from exc
    return provider_from_env(env)


#: How long the command line waits, at shutdown, for the spans still queued
#: to reach the collector: a dead or hanging collector costs this much, no more.
TRACE_SHUTDOWN_SECONDS: Final = 1.0


def shutdown_within(provider: SdkTracerProvider, seconds: float = TRACE_SHUTDOWN_SECONDS) -> bool:
    """Shut the tracer provider down (sending what is queued), waiting at most
    ``seconds``; ``False`` (and one log line) when the exporter did not finish:
    its thread is left behind, a daemon, and the spans it held are lost."""
    import logging
    import threading

    done = threading.Event()

    def shutdown() -> None:
        try:
            provider.shutdown()
        finally:
            done.set()

    threading.Thread(target=shutdown, name="trace-shutdown", daemon=True).start()
    if done.wait(seconds):
        return True
    logging.getLogger(__name__).warning(
        "trace exporter did not finish within %g s (collector down or hanging); spans still queued are lost",
        seconds)
    return False
