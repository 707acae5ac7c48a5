"""The embedded demo runtime: a real A2A 1.0 JSON-RPC server on aiohttp.

It plays the scripts of :mod:`aguiadapter.demo.scripts` with the wire of
``iac-code a2a``: ``POST /`` takes JSON-RPC 2.0 (``SendStreamingMessage``,
``SendMessage``, ``GetTask``, ``CancelTask``, ``SubscribeToTask``) and needs
the ``A2A-Version: 1.0`` header; a bearer token is checked when one is set.
``GET /health`` and the agent card are open; ``GET /iac-code/pipeline/state``
serves a task's pipeline log. Turns run in the task engine of
:mod:`aguiadapter.demo.agent`: a client that leaves its stream does not cancel
the turn (iac-code does not either), only ``CancelTask`` does.

For tests, ``record_headers=True`` keeps the headers of every request it
gets (what a traced runtime would read ``traceparent`` from), less those
that carry credentials.
"""

from __future__ import annotations

import hmac
import json
import logging
from typing import Any, Final

import attrs
from aiohttp import web
from aiohttp.typedefs import Handler

from aguiadapter.version import __version__
from aguiadapter.a2a import wire
from aguiadapter.demo.agent import DemoAgent, DemoState, Item, Listener, RpcError, TaskRecord, dumps
from aguiadapter.demo.scripts import Json, RpcFailure

log = logging.getLogger(__name__)

# The SSE line of a pre-encoded result is wrapped by templating, in the key
# order of ``wire.jsonrpc_result`` (result, id, jsonrpc) that iac-code sends.
_SSE_HEAD: Final = 'data: {"result":'
_OPEN_PATHS: Final = frozenset({"/health", "/.well-known/agent-card.json"})
_CARD_EXAMPLES: Final = ["hello", "think", "tool", "slow 5", "permission notes.txt", "question"]
#: Headers never recorded: they carry credentials.
_UNRECORDED: Final = frozenset({"authorization", "proxy-authorization", "cookie"})


@attrs.frozen
class DemoConfig:
    """Settings of one demo app."""

    token: str | None = None


@attrs.frozen
class RecordedRequest:
    """A request the demo runtime received (``record_headers=True``)."""

    method: str
    path: str
    #: The JSON-RPC method of a ``POST /``.
    rpc_method: str | None
    #: Every header but those carrying credentials, names in lower case.
    headers: dict[str, str]


CONFIG_KEY: Final = web.AppKey("demo_config", DemoConfig)
AGENT_KEY: Final = web.AppKey("demo_agent", DemoAgent)
RECORDED_KEY: Final = web.AppKey("demo_recorded", list[RecordedRequest])


def _json(body: Json, status: int = 200) -> web.Response:
    return web.json_response(body, status=status, dumps=dumps)


def _result(request_id: Any, result: Json) -> web.Response:
    return _json(wire.jsonrpc_result(request_id, result))


def _sse(batch: list[Item], request_id: Any) -> bytes:
    """SSE ``data:`` lines for a batch, wrapping the pre-encoded results by templating."""
    tail = f',"id":{dumps(request_id)},"jsonrpc":"2.0"}}\n\n'
    chunks: list[str] = []
    for item in batch:
        if isinstance(item, RpcFailure):
            chunks.append(f"data: {dumps(wire.jsonrpc_error(request_id, item.code, item.message))}\n\n")
        else:
            chunks.append(_SSE_HEAD + (tail + _SSE_HEAD).join(item) + tail)
    return "".join(chunks).encode()


