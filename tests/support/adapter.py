"""Run the adapter on a real loopback socket, and talk to it like a client."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import attrs
from aiohttp import web

from aguiadapter.config import Config
from aguiadapter.web.app import create_app
from aguiadapter.web.server import AdapterRunner

from .agui import check_stream, judge
from .serve import on_loopback



def run_body(
    *,
    thread_id: str,
    text: str | None,
    cwd: str,
    run_id: str | None = None,
    message_id: str | None = None,
    **iac: Any,
) -> dict[str, Any]:
    """A RunAgentInput shaped like the protocol reference's minimal request."""
    messages = []
    if text is not None:
        messages.append(
            {"id": message_id or f"msg-{uuid.uuid4()}", "role": "user", "content": text}
        )
    return {
        "threadId": thread_id,
        "runId": run_id or f"run-{uuid.uuid4()}",
        "state": {},
        "messages": messages,
        "tools": [],
        "context": [],
        "forwardedProps": {
            "iacCode": {"schemaVersion": 1, "rosInvocationId": "invocation-1", "cwd": cwd, **iac}
        },
    }


@attrs.define
class Reply:
    """What came back for one POST."""

    status: int
    headers: dict[str, str]
    body: bytes
    #: The profile the adapter advertised (``None``: none) and the run's input.
    advertised: str | None = None
    request: dict[str, Any] | None = None

    def json(self) -> Any:
        import json

        return json.loads(self.body)

    def events(self) -> list[dict[str, Any]]:
        """The stream's events, judged by :func:`check_stream`."""
        assert self.status == 200, self.body
        return check_stream(self.body, advertised=self.advertised, request=self.request)


@attrs.define
class RunningAdapter:
    """An adapter app served on a free loopback port."""

    url: str
    app: web.Application
    runner: web.AppRunner
    session: aiohttp.ClientSession
    config: Config

    async def post(self, path: str, body: Any, headers: dict[str, str] | None = None) -> Reply:
        """POST JSON (or raw bytes) and read the whole reply; a stream is judged
        (:meth:`judged`)."""
        all_headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        all_headers.update(headers or {})
        data = body if isinstance(body, bytes) else __import__("json").dumps(body).encode()
        async with self.session.post(
            self.url + path.lstrip("/"), data=data, headers=all_headers
        ) as resp:
            reply = Reply(resp.status, dict(resp.headers), await resp.read())
        request = body if path.strip("/") == "" and isinstance(body, dict) else None
        return self.judged(reply, request, all_headers)

    async def get(self, path: str, headers: dict[str, str] | None = None) -> Reply:
        """GET a route and read the whole reply; a stream is judged (:meth:`judged`)."""
        async with self.session.get(self.url + path.lstrip("/"), headers=headers or {}) as resp:
            reply = Reply(resp.status, dict(resp.headers), await resp.read())
        return self.judged(reply, None, headers or {})

    def advertised(self) -> str | None:
        """The profile this adapter serves, as its ``/capabilities`` and
        ``/health`` advertise it (read from the same ``Config.profile``, so
        that judging adds no request of its own to what a test observes);
        ``None`` while the adapter has no such setting. ``test_stream_hook``
        holds the two equal."""
        profile = getattr(self.config, "profile", None)
        return None if profile is None else str(getattr(profile, "value", profile))

    def judged(self, reply: Reply, request: dict[str, Any] | None, headers: dict[str, str]) -> Reply:
        """Every whole stream the adapter sends meets the AG-UI 1.0 checker in
        the profile it advertises. A re-attach after ``Last-Event-ID`` is the
        tail of a run (the adapter's own extension), judged by its test."""
        reply.advertised = self.advertised()
        reply.request = request
        is_stream = reply.headers.get("Content-Type", "").startswith("text/event-stream")
        if reply.status == 200 and is_stream and "Last-Event-ID" not in headers:
            judge(reply.body, advertised=reply.advertised, request=request)
        return reply

    async def run(self, body: dict[str, Any], headers: dict[str, str] | None = None) -> Reply:
        """POST a run to ``/``."""
        return await self.post("/", body, headers)

    async def close(self) -> None:
        await self.session.close()
        await self.runner.cleanup()


async def start_adapter(state_dir: Path, a2a_url: str | None, **config: Any) -> RunningAdapter:
    """Start ``create_app`` on a free port, served as ``python -m aguiadapter``
    serves it; the caller closes it."""
    cfg = Config(state_dir=state_dir, a2a_url=a2a_url, **config)
    app = create_app(cfg)
    runner = AdapterRunner(app, shutdown_timeout=1.0, header_timeout=cfg.header_timeout_seconds)
    await on_loopback(runner)
    port = runner.addresses[0][1]
    session = aiohttp.ClientSession()
    return RunningAdapter(f"http://127.0.0.1:{port}/", app, runner, session, cfg)


@contextlib.asynccontextmanager
async def started(root: Path, a2a_url: str | None, **config: Any) -> AsyncIterator[RunningAdapter]:
    """An adapter whose state is ``root/state`` and whose workspaces are under
    ``root/workspaces``, with ``config``; closed on exit."""
    running = await start_adapter(root / "state", a2a_url, allowed_cwds=(str(root / "workspaces"),), **config)
    try:
        yield running
    finally:
        await running.close()
