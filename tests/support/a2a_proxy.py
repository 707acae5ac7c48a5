"""A recording reverse proxy between the adapter and the A2A runtime.

Crash tests need to kill the adapter at exact instants of a resume without
any hook in the product. The adapter is pointed at this proxy
(``--a2a-url``); the proxy forwards every request to the runtime (JSON-RPC
``POST /``, the iac-code REST routes, ``/health``) and relays replies, a
``text/event-stream`` one event at a time, as soon as the event is complete.
It notes what it sees on each exchange (when the request arrived, when it
went on to the runtime, when each event came back and when it was relayed)
and lets a test stop the world at one of four points of the *answer*
exchange: the ``SendStreamingMessage``/``SendMessage`` whose message carries
the permission data part.

A stop runs the test's action (``kill -9`` of the adapter) and then drops
the exchange: the runtime sees its client go away, exactly as it would if
the adapter had died on its own at that point.
"""

from __future__ import annotations

import asyncio
import enum
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web
from .serve import on_loopback

LOOPBACK = "127.0.0.1"
# Hop-by-hop headers, and those aiohttp recomputes for the relayed body.
_NOT_FORWARDED = {
    "connection", "content-length", "content-encoding", "host", "keep-alive",
    "transfer-encoding", "upgrade",
}  # fmt: skip
_ANSWER_METHODS = {"SendStreamingMessage", "SendMessage"}
# The runtime closes a stream after one of these (A2A 1.0 has no final flag).
_STREAM_END = {
    "TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED",
    "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED",
}  # fmt: skip
#: How long TOOL_RUNNING lets the adapter digest the event that shows the
#: tool running before the kill (the tools of these tests run for seconds).
TOOL_RUNNING_GRACE_SECONDS = 0.3


class Instant(enum.Enum):
    """Where in the answer exchange a trap stops the adapter."""

    #: The answer reached the proxy; the runtime never gets it.
    BEFORE_SENT = "before-sent"
    #: The runtime took the answer and sent its first event; the adapter sees none of it.
    AFTER_SENT = "after-sent"
    #: The adapter was sent the event that shows the approved tool running
    #: (``inputReceived`` or a tool event), and had a moment to act on it;
    #: the tool still runs.
    TOOL_RUNNING = "tool-running"
    #: The runtime's last event of the stream was relayed to the adapter.
    AFTER_END = "after-end"


@dataclass
class SeenEvent:
    """A runtime event (a JSON-RPC response object) on a relayed stream."""

    arrived_at: float
    event: dict[str, Any]
    relayed_at: float | None = None


@dataclass
class Exchange:
    """One request through the proxy and what came back; times are
    ``time.monotonic()``."""

    http_method: str
    path: str
    body: Any
    received_at: float
    #: When the request went on to the runtime (``None``: it never did).
    sent_at: float | None = None
    status: int | None = None
    events: list[SeenEvent] = field(default_factory=list)
    ended_at: float | None = None
    #: Set when a trap stopped this exchange.
    dropped: Instant | None = None

    @property
    def rpc_method(self) -> str | None:
        return self.body.get("method") if isinstance(self.body, dict) else None

    @property
    def is_answer(self) -> bool:
        """A message whose part is an interrupt answer (the permission data part)."""
        if self.rpc_method not in _ANSWER_METHODS:
            return False
        message = (self.body.get("params") or {}).get("message") or {}
        return any(_is_permission_answer(part) for part in message.get("parts") or [])

    def relayed_before(self, moment: float) -> list[SeenEvent]:
        return [seen for seen in self.events if seen.relayed_at is not None and seen.relayed_at <= moment]


def _is_permission_answer(part: Any) -> bool:
    data = part.get("data") if isinstance(part, dict) else None
    return isinstance(data, dict) and data.get("kind") == "permission" and "decision" in data


def iac_metadata(event: dict[str, Any]) -> dict[str, Any]:
    """``metadata.iac_code`` of a status update event (empty otherwise)."""
    update = (event.get("result") or {}).get("statusUpdate")
    iac = ((update if isinstance(update, dict) else {}).get("metadata") or {}).get("iac_code")
    return iac if isinstance(iac, dict) else {}


def shows_tool_running(event: dict[str, Any]) -> bool:
    """The runtime says the approved tool is being carried out."""
    iac = iac_metadata(event)
    tool = iac.get("tool")
    return "inputReceived" in iac or (isinstance(tool, dict) and tool.get("status") in {"started", "progress"})


def ends_stream(event: dict[str, Any]) -> bool:
    """A JSON-RPC error, or a state after which the runtime closes the stream."""
    if "error" in event:
        return True
    result = event.get("result") or {}
    state = ((result.get("statusUpdate") or result.get("task") or {}).get("status") or {}).get("state")
    return state in _STREAM_END


@dataclass
class Trap:
    """A one-shot stop on the next answer exchange."""

    instant: Instant
    action: Callable[[], Awaitable[None]]
    fired: asyncio.Event = field(default_factory=asyncio.Event)
    #: The exchange it stopped.
    exchange: Exchange | None = None
    _running: asyncio.Future[None] | None = None

    async def fire(self, exchange: Exchange) -> None:
        """Run the action to its end, even if the exchange's handler is
        cancelled meanwhile (the kill closes its connection)."""
        self.exchange = exchange
        exchange.dropped = self.instant

        async def run() -> None:
            try:
                await self.action()
            finally:
                self.fired.set()

        self._running = asyncio.ensure_future(run())
        await asyncio.shield(self._running)


class _Dropped(Exception):
    """The exchange is abandoned: the adapter on the other side is dead."""


