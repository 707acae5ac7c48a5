"""Routes that read threads and runs: status, re-attach, capabilities.

``GET /threads/{threadId}`` answers from the thread's record, so that a
reloaded page can show a pending approval again (a run left ``running`` by
a process that died is settled first, as any request settles it: that is
the only time it asks the runtime).
``GET /threads/{threadId}/runs/{runId}/events`` re-attaches to a run: the
events after the client's cursor (``Last-Event-ID``, or ``?after=``), then
live ones until the run's terminal event. ``GET /capabilities`` is the AG-UI
``AgentCapabilities`` document of this server.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from ..errors import AdapterError, ErrorCode
from ..protocol.events import (
    ARTIFACT_EVENT,
    INPUT_SKIPPED_EVENT,
    PIPELINE_EVENT,
    SESSION_EVENT,
    TOOL_PROGRESS_EVENT,
)
from ..threads.record import ThreadRecord, ThreadState
from ..pool.settings import DEFAULT_RUNTIME
from ..store.run_log import parse_cursor
from ..store.contract import StoreUnavailable
from ..service.thread_service import ThreadService
from ..version import __version__
from .auth import named_user_id
from .handlers import authenticate, mount_prefix
from .http_errors import error_response, request_language
from .keys import CONFIG, STREAMS, admission, backend
from .sse import ClientGone, SseWriter

log = logging.getLogger(__name__)


def thread_view(record: ThreadRecord) -> dict[str, Any]:
    """What a client may know of a thread: ids, state, what it waits for."""
    view: dict[str, Any] = {"threadId": record.thread_id, "state": record.state.value}
    if record.execution_id is not None:
        view["executionId"] = record.execution_id
    if record.ros_invocation_id is not None:
        view["rosInvocationId"] = record.ros_invocation_id
    if record.state is ThreadState.RUNNING and record.active_run_id is not None:
        view["activeRunId"] = record.active_run_id
    view["pendingInterrupts"] = [item.interrupt for item in record.pending_interrupts]
    # The pool runtime it is pinned to; records made before pools ran on ``default``.
    view["runtime"] = record.runtime or DEFAULT_RUNTIME
    if record.state is ThreadState.TERMINAL and record.last_error is not None:
        view["lastError"] = {"code": record.last_error}
    return view


async def callers_thread(request: web.Request, service: ThreadService, principal: str | None) -> ThreadRecord:
    """The route's ``{threadId}`` of the caller (``THREAD_NOT_FOUND`` for an
    unknown one and for another user's alike)."""
    user_id = named_user_id(request, principal)
    record = await service.thread(request.match_info["threadId"], principal, user_id)
    if record is None:
        raise AdapterError(ErrorCode.THREAD_NOT_FOUND)
    return record


async def thread_status(request: web.Request) -> web.Response:
    """``GET /threads/{threadId}``: the thread's state, from its record (no secret in it)."""
    _, service = backend(request)
    language = request_language(request)
    try:
        record = await callers_thread(request, service, await authenticate(request))
    except AdapterError as exc:
        return error_response(exc, language, request)
    return web.json_response(thread_view(record), headers={"Cache-Control": "no-store"})


async def run_events(request: web.Request) -> web.StreamResponse:
    """``GET /threads/{threadId}/runs/{runId}/events``: re-attach to a run."""
    _, service = backend(request)
    language = request_language(request)
    limits = admission(request)
    slot = None
    try:
        try:
            principal = await authenticate(request)
            raw = request.headers.get("Last-Event-ID") or request.query.get("after")
            try:
                cursor = parse_cursor(raw)
            except ValueError as exc:
                raise AdapterError(ErrorCode.INVALID_INPUT, "invalid_event_cursor") from exc
            user_id = named_user_id(request, principal)
            thread_id = request.match_info["threadId"]
            if limits.max_per_user is not None:
                # Re-attached streams are bounded per user as runs are (apart from them).
                record = await service.thread(thread_id, principal, user_id)
                if record is None:
                    raise AdapterError(ErrorCode.THREAD_NOT_FOUND)
                slot = await limits.acquire_reattach(principal or record.user_id)
            chunks = await service.attach(thread_id, request.match_info["runId"], cursor, principal, user_id)
        except AdapterError as exc:
            return error_response(exc, language, request)
        return await _relay(request, chunks)
    finally:
        await limits.release(slot)


