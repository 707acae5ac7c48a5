"""``POST /connect``: a reloaded page gets its conversation and its pending approvals back.

The AG-UI convention for hydration (``@ag-ui/client``'s ``connectAgent``:
``POST {url}/connect`` with a ``RunAgentInput``; 404 and 405 mean "no
history"). The answer is one lawful AG-UI run, built by
:mod:`aguiadapter.web.hydrate`: ``RUN_STARTED``, ``MESSAGES_SNAPSHOT``
(the newest turns within a byte budget), a pipeline's ``ACTIVITY_SNAPSHOT``,
``RUN_FINISHED`` with the pending interrupts as its outcome. On a thread
with a run in progress the stream goes on with that run, from its start, as
a re-attach reads it (:meth:`~aguiadapter.service.thread_service.ThreadService.attach`:
live to its end, from any replica with Redis): that part is this server's own
transport extension, as re-attach is (AG-UI's SSE binding resumes nothing).

Authentication and ownership are those of every thread route: someone
else's thread is 404 ``THREAD_NOT_FOUND``, as an unknown one.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any, Final

from aiohttp import web

from ..errors import AdapterError, ErrorCode
from ..i18n import render
from ..protocol.events import encode_sse
from .hydrate import (
    HistoryMissing, HistoryPage, Hydration, announced_interrupts, before_active_run, hydrate_events,
    hydrate_run_id, pipeline_activity,
)
from ..protocol.inputs import ConnectRequest
from ..protocol.parsing import parse_connect_request
from ..threads import machine as tm
from ..threads.record import ThreadRecord
from ..service.history_reader import HistoryUnavailable
from ..service.thread_service import ThreadService
from .handlers import authenticate, read_json_body
from .http_errors import error_response, request_language
from .keys import CONFIG, HISTORY, admission, backend
from .thread_routes import _relay

log = logging.getLogger(__name__)

#: How many of the newest turns a hydrate run's snapshot holds at most (and
#: at most ``--history-page-bytes`` of them; older turns: the cursor).
SNAPSHOT_TURNS: Final = 20
#: Re-attach refusals after which the hydrate run still goes out, alone.
_NOT_FOLLOWED: Final = frozenset({ErrorCode.RUN_NOT_FOUND, ErrorCode.EVENTS_TRUNCATED})


async def connect(request: web.Request) -> web.StreamResponse:
    """``POST /connect``: the hydrate run, then the thread's run in progress."""
    config = request.config_dict[CONFIG]
    language = request_language(request)
    following: AsyncIterator[bytes] | None = None
    slot = None
    limits = None
    try:
        try:
            _, service = backend(request)
            limits = admission(request)
            principal = await authenticate(request)
            payload = await read_json_body(request, config.max_body_bytes)
            language = request_language(request, payload)
            body = parse_connect_request(payload)
            del payload
            record = await _owned_thread(service, body, principal)
            if record.active_run_id is not None and tm.runs(record, record.active_run_id) and service.resumable:
                if limits.max_per_user is not None:
                    slot = await limits.acquire_reattach(principal or record.user_id)
                following = await _follow(service, body.thread_id, record.active_run_id, principal)
            # An id of one of the thread's runs, one that left the record too, is not reused.
            used = body.run_id is not None and await service.knows_run(record, body.run_id)
            hydration = Hydration(
                thread_id=record.thread_id,
                run_id=hydrate_run_id(None if used else body.run_id, record),
                history=await _history(request, record, language, cut=following is not None, now=service.clock()),
                interrupts=announced_interrupts(record, service.clock()),
                activity=await _activity(service, record),
            )
        except BaseException as exc:
            if following is not None:
                await following.aclose()  # type: ignore[attr-defined]
            if not isinstance(exc, AdapterError):
                raise
            return error_response(exc, language, request)
        return await _relay(request, _stream(encode_sse(hydrate_events(hydration)), following))
    finally:
        if limits is not None:
            await limits.release(slot)


