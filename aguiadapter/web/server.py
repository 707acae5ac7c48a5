"""Serving the app so that even the HTTP parser's refusals are JSON.

aiohttp's parser answers some requests before any application code runs:
a request line over ``max_line_size``, a header over ``max_field_size``,
more than ``max_headers`` headers, malformed HTTP. It calls the connection's
``RequestHandler.handle_error``, which writes plain text, and no middleware
sees the request. :class:`JsonErrorRequestHandler` overrides that public
method to write the documented ``{"error": {"code", "message"}}`` body with
a fitting status (414, 431, 400; 500 for a bug), in English (the headers
that would name another language were not read).

aiohttp has no option that picks the connection class, so
:class:`AdapterRunner`, a drop-in ``web.AppRunner``, hands its sites (through
the public ``server`` property) a factory of such connections.
``python -m aguiadapter`` serves through it. An application that mounts
the adapter gets the same answers by serving its own app with
``AdapterRunner(parent_app)`` instead of ``web.AppRunner(parent_app)``
(``web.run_app`` has no runner argument); with aiohttp's own runner those
few answers stay aiohttp's plain text, and everything else stays JSON.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from aiohttp.http_exceptions import BadHttpMessage, LineTooLong
from aiohttp.web_request import BaseRequest

from ..errors import AdapterError, ErrorCode
from .access_log import AccessLog
from ..i18n import DEFAULT_LANGUAGE
from .http_errors import error_body

__all__ = ["AdapterRunner", "JsonErrorRequestHandler", "JsonErrorServer", "parser_error_code"]

log = logging.getLogger(__name__)

_METHOD_TOKEN = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _is_request_target(line: bytes) -> bool:
    """Whether an overlong line is the request line (or its URL), not a header.

    The C parser hands over the URL, the pure-Python one the whole line
    (``GET /... HTTP/1.1``); a header name can start with neither.
    """
    method, space, _ = line.partition(b" ")
    if space and method and set(method) <= _METHOD_TOKEN:
        return True
    return line.startswith((b"/", b"*", b"http:", b"https:"))


def parser_error_code(exc: BaseException | None, status: int, max_line_size: int, max_field_size: int) -> ErrorCode:
    """The documented code for what made aiohttp call ``handle_error``."""
    if isinstance(exc, LineTooLong):
        line, limit = (*exc.args, b"", None)[:2]
        if limit == max_line_size != max_field_size:
            return ErrorCode.URI_TOO_LONG
        if limit == max_field_size != max_line_size:
            return ErrorCode.HEADERS_TOO_LARGE
        target = isinstance(line, (bytes, bytearray)) and _is_request_target(bytes(line))
        return ErrorCode.URI_TOO_LONG if target else ErrorCode.HEADERS_TOO_LARGE
    if isinstance(exc, BadHttpMessage):
        if "Too many headers" in exc.message:
            return ErrorCode.HEADERS_TOO_LARGE
        return ErrorCode.BAD_REQUEST
    return ErrorCode.BAD_REQUEST if 400 <= status < 500 else ErrorCode.INTERNAL_ERROR


#: How long a connection may take to send a request's headers (a request
#: line and headers that never end would hold the connection forever).
HEADER_TIMEOUT_SECONDS = 10.0


class JsonErrorRequestHandler(web.RequestHandler):
    """A connection whose low-level error answers are JSON, and that is
    closed when a request's headers do not arrive within ``header_timeout``
    seconds (from the connection's start, or from the first bytes of a
    later request on it)."""

    def __init__(self, *args: Any, header_timeout: float = HEADER_TIMEOUT_SECONDS, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.header_timeout = header_timeout
        self._header_timer: asyncio.TimerHandle | None = None
        self._requests_seen = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Start waiting for the first request's headers."""
        super().connection_made(transport)
        self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        """Parse as aiohttp does; headers complete stop the clock, the first bytes of a request start it."""
        super().data_received(data)
        # aiohttp publishes none of these three (finished requests, one in
        # progress, parsed ones waiting): setup.cfg bounds aiohttp to the
        # tested minor series and `tox -e aiohttp-newest` tries the newest.
        count = self._request_count
        if count != self._requests_seen:
            self._requests_seen = count
            self._disarm_header_timer()
        elif self._header_timer is None and not self._request_in_progress and not self._messages:
            self._arm_header_timer()

    def connection_lost(self, exc: BaseException | None) -> None:
        """Stop the clock with the connection."""
        self._disarm_header_timer()
        super().connection_lost(exc)

    def _arm_header_timer(self) -> None:
        if self.header_timeout > 0:
            self._header_timer = asyncio.get_running_loop().call_later(self.header_timeout, self._headers_late)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        if self._request_count == self._requests_seen and not self._request_in_progress:
            log.debug("closed a connection whose request headers did not arrive within %g s", self.header_timeout)
            self.force_close()

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """The JSON answer to an error no application code could answer."""
        if request.writer.output_size > 0:
            # Too late for any answer: aiohttp raises and closes the connection.
            return super().handle_error(request, status, exc, message)
        code = parser_error_code(exc, status, self.max_line_size, self.max_field_size)
        if code is ErrorCode.INTERNAL_ERROR:
            log.error("error handling a request from %s", request.remote, exc_info=exc)
        else:
            # Not the parser's text: it quotes the start of the offending header.
            log.info("refused a request from %s: %s", request.remote, code.name)
        response = web.json_response(error_body(AdapterError(code), DEFAULT_LANGUAGE), status=code.status)
        response.force_close()
        return response