async def _relay(request: web.Request, chunks: AsyncIterator[bytes]) -> web.StreamResponse:
    """Write a re-attach's chunks as SSE until the run's end or the client leaves."""
    writer = SseWriter(request, request.config_dict[STREAMS])

    async def pump() -> None:
        try:
            async for chunk in chunks:
                await writer.send(chunk, chunk.count(b"\n\n"))
        except StoreUnavailable as exc:
            # The stream ends without its terminal event: the client comes
            # back with the id of the last one it got.
            log.warning("thread %s run %s: re-attach ended early: %s", request.match_info.get("threadId"),
                        request.match_info.get("runId"), exc)
            return
        if not writer.prepared:
            # Nothing after the cursor, and the run is over: an empty stream.
            await writer.open()

    pumping = asyncio.ensure_future(pump())
    # A client that leaves while the run is quiet is noticed by the app's stream watch.
    writer.on_disconnect = pumping.cancel
    try:
        await pumping
    except (asyncio.CancelledError, ClientGone):
        if not pumping.cancelled() and not isinstance(pumping.exception(), ClientGone):
            raise
    finally:
        pumping.cancel()
        await chunks.aclose()  # type: ignore[attr-defined]
        await writer.close()
    return writer.response


async def capabilities(request: web.Request) -> web.Response:
    """``GET /capabilities``: the AG-UI ``AgentCapabilities`` of this server (open)."""
    _, service = backend(request)
    config = request.config_dict[CONFIG]
    prefix = mount_prefix(request, "/capabilities")
    document: dict[str, Any] = {
        "identity": {
            "name": "aguiadapter",
            "type": "a2a",
            "description": "AG-UI in front of an A2A 1.0 agent runtime (iac-code).",
            "version": __version__,
        },
        "transport": {
            "streaming": True,
            "websocket": False,
            "httpBinary": False,
            "pushNotifications": False,
            "resumable": service.resumable,
        },
        "tools": {"supported": True, "clientProvided": False},
        "state": {"snapshots": False, "deltas": False, "persistentState": True},
        "reasoning": {"supported": True, "streaming": True, "encrypted": False},
        "multimodal": {"input": {"image": True, "audio": False, "video": False, "pdf": False, "file": False}},
        "humanInTheLoop": {"supported": True, "approvals": True, "interrupts": True, "approveWithEdits": False},
        "custom": {
            "iacCode": {
                # ag-ui-1.0, or iac-code-agui (--compat): which wire forms this server sends.
                "profile": config.profile.value,
                "customEvents": [SESSION_EVENT, ARTIFACT_EVENT, TOOL_PROGRESS_EVENT, PIPELINE_EVENT,
                                 INPUT_SKIPPED_EVENT],
                # Not AG-UI's: the 1.0 SSE binding has no resumption and its consumers ignore id: lines.
                "transportExtension": {
                    "standard": False,
                    "description": (
                        "This server's own extension of the AG-UI 1.0 HTTP+SSE binding: SSE id: lines, "
                        "re-attach with Last-Event-ID (or ?after=), and the thread routes. AG-UI clients "
                        "ignore id: lines and need none of it; the stream of POST / is plain AG-UI 1.0."
                    ),
                    "sseEventIds": service.resumable,
                    "lastEventIdReattach": service.resumable,
                    "threadRoutes": [
                        prefix + "/threads", prefix + "/threads/{threadId}", prefix + "/threads/{threadId}/messages",
                        *([prefix + "/threads/{threadId}/runs/{runId}/events"] if service.resumable else []),
                    ],
                },
                # Paths as the client calls them: under the mount point when mounted.
                "cancel": prefix + "/extensions/iac-code/v1/executions/{executionId}/cancel",
                "threadStatus": prefix + "/threads/{threadId}",
                "connect": prefix + "/connect",
                "threadMessages": prefix + "/threads/{threadId}/messages",
                "threadList": prefix + "/threads",
                "reattach": prefix + "/threads/{threadId}/runs/{runId}/events" if service.resumable else None,
                "disconnectGraceSeconds": config.disconnect_grace_seconds,
                "replayRetentionSeconds": config.replay_retention_seconds if service.resumable else 0,
                "interruptTtlSeconds": config.interrupt_ttl_seconds,
            }
        },
    }
    custom = document["custom"]["iacCode"]
    if custom["reattach"] is None:
        del custom["reattach"]
    return web.json_response(document)
