"""OpenTelemetry traces of one adapter app (the ``otel`` extra).

The only module that imports OpenTelemetry; :mod:`aguiadapter.telemetry`
imports it only for an app given a tracer provider. One trace per request:

- a SERVER span per HTTP request (``POST /``, ``GET /health``...), child of
  the caller's W3C ``traceparent`` when there is one;
- an ``agui.run`` span per run, with the run's identifiers and how it ended;
- a CLIENT span per A2A request (named after the JSON-RPC method, or
  ``GET /iac-code/pipeline/state`` for a plain route), whose context goes to
  the runtime in ``traceparent`` so the runtime's own spans join the trace.

Attributes hold identifiers, outcomes and error codes only: never message
text, a header or a credential.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from contextvars import Token
from importlib.metadata import entry_points
from typing import Any, Final

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider

from ..version import __version__

#: The name of the run span (the .NET AG-UI SDK's name for the same thing).
RUN_SPAN: Final = "agui.run"
_EXPORTER_GROUP: Final = "opentelemetry_traces_exporter"
#: ``OTEL_EXPORTER_OTLP_PROTOCOL`` values and the exporter entry point each needs.
_OTLP_PROTOCOLS: Final = {
    "http/protobuf": ("otlp_proto_http", "opentelemetry-exporter-otlp-proto-http"),
    "grpc": ("otlp_proto_grpc", "opentelemetry-exporter-otlp-proto-grpc"),
}


class Tracing:
    """Starts the spans of one app from a tracer provider."""

    def __init__(self, provider: TracerProvider) -> None:
        self.tracer = provider.get_tracer("aguiadapter", __version__)

    def start_run(self, attributes: dict[str, str | bool]) -> RunSpan:
        """The run's span, made the current span until :meth:`RunSpan.leave`."""
        span = self.tracer.start_span(RUN_SPAN, kind=SpanKind.INTERNAL, attributes=attributes)
        return RunSpan(span, otel_context.attach(trace.set_span_in_context(span)))

    def start_call(self, name: str, attributes: dict[str, str | int]) -> CallSpan:
        """A runtime request's span, child of the current span (never made current:
        a stream's span outlives the frame that opened it)."""
        return CallSpan(self.tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attributes))

    def refused(self, code: str) -> None:
        """The current request was refused with an error code (on its SERVER span)."""
        span = trace.get_current_span()
        span.set_attribute("agui.error_code", code)
        span.set_attribute("error.type", code)

    def server_middleware(self) -> Middleware:
        """An aiohttp middleware that wraps each request in a SERVER span."""
        tracer = self.tracer

        @web.middleware
        async def trace_request(request: web.Request, handler: Handler) -> web.StreamResponse:
            resource = request.match_info.route.resource
            route = resource.canonical if resource is not None else None
            if route is not None and route.endswith(HEALTH_PATH):
                # Probes every few seconds from every balancer: traces of nothing.
                return await handler(request)
            attributes: dict[str, str] = {
                "http.request.method": request.method,
                "url.path": request.path,
                "url.scheme": request.scheme,
            }
            if route is not None:
                attributes["http.route"] = route
            span = tracer.start_span(
                f"{request.method} {route}" if route is not None else request.method,
                context=propagate.extract(request.headers),
                kind=SpanKind.SERVER,
                attributes=attributes,
            )
            with trace.use_span(span, end_on_exit=True, record_exception=False, set_status_on_exception=False):
                try:
                    response = await handler(request)
                except web.HTTPException as exc:
                    _server_status(span, exc.status)
                    raise
                except Exception as exc:
                    span.set_attribute("error.type", type(exc).__qualname__)
                    span.set_status(Status(StatusCode.ERROR))
                    raise
                _server_status(span, response.status)
                return response

        return trace_request


def _server_status(span: Span, status: int) -> None:
    span.set_attribute("http.response.status_code", status)
    if status >= 500:
        # A client's mistake (4xx) is not the server's error.
        span.set_attribute("error.type", str(status))
        span.set_status(Status(StatusCode.ERROR))


