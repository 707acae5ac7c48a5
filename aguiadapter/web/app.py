"""The application factory: standalone or mounted as a sub-app."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from aiohttp import web

from ..a2a.client import A2AClient
from ..config import Config
from ..threads.service import ThreadService
from ..threads.file_store import FileThreadStore
from ..threads.store import ThreadStore
from . import handlers
from .http_errors import json_errors
from .keys import BACKEND, CONFIG, Backend

log = logging.getLogger(__name__)


def create_app(config: Config, *, store: ThreadStore | None = None) -> web.Application:
    """An ``aiohttp`` application serving the AG-UI interface.

    Without ``config.a2a_url`` the embedded demo runtime is started on
    loopback for the lifetime of the app. The app keeps nothing in globals:
    several instances can live in one process, and mounting it with
    ``parent.add_subapp("/agui", app)`` works as is (the body limits are
    enforced per request, whatever the parent's ``client_max_size``). Every
    error it answers is JSON, unknown paths under its prefix and methods its
    routes do not take included; to have the HTTP parser's own refusals in
    JSON too, serve it with :class:`~aguiadapter.web.server.AdapterRunner`.
    """
    app = web.Application(middlewares=[json_errors])
    app[CONFIG] = config
    app[BACKEND] = Backend()
    app.router.add_get("/health", handlers.health)
    app.router.add_post("/", handlers.run)
    app.router.add_post("/extensions/iac-code/v1/executions/{executionId}/cancel", handlers.cancel)
    app.router.add_get("/openapi.json", handlers.openapi)
    if config.metrics:
        app.router.add_get("/metrics", handlers.metrics)
    app.cleanup_ctx.append(_runtime_context(config, store))
    app.on_shutdown.append(_stop_runs)
    return app


def _runtime_context(config: Config, store: ThreadStore | None):  # type: ignore[no-untyped-def]
    async def context(app: web.Application) -> AsyncIterator[None]:
        demo = None
        url = config.a2a_url
        if url is None:
            from ..demo.runtime import DemoRuntime

            demo = DemoRuntime()
            url = await demo.start()
            log.info("embedded demo runtime on %s", url)
        client = A2AClient(url, token=config.a2a_token)
        started = app[BACKEND]
        started.client = client
        started.service = ThreadService(
            store or _configured_store(config),
            client,
            interrupt_ttl_seconds=config.interrupt_ttl_seconds,
        )
        try:
            await started.service.start()
            yield
        finally:
            started.client = started.service = None
            await client.close()
            if demo is not None:
                await demo.close()

    return context


def _configured_store(config: Config) -> ThreadStore:
    """The file store, or the Redis store for ``--store redis://...``."""
    if not config.store_url:
        return FileThreadStore(config.state_dir)
    try:
        from ..threads.redis_store import store_from_url
    except ImportError as exc:
        raise RuntimeError("--store redis://... needs the redis extra: pip install 'aguiadapter[redis]'") from exc
    return store_from_url(config.store_url)


async def _stop_runs(app: web.Application) -> None:
    service = app[BACKEND].service
    if service is not None:
        await service.shutdown()
