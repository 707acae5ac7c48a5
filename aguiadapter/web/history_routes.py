"""``GET /threads/{threadId}/messages``: a thread's conversation, a page of turns at a time.

The messages are AG-UI 1.0 ``Message`` objects projected from the runtime's
session transcript (:mod:`aguiadapter.runtime.history`), read through the
app's :class:`~aguiadapter.service.history_reader.HistoryReader`. A page is
the newest ``limit`` turns before the cursor ``before`` (a turn starts at a
user message, so a tool call and its result are never on two pages), within
the server's byte budget (at least one turn). The answer is
``{"messages": [...], "before": cursor | null}``: ``before`` fetches the
older turns; ``null`` means this page reaches the first turn.

Same auth and ownership as ``GET /threads/{threadId}``: another user's
thread and an unknown one are both 404 ``THREAD_NOT_FOUND``. 400
``INVALID_INPUT`` for a bad ``limit`` or cursor (checked before the thread
is looked up, so the answer tells nothing about whose thread it is); 503
``HISTORY_UNAVAILABLE`` with ``Retry-After`` when the runtime cannot serve
the transcript.

A thread pinned again to another runtime (its own left the pool) shows the
conversation since then; ``earlier`` lists each conversation before it,
which stayed on the old runtime, as unavailable (see docs/deployment.md).
"""

from __future__ import annotations

from typing import Any, Final

from aiohttp import web

from ..errors import AdapterError, ErrorCode
from ..fastjson import dumps
from ..runtime.history import parse_cursor
from .handlers import authenticate
from .http_errors import error_response, request_language
from .keys import CONFIG, HISTORY, backend
from .thread_list import page_limit
from .thread_routes import callers_thread

#: Turns per page when the client names no ``limit``, and the most it may ask for.
DEFAULT_LIMIT: Final = 20
MAX_LIMIT: Final = 200


def _limit(raw: str | None) -> int:
    return page_limit(raw, DEFAULT_LIMIT, MAX_LIMIT, "invalid_history_limit", max=MAX_LIMIT)


def _cursor(raw: str | None) -> str | None:
    try:
        parse_cursor(raw)
    except ValueError as exc:
        raise AdapterError(ErrorCode.INVALID_INPUT, "invalid_history_cursor") from exc
    return raw


async def thread_messages(request: web.Request) -> web.Response:
    """``GET /threads/{threadId}/messages?limit=&before=``: a page of the conversation."""
    _, service = backend(request)
    language = request_language(request)
    try:
        principal = await authenticate(request)
        limit = _limit(request.query.get("limit"))
        before = _cursor(request.query.get("before"))
        record = await callers_thread(request, service, principal)
        page = await request.config_dict[HISTORY].page(
            record, limit=limit, before=before, byte_budget=request.config_dict[CONFIG].history_page_bytes
        )
    except AdapterError as exc:
        return error_response(exc, language, request)
    document: dict[str, Any] = {"messages": page.messages, "before": page.before}
    earlier = service.earlier_of(record)
    if earlier:  # pinned again: what came before stayed on another runtime
        document["earlier"] = earlier
    body = dumps(document)
    return web.Response(body=body, content_type="application/json", headers={"Cache-Control": "no-store"})