class RunSpan:
    """The ``agui.run`` span of one run."""

    __slots__ = ("_span", "_token")

    def __init__(self, span: Span, token: Token[Context]) -> None:
        self._span = span
        self._token = token

    def first_event(self) -> None:
        """Mark when the runtime's first event arrived."""
        self._span.add_event("first runtime event")

    def end(self, outcome: str, error_code: str | None, task_id: str | None, events: int | None) -> None:
        """Record how the run ended and end the span (it stays current: the
        run's last log line still names it)."""
        span = self._span
        span.set_attribute("agui.outcome", outcome)
        if task_id is not None:
            span.set_attribute("a2a.task_id", task_id)
        if events is not None:
            span.set_attribute("agui.events", events)
        if error_code is not None:
            span.set_attribute("agui.error_code", error_code)
        if outcome == "error":
            span.set_attribute("error.type", error_code or "unknown")
            span.set_status(Status(StatusCode.ERROR, error_code))
        span.end()

    def leave(self) -> None:
        """Make the span that was current before the run current again."""
        otel_context.detach(self._token)


class CallSpan:
    """The CLIENT span of one runtime request."""

    __slots__ = ("_span",)

    def __init__(self, span: Span) -> None:
        self._span = span

    def headers(self, base: Mapping[str, str]) -> dict[str, str]:
        """``base`` plus the trace context of this request (``traceparent``, ``tracestate``)."""
        carrier = dict(base)
        propagate.inject(carrier, context=trace.set_span_in_context(self._span))
        return carrier

    def answered(self, status: int) -> None:
        """The runtime's HTTP status."""
        self._span.set_attribute("http.response.status_code", status)

    def end(self, exc: BaseException | None) -> None:
        """End the span; ``exc`` is what the request failed with, if it failed."""
        if exc is not None:
            self._span.set_attribute("error.type", type(exc).__qualname__)
            code = getattr(exc, "code", None)
            if isinstance(code, int) and not isinstance(code, bool):
                self._span.set_attribute("rpc.jsonrpc.error_code", code)
            self._span.set_status(Status(StatusCode.ERROR))
        self._span.end()


class TraceIdsFilter(logging.Filter):
    """Puts the current trace and span ids on every log record (``trace_id``,
    ``span_id``, lower-case hex as in ``traceparent``), for the formatters."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            record.trace_id = format(context.trace_id, "032x")
            record.span_id = format(context.span_id, "016x")
        return True


#: The route no span is made for (nor for the runtime's health call it makes).
HEALTH_PATH: Final = "/health"


# ------------------------------------------------------------- from OTEL_*
def provider_from_env(env: Mapping[str, str]) -> SdkTracerProvider:
    """An SDK tracer provider configured by the standard ``OTEL_*`` variables.

    The exporters are those of ``OTEL_TRACES_EXPORTER`` (default ``otlp``):
    ``otlp`` follows ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` /
    ``OTEL_EXPORTER_OTLP_PROTOCOL`` (default ``http/protobuf``), ``console``
    prints spans, any other name is an installed exporter's entry point. The
    SDK itself reads the rest (endpoint, headers, sampler, batch sizes,
    ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``). A setting that cannot
    work raises ``RuntimeError`` with one line saying why.
    """
    resource = Resource.create({SERVICE_VERSION: __version__})
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: "aguiadapter"}))
    # No shutdown at interpreter exit: the command line shuts it down itself,
    # within a bound (shutdown_within), and a second, unbounded try at exit
    # would wait on a dead collector all the same.
    provider = SdkTracerProvider(resource=resource, shutdown_on_exit=False)
    for exporter in _exporters(env):
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def _exporters(env: Mapping[str, str]) -> list[SpanExporter]:
    names = [name.strip().lower() for name in (env.get("OTEL_TRACES_EXPORTER") or "otlp").split(",")]
    exporters: list[SpanExporter] = []
    for name in names:
        if name in ("", "none"):
            continue
        if name == "otlp":
            protocol = (
                env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf"
            ).strip()
            if protocol not in _OTLP_PROTOCOLS:
                raise RuntimeError(
                    f"OTLP protocol {protocol!r} is not supported (use {' or '.join(_OTLP_PROTOCOLS)})"
                )
            entry, package = _OTLP_PROTOCOLS[protocol]
            exporters.append(_exporter(entry, f"OTLP over {protocol} needs pip install {package}"))
        else:
            exporters.append(_exporter(name, f"no trace exporter named {name!r} is installed (OTEL_TRACES_EXPORTER)"))
    return exporters


def _exporter(name: str, missing: str) -> SpanExporter:
    found = entry_points(group=_EXPORTER_GROUP, name=name)
    if not found:
        raise RuntimeError(missing)
    try:
        factory: Any = next(iter(found)).load()
    except ImportError as exc:
        raise RuntimeError(f"trace exporter {name!r} cannot be loaded: {exc}") from exc
    exporter: SpanExporter = factory()
    return exporter
