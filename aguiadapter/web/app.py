"""The application factory: standalone or mounted as a sub-app."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from ..config import NO_RUNTIME, Config
from ..images import ImageWork
from ..a2a.client import A2AClient
from ..threads.record import ThreadRecord
from ..telemetry import Telemetry
from ..pool.pool import RuntimePool
from ..pool.settings import DEFAULT_RUNTIME, RuntimeSpec
from ..store.factory import open_store
from ..service.history_reader import HistoryReader
from ..service.limits import AdmissionLimits
from ..store.run_log import LogBounds
from ..service.thread_service import ThreadService
from ..store.contract import ThreadStore
from ..workspace import CheckedWorkspaces
from . import connect_route, handlers, history_routes, thread_list, thread_routes
from .auth import PrincipalHook, authenticator_for
from .guard import add_cors_headers, request_guard
from .http_errors import json_errors
from .body_turns import LargeBodies
from .keys import (
    ADAPTER, AUTH, CLIENT, CONFIG, HISTORY, IMAGES, LARGE_BODIES, LIMITS, METRICS_URLS, POOL, SERVICE, STREAMS,
    TELEMETRY, WORKSPACES,
)
from .stream_watch import StreamWatch

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

log = logging.getLogger(__name__)


def create_app(
    config: Config,
    *,
    store: ThreadStore | None = None,
    tracer_provider: TracerProvider | None = None,
    principal: PrincipalHook | None = None,
) -> web.Application:
    """An ``aiohttp`` application serving the AG-UI interface.

    The runtime is ``config.a2a_url``, or with ``config.demo`` the embedded
    scripted demo runtime, started on loopback for the lifetime of the app;
    a config with neither is refused (``ValueError``), so that no deployment
    answers its users with the demo by accident. The app keeps nothing in globals:
    several instances can live in one process, and mounting it with
    ``parent.add_subapp("/agui", app)`` works as is (the body limits are
    enforced per request, whatever the parent's ``client_max_size``). Every
    error it answers is JSON, unknown paths under its prefix and methods its
    routes do not take included; to have the HTTP parser's own refusals in
    JSON too, serve it with :class:`~aguiadapter.web.server.AdapterRunner`.

    Metrics are kept in a registry of this app's own when ``config.metrics``
    (the ``/metrics`` route) or ``config.metrics_port`` (a listener of their
    own, started and stopped with the app; or mount :func:`create_metrics_app`
    where you like). Traces go to ``tracer_provider`` (an OpenTelemetry
    ``TracerProvider``, e.g. ``opentelemetry.trace.get_tracer_provider()``);
    without one nothing is traced and OpenTelemetry is not imported.

    ``principal`` lets a host application that already knows its user (its
    own sessions, its own auth middleware) name it: a coroutine from the
    request to the user's id, or :func:`~aguiadapter.web.auth.principal_from_request_key`
    for a middleware that sets ``request[PRINCIPAL_KEY]``. Threads then
    belong to that user, and per-user limits and metrics count them, as with
    JWTs; a request whose hook names nobody is refused (401). It excludes
    ``config.auth_token`` and ``config.jwt``.
    """
    if config.runtime_kind == "none":
        raise ValueError(NO_RUNTIME)
    telemetry = Telemetry.create(metrics=config.keeps_metrics, tracer_provider=tracer_provider)
    # The request's span (when tracing) around everything, its JSON error answer included.
    app = web.Application(middlewares=[*telemetry.middlewares(), json_errors, request_guard(config)])
    app[CONFIG] = config
    app[TELEMETRY] = telemetry
    app[AUTH] = authenticator_for(config, principal)
    app[STREAMS] = StreamWatch(config.heartbeat_seconds)
    app[HISTORY] = _history_reader(config)
    app[IMAGES] = ImageWork()
    app[LARGE_BODIES] = LargeBodies()
    app[WORKSPACES] = CheckedWorkspaces()
    app.on_response_prepare.append(add_cors_headers)
    app.router.add_get("/health", handlers.health)
    app.router.add_get("/", handlers.index)
    app.router.add_post("/", handlers.run)
    app.router.add_post("/extensions/iac-code/v1/executions/{executionId}/cancel", handlers.cancel)
    app.router.add_get("/openapi.json", handlers.openapi)
    app.router.add_get("/capabilities", thread_routes.capabilities)
    app.router.add_get("/threads", thread_list.list_threads)
    app.router.add_get("/threads/{threadId}", thread_routes.thread_status)
    app.router.add_get("/threads/{threadId}/runs/{runId}/events", thread_routes.run_events)
    app.router.add_post("/connect", connect_route.connect)
    app.router.add_get("/threads/{threadId}/messages", history_routes.thread_messages)
    if config.metrics:
        app.router.add_get("/metrics", handlers.metrics)
    app.cleanup_ctx.append(_runtime_context(config, store, telemetry))
    if config.metrics_port is not None:
        app.cleanup_ctx.append(_metrics_listener(config.metrics_host, config.metrics_port))
    app.on_shutdown.append(_stop_runs)
    app.on_cleanup.append(_stop_image_work)
    return app


def create_metrics_app(app: web.Application) -> web.Application:
    """A small app serving ``GET /metrics`` of the adapter ``app`` (made with
    metrics kept), for a listener or parent app other than the adapter's."""
    if app[TELEMETRY].metrics is None:
        raise ValueError("the adapter app keeps no metrics: set Config.metrics or Config.metrics_port")
    metrics_app = web.Application(middlewares=[json_errors])
    metrics_app[ADAPTER] = app
    metrics_app[TELEMETRY] = app[TELEMETRY]
    metrics_app.router.add_get("/metrics", handlers.metrics)
    return metrics_app


def _runtime_context(config: Config, store: ThreadStore | None, telemetry: Telemetry):  # type: ignore[no-untyped-def]
    async def context(app: web.Application) -> AsyncIterator[None]:
        await app[AUTH].start()
        demo = None
        specs = config.pool_specs()
        if config.demo:
            from ..demo.runtime import DemoRuntime

            demo = DemoRuntime()
            url = await demo.start()
            log.info("embedded demo runtime on %s", url)
            specs = (RuntimeSpec(DEFAULT_RUNTIME, url),)
        threads = store or open_store(
            config.store_url, state_dir=config.state_dir, retention_days=config.state_retention_days,
            durability=config.durability,
        )
        pool = RuntimePool(specs, token=config.a2a_token, slots=threads.run_slots("pool"), telemetry=telemetry,
                           probe_seconds=config.runtime_probe_seconds, counted=bool(config.runtimes))
        # Probed once now (a runtime that does not answer is logged; the server starts all the
        # same and /health reports it), then in the background.
        await pool.start()
        client = next(iter(pool.members.values())).client
        # The started parts go in the app's own keys: its startup (this
        # context) ends before aiohttp freezes it, mounted or not.
        app[CLIENT] = client
        app[POOL] = pool
        app[HISTORY].start(client, route=lambda record: _route(pool, record))
        service = app[SERVICE] = ThreadService(
            threads,
            pool,
            interrupt_ttl_seconds=config.interrupt_ttl_seconds,
            telemetry=telemetry,
            grace_seconds=config.disconnect_grace_seconds,
            log_bounds=run_log_bounds(config),
            runtime_config_dir=config.runtime_config_dir,
            profile=config.profile,
        )
        limits = app[LIMITS] = AdmissionLimits(
            threads.run_slots(), config.max_active_runs, config.max_active_runs_per_user,
            new_threads_per_user=config.max_new_threads_per_user,
            new_threads_window_seconds=config.new_threads_window_seconds,
            reattach_slots=threads.run_slots("reattach"),
        )
        service.new_thread_gate = limits.new_thread
        try:
            await service.start()
            await limits.start()
            yield
        finally:
            await limits.close()
            app[HISTORY].stop()
            await pool.close()
            await app[AUTH].close()
            if demo is not None:
                await demo.close()

    return context


def _route(pool: RuntimePool, record: ThreadRecord) -> tuple[A2AClient, Path | None]:
    member = pool.member(record.runtime)
    return member.client, member.spec.config_dir


def _history_reader(config: Config) -> HistoryReader:
    """The conversation reader; with ``--spawn-iac-code`` it may read the
    runtime's session files, which this server's own child writes."""
    return HistoryReader(
        cache_seconds=config.history_cache_seconds,
        max_reads=config.max_history_reads,
        max_reply_bytes=config.history_max_bytes,
        transcripts_dir=config.runtime_config_dir if config.spawned_runtime else None,
    )


def _metrics_listener(host: str, port: int):  # type: ignore[no-untyped-def]
    """The separate metrics listener, alive as long as the app."""

    async def context(app: web.Application) -> AsyncIterator[None]:
        runner = web.AppRunner(create_metrics_app(app), access_log=None, shutdown_timeout=0.5)
        await runner.setup()
        try:
            site = web.TCPSite(runner, host, port)
            await site.start()
            urls = [f"http://{_shown(bound[0])}:{bound[1]}/metrics" for bound in runner.addresses]
            app[METRICS_URLS] = tuple(urls)
            yield
        finally:
            await runner.cleanup()

    return context


def _shown(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def run_log_bounds(config: Config) -> LogBounds | None:
    """The run logs' bounds, or ``None`` when re-attach is off."""
    if not config.resumable:
        return None
    return LogBounds(config.run_log_max_events, config.run_log_max_bytes, config.replay_retention_seconds)


async def _stop_image_work(app: web.Application) -> None:
    app[IMAGES].close()


async def _stop_runs(app: web.Application) -> None:
    service = app.get(SERVICE)
    if service is not None:
        await service.shutdown()
    await app[STREAMS].close()
