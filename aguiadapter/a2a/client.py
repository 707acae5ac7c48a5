"""A2A 1.0 JSON-RPC client over aiohttp.

Every runtime event of every run passes through :func:`iter_sse_data` and
:meth:`A2AClient.stream_message`, so the streaming path stays small: the body
is read line by line, each event is decoded with one ``json.loads`` and its
``result`` dict is handed out as is (no model objects).

Nothing here logs: request bodies carry secrets in ``message.metadata`` and
the headers carry the bearer token. Each request is reported once to the
app's telemetry (its latency, and a span whose trace context goes to the
runtime in ``traceparent``), not each event of a stream.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncGenerator, Mapping
from contextlib import aclosing
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Literal

import aiohttp
from aiohttp.helpers import parse_content_type
from aiohttp.http_exceptions import HttpProcessingError

from aguiadapter.fastjson import loads as fast_loads
from aguiadapter.telemetry import QUIET, A2ACall, Telemetry
from aguiadapter.a2a.wire import (
    A2A_VERSION,
    CANCEL_TASK,
    GET_TASK,
    SEND_MESSAGE,
    SEND_STREAMING_MESSAGE,
    STREAM_END_STATES,
    SUBSCRIBE_TO_TASK,
    VERSION_HEADER,
)

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "A2AClient",
    "A2AError",
    "A2AHttpError",
    "A2ARpcError",
    "A2AUnavailable",
    "iter_sse_data",
]

# A whole artifact (e.g. a base64 image part) can arrive on one `data:` line.
MAX_SSE_LINE: Final = 64 * 1024 * 1024
_HEALTH_TIMEOUT: Final = 3.0
_SSE_TYPE: Final = "text/event-stream"


def media_type(headers: Mapping[str, str]) -> str:
    """The media type of ``Content-Type`` as aiohttp's ``content_type`` reads it
    (the same cached parse), without the parsed copy that aiohttp then keeps on
    the message for its whole life: about 1 KB per open stream, for a check
    made once."""
    raw = headers.get("Content-Type")
    return "application/octet-stream" if raw is None else parse_content_type(raw)[0]
# What a dead, unreachable or misbehaving peer looks like from aiohttp.
_TRANSPORT_ERRORS: Final = (aiohttp.ClientError, HttpProcessingError, OSError, asyncio.TimeoutError)
# The connection was never made: the request did not leave this process.
_NOT_CONNECTED: Final = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)
#: The statuses of a runtime that refuses this client's credentials.
_REFUSED: Final = (401, 403)
#: ``/health``'s ``a2a.status``: usable, refusing the token, or not answering.
RuntimeStatus = Literal["ok", "unauthorized", "unreachable"]


class A2AError(Exception):
    """Base class of every error raised by :class:`A2AClient`."""


class A2AUnavailable(A2AError):
    """The runtime cannot serve the call right now.

    Raised on connection refused/reset, timeouts, HTTP 5xx, 401/403, a reply
    that is not JSON, and a stream that ends before a terminal or interrupt
    state. ``status`` is the HTTP status when there was one. ``sent``: the
    request may have reached the runtime (only a connection never made
    proves it did not), so what it asked for may have been carried out.
    """

    def __init__(self, message: str, *, status: int | None = None, sent: bool = True) -> None:
        super().__init__(message)
        self.status = status
        self.sent = sent

    @property
    def unauthorized(self) -> bool:
        """The runtime answered, refusing this server's credentials (401, 403)."""
        return self.status in _REFUSED


class A2AHttpError(A2AError):
    """A non-2xx HTTP reply that is neither a JSON-RPC error nor "unavailable".

    For instance a 400 or 409 from an iac-code extra route; ``body`` holds the
    decoded JSON reply.
    """

    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"HTTP {status} from the A2A runtime")
        self.status = status
        self.body = body


class StreamEndedEarly(A2AUnavailable):
    """A stream the runtime closed cleanly before a terminal or interrupt
    state (iac-code does so after acknowledging a repeated answer)."""