def _drop(request: web.Request) -> _Dropped:
    """Close the adapter's side at once; the caller's ``finally`` closes the
    runtime's side."""
    if request.transport is not None:
        request.transport.close()
    return _Dropped()


class A2AProxy:
    """``async with A2AProxy(upstream_url) as proxy:`` listens on a free
    loopback port; ``proxy.url`` is what the adapter gets as ``--a2a-url``."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.exchanges: list[Exchange] = []
        self.trap: Trap | None = None
        #: JSON-RPC method → seconds a request of it waits here before it
        #: goes on to the runtime (a slow link on that one call).
        self.held: dict[str, float] = {}
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/"

    async def __aenter__(self) -> A2AProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        # No total timeout: a relayed stream lasts as long as the run.
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=5), auto_decompress=False
        )
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # handler_cancellation: when the adapter dies, the handler stops and
        # closes its request to the runtime, so the runtime sees its client go.
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5, handler_cancellation=True)
        await on_loopback(self._runner, LOOPBACK)
        self.port = self._runner.addresses[0][1]

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def arm(self, instant: Instant, action: Callable[[], Awaitable[None]]) -> Trap:
        """Stop the next answer exchange at ``instant`` with ``action``."""
        self.trap = Trap(instant, action)
        return self.trap

    def answers(self, since: float = 0.0) -> list[Exchange]:
        """The answer exchanges that arrived at ``since`` or later, oldest first."""
        return [exchange for exchange in self.exchanges if exchange.is_answer and exchange.received_at >= since]

    # -- forwarding

    def _take_trap(self, exchange: Exchange, instant: Instant) -> Trap | None:
        trap = self.trap
        if trap is None or trap.instant is not instant or not exchange.is_answer:
            return None
        self.trap = None
        return trap

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        try:
            return await self._forward(request)
        except _Dropped:
            # The transport is closed: nothing of this reply is ever sent.
            return web.Response(status=204)

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
        exchange = Exchange(request.method, request.path_qs, body, time.monotonic())
        self.exchanges.append(exchange)
        trap = self._take_trap(exchange, Instant.BEFORE_SENT)
        if trap is not None:
            await trap.fire(exchange)
            raise _drop(request)
        assert self._session is not None
        hold = self.held.get(exchange.rpc_method or "")
        if hold:
            await asyncio.sleep(hold)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _NOT_FORWARDED}
        exchange.sent_at = time.monotonic()
        try:
            upstream = await self._session.request(
                request.method, self.upstream + request.path_qs, data=raw or None, headers=headers
            )
        except aiohttp.ClientError:
            return web.Response(status=502, text="runtime unreachable through the test proxy")
        try:
            exchange.status = upstream.status
            reply_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in _NOT_FORWARDED}
            if not upstream.content_type.startswith("text/event-stream"):
                content = await upstream.read()
                exchange.ended_at = time.monotonic()
                return web.Response(status=upstream.status, body=content, headers=reply_headers)
            return await self._relay_stream(request, upstream, exchange, reply_headers)
        finally:
            upstream.close()

    async def _relay_stream(
        self,
        request: web.Request,
        upstream: aiohttp.ClientResponse,
        exchange: Exchange,
        headers: dict[str, str],
    ) -> web.StreamResponse:
        response = web.StreamResponse(status=upstream.status, headers=headers)
        await response.prepare(request)
        # Line by line; an event (its lines up to the blank one, LF or CRLF
        # as the runtime wrote them) is relayed whole, once it is complete.
        block: list[bytes] = []
        partial = b""
        while chunk := await upstream.content.readany():
            *lines, partial = (partial + chunk).split(b"\n")
            for line in lines:
                block.append(line + b"\n")
                if line in (b"", b"\r"):
                    await self._relay_event(request, response, exchange, b"".join(block))
                    block = []
        if block or partial:
            await _write(request, response, b"".join(block) + partial)
        exchange.ended_at = time.monotonic()
        try:
            await response.write_eof()
        except (ConnectionError, RuntimeError) as exc:
            raise _drop(request) from exc
        return response

    async def _relay_event(
        self, request: web.Request, response: web.StreamResponse, exchange: Exchange, block: bytes
    ) -> None:
        event = _sse_json(block)
        if event is None:  # a comment or a keep-alive: nothing to judge
            await _write(request, response, block)
            return
        seen = SeenEvent(time.monotonic(), event)
        exchange.events.append(seen)
        if len(exchange.events) == 1:
            trap = self._take_trap(exchange, Instant.AFTER_SENT)
            if trap is not None:
                await trap.fire(exchange)
                raise _drop(request)
        await _write(request, response, block)
        seen.relayed_at = time.monotonic()
        if shows_tool_running(event) and (trap := self._take_trap(exchange, Instant.TOOL_RUNNING)):
            await asyncio.sleep(TOOL_RUNNING_GRACE_SECONDS)
            await trap.fire(exchange)
            raise _drop(request)
        if ends_stream(event) and (trap := self._take_trap(exchange, Instant.AFTER_END)):
            await trap.fire(exchange)
            raise _drop(request)


async def _write(request: web.Request, response: web.StreamResponse, data: bytes) -> None:
    try:
        await response.write(data)
    except (ConnectionError, RuntimeError) as exc:
        # The adapter went away (killed): stop reading the runtime too.
        raise _drop(request) from exc


def _sse_json(block: bytes) -> dict[str, Any] | None:
    lines = [line.rstrip(b"\r") for line in block.split(b"\n")]
    data = [line[5:].removeprefix(b" ") for line in lines if line.startswith(b"data:")]
    if not data:
        return None
    try:
        value = json.loads(b"\n".join(data))
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
