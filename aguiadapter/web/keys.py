"""Typed application keys: everything a handler reads from its app."""

from __future__ import annotations

import attrs
from aiohttp import web

from ..a2a.client import A2AClient
from ..config import Config
from ..errors import AdapterError, ErrorCode
from ..images import ImageWork
from ..telemetry import Telemetry
from ..pool.pool import RuntimePool
from ..service.limits import AdmissionLimits
from ..service.history_reader import HistoryReader
from ..service.thread_service import ThreadService
from .auth import Authenticator
from .body_turns import LargeBodies
from .stream_watch import StreamWatch


@attrs.define
class Backend:
    """What the app starts on startup: the A2A client, the thread service and the admission limits.

    The app's keys are fixed before it starts; this holder is filled in when
    it does, so nothing is written to a frozen application.
    """

    client: A2AClient | None = None
    service: ThreadService | None = None
    #: Where the separate metrics listener (``Config.metrics_port``) listens.
    metrics_urls: list[str] = attrs.Factory(list)
    limits: AdmissionLimits | None = None
    #: The runtimes threads are pinned to (``/health`` lists them; SIGHUP reloads them).
    pool: RuntimePool | None = None


CONFIG = web.AppKey("aguiadapter.config", Config)
BACKEND = web.AppKey("aguiadapter.backend", Backend)
TELEMETRY = web.AppKey("aguiadapter.telemetry", Telemetry)
#: How the app decides who calls (open, shared token or verified JWTs).
AUTH = web.AppKey("aguiadapter.auth", Authenticator)
#: The one timer of the app's open SSE streams (heartbeats, vanished clients).
STREAMS = web.AppKey("aguiadapter.streams", StreamWatch)
#: Threads' conversations, read from the runtime on demand (``GET /threads/{id}/messages``,
#: ``POST /connect``): ``await request.config_dict[HISTORY].page(record, limit=...)``.
HISTORY = web.AppKey("aguiadapter.history", HistoryReader)
#: The images' fitting, its decodes bounded by one memory budget per app.
IMAGES = web.AppKey("aguiadapter.images", ImageWork)
#: Large run bodies take turns between being read and being admitted.
LARGE_BODIES = web.AppKey("aguiadapter.large_bodies", LargeBodies)


def backend(request: web.Request) -> tuple[A2AClient, ThreadService]:
    """The started client and service of the app that serves ``request``."""
    started = request.config_dict[BACKEND]
    if started.client is None or started.service is None:
        raise AdapterError(ErrorCode.SERVICE_UNAVAILABLE)
    return started.client, started.service


def admission(request: web.Request) -> AdmissionLimits:
    """The started admission limits of the app that serves ``request``."""
    limits = request.config_dict[BACKEND].limits
    if limits is None:
        raise AdapterError(ErrorCode.SERVICE_UNAVAILABLE)
    return limits
