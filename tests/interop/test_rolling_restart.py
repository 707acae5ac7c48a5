"""A rolling restart under the browser example: the page keeps the whole reply.

Two adapter processes share one redis-server (the replica suite's harness),
behind a load balancer that sends each request to the first replica that
takes it (a refused connection or a 503, what a draining replica answers,
passes it on to the next). The page is examples/browser's, in headless
Chromium, whose agent is ``AdapterHttpAgent`` of ``@aguiadapter/client``
(clients/js). While the demo runtime's reply streams slowly, the replica
serving it gets SIGTERM with a disconnect grace: it ends the page's stream
cleanly, with no terminal event. A plain ``HttpAgent`` would resolve there
and keep the cut-off text; the page re-attaches with ``Last-Event-ID``, the
load balancer takes it to the other replica, which adopts the run, and the
page shows the whole reply, once, as one message: exactly the text of the
run's event log, to its last delta.

(The log itself may miss a delta the runtime sent while the replicas
handed the run over: see "Rolling restarts" in docs/deployment.md;
tests/replicas/test_reattach_replicas.py is where that is the question.)
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from aguiadapter.demo.runtime import DemoRuntime
from tests.replicas.redis_server import RedisServer
from tests.replicas.replicas import Replica
from tests.support.agui import check_stream, texts

from .conftest import HERE, run_node
from .test_browser import browser_job, failure, load_serve

#: What a request takes to the replica and what comes back from it.
FORWARDED = ("Content-Type", "Accept", "Accept-Language", "Last-Event-ID", "Authorization")
RETURNED = ("Content-Type", "Cache-Control", "Retry-After")


class Balancer:
    """``/agui/*`` of the page, spread over the replicas in their order (a
    failover pool), each answer streamed through as it comes. Once a run's
    stream carried ``cue``, the replica relaying it gets SIGTERM: the
    rolling restart reaches it mid-answer."""

    def __init__(self, replicas: list[Replica], cue: bytes) -> None:
        self.replicas = replicas
        self.cue = cue
        #: (method, path, the replica that answered) of every request passed on.
        self.served: list[tuple[str, str, str]] = []
        self.stopped: Replica | None = None
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None), auto_decompress=False)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {name: request.headers[name] for name in FORWARDED if name in request.headers}
        path = "/" + request.match_info["tail"]
        for replica in self.replicas:
            url = replica.url.rstrip("/") + request.rel_url.with_path(path).path_qs
            try:
                upstream = await self.session.request(request.method, url, data=body or None, headers=headers)
            except aiohttp.ClientConnectionError:
                continue  # stopped already: the next one
            if upstream.status == 503:
                upstream.release()
                continue  # draining: the next one
            self.served.append((request.method, path, replica.name))
            return await self._relay(request, upstream, replica)
        return web.Response(status=502, text="no replica takes requests")

    async def _relay(
        self, request: web.Request, upstream: aiohttp.ClientResponse, replica: Replica
    ) -> web.StreamResponse:
        answer = web.StreamResponse(
            status=upstream.status, headers={name: upstream.headers[name] for name in RETURNED if name in upstream.headers}
        )
        await answer.prepare(request)
        seen = b""
        try:
            async for chunk in upstream.content.iter_any():
                await answer.write(chunk)
                if self.stopped is None and request.method == "POST":
                    seen = seen[-64:] + chunk
                    if self.cue in seen:
                        assert replica.process is not None
                        self.stopped = replica
                        replica.process.send_signal(signal.SIGTERM)
        except aiohttp.ClientPayloadError:
            pass  # the replica went away mid-answer: so does this answer
        finally:
            upstream.release()
        await answer.write_eof()
        return answer

    async def close(self) -> None:
        await self.session.close()


@pytest.fixture
async def redis_server(tmp_path: Path) -> AsyncIterator[RedisServer]:
    server = RedisServer(tmp_path / "redis")
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def replicas(tmp_path: Path, demo: DemoRuntime, redis_server: RedisServer) -> AsyncIterator[list[Replica]]:
    """Two adapter processes on the redis-server, in front of the demo runtime,
    each keeping a run whose client left for 20 s (the handover's window)."""
    options = ("--allowed-cwd", str(tmp_path / "workspaces"), "--disconnect-grace-seconds", "20")
    started = [
        Replica(name, tmp_path / "replicas", redis_server.url, demo.url, *options) for name in ("old", "new")
    ]
    try:
        await asyncio.gather(*(replica.start() for replica in started))
        yield started
    finally:
        await asyncio.gather(*(replica.stop() for replica in started))
        for replica in started:
            print(f"----- {replica.name} ({replica.url})\n{replica.log()}")


async def test_a_rolling_restart_mid_answer_leaves_the_whole_reply_on_the_page_once(
    chromium: str, node: str, tmp_path: Path, demo: DemoRuntime, workspace: Path, replicas: list[Replica]
) -> None:
    old, new = replicas
    balancer = Balancer(replicas, cue=b"tick 3.")
    app = web.Application()
    load_serve().add_page(app, workspace)
    app.router.add_route("*", "/agui/{tail:.*}", balancer.handle)
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/"
    try:
        report = await run_node(node, HERE / "browser.mjs", browser_job(url, chromium, tmp_path, "rolling"),
                                timeout=150.0)
    finally:
        await runner.cleanup()
        await balancer.close()
    assert balancer.stopped is old, "the replica serving the answer got SIGTERM mid-answer"
    assert report["error"] is None, failure(report)
    assert report["steps"] == ["loaded", "stream ended early", "answer complete"]
    shown = [(item["role"], item["text"]) for item in report["transcript"]]
    # The reply in one message (one bubble), then the page's note.
    assert [role for role, _ in shown] == ["user", "assistant", "note"], shown
    assert shown[0] == ("user", "slow 6"), shown
    # The run went to the old replica; its re-attach to the new one.
    runs = [(method, name) for method, path, name in balancer.served if not path.endswith("/events")]
    reattached = [path for _, path, name in balancer.served if path.endswith("/events") and name == "new"]
    assert runs == [("POST", "old")] and len(reattached) == 1, balancer.served
    assert all(name == "new" for _, path, name in balancer.served if path.endswith("/events")), balancer.served
    # The page holds the whole reply the run streamed, every delta once, in
    # order, to its last: the run's event log, read from its start.
    async with aiohttp.ClientSession() as session:
        async with session.get(new.url + reattached[0].lstrip("/"), headers={"Accept": "text/event-stream"}) as resp:
            assert resp.status == 200
            logged = texts(check_stream(await resp.read()))
    assert shown[1][1] == logged, (shown[1][1], logged)
    assert logged.startswith("tick 1. tick 2. tick 3. ") and logged.endswith("tick 29. tick 30. "), logged
    assert len(demo.state.tasks) == 1 and demo.state.total_cancel_calls == 0, "one runtime task, never cancelled"
    assert old.process is not None and await asyncio.to_thread(old.process.wait, 15) == 0
    # A clean end of the stream is no error to the browser; the page logged nothing.
    assert report["pageErrors"] == [] and report["console"] == [], report["console"]
