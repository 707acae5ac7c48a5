"""The browser example (examples/browser): a person's chat, in headless Chromium.

``examples/browser/serve.py`` builds one aiohttp app with the page and the
adapter under ``/agui/``; here it runs in-process in front of the ``demo``
fixture (so the test can count tool runs), and ``browser.mjs`` drives Debian's
chromium through ``playwright-core``: ``hello`` → the reply; ``permission
x.txt`` → Approve → the tool's result and the closing reply; a reload while
the approval waits (the page connects and shows the chat and the card again);
a connection broken mid-answer.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from aguiadapter.demo.runtime import DemoRuntime
from tests.support.flaky_link import flaky_link

from .conftest import HERE, run_node

EXAMPLE = HERE.parent.parent / "examples" / "browser"
BUNDLE = EXAMPLE / "static" / "agui-client.js"


def load_serve() -> ModuleType:
    spec = importlib.util.spec_from_file_location("browser_example_serve", EXAMPLE / "serve.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
async def page_url(tmp_path: Path, demo: DemoRuntime, workspace: Path) -> AsyncIterator[str]:
    """The example app on a free loopback port, in front of the demo fixture."""
    app = load_serve().build_app(state_dir=tmp_path / "state", workspace=workspace, a2a_url=demo.url)
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        await runner.cleanup()


async def test_a_person_chats_and_approves_a_permission(
    chromium: str, node: str, page_url: str, demo: DemoRuntime, tmp_path: Path
) -> None:
    screenshot = Path(os.environ.get("AGUI_INTEROP_SCREENSHOT") or tmp_path / "browser-example.png")
    job = {"url": page_url, "chromium": chromium, "userDataDir": str(tmp_path / "profile"), "screenshot": str(screenshot)}
    report = await run_node(node, HERE / "browser.mjs", job, timeout=150.0)
    assert report["error"] is None, f"{report['error']}\nsteps: {report['steps']}\npage: {report['transcript']}\nconsole: {report['console']}"
    assert report["steps"] == ["loaded", "hello answered", "interrupt shown", "approved and finished"]
    shown = [(item["role"], item["text"]) for item in report["transcript"]]
    roles = [role for role, _ in shown]
    assert roles == ["user", "assistant", "user", "assistant", "tool-call", "interrupt", "tool-result", "assistant"], shown
    assert shown[0] == ("user", "hello") and 'You said: "hello"' in shown[1][1]
    assert shown[4][1].startswith("write_file(") and '"path":"x.txt"' in shown[4][1]
    assert "Allow once?" in report["interrupt"] and "Approve" in report["interrupt"]
    assert "Successfully wrote" in shown[6][1] and "x.txt was written" in shown[7][1]
    assert sum(demo.state.tool_runs.values()) == 1
    # Offline and clean: every request went to the example server, nothing was logged.
    assert all(url.startswith(page_url) for url in report["requests"]), report["requests"]
    assert report["pageErrors"] == [] and report["console"] == []
    assert screenshot.stat().st_size > 10_000


def browser_job(url: str, chromium: str, tmp_path: Path, flow: str) -> dict[str, Any]:
    return {"url": url, "chromium": chromium, "userDataDir": str(tmp_path / f"profile-{flow}"),
            "screenshot": str(tmp_path / f"browser-{flow}.png"), "flow": flow}


def seen(item: dict[str, str]) -> tuple[str, Any]:
    """A line of the page; a tool call as its name and arguments (the history
    lists an argument object's keys in another order than the live stream)."""
    if item["role"] == "tool-call":
        name, _, args = item["text"].partition("(")
        return item["role"], (name, json.loads(args.removesuffix(")")))
    return item["role"], item["text"]


def failure(report: dict[str, Any]) -> str:
    return f"{report['error']}\nsteps: {report['steps']}\npage: {report['transcript']}\nconsole: {report['console']}"


async def test_a_reloaded_page_gets_the_chat_and_the_pending_approval_back_and_resumes_it(
    chromium: str, node: str, page_url: str, demo: DemoRuntime, tmp_path: Path
) -> None:
    report = await run_node(node, HERE / "browser.mjs", browser_job(page_url, chromium, tmp_path, "reload"),
                            timeout=150.0)
    assert report["error"] is None, failure(report)
    assert report["steps"] == ["loaded", "hello answered", "interrupt shown", "interrupt shown again after the reload",
                               "approved and finished"]
    assert "?thread=browser-" in report["url"]
    # The reloaded page connects (POST /agui/connect) and shows what it showed
    # before: the conversation from the snapshot, the card from the interrupt.
    before = [seen(item) for item in report["before"]]
    restored = [seen(item) for item in report["restored"]]
    assert [role for role, _ in before] == ["user", "assistant", "user", "assistant", "tool-call", "interrupt"], before
    assert restored == before
    assert "Allow once?" in report["interrupt"] and "Approve" in report["interrupt"]
    # Approve on the restored card: the resumed run goes on below it.
    shown = [(item["role"], item["text"]) for item in report["transcript"]]
    assert [role for role, _ in shown] == [role for role, _ in before] + ["tool-result", "assistant"], shown
    assert shown[3][1] == "I will write r.txt now." and shown[4][1].startswith("write_file(")
    assert "Successfully wrote" in shown[6][1] and "r.txt was written" in shown[7][1]
    assert sum(demo.state.tool_runs.values()) == 1
    assert sum(url.endswith("/agui/connect") for url in report["requests"]) == 1, "one connect, after the reload"
    assert report["pageErrors"] == [] and report["console"] == []


async def test_a_page_reloaded_while_the_agent_answers_gets_the_answer_live_to_its_end(
    chromium: str, node: str, page_url: str, demo: DemoRuntime, tmp_path: Path
) -> None:
    report = await run_node(node, HERE / "browser.mjs", browser_job(page_url, chromium, tmp_path, "reload-running"),
                            timeout=150.0)
    assert report["error"] is None, failure(report)
    assert report["steps"] == ["loaded", "answer streaming", "reloaded", "answer complete"]
    # The snapshot stops at the run's user message; the run streams on from its start: every delta once.
    shown = [(item["role"], item["text"]) for item in report["transcript"]]
    assert shown == [("user", "slow 3"), ("assistant", "".join(f"tick {n}. " for n in range(1, 16)))], shown
    assert len(demo.state.tasks) == 1 and demo.state.total_cancel_calls == 0, "one run, never cancelled"
    assert sum(url.endswith("/agui/connect") for url in report["requests"]) == 1
    assert report["pageErrors"] == [] and report["console"] == [], report["console"]


async def test_a_dropped_connection_resumes_the_answer_in_the_page(
    chromium: str, node: str, tmp_path: Path, demo: DemoRuntime, workspace: Path
) -> None:
    app = load_serve().build_app(state_dir=tmp_path / "state", workspace=workspace, a2a_url=demo.url)
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        async with flaky_link(runner.addresses[0][1], b"tick 6.") as link:
            url = f"http://127.0.0.1:{link.port}/"
            report = await run_node(node, HERE / "browser.mjs", browser_job(url, chromium, tmp_path, "drop"),
                                    timeout=150.0)
            assert link.cut.is_set(), "the connection broke mid-answer"
    finally:
        await runner.cleanup()
    assert report["error"] is None, failure(report)
    assert report["steps"] == ["loaded", "connection lost", "answer complete"]
    shown = [(item["role"], item["text"]) for item in report["transcript"]]
    assert [role for role, _ in shown] == ["user", "assistant", "note"], shown
    assert shown[1][1] == "".join(f"tick {n}. " for n in range(1, 16)), "every delta once, in order"
    assert len(demo.state.tasks) == 1 and demo.state.total_cancel_calls == 0, "one run, never cancelled"
    reattached = [u for u in report["requests"] if "/events" in u]
    assert len(reattached) == 1 and "/agui/threads/browser-" in reattached[0]
    # The browser's own word for the broken stream, and nothing from the page.
    assert report["pageErrors"] == []
    (broken,) = report["console"]
    assert broken["type"] == "error" and broken["text"].startswith("Failed to load resource: net::ERR_"), broken


async def test_serve_py_runs_on_its_own_with_the_embedded_runtime(tmp_path: Path) -> None:
    """``python examples/browser/serve.py --port 0``: page, bundle and adapter, then a clean Ctrl-C."""
    workspace = tmp_path / "ws"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(EXAMPLE / "serve.py"), "--port", "0",
        "--state-dir", str(tmp_path / "state"), "--workspace", str(workspace),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    assert proc.stdout is not None
    try:
        url = ""
        while not url:
            line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
            assert line, "serve.py exited before it listened"
            if line.startswith("browser example on "):
                url = line.split(" on ", 1)[1].strip()
        async with aiohttp.ClientSession() as session:
            async with session.get(url) as resp:
                page = await resp.text()
                assert resp.status == 200 and '<script type="module" src="/static/app.js">' in page
            async with session.get(url + "static/agui-client.js") as resp:
                assert resp.status == 200 and "javascript" in resp.headers["Content-Type"]
                assert (await resp.read()) == BUNDLE.read_bytes()
            async with session.get(url + "config.json") as resp:
                assert await resp.json() == {"aguiUrl": "/agui/", "cwd": str(workspace.resolve())}
            async with session.get(url + "agui/health") as resp:
                health = await resp.json()
                assert health["protocolVersion"] == "1.0" and health["a2a"]["reachable"] is True
            run = {
                "threadId": "serve-1", "runId": "run-1", "messages": [{"id": "m1", "role": "user", "content": "hello"}],
                "state": {}, "tools": [], "context": [],
                "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "i-1", "cwd": str(workspace.resolve())}},
            }
            async with session.post(url + "agui/", json=run, headers={"Accept": "text/event-stream"}) as resp:
                body = await resp.text()
                assert resp.status == 200 and '"type":"RUN_FINISHED"' in body
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)
        code = await asyncio.wait_for(proc.wait(), 15)
    assert code == 0


async def test_the_committed_bundle_is_the_lockfiles_client(node: str, tmp_path: Path) -> None:
    """``node tests/interop/build-browser.mjs`` reproduces static/agui-client.js byte for byte."""
    out = tmp_path / "agui-client.js"
    proc = await asyncio.create_subprocess_exec(
        node, str(HERE / "build-browser.mjs"), str(out), cwd=str(HERE),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    assert out.read_bytes() == BUNDLE.read_bytes(), "rebuild it: node tests/interop/build-browser.mjs"