class A2ARpcError(A2AError):
    """A JSON-RPC error object sent by the runtime.

    ``reason`` is ``data[0].reason`` (the google.rpc.ErrorInfo reason A2A 1.0
    servers attach, e.g. ``TASK_NOT_FOUND``) when present.
    """

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"JSON-RPC error {code}: {message}")
        self.code = code
        self.message = message
        self.data = data
        self.reason = _error_reason(data)

    @classmethod
    def from_error(cls, error: Any) -> A2ARpcError:
        """Build from a JSON-RPC ``error`` member, tolerating odd shapes."""
        if not isinstance(error, dict):
            return cls(0, str(error))
        code = error.get("code")
        message = error.get("message")
        return cls(
            code if isinstance(code, int) else 0,
            message if isinstance(message, str) else "",
            error.get("data"),
        )


def _error_reason(data: Any) -> str | None:
    first = data[0] if isinstance(data, list) and data else data
    reason = first.get("reason") if isinstance(first, dict) else None
    return reason if isinstance(reason, str) else None


async def iter_sse_data(
    content: aiohttp.StreamReader, *, max_line: int = MAX_SSE_LINE
) -> AsyncGenerator[bytes, None]:
    """Yield the ``data`` of each server-sent event read from ``content``.

    See :func:`iter_sse_batches`, which this flattens.
    """
    async for batch in iter_sse_batches(content, max_line=max_line):
        for data in batch:
            yield data


async def iter_sse_batches(
    content: aiohttp.StreamReader, *, max_line: int = MAX_SSE_LINE
) -> AsyncGenerator[list[bytes], None]:
    """Yield, per network chunk, the ``data`` of every event it completes.

    Several ``data:`` lines of one event are joined with ``\\n``. Comments
    (``:`` lines, used as heartbeats) and the other fields (``event``, ``id``,
    ``retry``) are skipped: A2A puts everything in ``data``. An event cut off
    by the end of the body (no blank line after it) is dropped, as the SSE
    specification requires. LF and CRLF line ends are accepted; a line longer
    than ``max_line`` bytes raises :class:`A2AUnavailable`. Handing out a
    chunk's events together lets the relay write them to its client at once.
    The list handed out is the caller's: it may empty it once done with it.
    """
    # Lines are split here rather than with StreamReader.readline(): one C-level
    # split per network chunk is cheaper, and readline() caps lines at 128 KiB
    # on aiohttp releases whose readline() takes no length argument.
    split = _LineSplitter(max_line).feed
    pending: list[bytes] = []
    while chunk := await content.readany():
        batch: list[bytes] = []
        for line in split(chunk):
            if line.startswith(b"data:"):
                # The single space after the colon is syntax, not part of the value.
                pending.append(line[6:] if line[5:6] == b" " else line[5:])
            elif not line:
                if pending:
                    batch.append(pending[0] if len(pending) == 1 else b"\n".join(pending))
                    pending.clear()
            elif line == b"data":
                pending.append(b"")
        if batch:
            yield batch


class _LineSplitter:
    """Cuts a byte stream into lines (LF or CRLF ends removed) across chunks."""

    __slots__ = ("_max", "_partial", "_size")

    def __init__(self, max_line: int) -> None:
        self._max = max_line
        self._partial: list[bytes] = []  # pieces of a line that spans chunks
        self._size = 0

    def feed(self, chunk: bytes) -> list[bytes]:
        """The lines that ``chunk`` completes."""
        if b"\n" not in chunk:
            self._keep(chunk, self._size + len(chunk))
            return []
        if self._partial:
            # Joined once the line is complete, so a long line costs linear time.
            self._partial.append(chunk)
            chunk = b"".join(self._partial)
            self._partial.clear()
        lines = chunk.split(b"\n")
        last = lines.pop()
        self._size = 0
        if last:
            self._keep(last, len(last))
        return [line[:-1] if line[-1:] == b"\r" else line for line in lines]

    def _keep(self, piece: bytes, size: int) -> None:
        # Bounds the memory an unterminated line can take.
        if size > self._max:
            raise A2AUnavailable(f"A2A runtime sent an SSE line over {self._max} bytes")
        self._partial.append(piece)
        self._size = size


