"""The load client: AG-UI runs and raw A2A streams, read at C speed.

The client must stay far cheaper than the servers it measures, so it does not
use an HTTP library and does not parse events: a bare asyncio protocol reads
the response in ``data_received`` (no task wake-up per network read), undoes
the chunked encoding, counts SSE ``data:`` lines with ``bytes.count`` (a
small carry-over catches patterns cut between reads), notes when the first
event and the first text delta arrive, and decodes only the last event (or,
for short runs, the whole body).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid
from typing import Any
from urllib.parse import urlsplit

import attrs

EVENT_MARK = b"\ndata:"
COMMENT_MARK = b"\n:"
AGUI_TEXT_MARK = b'"TEXT_MESSAGE_CONTENT"'
# The first agent message of a firehose turn is its first text delta.
A2A_TEXT_MARK = b'"role":"ROLE_AGENT"'
_CARRY = 32
_TAIL = 32 * 1024
_ids = itertools.count(1)


def new_id(prefix: str) -> str:
    """A short unique id for threads, runs and messages."""
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


def run_body(
    text: str,
    *,
    cwd: str,
    thread_id: str | None = None,
    run_id: str | None = None,
    message_id: str | None = None,
    ros_invocation_id: str = "inv-1",
    resume: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A ``RunAgentInput`` with one user message (and optionally a resume)."""
    body: dict[str, Any] = {
        "threadId": thread_id or new_id("bench-thread"),
        "runId": run_id or new_id("run"),
        "state": {},
        "messages": [{"id": message_id or new_id("msg"), "role": "user", "content": text}],
        "tools": [],
        "context": [],
        "forwardedProps": {
            "iacCode": {"schemaVersion": 1, "rosInvocationId": ros_invocation_id, "cwd": cwd}
        },
    }
    if resume is not None:
        body["resume"] = resume
    return body


