"""Typed application keys: everything a handler reads from its app."""

from __future__ import annotations

from typing import Final, TypeVar

from aiohttp import web

from ..a2a.client import A2AClient
from ..config import Config
from ..errors import AdapterError, ErrorCode
from ..images import ImageWork
from ..telemetry import Telemetry
from ..workspace import CheckedWorkspaces
from ..pool.pool import RuntimePool
from ..service.limits import AdmissionLimits
from ..service.history_reader import HistoryReader
from ..service.thread_service import ThreadService
from .auth import Authenticator
from .body_turns import LargeBodies
from .stream_watch import StreamWatch

_T = TypeVar("_T")


CONFIG = web.AppKey("aguiadapter.config", Config)
# What the app starts, set by its cleanup context (an app, a mounted one
# included, takes keys until its startup ends); absent before and on a
# failed start, so a handler answers 503 SERVICE_UNAVAILABLE.
CLIENT = web.AppKey("aguiadapter.client", A2AClient)
SERVICE = web.AppKey("aguiadapter.service", ThreadService)
LIMITS = web.AppKey("aguiadapter.limits", AdmissionLimits)
#: The runtimes threads are pinned to (``/health`` lists them; SIGHUP reloads them).
POOL = web.AppKey("aguiadapter.pool", RuntimePool)
#: Where the separate metrics listener (``Config.metrics_port``) listens.
METRICS_URLS: Final[web.AppKey[tuple[str, ...]]] = web.AppKey("aguiadapter.metrics_urls")
#: Set on an app of :func:`~aguiadapter.web.app.create_metrics_app` only: the
#: adapter app whose started service it reads.
ADAPTER = web.AppKey("aguiadapter.adapter", web.Application)
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
#: The workspaces that passed their disk check lately, per user.
WORKSPACES = web.AppKey("aguiadapter.workspaces", CheckedWorkspaces)


def _started(request: web.Request, key: web.AppKey[_T]) -> _T | None:
    """What the adapter app that serves ``request`` started under ``key`` (through a metrics app: its adapter's)."""
    adapter = request.config_dict.get(ADAPTER)
    return adapter.get(key) if adapter is not None else request.config_dict.get(key)


def backend(request: web.Request) -> tuple[A2AClient, ThreadService]:
    """The started client and service of the app that serves ``request``."""
    client, service = _started(request, CLIENT), _started(request, SERVICE)
    if client is None or service is None:
        raise AdapterError(ErrorCode.SERVICE_UNAVAILABLE)
    return client, service


def admission(request: web.Request) -> AdmissionLimits:
    """The started admission limits of the app that serves ``request``."""
    limits = _started(request, LIMITS)
    if limits is None:
        raise AdapterError(ErrorCode.SERVICE_UNAVAILABLE)
    return limits