def _decode_result(data: bytes) -> dict[str, Any]:
    """The ``result`` of one JSON-RPC response; raises on ``error``."""
    try:
        obj = fast_loads(data)
    except ValueError as exc:  # UnicodeDecodeError and orjson's errors are ValueErrors too
        raise A2AUnavailable("A2A runtime sent an event that is not JSON") from exc
    if type(obj) is dict:
        result = obj.get("result")
        if type(result) is dict:
            return result
        if "error" in obj:
            raise A2ARpcError.from_error(obj["error"])
    raise A2AUnavailable("A2A runtime sent an event that is not a JSON-RPC response")


def _decode_chunk(chunk: list[bytes], ended: bool) -> tuple[list[dict[str, Any]], bool, A2AError | None]:
    """The results of a chunk's events, whether the stream may end after
    them, and the error that stopped decoding (what came before it is kept).
    A function of its own, so that no result stays referenced by the
    stream's generator while it waits for the next chunk."""
    batch: list[dict[str, Any]] = []
    for data in chunk:
        try:
            result = _decode_result(data)
        except A2AError as exc:
            return batch, ended, exc
        ended = _ends_stream(result, ended)
        batch.append(result)
    return batch, ended, None


def _ends_stream(result: dict[str, Any], ended: bool) -> bool:
    """Whether the stream may end after ``result`` (A2A 1.0 has no ``final`` flag)."""
    holder = result.get("statusUpdate") or result.get("task")
    if holder is None:
        # A direct Message answer ends the exchange; artifacts move no state.
        return True if "message" in result else ended
    status = holder.get("status") if isinstance(holder, dict) else None
    state = status.get("state") if isinstance(status, dict) else None
    return isinstance(state, str) and state in STREAM_END_STATES


def _loads_reply(raw: bytes, status: int) -> Any:
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise A2AUnavailable(
            f"A2A runtime replied HTTP {status} without JSON", status=status
        ) from exc