def a2a_body(text: str, *, cwd: str, task_id: str | None = None, context_id: str | None = None,
             parts: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A JSON-RPC ``SendStreamingMessage`` request for the runtime itself."""
    message: dict[str, Any] = {
        "messageId": new_id("raw-msg"),
        "contextId": context_id or new_id("raw-ctx"),
        "role": "ROLE_USER",
        "parts": parts if parts is not None else [{"text": text}],
        "metadata": {"iac_code": {"cwd": cwd, "rosInvocationId": "inv-raw"}},
    }
    if task_id is not None:
        message["taskId"] = task_id
    return {"jsonrpc": "2.0", "id": next(_ids), "method": "SendStreamingMessage", "params": {"message": message}}


AGUI_HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream"}
A2A_HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream", "A2A-Version": "1.0"}


@attrs.define
class StreamResult:
    """What one streamed request delivered, as seen by the client."""

    status: int = 0
    started: float = 0.0
    first_event: float | None = None
    first_text: float | None = None
    ended: float = 0.0
    events: int = 0
    texts: int = 0
    comments: int = 0
    bytes: int = 0
    last_event: Any = None
    body: bytes | None = None
    error: str | None = None

    @property
    def seconds(self) -> float:
        """Request sent → stream ended."""
        return self.ended - self.started

    @property
    def ttfe(self) -> float | None:
        """Seconds to the first event."""
        return None if self.first_event is None else self.first_event - self.started

    @property
    def ttft(self) -> float | None:
        """Seconds to the first text delta."""
        return None if self.first_text is None else self.first_text - self.started

    def events_of(self) -> list[Any]:
        """Every event of a kept body, decoded."""
        if self.body is None:
            return []
        return [json.loads(block) for block in _data_blocks(self.body)]


def _data_blocks(raw: bytes) -> list[bytes]:
    text = raw.replace(b"\r\n", b"\n")
    blocks = []
    for event in text.split(b"\n\n"):
        data = [line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
        if data:
            blocks.append(b"\n".join(data))
    return blocks


def _last_event(tail: bytes) -> Any:
    blocks = _data_blocks(tail)
    for block in reversed(blocks):
        try:
            return json.loads(block)
        except ValueError:
            continue
    return None


class _SseProtocol(asyncio.Protocol):
    """HTTP/1.1 response reader that counts SSE events as bytes arrive.

    It runs in ``data_received`` (no task wake-up per network read), undoes
    chunked transfer encoding, and counts with ``bytes.count``.
    """

    def __init__(self, result: StreamResult, text_mark: bytes, keep_body: bool,
                 opened: asyncio.Event | None, texted: asyncio.Event | None = None) -> None:
        self.result = result
        self.text_mark = text_mark
        self.keep_body = keep_body
        self.opened = opened
        self.texted = texted
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None
        self._head = b""
        self._in_body = False
        self._chunked = False
        self._remaining = 0  # bytes left in the current chunk
        self._size_line = b""
        self._ended = False
        self._sse = False
        self._carry = b"\n"  # the stream start counts as a line start
        self._tail = b""
        self._chunks: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if not self._in_body:
            self._head += data
            split = self._head.find(b"\r\n\r\n")
            if split < 0:
                return
            head, data = self._head[:split], self._head[split + 4 :]
            self._head = b""
            self._in_body = True
            lines = head.split(b"\r\n")
            self.result.status = int(lines[0].split()[1])
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                headers[name.strip().lower()] = value.strip().lower()
            self._chunked = b"chunked" in headers.get(b"transfer-encoding", b"")
            self._sse = headers.get(b"content-type", b"").startswith(b"text/event-stream")
        if self._chunked:
            data = self._dechunk(data)
        if data:
            self._payload(data)
        if self._ended:
            self._finish()

    def _dechunk(self, data: bytes) -> bytes:
        out = []
        position, size = 0, len(data)
        while position < size:
            if self._remaining > 0:
                take = data[position : position + self._remaining]
                out.append(take)
                self._remaining -= len(take)
                position += len(take)
                if not self._remaining:
                    self._remaining = -2  # the CRLF after the chunk
                continue
            if self._remaining < 0:
                skip = min(-self._remaining, size - position)
                self._remaining += skip
                position += skip
                continue
            end = data.find(b"\r\n", position)
            if end < 0:
                self._size_line += data[position:]
                break
            line = self._size_line + data[position:end]
            self._size_line = b""
            position = end + 2
            length = int(line.split(b";")[0], 16)
            if length == 0:
                self._ended = True
                break
            self._remaining = length
        return b"".join(out) if len(out) != 1 else out[0]

    def _payload(self, chunk: bytes) -> None:
        result = self.result
        result.bytes += len(chunk)
        if self.keep_body or not self._sse:
            self._chunks.append(chunk)
        else:
            self._tail = (self._tail + chunk)[-_TAIL:]
        if not self._sse:
            return
        carry = self._carry
        buf = carry + chunk
        found = buf.count(EVENT_MARK) - carry.count(EVENT_MARK)
        if found:
            result.events += found
            if result.first_event is None:
                result.first_event = time.perf_counter()
                if self.opened is not None:
                    self.opened.set()
        texts = buf.count(self.text_mark) - carry.count(self.text_mark)
        if texts:
            result.texts += texts
            if result.first_text is None:
                result.first_text = time.perf_counter()
                if self.texted is not None:
                    self.texted.set()
        if b"\n:" in buf:
            result.comments += buf.count(COMMENT_MARK) - carry.count(COMMENT_MARK)
        self._carry = buf[-_CARRY:]

    def _finish(self, error: str | None = None) -> None:
        if self.done.done():
            return
        result = self.result
        result.ended = time.perf_counter()
        body = b"".join(self._chunks) if self._chunks else None
        if self.keep_body or not self._sse:
            result.body = body
        if error is None and not self._sse and self._in_body:
            text = (body or b"")[:300].decode(errors="replace")
            error = f"HTTP {result.status}: {text}"
        if error is None and not self._in_body:
            error = "connection closed before a response"
        result.error = error
        tail = (body or b"")[-_TAIL:] if self.keep_body else self._tail
        result.last_event = _last_event(tail) if self._sse else None
        self.done.set_result(None)
        if self.transport is not None:
            self.transport.close()

    def eof_received(self) -> bool | None:
        self._finish()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._finish(f"{type(exc).__name__}: {exc}" if exc is not None else None)


async def stream(
    url: str,
    body: dict[str, Any],
    *,
    headers: dict[str, str] = AGUI_HEADERS,
    text_mark: bytes = AGUI_TEXT_MARK,
    keep_body: bool = False,
    opened: asyncio.Event | None = None,
    result: StreamResult | None = None,
    texted: asyncio.Event | None = None,
) -> StreamResult:
    """POST *body* to *url* (a loopback ``http://host:port/``) and read the SSE reply to its end.

    One fresh connection per request (``Connection: close``). *opened* is set
    at the first event, *texted* at the first text delta. Pass *result* to watch a stream that will be
    cancelled (the idle measure): it is filled as data arrives.
    """
    parsed = urlsplit(url)
    host, port = parsed.hostname or "127.0.0.1", parsed.port or 80
    data = json.dumps(body, separators=(",", ":")).encode()
    lines = [f"POST {parsed.path or '/'} HTTP/1.1", f"Host: {host}:{port}", "Connection: close",
             f"Content-Length: {len(data)}", *(f"{k}: {v}" for k, v in headers.items())]
    request = ("\r\n".join(lines) + "\r\n\r\n").encode() + data
    result = result if result is not None else StreamResult()
    loop = asyncio.get_running_loop()
    result.started = time.perf_counter()
    try:
        transport, protocol = await loop.create_connection(
            lambda: _SseProtocol(result, text_mark, keep_body, opened, texted), host, port
        )
    except OSError as exc:
        result.ended = time.perf_counter()
        result.error = f"{type(exc).__name__}: {exc}"
        return result
    try:
        transport.write(request)
        await protocol.done
    finally:
        transport.close()
    return result


def agui_outcome(result: StreamResult) -> str:
    """``success``, ``interrupt``, ``error: ...`` for an AG-UI stream."""
    if result.error is not None:
        return f"error: {result.error}"
    last = result.last_event
    if not isinstance(last, dict):
        return "error: no final event"
    if last.get("type") == "RUN_FINISHED":
        outcome = last.get("outcome")
        kind = outcome.get("type") if isinstance(outcome, dict) else None
        return str(kind or "success")
    if last.get("type") == "RUN_ERROR":
        return f"error: RUN_ERROR {last.get('code')}: {last.get('message')}"
    return f"error: stream ended on {last.get('type')}"


def a2a_outcome(result: StreamResult) -> str:
    """The final task state of a raw A2A stream (or ``error: ...``)."""
    if result.error is not None:
        return f"error: {result.error}"
    last = result.last_event
    if not isinstance(last, dict) or not isinstance(last.get("result"), dict):
        return f"error: {str(last)[:200]}"
    holder = last["result"].get("statusUpdate") or last["result"].get("task") or {}
    return str((holder.get("status") or {}).get("state"))


async def run_ok(url: str, text: str, cwd: str) -> None:
    """One run of the demo runtime's script ``text`` on a new thread; a run
    that does not end in success stops the measure (its count would lie)."""
    result = await stream(url, run_body(text, cwd=cwd))
    if agui_outcome(result) != "success":
        raise RuntimeError(f"run failed: {agui_outcome(result)}")
