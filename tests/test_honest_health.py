"""A refused runtime token is told as such, never as a network outage:
``/health`` (``a2a.status``), the start-up line and the run's error."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from aguiadapter.demo.runtime import DemoRuntime
from tests.support.adapter import RunningAdapter, run_body, start_adapter
from tests.support.iac_runtime import free_port
from tests.support.serve import on_loopback, port_of


async def health(adapter: RunningAdapter) -> dict[str, Any]:
    async with adapter.session.get(adapter.url + "health") as resp:
        return dict(await resp.json())


@pytest.fixture
async def guarded() -> AsyncIterator[DemoRuntime]:
    """The demo runtime with a token of its own (its /health stays open)."""
    runtime = DemoRuntime(token="the-runtime-token")
    await runtime.start()
    try:
        yield runtime
    finally:
        await runtime.close()


async def test_a_refused_token_is_unauthorized_in_health_and_in_the_runs_error(
    tmp_path: Path, guarded: DemoRuntime, workspace: Path
) -> None:
    adapter = await start_adapter(tmp_path / "state", guarded.url, a2a_token="not-the-token",
                                  allowed_cwds=(str(tmp_path / "workspaces"),))
    try:
        # Its /health is open: nothing tells the token is wrong before a call needs it.
        assert (await health(adapter))["a2a"]["status"] == "ok"
        reply = await adapter.run(run_body(thread_id="t-401", text="hello", cwd=str(workspace)))
        error = reply.events()[-1]
        assert error["type"] == "RUN_ERROR" and error["code"] == "A2A_UNAVAILABLE"
        assert "credentials" in error["message"] and "unavailable" not in error["message"], error
        zh = await adapter.run(run_body(thread_id="t-401-zh", text="hello", cwd=str(workspace)),
                               headers={"Accept-Language": "zh-CN"})
        assert "凭据" in zh.events()[-1]["message"]
        body = await health(adapter)
        assert body["a2a"]["status"] == "unauthorized" and body["a2a"]["reachable"] is False
        assert body["status"] == "degraded"
    finally:
        await adapter.close()
    good = await start_adapter(tmp_path / "state", guarded.url, a2a_token="the-runtime-token",
                               allowed_cwds=(str(tmp_path / "workspaces"),))
    try:
        reply = await good.run(run_body(thread_id="t-ok", text="hello", cwd=str(workspace)))
        assert reply.events()[-1]["type"] == "RUN_FINISHED"
        assert (await health(good))["a2a"] | {"url": None} == {"url": None, "reachable": True, "status": "ok"}
    finally:
        await good.close()


async def test_a_runtime_whose_health_needs_the_token_is_unauthorized_from_the_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """As iac-code a2a: every route, /health included, answers 401 to a wrong token."""

    async def refuse(request: web.Request) -> web.Response:
        return web.json_response({"error": "Unauthorized"}, status=401)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", refuse)
    runner = web.AppRunner(app)
    await on_loopback(runner)
    port = port_of(runner)
    caplog.set_level(logging.WARNING, "aguiadapter")
    try:
        adapter = await start_adapter(tmp_path / "state", f"http://127.0.0.1:{port}/", a2a_token="wrong-token")
        try:
            body = await health(adapter)
            assert body["a2a"]["status"] == "unauthorized" and body["a2a"]["reachable"] is False
        finally:
            await adapter.close()
    finally:
        await runner.cleanup()
    (line,) = [record.getMessage() for record in caplog.records if "A2A runtime" in record.getMessage()]
    assert "refuses this server's token" in line and "does not answer" not in line, line
    assert "wrong-token" not in caplog.text


async def test_a_runtime_that_does_not_answer_is_unreachable(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "aguiadapter")
    adapter = await start_adapter(tmp_path / "state", f"http://127.0.0.1:{free_port()}/")
    try:
        body = await health(adapter)
        assert body["a2a"]["status"] == "unreachable" and body["a2a"]["reachable"] is False
        assert body["store"] == {"kind": "file", "reachable": True, "status": "ok", "durability": "fsync"}
    finally:
        await adapter.close()
    assert "does not answer" in caplog.text
