"""Which `Host` and `Origin` a request may come with: DNS rebinding and CORS.

A web page the user visits may send requests to ``127.0.0.1:8000`` through a
name it controls (DNS rebinding: ``evil.example`` resolves to 127.0.0.1 after
the page loaded), or straight to the loopback address from its own origin.
Two checks keep such pages out:

- **Host.** Every request to a server that authenticates nobody (open mode)
  must name a loopback host: ``localhost`` (or ``*.localhost``),
  ``127.x.x.x``, ``[::1]``, or a name of ``Config.allowed_hosts``
  (``--allowed-host``). Otherwise 403 ``FORBIDDEN``. This holds on every
  listener, whatever address the connection arrived on: a server on
  ``0.0.0.0`` or a container's address is as reachable by a rebound name as
  one on loopback. The ``Host`` must be exactly a name and an optional
  decimal port: a trailing dot (``localhost.``, which a resolver may send to
  real DNS) or anything after an IPv6 literal's ``]`` other than a port is
  refused. A server that checks tokens is not limited: a rebound name brings
  no token.
- **Origin.** A request carrying ``Origin`` (browsers send it on every
  cross-origin request and on same-origin ``POST``) must come from the
  server's own origin (the ``Origin``'s host and port are the ``Host``) or
  from one of ``Config.allowed_origins`` (``--allowed-origin``). Otherwise
  403 ``FORBIDDEN``, in every auth mode. Clients that are not browsers send
  no ``Origin`` and are not concerned.

A CORS preflight (``OPTIONS`` with ``Access-Control-Request-Method``) from a
listed origin is answered 204 with the methods and headers the routes take;
the answers to that origin's requests carry ``Access-Control-Allow-Origin``
(streams too, as the header is added when a response is prepared).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from aiohttp import hdrs, web
from aiohttp.typedefs import Middleware

from ..config import Config, normalise_origin
from ..errors import AdapterError, ErrorCode
from .auth import OpenAccess
from .keys import AUTH

#: The listed origin a request came from, for :func:`add_cors_headers`.
CORS_ORIGIN = web.RequestKey("aguiadapter.cors_origin", str)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: Request headers a listed origin's page may send.
ALLOWED_HEADERS = (
    "Authorization, Content-Type, Accept, Accept-Language, Last-Event-ID, traceparent, tracestate"
)
#: Response headers a listed origin's page may read.
EXPOSED_HEADERS = "Retry-After, WWW-Authenticate, Content-Language"
PREFLIGHT_MAX_AGE = "600"
#: A DNS name: dot-separated labels of letters, digits and hyphens (no empty label, no trailing dot).
_LABELS = re.compile(r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*")


def is_loopback_host(name: str) -> bool:
    """``localhost``, ``*.localhost`` or a loopback address literal (no trailing dot)."""
    name = name.lower()
    if name == "localhost" or (name.endswith(".localhost") and _LABELS.fullmatch(name) is not None):
        return True
    try:
        address = ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def host_name(host: str) -> str:
    """The name part of a ``Host`` header (no port; brackets kept off an IPv6 literal).

    ``""`` (a name nothing allows) when the header is not exactly a name or
    ``[literal]`` with an optional decimal port: ``[::1]evil.example`` does
    not pass for ``::1``.
    """
    host = host.strip().lower()
    if host.startswith("["):
        literal, closed, rest = host[1:].partition("]")
        if not closed or (rest and not _is_port(rest)):
            return ""
        return literal
    if host.count(":") == 1:
        name, _, port = host.partition(":")
        return name if port.isascii() and port.isdigit() else ""
    return host


def _is_port(suffix: str) -> bool:
    """``:`` and decimal digits (what may follow a bracketed IPv6 literal)."""
    digits = suffix[1:]
    return suffix.startswith(":") and digits.isascii() and digits.isdigit()


def _check_host(request: web.Request, config: Config) -> None:
    if not isinstance(request.config_dict[AUTH], OpenAccess):
        return
    name = host_name(request.headers.get(hdrs.HOST, ""))
    if name and (is_loopback_host(name) or name in config.allowed_hosts):
        return
    raise AdapterError(ErrorCode.FORBIDDEN, "forbidden_host")


def _allowed_origin(request: web.Request, config: Config) -> str | None:
    """The request's ``Origin`` when it is listed; ``None`` without one; 403 when refused."""
    origin = request.headers.get(hdrs.ORIGIN)
    if origin is None:
        return None
    try:
        normal = normalise_origin(origin)
    except ValueError:
        raise AdapterError(ErrorCode.FORBIDDEN, "forbidden_origin") from None
    if normal in config.allowed_origins:
        return origin
    if urlsplit(normal).netloc == request.headers.get(hdrs.HOST, "").strip().lower():
        return None  # same origin: no CORS headers needed
    raise AdapterError(ErrorCode.FORBIDDEN, "forbidden_origin")


def _preflight(origin: str) -> web.Response:
    return web.Response(status=204, headers={
        hdrs.ACCESS_CONTROL_ALLOW_ORIGIN: origin,
        hdrs.ACCESS_CONTROL_ALLOW_METHODS: "GET, POST",
        hdrs.ACCESS_CONTROL_ALLOW_HEADERS: ALLOWED_HEADERS,
        hdrs.ACCESS_CONTROL_MAX_AGE: PREFLIGHT_MAX_AGE,
        hdrs.VARY: "Origin",
    })


def request_guard(config: Config) -> Middleware:
    """The middleware checking ``Host`` and ``Origin`` (inside ``json_errors``, so refusals are JSON)."""

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        _check_host(request, config)
        origin = _allowed_origin(request, config)
        if origin is not None:
            if request.method == hdrs.METH_OPTIONS and hdrs.ACCESS_CONTROL_REQUEST_METHOD in request.headers:
                return _preflight(origin)
            request[CORS_ORIGIN] = origin
        return await handler(request)

    return guard


async def add_cors_headers(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: a listed origin may read the answer (streams included)."""
    origin = request.get(CORS_ORIGIN)
    if origin is not None and hdrs.ACCESS_CONTROL_ALLOW_ORIGIN not in response.headers:
        response.headers[hdrs.ACCESS_CONTROL_ALLOW_ORIGIN] = origin
        response.headers[hdrs.ACCESS_CONTROL_EXPOSE_HEADERS] = EXPOSED_HEADERS
        response.headers.add(hdrs.VARY, "Origin")
