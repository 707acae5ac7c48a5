"""The minimal relay: the practical speed limit of an A2A → AG-UI relay in Python.

``python -m benchmarks.relay --port N --a2a-url URL`` serves ``POST /``: it
sends the newest user message to the runtime with ``SendStreamingMessage``,
and for each event of the reply does what any relay must do and nothing
more: ``json.loads``, build the AG-UI event dict, ``json.dumps``, write
``data: ...\\n\\n``. No validation, no thread state, no persistence, no
interrupts, no heartbeats, no cancel on disconnect. The events of one
network chunk go out in one write (the cheap trick any fast relay uses);
``--per-event-writes`` writes each event on its own instead.

``--record-writes process|fsync --state-dir DIR`` makes it the floor of a
relay that keeps a turn's record (:mod:`benchmarks.floor`): before it sends
the turn to the runtime and again before ``RUN_FINISHED``, it replaces the
thread's small JSON record (a temporary file renamed over it), on the event
loop itself, the cheapest way there is for one client at a time. ``fsync``
also syncs the file and then its folder, as a record that must survive a
power cut needs. Nothing else: no run history, no thread list, no
validation, no log.
"""

from __future__ import annotations

import argparse
import json
import os
import uuid
from typing import Any

import aiohttp
from aiohttp import web

_WORKING = "TASK_STATE_WORKING"
_END_STATES = frozenset(
    {
        "TASK_STATE_COMPLETED",
        "TASK_STATE_FAILED",
        "TASK_STATE_CANCELED",
        "TASK_STATE_REJECTED",
        "TASK_STATE_INPUT_REQUIRED",
        "TASK_STATE_AUTH_REQUIRED",
    }
)
_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

SESSION: web.AppKey[aiohttp.ClientSession] = web.AppKey("session", aiohttp.ClientSession)
UPSTREAM: web.AppKey[str] = web.AppKey("upstream", str)
BATCH: web.AppKey[bool] = web.AppKey("batch", bool)


class Records:
    """A thread's record replaced whole, as the floor of a relay that keeps one."""

    def __init__(self, folder: str, *, sync: bool) -> None:
        self.folder = folder
        self.sync = sync
        os.makedirs(folder, exist_ok=True)

    def save(self, thread_id: str, run_id: str, state: str, messages: Any) -> None:
        """Replace the thread's record: its state, its run, the request's messages."""
        path = os.path.join(self.folder, f"{uuid.uuid5(uuid.NAMESPACE_URL, thread_id)}.json")
        tmp = path + ".tmp"
        data = json.dumps({"threadId": thread_id, "runId": run_id, "state": state, "messages": messages}).encode()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data)
            if self.sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        if self.sync:
            folder = os.open(self.folder, os.O_RDONLY)
            try:
                os.fsync(folder)
            finally:
                os.close(folder)


RECORDS: web.AppKey[Records | None] = web.AppKey("records", object)  # type: ignore[arg-type]


def _a2a_request(body: dict[str, Any]) -> bytes:
    user = next(m for m in reversed(body["messages"]) if m.get("role") == "user")
    iac = body.get("forwardedProps", {}).get("iacCode", {})
    message = {
        "messageId": str(user.get("id") or uuid.uuid4()),
        "contextId": str(body["threadId"]),
        "role": "ROLE_USER",
        "parts": [{"text": user["content"]}],
        "metadata": {"iac_code": {"cwd": iac.get("cwd"), "rosInvocationId": iac.get("rosInvocationId")}},
    }
    request = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {"message": message}}
    return json.dumps(request).encode()