class A2AClient:
    """JSON-RPC 2.0 client for one A2A 1.0 runtime endpoint.

    ``url`` is the JSON-RPC endpoint (``POST``); ``/health`` and the iac-code
    extra routes are resolved against it. ``max_streams`` caps the
    connections this client opens (0 = no cap); a request that waits longer
    than ``connect_timeout`` for a free connection fails with
    :class:`A2AUnavailable`. ``request_timeout`` bounds GetTask, CancelTask and
    :meth:`post_json`; streams and :meth:`send_message` (which blocks until the
    turn stops) have no read timeout because runs can be long and silent.
    """

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        session: aiohttp.ClientSession | None = None,
        connect_timeout: float = 10.0,
        max_streams: int = 0,
        request_timeout: float | None = 60.0,
        telemetry: Telemetry | None = None,
    ) -> None:
        self._url = url
        self._endpoint = (telemetry or QUIET).a2a_endpoint(url)
        self._base = url.rstrip("/")
        self._session = session
        self._owns_session = session is None
        self._max_streams = max_streams
        self._ids = itertools.count(1)
        headers = {VERSION_HEADER: A2A_VERSION, "Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._json_headers = {**headers, "Accept": "application/json"}
        self._sse_headers = {**headers, "Accept": _SSE_TYPE}
        self._open_timeout = aiohttp.ClientTimeout(
            total=None, connect=connect_timeout, sock_connect=connect_timeout, sock_read=None
        )
        self._unary_timeout = aiohttp.ClientTimeout(
            total=request_timeout, connect=connect_timeout, sock_connect=connect_timeout
        )
        self._health_timeout = aiohttp.ClientTimeout(total=min(_HEALTH_TIMEOUT, connect_timeout))
        #: The status (401, 403) of the last call the runtime refused for its
        #: credentials, until one is taken again; ``None`` when none was refused.
        self.refused_status: int | None = None

    @property
    def url(self) -> str:
        """The JSON-RPC endpoint this client posts to."""
        return self._url

    def __repr__(self) -> str:
        return f"A2AClient({self._url!r})"

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- public API ---------------------------------------------------------

    def stream_message(self, message: dict[str, Any]) -> AsyncGenerator[dict[str, Any], None]:
        """SendStreamingMessage: yield each ``result`` of the event stream.

        Each item holds one of ``task``, ``statusUpdate``, ``artifactUpdate``,
        ``message``. A JSON-RPC error, before or during the stream, raises
        :class:`A2ARpcError`. Close the generator (``aclose()``, or
        ``contextlib.aclosing``) to drop the connection early.
        """
        return self._stream(SEND_STREAMING_MESSAGE, {"message": message})

    def subscribe(self, task_id: str) -> AsyncGenerator[dict[str, Any], None]:
        """SubscribeToTask: same contract as :meth:`stream_message`."""
        return self._stream(SUBSCRIBE_TO_TASK, {"id": task_id})

    def stream_message_batches(self, message: dict[str, Any]) -> AsyncGenerator[list[dict[str, Any]], None]:
        """:meth:`stream_message`, a list of results per network chunk (the relay's form)."""
        return self._stream_batches(SEND_STREAMING_MESSAGE, {"message": message})

    def subscribe_batches(self, task_id: str) -> AsyncGenerator[list[dict[str, Any]], None]:
        """:meth:`subscribe`, a list of results per network chunk."""
        return self._stream_batches(SUBSCRIBE_TO_TASK, {"id": task_id})

    async def send_message(self, message: dict[str, Any]) -> dict[str, Any]:
        """SendMessage (non-streaming); returns the JSON-RPC ``result``."""
        return await self._call(SEND_MESSAGE, {"message": message}, self._open_timeout)

    async def get_task(self, task_id: str, history_length: int | None = None) -> dict[str, Any]:
        """GetTask; returns the Task dict."""
        params: dict[str, Any] = {"id": task_id}
        if history_length is not None:
            params["historyLength"] = history_length
        return await self._call(GET_TASK, params, self._unary_timeout)

    async def cancel_task(self, task_id: str) -> dict[str, Any]:
        """CancelTask; returns the Task dict."""
        return await self._call(CANCEL_TASK, {"id": task_id}, self._unary_timeout)

    async def health(self) -> bool:
        """Whether the runtime is usable: :meth:`health_status` is ``ok``."""
        return await self.health_status() == "ok"

    async def health_status(self) -> RuntimeStatus:
        """``GET <base>/health``: ``ok`` on a 2xx reply, ``unauthorized`` when
        the runtime refuses this client's token (401/403 there, or on the
        last call it refused: a runtime whose ``/health`` is open), else
        ``unreachable``."""
        with self._endpoint.call("/health", http="GET", traced=False) as call:
            try:
                session = self._get_session()
                async with session.get(
                    f"{self._base}/health", headers=call.headers(self._json_headers), timeout=self._health_timeout
                ) as resp:
                    call.answered(resp.status)
                    if resp.status in _REFUSED:
                        return "unauthorized"
                    if 200 <= resp.status < 300:
                        return "unauthorized" if self.refused_status is not None else "ok"
                    return "unreachable"
            except (*_TRANSPORT_ERRORS, ValueError, RuntimeError) as exc:
                # Refused, timed out, bad URL, closed session: all mean "not healthy".
                call.end(exc)
                return "unreachable"

    async def post_json(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST a plain JSON body to an extra route of the runtime (not JSON-RPC).

        Returns the decoded JSON object. Non-2xx replies raise
        :class:`A2AUnavailable` (401/403/5xx) or :class:`A2AHttpError`.
        """
        url = f"{self._base}/{path.lstrip('/')}"
        with self._endpoint.call("/" + path.lstrip("/"), http="POST") as call:
            resp = await self._send(url, body, self._json_headers, self._unary_timeout, path, call)
            return await self._json_object(resp, path)

    async def get_json(self, path: str, params: dict[str, str], *, max_bytes: int | None = None) -> dict[str, Any]:
        """GET an extra route of the runtime (e.g. the pipeline state); a reply
        longer than ``max_bytes`` raises :class:`A2AReplyTooLarge` before more
        of it is read."""
        url = f"{self._base}/{path.lstrip('/')}"
        headers = {key: value for key, value in self._json_headers.items() if key != "Content-Type"}
        with self._endpoint.call("/" + path.lstrip("/"), http="GET") as call:
            try:
                resp = await self._get_session().get(
                    url, params=params, headers=call.headers(headers), timeout=self._unary_timeout
                )
            except _TRANSPORT_ERRORS as exc:
                raise A2AUnavailable(f"{path}: A2A runtime unreachable ({type(exc).__name__})") from exc
            call.answered(resp.status)
            return await self._json_object(resp, path, max_bytes)

    async def _json_object(
        self, resp: aiohttp.ClientResponse, path: str, max_bytes: int | None = None
    ) -> dict[str, Any]:
        """A plain (non-JSON-RPC) JSON object reply, or the matching error."""
        async with resp:
            obj = await self._read_reply(resp, path, max_bytes)
        if not 200 <= resp.status < 300:
            raise A2AHttpError(resp.status, obj)
        if not isinstance(obj, dict):
            raise A2AUnavailable(f"{path}: reply is not a JSON object", status=resp.status)
        return obj

    async def close(self) -> None:
        """Close the HTTP session if this client created it."""
        session, self._session = self._session, None
        if session is not None and self._owns_session:
            await session.close()

    # -- plumbing -----------------------------------------------------------

    def _get_session(self) -> aiohttp.ClientSession:
        session = self._session
        if session is None:
            # limit=0: aiohttp's default cap of 100 would stall the 101st stream.
            connector = aiohttp.TCPConnector(limit=self._max_streams, limit_per_host=0)
            session = self._session = aiohttp.ClientSession(connector=connector)
            self._owns_session = True
        return session

    def _rpc_body(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params}

    async def _send(
        self,
        url: str,
        body: dict[str, Any],
        headers: dict[str, str],
        timeout: aiohttp.ClientTimeout,
        what: str,
        call: A2ACall,
    ) -> aiohttp.ClientResponse:
        data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
        try:
            resp = await self._get_session().post(url, data=data, headers=call.headers(headers), timeout=timeout)
        except _TRANSPORT_ERRORS as exc:
            raise A2AUnavailable(
                f"{what}: A2A runtime unreachable ({type(exc).__name__})", sent=not isinstance(exc, _NOT_CONNECTED)
            ) from exc
        call.answered(resp.status)
        if resp.status not in _REFUSED:
            self.refused_status = None  # the token was taken (again)
        return resp

    async def _read_reply(self, resp: aiohttp.ClientResponse, what: str, max_bytes: int | None = None) -> Any:
        """Decode a JSON reply; the statuses meaning "unavailable" raise first."""
        status = resp.status
        if status in _REFUSED:
            self.refused_status = status
        if status in _REFUSED or status >= 500:
            raise A2AUnavailable(f"{what}: A2A runtime answered HTTP {status}", status=status)
        try:
            raw = await resp.read() if max_bytes is None else await _read_at_most(resp, what, max_bytes)
        except _TRANSPORT_ERRORS as exc:
            raise A2AUnavailable(f"{what}: reply cut off ({type(exc).__name__})") from exc
        return _loads_reply(raw, status)

    def _check_rpc_reply(
        self, resp: aiohttp.ClientResponse, obj: Any, method: str
    ) -> dict[str, Any]:
        if isinstance(obj, dict):
            if "error" in obj:
                raise A2ARpcError.from_error(obj["error"])
            if not 200 <= resp.status < 300:
                raise A2AHttpError(resp.status, obj)
            result = obj.get("result")
            if isinstance(result, dict):
                return result
        elif not 200 <= resp.status < 300:
            raise A2AHttpError(resp.status, obj)
        raise A2AUnavailable(f"{method}: reply is not a JSON-RPC response", status=resp.status)

    async def _call(
        self, method: str, params: dict[str, Any], timeout: aiohttp.ClientTimeout
    ) -> dict[str, Any]:
        body = self._rpc_body(method, params)
        with self._endpoint.call(method) as call:
            resp = await self._send(self._url, body, self._json_headers, timeout, method, call)
            async with resp:
                obj = await self._read_reply(resp, method)
            return self._check_rpc_reply(resp, obj, method)

    async def _open_stream(self, method: str, params: dict[str, Any], call: A2ACall) -> aiohttp.ClientResponse:
        """POST a streaming call; return the response once it is known to be SSE."""
        body = self._rpc_body(method, params)
        resp = await self._send(self._url, body, self._sse_headers, self._open_timeout, method, call)
        if 200 <= resp.status < 300 and media_type(resp.headers) == _SSE_TYPE:
            return resp
        # Errors to streaming calls come back as one application/json object.
        async with resp:
            obj = await self._read_reply(resp, method)
        self._check_rpc_reply(resp, obj, method)
        raise A2AUnavailable(f"{method}: expected an event stream, got {media_type(resp.headers)}")

    async def _stream(
        self, method: str, params: dict[str, Any]
    ) -> AsyncGenerator[dict[str, Any], None]:
        async with aclosing(self._stream_batches(method, params)) as batches:
            async for batch in batches:
                for result in batch:
                    yield result

    async def _stream_batches(
        self, method: str, params: dict[str, Any]
    ) -> AsyncGenerator[list[dict[str, Any]], None]:
        call = self._endpoint.call(method)
        failure: BaseException | None = None
        try:
            resp = await self._open_stream(method, params, call)
            # Sent: the request (a whole user message) need not live as long as the stream.
            del params
            ended = at_eof = False
            try:
                async with aclosing(iter_sse_batches(resp.content)) as chunks:
                    async for chunk in chunks:
                        batch, ended, error = _decode_chunk(chunk, ended)
                        # Decoded: the raw events need not wait, with the generator
                        # that made them, until the caller wants the next chunk.
                        chunk.clear()
                        if error is not None:
                            if batch:
                                yield batch  # what came before the error
                            raise error
                        yield batch
                        # The caller is done with it: not kept while the stream waits for more.
                        del batch
                at_eof = True
            except _TRANSPORT_ERRORS as exc:
                raise A2AUnavailable(f"{method}: stream broken ({type(exc).__name__})") from exc
            finally:
                # close() drops the socket at once (the server sees the client go);
                # release() keeps a fully read connection for reuse.
                if at_eof:
                    resp.release()
                else:
                    resp.close()
            if not ended:
                raise StreamEndedEarly(f"{method}: stream ended before a terminal or interrupt state")
        except (GeneratorExit, asyncio.CancelledError):
            raise  # closed or stopped by the caller: not the runtime's failure
        except BaseException as exc:
            failure = exc
            raise
        finally:
            call.end(failure)


class A2AReplyTooLarge(A2AUnavailable):
    """The runtime's reply is longer than the caller reads."""


async def _read_at_most(resp: aiohttp.ClientResponse, what: str, max_bytes: int) -> bytes:
    """The body, refused as soon as it is known to be longer than ``max_bytes``
    (by its ``Content-Length``, else while it arrives): never held whole."""
    if resp.content_length is not None and resp.content_length > max_bytes:
        raise A2AReplyTooLarge(f"{what}: reply of {resp.content_length} bytes, more than {max_bytes}")
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_any():
        size += len(chunk)
        if size > max_bytes:
            raise A2AReplyTooLarge(f"{what}: reply of more than {max_bytes} bytes")
        chunks.append(chunk)
    return b"".join(chunks)
