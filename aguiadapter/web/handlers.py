"""HTTP handlers: health, runs, and the JSON error responses before a stream."""

from __future__ import annotations

import asyncio
import functools
import json
from importlib import resources
from typing import Any

from aiohttp import web

from ..a2a.client import media_type
from ..version import __version__
from ..errors import AdapterError, ErrorCode
from ..logs import KNOWN_SECRETS, SecretsHidden, mask_url
from ..protocol.digest import canonical_digest
from ..protocol.inputs import RunAgentInput
from ..protocol.parsing import parse_cancel_request, parse_run_input
from ..protocol.profile import Profile
from ..protocol.request_json import decode_request_json
from ..runs.driver import Ticket
from ..service.thread_service import ThreadService
from ..store.contract import StoreUnavailable
from ..workspace import resolve_workspace
from .auth import HostPrincipal, OpenAccess, Unauthorized, bind_user_id, named_user_id
from .http_errors import error_response, request_language
from .keys import AUTH, CONFIG, IMAGES, LARGE_BODIES, STREAMS, TELEMETRY, WORKSPACES, admission, backend
from .body_turns import read_at_pace, reserved_size
from .sse import SseWriter


async def authenticate(request: web.Request) -> str | None:
    """The caller's verified principal (``None`` in the modes that name nobody); 401 to refuse."""
    return await request.config_dict[AUTH].principal(request)


async def _may_see_internals(request: web.Request) -> bool:
    """Open mode, a caller whose bearer token authenticates, or a user the host's hook names."""
    auth = request.config_dict[AUTH]
    if isinstance(auth, OpenAccess):
        return True
    if "Authorization" not in request.headers and not isinstance(auth, HostPrincipal):
        return False
    try:
        await auth.principal(request)
    except Unauthorized:
        return False
    return True


async def read_json_body(request: web.Request, limit: int) -> Any:
    """The JSON body, read with a hard size limit (also as a sub-app), from the
    app's body budget (see body_turns)."""
    async with request.config_dict[LARGE_BODIES].room(reserved_size(request, limit)):
        return decode_request_json(await read_body(request, limit))


async def read_body(request: web.Request, limit: int) -> bytes:
    """The bytes of a JSON body, read with a hard size limit counted on what
    its ``Content-Encoding`` inflates to, as it inflates, at a minimum pace."""
    if request.content_type != "application/json":
        raise AdapterError(ErrorCode.UNSUPPORTED_MEDIA_TYPE)
    reserved_size(request, limit)  # 413 from the header, before reading
    return await read_at_pace(request, limit)


@functools.cache
def openapi_document(prefix: str = "") -> bytes:
    """The packaged OpenAPI 3.1 description (aguiadapter/web/openapi.json);
    with a ``prefix`` its server is the mount point (a URL relative to the
    document's own, so that whatever host name the client used is kept)."""
    packaged = resources.files("aguiadapter.web").joinpath("openapi.json").read_bytes()
    if not prefix:
        return packaged
    document = json.loads(packaged)
    document["servers"] = [{"url": prefix, "description": "where this server's AG-UI interface is mounted"}]
    return json.dumps(document, ensure_ascii=False).encode()


def mount_prefix(request: web.Request, own_path: str) -> str:
    """Where the adapter app is mounted (``/agui`` under ``add_subapp("/agui/", ...)``,
    ``""`` on its own), seen from a request to its route ``own_path``.

    aiohttp prefixes a sub-app's resources when it is mounted, so the
    route's canonical path is the prefix followed by the app's own path.
    """
    resource = request.match_info.route.resource
    canonical = resource.canonical if resource is not None else own_path
    return canonical.removesuffix(own_path) if canonical.endswith(own_path) else ""


async def openapi(request: web.Request) -> web.Response:
    """``GET /openapi.json``: the OpenAPI description of this interface (open, no auth)."""
    return web.Response(body=openapi_document(mount_prefix(request, "/openapi.json")), content_type="application/json")


async def metrics(request: web.Request) -> web.Response:
    """``GET /metrics``: the app's Prometheus metrics (with ``--metrics`` or
    ``--metrics-port``), in the text format or OpenMetrics as ``Accept`` asks."""
    kept = request.config_dict[TELEMETRY].metrics
    if kept is None:
        raise web.HTTPNotFound()
    _, service = backend(request)
    try:
        # Read from the store at scrape time: with Redis, other replicas move them.
        here, shared = float(await service.expiry.pending_here()), float(await service.store.deadline_count())
    except StoreUnavailable:
        here = shared = float("nan")
    kept.set_pending(here, shared)
    for name, active in (await service.pool.active_runs()).items():
        request.config_dict[TELEMETRY].runtime_load(name, float("nan") if active is None else float(active))
    body, content_type = kept.exposition(request.headers.get("Accept", ""))
    return web.Response(body=body, headers={"Content-Type": content_type})


