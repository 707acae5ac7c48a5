"""``GET /threads``: the caller's threads, newest first, a page at a time.

Whose threads (:func:`~aguiadapter.threads.listing.list_owner`):

- verified identity (JWTs, or an embedding's ``principal`` hook): the
  verified user's; a ``userId`` parameter may only repeat that user;
- shared token: nobody is named, so the caller says whose: ``userId`` is
  required (a back-end for front-end decides it) and lists the threads whose
  first run named that ``userId``;
- open (no auth, a loopback server): ``userId`` lists that user's threads;
  without it, the threads started without a ``userId``.

Answered from the store's per-owner index (the records' summaries), never by
reading every record; see ``docs/front-ends.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from aiohttp import web

from ..errors import AdapterError, ErrorCode
from ..threads.listing import DEFAULT_LIMIT, MAX_LIMIT, ListCursor, ThreadSummary, list_owner
from ..threads.record import ThreadState
from ..store.contract import StoreUnavailable
from ..pool.settings import DEFAULT_RUNTIME
from .auth import SharedToken
from .handlers import authenticate
from .http_errors import error_response, request_language
from .keys import AUTH, backend

#: The longest ``userId`` a list call takes (as long as a principal may be).
MAX_USER_ID_CHARS = 1024
_STATES = {state.value: state for state in ThreadState}


async def list_threads(request: web.Request) -> web.Response:
    """``GET /threads?limit=&cursor=&state=&userId=``."""
    _, service = backend(request)
    language = request_language(request)
    try:
        principal = await authenticate(request)
        query = request.query
        owner = _owner(principal, query.get("userId"), isinstance(request.config_dict[AUTH], SharedToken))
        limit, cursor, states = _limit(query.get("limit")), _cursor(query.get("cursor")), _states(query.get("state"))
        try:
            page = await service.store.list_threads(owner, cursor, limit, states)
        except StoreUnavailable as exc:
            raise AdapterError(ErrorCode.STATE_STORE_UNAVAILABLE) from exc
    except AdapterError as exc:
        return error_response(exc, language, request)
    body = {
        "threads": [summary_view(summary) for summary in page.threads],
        "nextCursor": None if page.next_cursor is None else page.next_cursor.encode(),
    }
    return web.json_response(body, headers={"Cache-Control": "no-store"})


def summary_view(summary: ThreadSummary) -> dict[str, Any]:
    """What the list shows of one thread (as ``GET /threads/{threadId}`` names it)."""
    view: dict[str, Any] = {
        "threadId": summary.thread_id,
        "state": summary.state.value,
        "createdAt": None if summary.created_at is None else iso_millis(summary.created_at),
        "updatedAt": iso_millis(summary.updated_at),
        "pendingInterrupts": summary.pending_interrupts,
        # The pool runtime it is pinned to; records made before pools ran on ``default``.
        "runtime": summary.runtime or DEFAULT_RUNTIME,
    }
    if summary.active_run_id is not None:
        view["activeRunId"] = summary.active_run_id
    if summary.last_error is not None:
        view["lastError"] = {"code": summary.last_error}
    return view


def iso_millis(timestamp: float) -> str:
    """An RFC 3339 UTC time with milliseconds (``2026-12-01T20:55:00.123Z``)."""
    moment = datetime.fromtimestamp(timestamp, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _owner(principal: str | None, user_id: str | None, shared_token: bool) -> str:
    if user_id is not None and (not user_id or len(user_id) > MAX_USER_ID_CHARS):
        raise AdapterError(ErrorCode.INVALID_INPUT, "thread_list_bad_user_id")
    if principal is not None:
        if user_id is not None and user_id != principal:
            raise AdapterError(ErrorCode.INVALID_INPUT, "input_user_id_not_principal", path="userId")
        return list_owner(principal, None)
    if shared_token and user_id is None:
        raise AdapterError(ErrorCode.INVALID_INPUT, "thread_list_user_id_required")
    return list_owner(None, user_id)


def page_limit(raw: str | None, default: int, largest: int, refusal: str, **args: int) -> int:
    """A page size from a query's ``limit``: ``default`` without one, else
    1 to ``largest`` (an ``INVALID_INPUT`` named ``refusal`` with ``args``)."""
    if raw is None:
        return default
    if not raw.isascii() or not raw.isdigit() or len(raw) > 6 or not 1 <= int(raw) <= largest:
        raise AdapterError(ErrorCode.INVALID_INPUT, refusal, **args)
    return int(raw)


def _limit(raw: str | None) -> int:
    return page_limit(raw, DEFAULT_LIMIT, MAX_LIMIT, "thread_list_bad_limit", most=MAX_LIMIT)


def _cursor(raw: str | None) -> ListCursor | None:
    if raw is None:
        return None
    try:
        return ListCursor.decode(raw)
    except ValueError:
        raise AdapterError(ErrorCode.INVALID_INPUT, "thread_list_bad_cursor") from None


def _states(raw: str | None, known: Mapping[str, ThreadState] = _STATES) -> frozenset[ThreadState] | None:
    if raw is None:
        return None
    names = raw.split(",")
    if not all(name in known for name in names):
        raise AdapterError(ErrorCode.INVALID_INPUT, "thread_list_bad_state", states=", ".join(known))
    return frozenset(known[name] for name in names)