class JsonErrorServer(web.Server):
    """The connection factory of :class:`AdapterRunner`: each connection is a
    :class:`JsonErrorRequestHandler` of the app's own server ``plain``, which
    keeps the count of its connections and closes them on cleanup as usual."""

    def __init__(self, plain: web.Server, *, header_timeout: float = HEADER_TIMEOUT_SECONDS,
                 **connection_options: Any) -> None:
        super().__init__(
            plain.request_handler,
            request_factory=plain.request_factory,
            handler_cancellation=plain.handler_cancellation,
            **connection_options,
        )
        self.plain = plain
        self.header_timeout = header_timeout
        self._connection_loop = asyncio.get_running_loop()
        self._connection_options = connection_options

    def __call__(self) -> web.RequestHandler:
        return JsonErrorRequestHandler(
            self.plain, loop=self._connection_loop, header_timeout=self.header_timeout, **self._connection_options
        )


class AdapterRunner(web.AppRunner):
    """``web.AppRunner`` whose listeners serve its app through :class:`JsonErrorServer`.

    Takes the same arguments (``max_line_size``, ``max_field_size``,
    ``max_headers``, ``access_log``, ``shutdown_timeout``...; connection
    options an app would pass as ``handler_args`` go here), and
    ``header_timeout``: seconds a connection may take to send a request's
    headers (default 10; 0: no limit beyond aiohttp's keep-alive timeout).
    """

    def __init__(
        self,
        app: web.Application,
        *,
        header_timeout: float = HEADER_TIMEOUT_SECONDS,
        access_log_class: type[AbstractAccessLogger] = AccessLog,
        **kwargs: Any,
    ) -> None:
        super().__init__(app, access_log_class=access_log_class, **kwargs)
        self.header_timeout = header_timeout
        # What aiohttp hands each connection: the runner's options but its own.
        self._connection_options = {key: value for key, value in kwargs.items() if key != "shutdown_timeout"}
        self._connection_options["access_log_class"] = access_log_class
        self._json_server: JsonErrorServer | None = None

    @property
    def server(self) -> web.Server | None:
        """The factory a site listens with (aiohttp's public ``BaseRunner.server``):
        the app's own server, its connections made JSON-answering."""
        plain = super().server
        if plain is None:
            self._json_server = None
        elif self._json_server is None or self._json_server.plain is not plain:
            self._json_server = JsonErrorServer(plain, header_timeout=self.header_timeout, **self._connection_options)
        return self._json_server


class AccessLogWithoutHealth(AccessLog):
    """The access log without the ``GET /health`` lines (``--quiet-health``):
    a balancer probing every few seconds drowns the requests that matter."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        if request.method == "GET" and request.path.endswith("/health"):
            return
        super().log(request, response, time)
