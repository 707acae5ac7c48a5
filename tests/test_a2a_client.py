"""Tests for aguiadapter.a2a.client over real loopback sockets.

Two kinds of peer: the reference a2a-sdk 1.3.0 server (served by uvicorn in
a background thread) and small aiohttp servers that replay canned bytes,
including the recorded iac-code streams under tests/fixtures/a2a.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import aiohttp
import pytest
import uvicorn
from a2a.helpers.proto_helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Part,
    TaskState,
)
from aiohttp import web
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from aguiadapter.a2a import wire
from aguiadapter.a2a.client import (
    A2AClient,
    A2AHttpError,
    A2ARpcError,
    A2AUnavailable,
    iter_sse_data,
)
from tests.support.recordings import INDEX, names_with, recorded_objects, recorded_request

TOKEN = "test-token-not-a-secret"
SSE_RECORDINGS = names_with("text/event-stream")
JSON_RECORDINGS = names_with("application/json")

Json = dict[str, Any]


def user_message(text: str, **extra: Any) -> Json:
    """A ROLE_USER message as the adapter sends it."""
    return {
        "messageId": f"msg-{uuid.uuid4().hex}",
        "role": wire.ROLE_USER,
        "parts": [{"text": text}],
        **extra,
    }


def state_of(result: Json) -> str | None:
    """The task state a stream result carries, if any."""
    holder = result.get("statusUpdate") or result.get("task") or {}
    state = holder.get("status", {}).get("state")
    return state if isinstance(state, str) else None


def free_port() -> int:
    """A loopback port nothing listens on (bound once, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def collect(stream: AsyncIterator[Json]) -> list[Json]:
    """Every item of a stream, bounded in time so a bug cannot hang the run."""

    async def run() -> list[Json]:
        return [item async for item in stream]

    return await asyncio.wait_for(run(), 20)


# ---------------------------------------------------------------------------
# The reference SDK server
# ---------------------------------------------------------------------------


class ScriptedExecutor(AgentExecutor):
    """Picks its behaviour from the first word of the user text.

    ``wait``: stops in INPUT_REQUIRED. ``endless``: streams WORKING ticks
    (bounded, so it stops by itself). Anything else: three text deltas, an
    artifact, COMPLETED.
    """

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id and context.context_id and context.message
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        if context.current_task is None:
            await event_queue.enqueue_event(new_task_from_user_message(context.message))
        await updater.start_work()
        word = context.get_user_input().split(" ", 1)[0]
        if word == "wait":
            await updater.requires_input(updater.new_agent_message([Part(text="Which one?")]))
        elif word == "endless":
            await self._tick(updater)
        else:
            await self._answer(updater)

    async def _answer(self, updater: TaskUpdater) -> None:
        for delta in ("Hello", ", ", "world"):
            message = updater.new_agent_message([Part(text=delta)])
            await updater.update_status(TaskState.TASK_STATE_WORKING, message=message)
        await updater.add_artifact([Part(text="report body")], name="report.txt", last_chunk=True)
        await updater.complete()

    async def _tick(self, updater: TaskUpdater) -> None:
        for n in range(2000):
            message = updater.new_agent_message([Part(text=f"tick {n}")])
            await updater.update_status(TaskState.TASK_STATE_WORKING, message=message)
            await asyncio.sleep(0.01)
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id and context.context_id
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


@dataclass
class ExchangeProbe:
    """Server-side view of one HTTP exchange (set from the server thread)."""

    disconnected: threading.Event = field(default_factory=threading.Event)
    finished: threading.Event = field(default_factory=threading.Event)


class ProbeMiddleware:
    """ASGI wrapper: bearer check, and a record of every SSE exchange."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.sse_exchanges: list[ExchangeProbe] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        if scope["path"] == "/" and headers.get(b"authorization") != f"Bearer {TOKEN}".encode():
            await JSONResponse({"error": "unauthorized"}, status_code=401)(scope, receive, send)
            return
        probe = ExchangeProbe()

        async def probe_receive() -> Any:
            message = await receive()
            if message["type"] == "http.disconnect":
                probe.disconnected.set()
            return message

        async def probe_send(message: Any) -> None:
            if message["type"] == "http.response.start":
                response_headers = dict(message.get("headers", []))
                if response_headers.get(b"content-type", b"").startswith(b"text/event-stream"):
                    self.sse_exchanges.append(probe)
            await send(message)

        try:
            await self.app(scope, probe_receive, probe_send)
        finally:
            probe.finished.set()


@dataclass
class SdkServer:
    url: str
    probe: ProbeMiddleware


async def _health(request: Request) -> JSONResponse:
    return JSONResponse({"status": "healthy"})


def build_sdk_app() -> ProbeMiddleware:
    card = AgentCard(
        name="scripted",
        description="test agent",
        version="1.0.0",
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        # The real URL is known only once uvicorn has bound a port; unused here.
        supported_interfaces=[
            AgentInterface(
                url="http://127.0.0.1/", protocol_binding="JSONRPC", protocol_version="1.0"
            )
        ],
        skills=[AgentSkill(id="echo", name="echo", description="scripted replies", tags=["test"])],
    )
    handler = DefaultRequestHandler(
        agent_executor=ScriptedExecutor(), task_store=InMemoryTaskStore(), agent_card=card
    )
    routes = [*create_jsonrpc_routes(handler, "/"), Route("/health", _health, methods=["GET"])]
    return ProbeMiddleware(Starlette(routes=routes))


@pytest.fixture(scope="module")
def sdk_server() -> Iterator[SdkServer]:
    """The a2a-sdk JSON-RPC app under uvicorn, on a free loopback port.

    The socket is bound and listening before uvicorn starts, so a client that
    connects early waits in the backlog instead of being refused: no need to
    wait for the server thread.
    """
    app = build_sdk_app()
    config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    sock = socket.create_server(("127.0.0.1", 0))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="a2a-sdk-server", daemon=True)
    thread.start()
    yield SdkServer(f"http://127.0.0.1:{sock.getsockname()[1]}/", app)
    server.should_exit = True
    thread.join(10)
    sock.close()


@pytest.fixture
async def sdk_client(sdk_server: SdkServer) -> AsyncIterator[A2AClient]:
    client = A2AClient(sdk_server.url, token=TOKEN)
    yield client
    await client.close()


async def wait_thread_event(event: threading.Event, timeout: float = 5.0) -> bool:
    """Wait for an event set by the server thread without blocking the loop."""
    return await asyncio.to_thread(event.wait, timeout)


async def test_stream_message_yields_sdk_events_in_order(sdk_client: A2AClient) -> None:
    results = await collect(sdk_client.stream_message(user_message("hello there")))

    kinds = [next(iter(r)) for r in results]
    assert kinds == ["task", *["statusUpdate"] * 4, "artifactUpdate", "statusUpdate"]
    assert all(type(r) is dict for r in results)
    task_id = results[0]["task"]["id"]
    assert all(r[k].get("taskId", r[k].get("id")) == task_id for r, k in zip(results, kinds, strict=False))
    assert [state_of(r) for r in results if "statusUpdate" in r] == [
        wire.WORKING,
        wire.WORKING,
        wire.WORKING,
        wire.WORKING,
        wire.COMPLETED,
    ]
    deltas = [r["statusUpdate"]["status"]["message"]["parts"][0]["text"] for r in results[2:5]]
    assert deltas == ["Hello", ", ", "world"]
    artifact = results[5]["artifactUpdate"]["artifact"]
    assert artifact["name"] == "report.txt"
    assert artifact["parts"] == [{"text": "report body"}]


async def test_send_message_returns_the_finished_task(sdk_client: A2AClient) -> None:
    result = await sdk_client.send_message(user_message("hello"))

    assert result["task"]["status"]["state"] == wire.COMPLETED


async def test_get_task_and_cancel_task_round_trip(sdk_client: A2AClient) -> None:
    results = await collect(sdk_client.stream_message(user_message("wait for me")))
    assert state_of(results[-1]) == wire.INPUT_REQUIRED
    task_id = results[0]["task"]["id"]

    task = await sdk_client.get_task(task_id, history_length=10)
    assert task["id"] == task_id
    assert task["status"]["state"] == wire.INPUT_REQUIRED

    canceled = await sdk_client.cancel_task(task_id)
    assert canceled["id"] == task_id
    assert canceled["status"]["state"] == wire.CANCELED
    assert (await sdk_client.get_task(task_id))["status"]["state"] == wire.CANCELED

    with pytest.raises(A2ARpcError) as caught:
        await sdk_client.cancel_task(task_id)
    assert caught.value.code == wire.TASK_NOT_CANCELABLE
    assert caught.value.reason == "TASK_NOT_CANCELABLE"


async def test_unknown_task_raises_task_not_found(sdk_client: A2AClient) -> None:
    with pytest.raises(A2ARpcError) as caught:
        await sdk_client.get_task(str(uuid.uuid4()))
    assert caught.value.code == wire.TASK_NOT_FOUND
    assert caught.value.reason == "TASK_NOT_FOUND"

    # A streaming call refused up front: the error is one application/json object.
    stream = sdk_client.stream_message(user_message("hi", taskId=str(uuid.uuid4())))
    with pytest.raises(A2ARpcError) as caught:
        await collect(stream)
    assert caught.value.code == wire.TASK_NOT_FOUND
    assert caught.value.reason == "TASK_NOT_FOUND"


async def read_then_drop(stream: AsyncIterator[Json], count: int) -> list[Json]:
    """Leave an ``async for`` after ``count`` items without closing the stream."""
    seen: list[Json] = []
    async for item in stream:
        seen.append(item)
        if len(seen) == count:
            break
    return seen


@pytest.mark.parametrize("how", ["aclose", "break"])
async def test_consumer_stopping_early_closes_the_connection(
    sdk_server: SdkServer, sdk_client: A2AClient, how: str
) -> None:
    known = len(sdk_server.probe.sse_exchanges)
    if how == "aclose":
        stream = sdk_client.stream_message(user_message("endless"))
        seen = [await asyncio.wait_for(anext(stream), 10) for _ in range(4)]
        exchange = sdk_server.probe.sse_exchanges[known]
        assert not exchange.finished.is_set()
        await stream.aclose()
    else:
        # The generator is only referenced inside the call: dropping it is the
        # consumer "just stopping"; asyncio's finalizer hook closes it.
        seen = await asyncio.wait_for(
            read_then_drop(sdk_client.stream_message(user_message("endless")), 4), 10
        )
        exchange = sdk_server.probe.sse_exchanges[known]

    assert await wait_thread_event(exchange.disconnected), "server never saw the client go"
    assert await wait_thread_event(exchange.finished), "SSE response still running"
    # Closing the stream does not cancel the task; do it so the executor stops.
    canceled = await sdk_client.cancel_task(seen[0]["task"]["id"])
    assert canceled["status"]["state"] == wire.CANCELED


async def test_cancelled_consumer_task_closes_the_connection(
    sdk_server: SdkServer, sdk_client: A2AClient
) -> None:
    known = len(sdk_server.probe.sse_exchanges)
    first: asyncio.Future[Json] = asyncio.get_running_loop().create_future()

    async def consume() -> None:
        async for result in sdk_client.stream_message(user_message("endless")):
            if not first.done():
                first.set_result(result)

    consumer = asyncio.create_task(consume())
    task_id = (await asyncio.wait_for(first, 10))["task"]["id"]
    consumer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await consumer

    exchange = sdk_server.probe.sse_exchanges[known]
    assert await wait_thread_event(exchange.disconnected)
    assert await wait_thread_event(exchange.finished)
    await sdk_client.cancel_task(task_id)


async def test_subscribe_follows_a_running_task(sdk_client: A2AClient) -> None:
    stream = sdk_client.stream_message(user_message("endless"))
    task_id = (await asyncio.wait_for(anext(stream), 10))["task"]["id"]
    await stream.aclose()

    follow = sdk_client.subscribe(task_id)
    first = await asyncio.wait_for(anext(follow), 10)
    second = await asyncio.wait_for(anext(follow), 10)
    await follow.aclose()

    assert first["task"]["id"] == task_id
    assert second["statusUpdate"]["taskId"] == task_id
    await sdk_client.cancel_task(task_id)

    with pytest.raises(A2ARpcError) as caught:
        await collect(sdk_client.subscribe(str(uuid.uuid4())))
    assert caught.value.code == wire.TASK_NOT_FOUND


async def test_wrong_token_is_unavailable_with_status_401(sdk_server: SdkServer) -> None:
    async with A2AClient(sdk_server.url, token="wrong") as client:
        with pytest.raises(A2AUnavailable) as caught:
            await client.get_task("x")
        assert caught.value.status == 401
        with pytest.raises(A2AUnavailable) as caught:
            await collect(client.stream_message(user_message("hello")))
        assert caught.value.status == 401


async def test_health(sdk_server: SdkServer) -> None:
    async with A2AClient(sdk_server.url) as client:
        assert await client.health() is True
    async with A2AClient(f"http://127.0.0.1:{free_port()}/") as client:
        assert await client.health() is False


async def test_missing_server_is_unavailable() -> None:
    async with A2AClient(f"http://127.0.0.1:{free_port()}/", connect_timeout=2) as client:
        with pytest.raises(A2AUnavailable) as caught:
            await collect(client.stream_message(user_message("hello")))
        assert caught.value.status is None
        assert caught.value.sent is False, "no connection: the message never left"
        with pytest.raises(A2AUnavailable):
            await client.get_task("x")
        with pytest.raises(A2AUnavailable):
            await client.post_json("/iac-code/session/ensure-restored", {})


# ---------------------------------------------------------------------------
# Canned aiohttp servers
# ---------------------------------------------------------------------------

Reply = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class Canned:
    """One aiohttp app; each request to it is recorded and answered by ``reply``."""

    reply: Reply
    requests: list[tuple[str, dict[str, str], Any]] = field(default_factory=list)
    url: str = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json() if request.method == "POST" else None
        self.requests.append((request.path, dict(request.headers), body))
        return await self.reply(request)


@pytest.fixture
def canned(aiohttp_server: Any) -> Callable[[Reply], Awaitable[Canned]]:
    async def start(reply: Reply) -> Canned:
        runtime = Canned(reply)
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", runtime.handle)
        server = await aiohttp_server(app)
        runtime.url = str(server.make_url("/"))
        return runtime

    return start


def sse_reply(chunks: list[bytes], *, pause: float = 0) -> Reply:
    async def reply(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for chunk in chunks:
            await resp.write(chunk)
            if pause:
                await asyncio.sleep(pause)
        await resp.write_eof()
        return resp

    return reply


def json_reply(obj: Any, status: int = 200) -> Reply:
    async def reply(request: web.Request) -> web.StreamResponse:
        return web.json_response(obj, status=status)

    return reply


def frame_lf(objects: list[Json]) -> list[bytes]:
    return [b"data: " + json.dumps(o).encode() + b"\n\n" for o in objects]


def frame_crlf(objects: list[Json]) -> list[bytes]:
    return [b"data: " + json.dumps(o).encode() + b"\r\n\r\n" for o in objects]


def frame_multiline(objects: list[Json]) -> list[bytes]:
    """Pretty-printed JSON over several data lines, with comments and other fields."""
    chunks = [b": stream opened\n\n"]
    for n, obj in enumerate(objects):
        lines = json.dumps(obj, indent=1).split("\n")
        data = "".join(f"data:{line}\n" for line in lines)
        chunks.append(f"event: message\nid: {n}\n{data}: keep-alive\nretry: 5\n\n".encode())
    return chunks


def frame_tiny_chunks(objects: list[Json]) -> list[bytes]:
    blob = b"".join(frame_crlf(objects))
    return [blob[i : i + 7] for i in range(0, len(blob), 7)]


FRAMINGS = {
    "lf": frame_lf,
    "crlf": frame_crlf,
    "multiline": frame_multiline,
    "tiny-chunks": frame_tiny_chunks,
}


def result(state: str | None = None, kind: str = "statusUpdate") -> Json:
    """One JSON-RPC stream response holding a ``kind`` result."""
    if kind == "artifactUpdate":
        body: Json = {"taskId": "t", "artifact": {"artifactId": "a", "parts": [{"text": "x"}]}}
    elif kind == "message":
        body = {"messageId": "m", "role": wire.ROLE_AGENT, "parts": [{"text": "hi"}]}
    else:
        body = {"taskId": "t", "contextId": "c", "status": {"state": state}}
        if kind == "task":
            body = {"id": "t", "contextId": "c", "status": {"state": state}}
    return {"result": {kind: body}, "id": 1, "jsonrpc": "2.0"}


@pytest.mark.parametrize("framing", sorted(FRAMINGS))
@pytest.mark.parametrize("name", SSE_RECORDINGS)
async def test_recorded_streams_yield_the_recorded_results(
    canned: Callable[[Reply], Awaitable[Canned]], name: str, framing: str
) -> None:
    objects = recorded_objects(name)
    runtime = await canned(sse_reply(FRAMINGS[framing](objects)))
    recorded = recorded_request(name)

    async with A2AClient(runtime.url, token=TOKEN) as client:
        results = await collect(client.stream_message(recorded["params"]["message"]))

    assert results == [o["result"] for o in objects]
    assert state_of(results[-1]) == INDEX[name]["finalState"]
    _, headers, body = runtime.requests[0]
    assert {k: v for k, v in body.items() if k != "id"} == {
        k: v for k, v in recorded.items() if k != "id"
    }
    assert headers["Accept"] == "text/event-stream"


async def call_like_recording(client: A2AClient, request: Json) -> Json:
    """Replay a recorded JSON-RPC request through the matching client method."""
    params = request["params"]
    method = request["method"]
    if method == wire.GET_TASK:
        return await client.get_task(params["id"], params.get("historyLength"))
    if method == wire.CANCEL_TASK:
        return await client.cancel_task(params["id"])
    if method == wire.SUBSCRIBE_TO_TASK:
        return {"stream": await collect(client.subscribe(params["id"]))}
    assert method == wire.SEND_STREAMING_MESSAGE
    return {"stream": await collect(client.stream_message(params["message"]))}


@pytest.mark.parametrize("name", JSON_RECORDINGS)
async def test_recorded_json_replies(
    canned: Callable[[Reply], Awaitable[Canned]], name: str
) -> None:
    (obj,) = recorded_objects(name)
    runtime = await canned(json_reply(obj))
    recorded = recorded_request(name)
    expected_error = INDEX[name]["jsonrpcError"]

    async with A2AClient(runtime.url, token=TOKEN) as client:
        if expected_error is None:
            assert await call_like_recording(client, recorded) == obj["result"]
        else:
            with pytest.raises(A2ARpcError) as caught:
                await call_like_recording(client, recorded)
            assert caught.value.code == expected_error["code"]
            assert caught.value.message == expected_error["message"]
            assert caught.value.reason == expected_error["data"][0]["reason"]
            assert caught.value.data == expected_error["data"]

    _, headers, body = runtime.requests[0]
    assert {k: v for k, v in body.items() if k != "id"} == {
        k: v for k, v in recorded.items() if k != "id"
    }
    assert headers["A2A-Version"] == "1.0"
    assert headers["Authorization"] == f"Bearer {TOKEN}"


END_STATE_CASES = {
    "completed": (
        [result(wire.SUBMITTED, "task"), result(wire.WORKING), result(wire.COMPLETED)],
        True,
    ),
    "input-required": ([result(wire.WORKING), result(wire.INPUT_REQUIRED)], True),
    "auth-required": ([result(wire.AUTH_REQUIRED)], True),
    "failed": ([result(wire.FAILED)], True),
    "message-only": ([result(kind="message")], True),
    "artifact-after-end": ([result(wire.COMPLETED), result(kind="artifactUpdate")], True),
    "cut-while-working": ([result(wire.SUBMITTED, "task"), result(wire.WORKING)], False),
    "empty": ([], False),
    "resumed-then-cut": ([result(wire.INPUT_REQUIRED), result(wire.WORKING)], False),
}


@pytest.mark.parametrize("case", sorted(END_STATE_CASES))
async def test_stream_must_reach_an_end_state(
    canned: Callable[[Reply], Awaitable[Canned]], case: str
) -> None:
    objects, complete = END_STATE_CASES[case]
    runtime = await canned(sse_reply(frame_lf(objects)))
    received: list[Json] = []

    async def consume() -> None:
        async with A2AClient(runtime.url) as client:
            async for item in client.stream_message(user_message("x")):
                received.append(item)

    if complete:
        await consume()
    else:
        with pytest.raises(A2AUnavailable, match="before a terminal"):
            await consume()
    assert received == [o["result"] for o in objects]


async def test_rpc_error_mid_stream(canned: Callable[[Reply], Awaitable[Canned]]) -> None:
    error = wire.jsonrpc_error(1, wire.INTERNAL_ERROR, "agent crashed")
    chunks = [*frame_lf([result(wire.WORKING)]), b"event: error\ndata: " + json.dumps(error).encode() + b"\n\n"]
    runtime = await canned(sse_reply(chunks))
    received: list[Json] = []
    async with A2AClient(runtime.url) as client:
        with pytest.raises(A2ARpcError) as caught:
            async for item in client.stream_message(user_message("x")):
                received.append(item)
    assert caught.value.code == wire.INTERNAL_ERROR
    assert caught.value.reason == "INTERNAL_ERROR"
    assert caught.value.message == "agent crashed"
    assert len(received) == 1


async def test_connection_dropped_mid_stream(canned: Callable[[Reply], Awaitable[Canned]]) -> None:
    async def reply(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(frame_lf([result(wire.WORKING)])[0] + b'data: {"resu')
        await asyncio.sleep(0.05)
        assert request.transport is not None
        request.transport.abort()
        return resp

    runtime = await canned(reply)
    received: list[Json] = []
    async with A2AClient(runtime.url) as client:
        with pytest.raises(A2AUnavailable) as caught:
            async for item in client.stream_message(user_message("x")):
                received.append(item)
    assert [state_of(r) for r in received] == [wire.WORKING]
    assert caught.value.sent is True


async def test_a_runtime_that_hangs_up_before_replying_may_have_taken_the_message(
    canned: Callable[[Reply], Awaitable[Canned]],
) -> None:
    # iac-code killed while it works on a message: it read the message (and
    # may have acted on it) but never replied.
    read: list[Json] = []

    async def reply(request: web.Request) -> web.StreamResponse:
        read.append(await request.json())
        assert request.transport is not None
        request.transport.abort()
        return web.Response()

    runtime = await canned(reply)
    async with A2AClient(runtime.url) as client:
        with pytest.raises(A2AUnavailable) as caught:
            await collect(client.stream_message(user_message("x")))
    assert len(read) == 1 and caught.value.sent is True


async def test_event_that_is_not_json(canned: Callable[[Reply], Awaitable[Canned]]) -> None:
    runtime = await canned(sse_reply([b"data: {not json\n\n"]))
    async with A2AClient(runtime.url) as client:
        with pytest.raises(A2AUnavailable, match="not JSON"):
            await collect(client.stream_message(user_message("x")))


@pytest.mark.parametrize("status", [401, 403, 500, 502, 503])
async def test_unavailable_statuses(
    canned: Callable[[Reply], Awaitable[Canned]], status: int
) -> None:
    runtime = await canned(json_reply(wire.jsonrpc_error(1, wire.INTERNAL_ERROR, "x"), status))
    async with A2AClient(runtime.url) as client:
        with pytest.raises(A2AUnavailable) as caught:
            await client.get_task("t")
        assert caught.value.status == status
        with pytest.raises(A2AUnavailable) as caught:
            await collect(client.stream_message(user_message("x")))
        assert caught.value.status == status
        with pytest.raises(A2AUnavailable) as caught:
            await client.post_json("/iac-code/session/ensure-restored", {})
        assert caught.value.status == status
        assert await client.health() is False


async def test_non_json_reply_is_unavailable(canned: Callable[[Reply], Awaitable[Canned]]) -> None:
    async def reply(request: web.Request) -> web.StreamResponse:
        return web.Response(text="<html>proxy error</html>", content_type="text/html")

    runtime = await canned(reply)
    async with A2AClient(runtime.url) as client:
        with pytest.raises(A2AUnavailable, match="without JSON"):
            await client.cancel_task("t")
        with pytest.raises(A2AUnavailable, match="without JSON"):
            await collect(client.subscribe("t"))


async def test_other_http_errors(canned: Callable[[Reply], Awaitable[Canned]]) -> None:
    rpc_error = wire.jsonrpc_error(1, wire.INVALID_REQUEST, "bad")
    replies = iter([json_reply(rpc_error, 400), json_reply({"detail": "nope"}, 404)])

    async def reply(request: web.Request) -> web.StreamResponse:
        return await next(replies)(request)

    runtime = await canned(reply)
    async with A2AClient(runtime.url) as client:
        with pytest.raises(A2ARpcError) as rpc:
            await client.get_task("t")
        assert rpc.value.code == wire.INVALID_REQUEST
        with pytest.raises(A2AHttpError) as http:
            await client.get_task("t")
        assert (http.value.status, http.value.body) == (404, {"detail": "nope"})


async def test_request_shape(canned: Callable[[Reply], Awaitable[Canned]]) -> None:
    runtime = await canned(json_reply({"result": {"id": "t"}, "id": 1, "jsonrpc": "2.0"}))
    message = user_message("hi", contextId="ctx-1")
    async with A2AClient(runtime.url) as client:
        await client.get_task("t", history_length=10)
        await client.get_task("t")
        await client.cancel_task("t")
        await client.send_message(message)

    bodies = [body for _, _, body in runtime.requests]
    assert [b["method"] for b in bodies] == ["GetTask", "GetTask", "CancelTask", "SendMessage"]
    assert [b["params"] for b in bodies] == [
        {"id": "t", "historyLength": 10},
        {"id": "t"},
        {"id": "t"},
        {"message": message},
    ]
    assert all(b["jsonrpc"] == "2.0" for b in bodies)
    assert len({b["id"] for b in bodies}) == len(bodies)
    for path, headers, _ in runtime.requests:
        assert path == "/"
        assert headers["A2A-Version"] == "1.0"
        assert headers["Content-Type"] == "application/json"
        assert "Authorization" not in headers


async def test_post_json(canned: Callable[[Reply], Awaitable[Canned]]) -> None:
    replies = iter(
        [
            json_reply({"restored": True}),
            json_reply({"error": {"code": "backup_not_ready", "retryable": True}}, 409),
        ]
    )

    async def reply(request: web.Request) -> web.StreamResponse:
        return await next(replies)(request)

    runtime = await canned(reply)
    body = {"cwd": "/w", "sessionId": "s"}
    async with A2AClient(runtime.url, token=TOKEN) as client:
        assert await client.post_json("/iac-code/session/ensure-restored", body) == {
            "restored": True
        }
        with pytest.raises(A2AHttpError) as caught:
            await client.post_json("iac-code/session/ensure-restored", body)
    assert caught.value.status == 409
    assert caught.value.body["error"]["retryable"] is True
    for path, headers, sent in runtime.requests:
        assert path == "/iac-code/session/ensure-restored"
        assert headers["Authorization"] == f"Bearer {TOKEN}"
        assert sent == body


def gated_sse(gate: asyncio.Event, tally: dict[str, int], needed: int) -> Reply:
    """Each stream sends WORKING, waits for ``gate``, then COMPLETED."""

    async def reply(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(frame_lf([result(wire.WORKING)])[0])
        tally["open"] += 1
        tally["peak"] = max(tally["peak"], tally["open"])
        if tally["open"] >= needed:
            gate.set()
        await gate.wait()
        await asyncio.sleep(0.01)
        tally["open"] -= 1
        await resp.write(frame_lf([result(wire.COMPLETED)])[0])
        await resp.write_eof()
        return resp

    return reply


async def test_more_than_100_concurrent_streams(
    canned: Callable[[Reply], Awaitable[Canned]],
) -> None:
    gate, tally = asyncio.Event(), {"open": 0, "peak": 0}
    runtime = await canned(gated_sse(gate, tally, needed=120))
    async with A2AClient(runtime.url) as client:
        streams = [collect(client.stream_message(user_message("x"))) for _ in range(120)]
        done = await asyncio.wait_for(asyncio.gather(*streams), 15)
    assert tally["peak"] == 120
    assert all(len(r) == 2 for r in done)


async def test_max_streams_caps_connections(
    canned: Callable[[Reply], Awaitable[Canned]],
) -> None:
    gate, tally = asyncio.Event(), {"open": 0, "peak": 0}
    runtime = await canned(gated_sse(gate, tally, needed=2))
    async with A2AClient(runtime.url, max_streams=2) as client:
        streams = [collect(client.stream_message(user_message("x"))) for _ in range(5)]
        await asyncio.wait_for(asyncio.gather(*streams), 15)
    assert tally["peak"] == 2


async def test_caller_session_is_not_closed(canned: Callable[[Reply], Awaitable[Canned]]) -> None:
    runtime = await canned(json_reply({"result": {"id": "t"}, "id": 1, "jsonrpc": "2.0"}))
    async with aiohttp.ClientSession() as session:
        client = A2AClient(runtime.url, session=session)
        assert await client.get_task("t") == {"id": "t"}
        await client.close()
        assert not session.closed


# ---------------------------------------------------------------------------
# SSE parser on raw byte chunks
# ---------------------------------------------------------------------------


def every_byte(blob: bytes) -> list[bytes]:
    return [blob[i : i + 1] for i in range(len(blob))]


SSE_CASES: dict[str, tuple[list[bytes], list[bytes]]] = {
    "lf": ([b'data: {"a":1}\n\n'], [b'{"a":1}']),
    "crlf": ([b"data: x\r\n\r\ndata: y\r\n\r\n"], [b"x", b"y"]),
    "mixed-line-ends": ([b"data: x\r\n\ndata: y\n\r\n"], [b"x", b"y"]),
    "split-at-every-byte": (every_byte(b"data: one\r\n\r\ndata: two\n\n"), [b"one", b"two"]),
    "split-inside-crlf": ([b"data: one\r", b"\n\r", b"\n"], [b"one"]),
    "two-events-one-chunk": ([b"data: a\n\ndata: b\n\n"], [b"a", b"b"]),
    "multi-line-data": ([b"data: a\ndata: b\n", b"data:c\n\n"], [b"a\nb\nc"]),
    "comments-and-fields": (
        [b": ping\n\nevent: error\nid: 7\nretry: 10\ndata: x\n: mid\n\n:tail\n\n"],
        [b"x"],
    ),
    "no-space-after-colon": ([b"data:x\n\n"], [b"x"]),
    "only-one-space-stripped": ([b"data:  x\n\n"], [b" x"]),
    "bare-data-field": ([b"data\n\n", b"data:\ndata: z\n\n"], [b"", b"\nz"]),
    "blank-lines-between": ([b"\n\n\ndata: a\n\n\n\ndata: b\n\n"], [b"a", b"b"]),
    "unknown-field-like-data": ([b"datum: no\ndata: yes\n\n"], [b"yes"]),
    "unfinished-event-dropped": ([b"data: a\n\ndata: b\n"], [b"a"]),
    "unfinished-line-dropped": ([b"data: a\n\ndata: b"], [b"a"]),
    "empty-body": ([], []),
}


def reader_of(chunks: list[bytes]) -> aiohttp.StreamReader:
    reader = aiohttp.StreamReader(
        mock.Mock(_reading_paused=False), 2**16, loop=asyncio.get_running_loop()
    )
    for chunk in chunks:
        reader.feed_data(chunk)
    reader.feed_eof()
    return reader


@pytest.mark.parametrize("case", sorted(SSE_CASES))
async def test_sse_parser(case: str) -> None:
    chunks, expected = SSE_CASES[case]
    assert [data async for data in iter_sse_data(reader_of(chunks))] == expected


async def test_sse_parser_takes_long_lines() -> None:
    payload = b"x" * (3 * 2**20)  # far above aiohttp's default line limit
    blob = b"data: " + payload + b"\n\n"
    chunks = [blob[i : i + 65536] for i in range(0, len(blob), 65536)]
    assert [data async for data in iter_sse_data(reader_of(chunks))] == [payload]


async def test_sse_parser_line_limit() -> None:
    # A line still growing past the limit is refused before it is complete.
    for chunks in ([b"data: " + b"x" * 200], [b"data: ok\n\ndata: " + b"x" * 200]):
        with pytest.raises(A2AUnavailable, match="over 100 bytes"):
            _ = [data async for data in iter_sse_data(reader_of(chunks), max_line=100)]