_INDEX_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>aguiadapter</title></head>
<body><h1>aguiadapter {version}</h1>
<p>An AG-UI server: clients <code>POST</code> a <code>RunAgentInput</code> to this URL and read the
run as server-sent events.</p>
<ul>
<li><a href="{prefix}/health">health</a>: status, protocol version, which runtime</li>
<li><a href="{prefix}/capabilities">capabilities</a>: what this server supports</li>
<li><a href="{prefix}/openapi.json">openapi.json</a>: every route, its requests and answers</li>
</ul>
<p>Docs: README.md and docs/integrators-guide.md of the aguiadapter package.</p>
</body></html>
"""


async def index(request: web.Request) -> web.Response:
    """``GET /``: where to look, for a person with a browser (HTML) or a program (JSON); open."""
    prefix = mount_prefix(request, "/")
    if _prefers_html(request.headers.get("Accept", "")):
        page = _INDEX_HTML.format(version=__version__, prefix=prefix)
        return web.Response(text=page, content_type="text/html")
    return web.json_response(
        {
            "service": "aguiadapter",
            "serverVersion": __version__,
            "protocol": "ag-ui",
            "run": {"method": "POST", "path": prefix + "/"},
            "links": {
                "health": prefix + "/health",
                "capabilities": prefix + "/capabilities",
                "openapi": prefix + "/openapi.json",
            },
            "docs": "README.md and docs/integrators-guide.md of the aguiadapter package",
        }
    )


def _prefers_html(accept: str) -> bool:
    """Whether ``Accept`` ranks ``text/html`` above JSON (as a browser's does)."""
    ranks: dict[str, float] = {}
    for item in accept.split(","):
        kind, *params = (part.strip() for part in item.split(";"))
        weight = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip() == "q":
                try:
                    weight = float(value)
                except ValueError:
                    weight = 0.0
        ranks[kind.lower()] = max(weight, ranks.get(kind.lower(), 0.0))
    return ranks.get("text/html", 0.0) > ranks.get("application/json", 0.0)


async def health(request: web.Request) -> web.Response:
    """Open health check with protocol and runtime reachability.

    The runtime's URL (credentials masked) is shown in open mode and to a
    caller whose token is good; an anonymous caller of a server that checks
    tokens learns only whether the runtime answers.
    """
    client, service = backend(request)
    config = request.config_dict[CONFIG]
    kind = config.runtime_kind
    pool = service.pool
    probed, store_status = await asyncio.gather(client.health_status(), service.store.status())
    runtime_status: str = probed
    single = pool.only
    if single is not None:
        single.status = probed  # fresher than the last background probe
    reachable, store_ok = runtime_status == "ok", store_status == "ok"
    internals = await _may_see_internals(request)
    runtimes = await pool.report(with_urls=internals)
    if single is None:
        # A pool: ``a2a`` says whether a new thread has somewhere to go.
        reachable = pool.takes_new_threads
        runtime_status = "ok" if all(item["reachable"] for item in runtimes) else "degraded"
    # ``reachable`` as before (usable); ``status`` says why not: a refused
    # token is an operator's fix, not a network outage.
    runtime: dict[str, Any] = {"reachable": reachable, "status": runtime_status}
    if internals and single is not None:
        runtime = {"url": mask_url(client.url), **runtime}
    status = "ok" if runtime_status == "ok" and store_ok else "degraded"
    # A pool with no runtime for a new thread sends the load balancer elsewhere; a
    # single runtime keeps answering 200 "degraded", as before pools.
    unusable = single is None and not reachable
    if service.draining:
        status = "draining"
    return web.json_response(
        {
            "status": status,
            "protocol": "ag-ui",
            "protocolVersion": "1.0",
            # ag-ui-1.0, or iac-code-agui (--compat): which wire forms this server sends.
            "profile": config.profile.value,
            "serverVersion": __version__,
            # demo (the scripted agent), iac-code (a supervised child) or a2a.
            "runtime": kind,
            "a2a": runtime,
            # The pool's runtimes (one named "default" with --a2a-url alone).
            "runtimes": runtimes,
            "store": {"kind": service.store.kind, "reachable": store_ok, "status": store_status,
                      # fsync or process (--durability); redis: the Redis server's own.
                      "durability": service.store.durability},
        },
        # A draining replica tells the load balancer to send it nothing new.
        status=503 if service.draining or unusable else 200,
    )


async def run(request: web.Request) -> web.StreamResponse:
    """``POST /``: admit a ``RunAgentInput`` and stream the run as SSE."""
    config = request.config_dict[CONFIG]
    _, service = backend(request)
    language = request_language(request)
    limits = admission(request)
    payload: Any = None
    slot = None
    # Not an ExitStack (its queue is 0.8 KB): this frame lives as long as the stream.
    with SecretsHidden() as hidden:
        try:
            try:
                principal = await authenticate(request)
                if media_type(request.headers) != "application/json":
                    raise AdapterError(ErrorCode.UNSUPPORTED_MEDIA_TYPE)
                # Room in the body budget, then the body, then its turn when large (see body_turns).
                large_bodies = request.config_dict[LARGE_BODIES]
                async with large_bodies.whole(request, config.max_body_bytes) as held:
                    body = held.pop()
                    if large_bodies.is_large(len(body)):
                        # Off the event loop: other users' events go on meanwhile.
                        payload, parsed, digest = await asyncio.to_thread(_decoded_run, body, config.profile)
                    else:
                        payload, parsed, digest = _decoded_run(body, config.profile)
                    del body
                    language = request_language(request, payload)
                    if isinstance(parsed, AdapterError):
                        raise parsed
                    run_input = bind_user_id(parsed, principal)
                    # From every line this run logs, the runtime's quotes included.
                    hidden.hide(run_input.iac_code.secret_values())
                    # The thread's record file is looked for on the same trip (a new thread's admission reads nothing).
                    early = service.absence_probe(run_input.thread_id, principal)
                    cwd = await resolve_workspace(run_input.iac_code.cwd, config.allowed_cwds,
                                                  early.look if early is not None else None,
                                                  checked=request.config_dict[WORKSPACES],
                                                  user=run_input.iac_code.user_id or "")
                    # Before admission: a refused run never touches its thread or the runtime.
                    slot = await limits.acquire(run_input.iac_code.user_id)
                    # Images are decoded only once the run limits and the new-thread gate said yes.
                    ticket = await service.admit(
                        run_input, digest, language, cwd, principal,
                        prepare=request.config_dict[IMAGES].fit, early=early,
                    )
                    # Admitted: the runtime has them now, and may quote them later,
                    # outside this request (an expiry, a later turn).
                    KNOWN_SECRETS.remember(run_input.iac_code.secret_values())
            except AdapterError as exc:
                return error_response(exc, language, request)
            # The ticket holds what the run needs; the decoded body is not kept for
            # as long as the stream stays open.
            del payload, run_input
            return await _stream(request, service, ticket, language)
        finally:
            await limits.release(slot)


def _decoded_run(body: bytes, profile: Profile) -> tuple[Any, RunAgentInput | AdapterError, str]:
    """The body's JSON, the run it asks for in ``profile`` (or why it is refused) and its digest."""
    payload = decode_request_json(body)
    try:
        parsed: RunAgentInput | AdapterError = parse_run_input(payload, profile)
    except AdapterError as exc:
        return payload, exc, ""
    return payload, parsed, canonical_digest(payload)


async def _stream(request: web.Request, service: ThreadService, ticket: Ticket, language: str) -> web.StreamResponse:
    """Run an admitted ticket, its events written as SSE."""
    execution_id = ticket.execution_id
    sink = SseWriter(
        request,
        request.config_dict[STREAMS],
        on_disconnect=functools.partial(service.stop_run, execution_id, "disconnect"),
    )
    try:
        await service.run(ticket, sink)
    except AdapterError as exc:
        if not sink.prepared:
            return error_response(exc, language, request)
        raise
    finally:
        await sink.close()
    return sink.response


async def cancel(request: web.Request) -> web.Response:
    """``POST /extensions/iac-code/v1/executions/{executionId}/cancel``."""
    config = request.config_dict[CONFIG]
    _, service = backend(request)
    language = request_language(request)
    execution_id = request.match_info["executionId"]
    try:
        principal = await authenticate(request)
        user_id = named_user_id(request, principal)
        payload = await read_json_body(request, config.max_cancel_body_bytes)
        language = request_language(request, payload)
        body = parse_cancel_request(payload)
        status = await service.cancel_execution(
            execution_id, body.thread_id, body.ros_invocation_id, principal, user_id
        )
        if status == "not_found":
            raise AdapterError(ErrorCode.EXECUTION_NOT_FOUND)
    except AdapterError as exc:
        return error_response(exc, language, request)
    return web.json_response({"executionId": execution_id, "status": status})