async def _owned_thread(service: ThreadService, body: ConnectRequest, principal: str | None) -> ThreadRecord:
    """The caller's thread, settled as ``GET /threads/{id}`` settles it, and
    with interrupts past their time expired (as any access expires them);
    404 for an unknown thread, someone else's, or another ``userId``'s."""
    user_id = None if body.iac_code is None else body.iac_code.user_id
    if principal is not None and user_id is not None and user_id != principal:
        raise AdapterError(ErrorCode.INVALID_INPUT, "input_user_id_not_principal", path="forwardedProps.iacCode.userId")
    named = user_id if principal is None else None  # with a verified user, their key decides
    record = await service.thread(body.thread_id, principal, named)
    if record is not None and tm.expiry_due(record, service.clock())[0] is tm.Due.EXPIRE:
        await service.expire_thread(record.key)
        record = await service.thread(body.thread_id, principal, named)
    if record is None:
        raise AdapterError(ErrorCode.THREAD_NOT_FOUND)
    return record


async def _follow(
    service: ThreadService, thread_id: str, run_id: str, principal: str | None
) -> AsyncIterator[bytes] | None:
    """The run in progress from its first event (its ``RUN_STARTED``), live
    to its end; ``None`` when its log no longer has it all."""
    try:
        return await service.attach(thread_id, run_id, 0, principal)
    except AdapterError as exc:
        if exc.code not in _NOT_FOLLOWED:
            raise
        log.info("thread %s: connect does not follow run %s: %s", thread_id, run_id, exc.code.name)
        return None


async def _history(
    request: web.Request, record: ThreadRecord, language: str, *, cut: bool, now: float
) -> HistoryPage | HistoryMissing:
    """The newest turns, up to where a followed run starts (``cut``).

    The reader keeps a conversation a few seconds; what it keeps may be older
    than the thread's last change (a turn that ended since, a run that began),
    and a snapshot replaces what the page shows: such a thread, and one whose
    run is cut, is read afresh (the run's own user message must be in what
    is cut)."""
    reader = request.config_dict[HISTORY]
    if cut or now - record.updated_at < reader.cache_seconds:
        reader.forget(record)
    try:
        page = await reader.page(
            record, limit=SNAPSHOT_TURNS, before=None, byte_budget=request.config_dict[CONFIG].history_page_bytes
        )
    except HistoryUnavailable as exc:
        log.info("thread %s: connect without history: %s", record.thread_id, exc.reason)
        if exc.message_id == "history_gone":  # the runtime restarted: the next turn brings it back
            return HistoryMissing(render("connect_history_gone", language))
        if not exc.retry:  # a pipeline thread: asking again does not help
            return HistoryMissing(render("connect_history_pipeline", language))
        retry = exc.response_headers().get("Retry-After")
        return HistoryMissing(render("connect_history_unavailable", language), int(retry) if retry else None)
    messages = before_active_run(page.messages, record) if cut else list(page.messages)
    return HistoryPage(messages, page.before)


async def _activity(service: ThreadService, record: ThreadRecord) -> dict[str, Any] | None:
    """A pipeline thread's ``ACTIVITY_SNAPSHOT``, from the runtime's pipeline state route."""
    if record.pipeline is None or record.task_id is None:
        return None
    state = await service.runtime_of(record).pipeline_state(record.task_id, record.pipeline.last_sequence)
    return pipeline_activity(record, state)


async def _stream(hydrate: bytes, following: AsyncIterator[bytes] | None) -> AsyncIterator[bytes]:
    """The hydrate run's bytes, then the followed run's (closed however the
    stream ends, so that its log counts no reader that left)."""
    try:
        yield hydrate
        if following is not None:
            async for chunk in following:
                yield chunk
    finally:
        if following is not None:
            await following.aclose()  # type: ignore[attr-defined]