async def _stream(request: web.Request, request_id: Any, task: TaskRecord, listener: Listener) -> web.StreamResponse:
    """Write a listener's events as ``text/event-stream`` until its stream ends."""
    agent = request.app[AGENT_KEY]
    response = web.StreamResponse(headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    response.content_type = "text/event-stream"
    try:
        await response.prepare(request)
        while (batch := await listener.next_batch()) is not None:
            await response.write(_sse(batch, request_id))
        await response.write_eof()
    except ConnectionError:
        log.debug("client left the stream of task %s; the turn goes on", task.id)
    finally:
        agent.detach(task, listener)
    return response


async def _send_streaming(request: web.Request, request_id: Any, params: Json) -> web.StreamResponse:
    task, listener = request.app[AGENT_KEY].send(params.get("message"))
    return await _stream(request, request_id, task, listener)


async def _send(request: web.Request, request_id: Any, params: Json) -> web.StreamResponse:
    agent = request.app[AGENT_KEY]
    task, listener = agent.send(params.get("message"))
    if listener.reply is not None:
        # A side-band answer is acknowledged at once; the pipeline goes on.
        return _result(request_id, listener.reply)
    config = params.get("configuration")
    if isinstance(config, dict) and config.get("returnImmediately") is True:
        agent.detach(task, listener)
        return _result(request_id, {"task": agent.snapshot(task)})
    try:
        while (batch := await listener.next_batch()) is not None:
            for item in batch:
                if isinstance(item, RpcFailure):
                    return _json(wire.jsonrpc_error(request_id, item.code, item.message))
    finally:
        agent.detach(task, listener)
    return _result(request_id, {"task": agent.snapshot(task)})


async def _get_task(request: web.Request, request_id: Any, params: Json) -> web.StreamResponse:
    agent = request.app[AGENT_KEY]
    history_length = params.get("historyLength")
    if history_length is not None and (not isinstance(history_length, int) or history_length < 0):
        raise RpcError(wire.INVALID_PARAMS, "historyLength must be a non-negative integer")
    snapshot = agent.snapshot(agent.task(params.get("id")), history_length)
    return _result(request_id, snapshot)


async def _cancel_task(request: web.Request, request_id: Any, params: Json) -> web.StreamResponse:
    return _result(request_id, request.app[AGENT_KEY].cancel(params.get("id")))


async def _subscribe(request: web.Request, request_id: Any, params: Json) -> web.StreamResponse:
    task, listener = request.app[AGENT_KEY].subscribe(params.get("id"))
    return await _stream(request, request_id, task, listener)


_METHODS: Final = {
    wire.SEND_STREAMING_MESSAGE: _send_streaming,
    wire.SEND_MESSAGE: _send,
    wire.GET_TASK: _get_task,
    wire.CANCEL_TASK: _cancel_task,
    wire.SUBSCRIBE_TO_TASK: _subscribe,
}


def _version_supported(version: str) -> bool:
    # "1.0" and "1.0.0" are the same protocol; anything else is refused.
    return version.strip().split(".")[:2] == wire.A2A_VERSION.split(".")


async def handle_rpc(request: web.Request) -> web.StreamResponse:
    """``POST /``: one JSON-RPC 2.0 request."""
    try:
        body = json.loads(await request.read())
    except ValueError:
        return _json(wire.jsonrpc_error(None, wire.PARSE_ERROR, "Parse error"))
    request_id = body.get("id") if isinstance(body, dict) else None
    if not isinstance(body, dict) or body.get("jsonrpc") != "2.0" or not isinstance(body.get("method"), str):
        return _json(wire.jsonrpc_error(request_id, wire.INVALID_REQUEST, "Invalid Request"))
    # Without the header a client speaks 0.3, which this server does not.
    version = request.headers.get(wire.VERSION_HEADER, "0.3")
    if not _version_supported(version):
        message = f"A2A version '{version}' is not supported by this handler. Expected version '{wire.A2A_VERSION}'."
        return _json(wire.jsonrpc_error(request_id, wire.VERSION_NOT_SUPPORTED, message))
    method = _METHODS.get(body["method"])
    if method is None:
        return _json(wire.jsonrpc_error(request_id, wire.METHOD_NOT_FOUND, f"Method not found: {body['method']}"))
    params = body.get("params", {})
    if not isinstance(params, dict):
        return _json(wire.jsonrpc_error(request_id, wire.INVALID_PARAMS, "params must be an object"))
    try:
        return await method(request, request_id, params)
    except RpcError as error:
        return _json(wire.jsonrpc_error(request_id, error.code, error.message))


async def handle_health(request: web.Request) -> web.Response:
    """``GET /health``: open liveness probe."""
    return _json({"status": "ok"})


async def handle_agent_card(request: web.Request) -> web.Response:
    """``GET /.well-known/agent-card.json``: an A2A 1.0 AgentCard for SDK clients."""
    url = f"{request.scheme}://{request.host}/"
    return _json(
        {
            "name": "aguiadapter demo runtime",
            "description": "A scripted demo agent that speaks the A2A wire of iac-code.",
            "version": __version__,
            "supportedInterfaces": [{"url": url, "protocolBinding": "JSONRPC", "protocolVersion": wire.A2A_VERSION}],
            "capabilities": {"streaming": True, "pushNotifications": False},
            "defaultInputModes": ["text/plain", "application/json"],
            "defaultOutputModes": ["text/plain", "application/json"],
            "skills": [
                {
                    "id": "demo-scripts",
                    "name": "Scripted demo turns",
                    "description": "The first word picks a behaviour; see aguiadapter.demo.scripts.",
                    "tags": ["demo"],
                    "examples": _CARD_EXAMPLES,
                }
            ],
        }
    )


async def handle_ensure_restored(request: web.Request) -> web.Response:
    """``POST /iac-code/session/ensure-restored`` with ``{cwd, sessionId, taskId?}``,
    as iac-code takes it: ``{"status": "current"}`` for a session this runtime
    knows, 404 ``{"status": "not_found"}`` otherwise (its sessions live in memory)."""
    try:
        body = json.loads(await request.read())
    except ValueError:
        body = None
    task_id = body.get("taskId") if isinstance(body, dict) else None
    if (
        not isinstance(body, dict)
        or not isinstance(body.get("cwd"), str)
        or not body["cwd"]
        or not isinstance(body.get("sessionId"), str)
        or (task_id is not None and not isinstance(task_id, str))
    ):
        return _json({"error": "Invalid session restore request."}, status=400)
    known = {context.session_id for context in request.app[AGENT_KEY].state.contexts.values()}
    if body["sessionId"] not in known:
        return _json({"status": "not_found"}, status=404)
    return _json({"status": "current"})


async def handle_pipeline_state(request: web.Request) -> web.Response:
    """``GET /iac-code/pipeline/state?taskId=…&afterSequence=N``: snapshot and later events."""
    task = request.app[AGENT_KEY].state.tasks.get(request.query.get("taskId", ""))
    if task is None:
        return _json({"error": "task not found"}, status=404)
    try:
        after = float(request.query.get("afterSequence", "0"))
    except ValueError:
        after = float("nan")
    if after != after:  # NaN: not a number, or "nan"
        return _json({"error": "afterSequence must be a number"}, status=400)
    if task.pipeline is None:
        return _json({"error": "the task has no pipeline run"}, status=404)
    return _json(task.pipeline.state_after(after))


async def handle_execution_state(request: web.Request) -> web.Response:
    """``GET /iac-code/execution/state?contextId=…``: the context's current execution."""
    execution = request.app[AGENT_KEY].execution(request.query.get("contextId", ""))
    if execution is None:
        return _json({"error": "Execution was not found"}, status=404)
    return _json(execution)


async def handle_session_recovery(request: web.Request) -> web.Response:
    """``GET /iac-code/session/recovery?contextId=…&executionId=…``: the
    session transcript of the context's current execution."""
    document = request.app[AGENT_KEY].recovery(request.query.get("contextId", ""),
                                               request.query.get("executionId", ""))
    if document is None:
        return _json({"error": "Execution was not found"}, status=404)
    return _json(document)


@web.middleware
async def bearer_auth(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Check ``Authorization: Bearer <token>`` when the app has a token."""
    token = request.app[CONFIG_KEY].token
    if token is None or (request.method == "GET" and request.path in _OPEN_PATHS):
        return await handler(request)
    supplied = request.headers.get("Authorization", "").encode()
    if not hmac.compare_digest(supplied, f"Bearer {token}".encode()):
        return web.json_response({"error": "unauthorized"}, status=401, headers={"WWW-Authenticate": "Bearer"})
    return await handler(request)


@web.middleware
async def record_request(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Keep the request's headers for a test (never its credentials)."""
    rpc_method = None
    if request.method == "POST" and request.path == "/":
        try:
            body = json.loads(await request.read())  # read() caches the body for the handler
        except ValueError:
            body = None
        method = body.get("method") if isinstance(body, dict) else None
        rpc_method = method if isinstance(method, str) else None
    headers = {name.lower(): value for name, value in request.headers.items() if name.lower() not in _UNRECORDED}
    request.app[RECORDED_KEY].append(RecordedRequest(request.method, request.path, rpc_method, headers))
    return await handler(request)


async def _on_shutdown(app: web.Application) -> None:
    app[AGENT_KEY].shutdown()


def create_demo_app(
    *, token: str | None = None, state: DemoState | None = None, record_headers: bool = False
) -> web.Application:
    """The demo runtime as an aiohttp application (bearer auth when *token* is set)."""
    app = web.Application(middlewares=[record_request, bearer_auth] if record_headers else [bearer_auth])
    app[CONFIG_KEY] = DemoConfig(token)
    app[RECORDED_KEY] = []
    app[AGENT_KEY] = DemoAgent(state or DemoState())
    app.router.add_post("/", handle_rpc)
    app.router.add_get("/health", handle_health)
    app.router.add_get("/.well-known/agent-card.json", handle_agent_card)
    app.router.add_post("/iac-code/session/ensure-restored", handle_ensure_restored)
    app.router.add_get("/iac-code/execution/state", handle_execution_state)
    app.router.add_get("/iac-code/session/recovery", handle_session_recovery)
    app.router.add_get("/iac-code/pipeline/state", handle_pipeline_state)
    app.on_shutdown.append(_on_shutdown)
    return app


class DemoRuntime:
    """The demo runtime served on a (loopback) socket.

    ``url = await runtime.start()`` serves it; ``runtime.state`` shows its tasks
    and counters to tests; ``await runtime.close()`` stops turns and server.
    """

    def __init__(
        self, *, token: str | None = None, state: DemoState | None = None, record_headers: bool = False
    ) -> None:
        self.app = create_demo_app(token=token, state=state, record_headers=record_headers)
        self._runner: web.AppRunner | None = None
        self._url: str | None = None

    @property
    def state(self) -> DemoState:
        """The runtime's tasks, contexts and counters."""
        return self.app[AGENT_KEY].state

    @property
    def requests(self) -> list[RecordedRequest]:
        """The requests received so far, when started with ``record_headers=True``."""
        return self.app[RECORDED_KEY]

    @property
    def url(self) -> str:
        """The base URL (``http://host:port/``); the JSON-RPC endpoint is its root."""
        if self._url is None:
            raise RuntimeError("the demo runtime is not started")
        return self._url

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Listen on *host*:*port* (0 picks a free port) and return the base URL."""
        if self._runner is not None:
            return self.url
        runner = web.AppRunner(self.app, access_log=None, shutdown_timeout=2.0)
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        bound_port = runner.addresses[0][1]
        shown = f"[{host}]" if ":" in host else host
        self._url = f"http://{shown}:{bound_port}/"
        return self._url

    async def close(self) -> None:
        """Stop every turn and the server."""
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()