class _Turn:
    """The few facts the relay tracks while one reply streams."""

    __slots__ = ("done", "message_id", "run_id", "thread_id")

    def __init__(self, thread_id: str, run_id: str) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self.message_id: str | None = None
        self.done = False

    def events(self, data: bytes) -> list[dict[str, Any]]:
        """The AG-UI events of one A2A event."""
        obj = json.loads(data)
        result = obj.get("result")
        if result is None:
            self.done = True
            return [{"type": "RUN_ERROR", "message": str(obj.get("error")), "code": "A2A_EXECUTION_FAILED"}]
        update = result.get("statusUpdate")
        if update is None:
            return []
        status = update.get("status") or {}
        state = status.get("state")
        out: list[dict[str, Any]] = []
        message = status.get("message")
        final = ((update.get("metadata") or {}).get("iac_code") or {}).get("assistantFinal")
        if message is not None and state == _WORKING and not final:
            for part in message.get("parts") or ():
                text = part.get("text")
                if text:
                    if self.message_id is None:
                        self.message_id = f"{self.run_id}-text"
                        out.append({"type": "TEXT_MESSAGE_START", "messageId": self.message_id, "role": "assistant"})
                    out.append({"type": "TEXT_MESSAGE_CONTENT", "messageId": self.message_id, "delta": text})
        if state in _END_STATES:
            self.done = True
            if self.message_id is not None:
                out.append({"type": "TEXT_MESSAGE_END", "messageId": self.message_id})
            if state in ("TASK_STATE_FAILED", "TASK_STATE_REJECTED"):
                out.append({"type": "RUN_ERROR", "message": state, "code": "A2A_EXECUTION_FAILED"})
            else:
                out.append({"type": "RUN_FINISHED", "threadId": self.thread_id, "runId": self.run_id,
                            "outcome": {"type": "success"}})
        return out


async def handle_run(request: web.Request) -> web.StreamResponse:
    """``POST /``: relay one turn."""
    body = await request.json()
    turn = _Turn(str(body["threadId"]), str(body["runId"]))
    batch = request.app[BATCH]
    records = request.app[RECORDS]
    if records is not None:
        records.save(turn.thread_id, turn.run_id, "running", body["messages"])
    upstream = await request.app[SESSION].post(
        request.app[UPSTREAM],
        data=_a2a_request(body),
        headers={"Content-Type": "application/json", "Accept": "text/event-stream", "A2A-Version": "1.0"},
    )
    response = web.StreamResponse(headers=_SSE_HEADERS)
    await response.prepare(request)
    started = {"type": "RUN_STARTED", "threadId": turn.thread_id, "runId": turn.run_id}
    await response.write(b"data: " + _dumps(started).encode() + b"\n\n")
    partial = b""
    try:
        while not turn.done and (chunk := await upstream.content.readany()):
            lines = (partial + chunk).split(b"\n")
            partial = lines.pop()
            out: list[bytes] = []
            for line in lines:
                if not line.startswith(b"data:"):
                    continue
                for event in turn.events(line[5:]):
                    if records is not None and event["type"] == "RUN_FINISHED":
                        records.save(turn.thread_id, turn.run_id, "idle", body["messages"])
                    encoded = b"data: " + _dumps(event).encode() + b"\n\n"
                    if batch:
                        out.append(encoded)
                    else:
                        await response.write(encoded)
                if turn.done:
                    break
            if out:
                await response.write(b"".join(out))
    finally:
        upstream.close()
    await response.write_eof()
    return response


async def handle_health(request: web.Request) -> web.Response:
    """``GET /health``."""
    return web.json_response({"status": "ok"})


def create_app(upstream: str, *, batch: bool = True, records: Records | None = None) -> web.Application:
    """The relay as an aiohttp application."""
    app = web.Application()
    app[UPSTREAM] = upstream
    app[BATCH] = batch
    app[RECORDS] = records

    async def session_ctx(app: web.Application):  # type: ignore[no-untyped-def]
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=0)
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        app[SESSION] = aiohttp.ClientSession(connector=connector, timeout=timeout)
        yield
        await app[SESSION].close()

    app.cleanup_ctx.append(session_ctx)
    app.router.add_post("/", handle_run)
    app.router.add_get("/health", handle_health)
    return app


def main(argv: list[str] | None = None) -> None:
    """Serve the relay until interrupted."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.relay")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--a2a-url", required=True)
    parser.add_argument("--per-event-writes", action="store_true",
                        help="one write per event instead of one per network chunk")
    parser.add_argument("--record-writes", choices=("process", "fsync"),
                        help="replace a thread's record before the turn is sent and before RUN_FINISHED")
    parser.add_argument("--state-dir", help="where --record-writes keeps the records")
    args = parser.parse_args(argv)
    if args.record_writes and not args.state_dir:
        parser.error("--record-writes needs --state-dir")
    records = Records(args.state_dir, sync=args.record_writes == "fsync") if args.record_writes else None
    app = create_app(args.a2a_url, batch=not args.per_event_writes, records=records)
    web.run_app(app, host=args.host, port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
