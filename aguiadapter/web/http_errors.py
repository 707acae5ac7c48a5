"""Every error the app answers, as ``{"error": {"code", "message"}}``.

Handlers raise :class:`~aguiadapter.errors.AdapterError` or answer with
:func:`error_response`; the :func:`json_errors` middleware turns whatever
else ends a request in error (no route, a method the route does not take,
an aiohttp ``HTTPException``, a bug) into the same JSON body with a fitting
status and documented code. The middleware belongs to the adapter's app, so
it also serves a mounted adapter (``parent.add_subapp("/agui/", app)``) for
every path under its prefix, and nothing of the parent's.

Errors of the HTTP parser itself (oversize request line or headers,
malformed HTTP) are answered before any app runs: see :mod:`.server`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from aiohttp import hdrs, web

from ..errors import AdapterError, ErrorCode
from ..i18n import negotiate_language, render_error
from ..protocol.parsing import peek_preferred_language
from .keys import TELEMETRY

__all__ = ["error_body", "error_response", "json_errors", "request_language"]

log = logging.getLogger(__name__)

_BY_STATUS: Final[Mapping[int, ErrorCode]] = {
    400: ErrorCode.BAD_REQUEST,
    401: ErrorCode.UNAUTHORIZED,
    404: ErrorCode.NOT_FOUND,
    405: ErrorCode.METHOD_NOT_ALLOWED,
    413: ErrorCode.REQUEST_TOO_LARGE,
    414: ErrorCode.URI_TOO_LONG,
    415: ErrorCode.UNSUPPORTED_MEDIA_TYPE,
    431: ErrorCode.HEADERS_TOO_LARGE,
    503: ErrorCode.SERVICE_UNAVAILABLE,
}


def code_for_status(status: int) -> ErrorCode:
    """The documented code answering an HTTP error status."""
    return _BY_STATUS.get(status) or (ErrorCode.BAD_REQUEST if status < 500 else ErrorCode.INTERNAL_ERROR)


def error_body(error: AdapterError, language: str) -> dict[str, Any]:
    """``{"error": {"code", "message"}}`` in ``language``."""
    return {"error": {"code": error.code.name, "message": render_error(error, language)}}


def error_response(
    error: AdapterError,
    language: str,
    request: web.Request | None = None,
    headers: Mapping[str, str] | None = None,
) -> web.Response:
    """The JSON error answer, with the code's HTTP status (and the headers
    the error itself carries: ``WWW-Authenticate``, ``Retry-After``...)."""
    if request is not None:
        request.config_dict[TELEMETRY].refused(error.code)
    headers = {**error.response_headers(), **(headers or {})}
    return web.json_response(error_body(error, language), status=error.code.status, headers=headers)


def request_language(request: web.Request, payload: Any = None) -> str:
    """``preferredLanguage`` of the body over ``Accept-Language`` over English."""
    preferred = peek_preferred_language(payload) if payload is not None else None
    return negotiate_language(preferred, request.headers.get(hdrs.ACCEPT_LANGUAGE))


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Answer every error of the app's routes (and of its missing ones) as JSON."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        error, headers = AdapterError(code_for_status(exc.status)), _allow_header(exc)
    except AdapterError as exc:
        error, headers = exc, None
    except Exception:  # a bug still gets the documented answer
        if request.writer.output_size > 0:
            raise  # the response has begun; aiohttp closes the connection
        log.exception("unhandled error answering %s %s", request.method, request.rel_url.path)
        error, headers = AdapterError(ErrorCode.INTERNAL_ERROR), None
    if request.writer.output_size > 0:
        # A stream has begun: its errors are events, not a second response.
        raise error
    return error_response(error, request_language(request), request, headers)


def _allow_header(exc: web.HTTPException) -> dict[str, str] | None:
    allow = exc.headers.get(hdrs.ALLOW)
    return None if allow is None else {hdrs.ALLOW: allow}
