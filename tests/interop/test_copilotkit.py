"""The CopilotKit example (examples/copilotkit), driven as a person would.

CopilotKit's own pieces, at the versions its lockfile pins: the runtime
(``@copilotkit/runtime`` 1.75, an ``HttpAgent`` of ``@ag-ui/client`` 0.0.59
pointed at the adapter) and its React chats (``@copilotkit/react-core`` and
``react-ui`` 1.74), in headless Chromium through ``copilotkit.mjs``. The page
is built from the lockfile by the example's ``build.mjs``; nothing is
downloaded but the npm packages, and no browser at all.

Between the CopilotKit runtime and the adapter sits a recording proxy, so the
tests also pin what CopilotKit sends: the whole history, no
``protocolVersion``, and, without the example's middleware, the resume under
the interrupted run's own ``runId`` (CopilotKit/CopilotKit#6999), which the
adapter refuses with ``RUN_ID_CONFLICT`` and a message that says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import attrs
import pytest
from aiohttp import web

from aguiadapter.demo.runtime import DemoRuntime
from tests.support.adapter import RunningAdapter
from tests.support.agui import judge

from .conftest import HERE, missing, run_node

EXAMPLE = HERE.parent.parent / "examples" / "copilotkit"
EXAMPLE_MODULES = EXAMPLE / "node_modules"
DRIVER = HERE / "copilotkit.mjs"


@pytest.fixture(scope="session")
def node_for_copilotkit(node: str) -> str:
    """``node``, once ``examples/copilotkit/node_modules`` is installed too."""
    for package in ("@copilotkit/runtime", "@copilotkit/react-core", "@copilotkit/react-ui", "esbuild"):
        if not (EXAMPLE_MODULES / package / "package.json").exists():
            missing(f"examples/copilotkit/node_modules/{package}", "node-modules")
    return node


@pytest.fixture(scope="session")
def pages(node_for_copilotkit: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example's pages, built once per session from its lockfile (``node build.mjs DIR``)."""
    dist = tmp_path_factory.mktemp("copilotkit-dist")
    built = subprocess.run(
        [node_for_copilotkit, str(EXAMPLE / "build.mjs"), str(dist)],
        cwd=EXAMPLE, capture_output=True, text=True, timeout=180, check=False,
    )
    assert built.returncode == 0, built.stderr
    assert (dist / "v2.js").exists() and (dist / "classic.js").exists(), built.stdout
    return dist


@attrs.define
class Exchange:
    """One request the CopilotKit runtime sent to the adapter, and the answer."""

    path: str  # "/" (a run) or "/connect" (a page that mounts with its threadId)
    body: dict[str, Any]
    headers: dict[str, str]
    status: int
    reply: bytes
    content_type: str = ""

    def error(self) -> dict[str, Any]:
        error: dict[str, Any] = json.loads(self.reply)["error"]
        return error


@pytest.fixture
async def recorded(adapter: RunningAdapter) -> AsyncIterator[tuple[str, list[Exchange]]]:
    """A pass-through proxy in front of the adapter that keeps every request and its answer.

    Every whole stream it passed on meets the AG-UI 1.0 stream checker, in the
    profile the adapter serves, once the test is done with them."""
    exchanges: list[Exchange] = []
    session = aiohttp.ClientSession()

    async def forward(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {name: value for name, value in request.headers.items()
                   if name.lower() in ("content-type", "accept", "accept-language", "authorization")}
        path = "/" + request.match_info["tail"]
        async with session.post(adapter.url + path.lstrip("/"), data=body, headers=headers) as upstream:
            response = web.StreamResponse(status=upstream.status,
                                          headers={"Content-Type": upstream.headers["Content-Type"]})
            await response.prepare(request)
            reply = bytearray()
            async for chunk in upstream.content.iter_any():
                reply += chunk
                await response.write(chunk)
            exchanges.append(Exchange(path, json.loads(body), dict(request.headers), upstream.status, bytes(reply),
                                      upstream.headers["Content-Type"]))
            await response.write_eof()
            return response

    app = web.Application()
    app.router.add_post("/{tail:(connect)?}", forward)
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/", exchanges
    finally:
        await runner.cleanup()
        await session.close()
    for exchange in exchanges:
        if exchange.status == 200 and exchange.content_type.startswith("text/event-stream"):
            judge(exchange.reply, advertised=adapter.advertised(), request=exchange.body if exchange.path == "/" else None)


@contextlib.asynccontextmanager
async def example_server(node: str, pages: Path, agui_url: str, workspace: Path, *options: str) -> AsyncIterator[str]:
    """``node server.mjs`` on a free loopback port: the CopilotKit runtime and the pages."""
    proc = await asyncio.create_subprocess_exec(
        node, str(EXAMPLE / "server.mjs"), "--agui-url", agui_url, "--port", "0",
        "--cwd", str(workspace), "--dist", str(pages), *options,
        cwd=str(EXAMPLE), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    assert proc.stdout is not None
    output: list[str] = []
    url = ""
    drainer: asyncio.Task[None] | None = None
    try:
        while not url:
            line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
            assert line, "server.mjs exited before it listened:\n" + "".join(output)
            output.append(line)
            if line.startswith("copilotkit example on "):
                url = line.split(" on ", 1)[1].strip()

        async def drain() -> None:
            assert proc.stdout is not None
            while line := await proc.stdout.readline():
                output.append(line.decode())

        drainer = asyncio.create_task(drain())
        yield url
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 15)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
        if drainer is not None:
            await drainer


async def chat(node: str, chromium: str, url: str, ui: str, tmp_path: Path, **job: Any) -> dict[str, Any]:
    """Run ``copilotkit.mjs`` against the page; returns what it saw."""
    screenshot = Path(os.environ.get("AGUI_INTEROP_SCREENSHOT") or tmp_path / f"copilotkit-{ui}.png")
    payload = {"url": url, "ui": ui, "chromium": chromium, "userDataDir": str(tmp_path / f"profile-{ui}"),
               "screenshot": str(screenshot), **job}
    return await run_node(node, DRIVER, payload, timeout=180.0)


def runs(exchanges: list[Exchange]) -> list[Exchange]:
    """The runs among the requests (not the connects)."""
    return [exchange for exchange in exchanges if exchange.path == "/"]


def shown(report: dict[str, Any], role: str) -> list[str]:
    return [item["text"] for item in report["transcript"] if item["role"] == role]


@pytest.mark.parametrize("ui", ["v2", "classic"])
async def test_a_person_chats_uses_a_tool_approves_and_goes_on_through_copilotkit(
    ui: str,
    node_for_copilotkit: str,
    chromium: str,
    pages: Path,
    recorded: tuple[str, list[Exchange]],
    demo: DemoRuntime,
    workspace: Path,
    tmp_path: Path,
) -> None:
    agui_url, exchanges = recorded
    async with example_server(node_for_copilotkit, pages, agui_url, workspace) as url:
        async with aiohttp.ClientSession() as session, session.get(url + "api/copilotkit/info") as resp:
            info = await resp.json()
        page = url if ui == "v2" else url + "classic"
        report = await chat(node_for_copilotkit, chromium, page, ui, tmp_path)

    assert report["error"] is None, (
        f"{report['error']}\nsteps: {report['steps']}\npage: {report['transcript']}\nconsole: {report['console']}"
    )
    assert report["steps"] == [
        "loaded", "hello answered", "tool answered", "approval shown", "approved and finished", "second turn answered",
    ]
    # What the person saw: the replies, both tool cards with their results, no card left open.
    assert shown(report, "user") == ["hello", "tool", "permission x.txt", "hello again"]
    replies = "\n".join(shown(report, "assistant"))
    assert 'You said: "hello"' in replies and "The workspace holds README.md and main.tf." in replies
    assert "Done: x.txt was written." in replies and 'You said: "hello again"' in replies
    listing, writing = shown(report, "tool")
    assert listing.startswith('list_files({"path":"."})') and "README.md" in listing
    assert writing.startswith('write_file({"path":"x.txt"') and f"Successfully wrote 1 lines to {workspace}/x.txt" in writing
    assert "Approve" in report["approval"] and "Deny" in report["approval"]
    assert shown(report, "approval") == [] and shown(report, "error") == []
    # What the approval did: the demo runtime ran the tool, once.
    assert demo.state.tool_runs["write_file"] == 1

    # What CopilotKit sent: four turns and one resume, each a new runId on one thread.
    exchanges = runs(exchanges)
    assert [exchange.status for exchange in exchanges] == [200] * 5
    bodies = [exchange.body for exchange in exchanges]
    assert len({body["threadId"] for body in bodies}) == 1
    assert len({body["runId"] for body in bodies}) == 5
    interrupted, resume = bodies[2], bodies[3]
    (interrupt,) = json.loads(_last_event(exchanges[2].reply))["outcome"]["interrupts"]
    assert resume["resume"] == [
        {"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "allow_once"}}
    ]
    assert resume["runId"] != interrupted["runId"]  # the example's middleware gave it its own
    # CopilotKit's convention for a tool_call interrupt: the answer goes into the
    # history as the call's result, and stays its only result (ours is dropped).
    decision = {"role": "tool", "toolCallId": interrupt["toolCallId"], "content": '{"decision":"allow_once"}'}
    assert {k: v for k, v in resume["messages"][-1].items() if k != "id"} == decision
    results = [m for m in bodies[4]["messages"] if m.get("toolCallId") == interrupt["toolCallId"]]
    assert [{k: v for k, v in m.items() if k != "id"} for m in results] == [decision]
    # The whole history every time, never a protocolVersion, the properties as forwardedProps.
    users = [[m["content"] for m in body["messages"] if m["role"] == "user"] for body in bodies]
    assert users == [
        ["hello"], ["hello", "tool"], ["hello", "tool", "permission x.txt"],
        ["hello", "tool", "permission x.txt"], ["hello", "tool", "permission x.txt", "hello again"],
    ]
    assert all("protocolVersion" not in body and body["tools"] == [] for body in bodies)
    # Not the browser's language: Node's fetch default. Hence preferredLanguage.
    assert {exchange.headers.get("Accept-Language") for exchange in exchanges} == {"*"}
    (iac,) = {json.dumps(body["forwardedProps"]["iacCode"], sort_keys=True) for body in bodies}
    assert json.loads(iac) == {"schemaVersion": 1, "rosInvocationId": json.loads(iac)["rosInvocationId"],
                               "cwd": str(workspace), "preferredLanguage": "en-US"}

    # Offline and clean: the page asked only its own server, logged no error, and
    # CopilotKit's checks of our streams found nothing to complain about.
    assert all(request.startswith(url) for request in report["requests"]), report["requests"]
    assert report["pageErrors"] == []
    assert [line for line in report["console"] if line["type"] in ("error", "warning")] == []
    assert info["agents"] == {"default": info["agents"]["default"]} and info["telemetryDisabled"] is True


@pytest.mark.parametrize("ui", ["v2", "classic"])
async def test_a_reloaded_page_gets_the_chat_and_the_approval_back_and_the_approval_completes(
    ui: str,
    node_for_copilotkit: str,
    chromium: str,
    pages: Path,
    recorded: tuple[str, list[Exchange]],
    demo: DemoRuntime,
    workspace: Path,
    tmp_path: Path,
) -> None:
    """The page keeps its thread in its URL; reloaded, CopilotChat connects, the
    example's AdapterHistoryRunner asks the adapter (POST /connect), and the
    chat shows the conversation and the approval card again."""
    agui_url, exchanges = recorded
    async with example_server(node_for_copilotkit, pages, agui_url, workspace) as url:
        page = url if ui == "v2" else url + "classic"
        report = await chat(node_for_copilotkit, chromium, page, ui, tmp_path, flow="reload")

    assert report["error"] is None, (
        f"{report['error']}\nsteps: {report['steps']}\npage: {report['transcript']}\nconsole: {report['console']}"
    )
    assert report["steps"] == [
        "loaded", "hello answered", "approval shown", "approval shown again after the reload", "approved and finished",
    ]
    # What the person sees after the reload: the same chat, the same card.
    assert [item["role"] for item in report["restored"]] == [item["role"] for item in report["before"]]
    assert shown({"transcript": report["restored"]}, "user") == ["hello", "permission x.txt"]
    assert shown({"transcript": report["restored"]}, "approval") == shown({"transcript": report["before"]}, "approval")
    assert "Approve" in report["approval"] and "x.txt" in report["approval"]
    # Then the approval completes, once.
    writing = shown(report, "tool")[-1]  # the restored call: its arguments' keys in the history's order
    assert writing.startswith("write_file(") and '"path":"x.txt"' in writing and "Successfully wrote" in writing
    assert "Done: x.txt was written." in "\n".join(shown(report, "assistant"))
    assert demo.state.tool_runs["write_file"] == 1
    assert shown(report, "approval") == [] and shown(report, "error") == []

    # What went to the adapter: the two turns (the classic chat connects when
    # it first mounts too, to a thread the adapter does not know: 404, nothing
    # restored; the v2 chat has no thread to connect to yet), the connects of
    # the reloaded page (CopilotChat may connect more than once while it
    # mounts, keeping the last), the resume.
    kinds = [(exchange.path, exchange.status) for exchange in exchanges]
    at = [index for index, kind in enumerate(kinds) if kind[0] == "/"]
    assert len(at) == 3 and at[1] == at[0] + 1 and at[2] == len(kinds) - 1, kinds
    first_visit = set(kinds[: at[0]])
    assert first_visit == (set() if ui == "v2" else {("/connect", 404)}), kinds
    assert at[2] > at[1] + 1 and set(kinds[at[1] + 1 : at[2]]) == {("/connect", 200)}, kinds
    assert all(status == 200 for path, status in kinds if path == "/")
    # One thread, the one in the page's address; one rosInvocationId, after the reload too.
    thread_id = exchanges[at[0]].body["threadId"]
    assert report["url"].endswith(f"?thread={thread_id}")
    assert {exchange.body["threadId"] for exchange in exchanges[at[0]:]} == {thread_id}
    interrupted, resume = exchanges[at[1]], exchanges[at[2]]
    (interrupt,) = json.loads(_last_event(interrupted.reply))["outcome"]["interrupts"]
    for hydrate in exchanges[at[1] + 1 : at[2]]:
        events = [json.loads(line.removeprefix("data:")) for line in hydrate.reply.decode().splitlines()
                  if line.startswith("data:")]
        assert [event["type"] for event in events] == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
        assert events[-1]["outcome"] == {"type": "interrupt", "interrupts": [interrupt]}
    assert resume.body["resume"] == [
        {"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "allow_once"}}
    ]
    invocations = {exchange.body["forwardedProps"]["iacCode"]["rosInvocationId"] for exchange in runs(exchanges)}
    assert len(invocations) == 1, "the resume carries the interrupted turn's rosInvocationId"
    assert report["pageErrors"] == []
    assert [line for line in report["console"] if line["type"] in ("error", "warning")] == []


async def test_without_the_middleware_copilotkit_resumes_under_the_interrupted_runs_id(
    node_for_copilotkit: str,
    chromium: str,
    pages: Path,
    recorded: tuple[str, list[Exchange]],
    demo: DemoRuntime,
    workspace: Path,
    tmp_path: Path,
) -> None:
    """The negative control: the upstream bug is still there, and our refusal explains it.

    When a CopilotKit release with the fix of CopilotKit/CopilotKit#6999 is
    pinned, this test fails: then the example's middleware can go.
    """
    agui_url, exchanges = recorded
    async with example_server(node_for_copilotkit, pages, agui_url, workspace, "--no-resume-middleware") as url:
        report = await chat(node_for_copilotkit, chromium, url, "v2", tmp_path, expectRefusal=True, locale="zh-CN")

    assert report["error"] is None, f"{report['error']}\nsteps: {report['steps']}\npage: {report['transcript']}"
    assert report["steps"] == ["loaded", "approval shown", "approved, answer sent"]
    interrupted, resume = runs(exchanges)
    assert resume.body["resume"] and resume.body["runId"] == interrupted.body["runId"]
    assert resume.status == 409
    error = resume.error()
    assert error["code"] == "RUN_ID_CONFLICT"
    assert "新的 runId" in error["message"] and "docs/front-ends.md" in error["message"]
    # The tool never ran; the person is left with the card and no result.
    assert demo.state.tool_runs["write_file"] == 0
    assert report["approvalOpen"] is True
    # What the person and the developer are told: the adapter's message, in the
    # browser's language (preferredLanguage), on the page and in the console.
    (banner,) = shown(report, "error")
    assert "RUN_ID_CONFLICT" in banner and "CopilotKit" in banner and "runId" in banner
    assert "Resume 是一个新的 run" in banner, banner
    logged = [line["text"] for line in report["console"] if line["type"] == "error"]
    assert any("RUN_ID_CONFLICT" in text and "docs/front-ends.md" in text for text in logged), logged
    assert not any("Successfully wrote" in text for text in shown(report, "tool"))


async def test_a_question_answered_cancel_ends_quietly_and_the_chat_goes_on(
    node_for_copilotkit: str,
    chromium: str,
    pages: Path,
    recorded: tuple[str, list[Exchange]],
    workspace: Path,
    tmp_path: Path,
) -> None:
    """AG-UI 1.0's cancelled outcome, read by CopilotKit through the example's shim.

    The adapter ends the cancelled question's run ``RUN_FINISHED`` with
    ``outcome: {"type": "cancelled"}`` (the recording proxy sees it as sent);
    the page shows no error, the card goes, and the next message is answered.
    """
    agui_url, exchanges = recorded
    async with example_server(node_for_copilotkit, pages, agui_url, workspace) as url:
        report = await chat(node_for_copilotkit, chromium, url, "v2", tmp_path, flow="cancel-question")

    assert report["error"] is None, (
        f"{report['error']}\nsteps: {report['steps']}\npage: {report['transcript']}\nconsole: {report['console']}"
    )
    assert report["steps"] == ["loaded", "question shown", "question cancelled", "next turn answered"]
    assert shown({"transcript": report["afterCancel"]}, "error") == []
    assert shown({"transcript": report["afterCancel"]}, "approval") == []
    assert shown(report, "user") == ["question", "hello again"]
    assert 'You said: "hello again"' in "\n".join(shown(report, "assistant"))
    asked, cancelled, again = runs(exchanges)
    (interrupt,) = json.loads(_last_event(asked.reply))["outcome"]["interrupts"]
    assert cancelled.body["resume"] == [{"interruptId": interrupt["id"], "status": "cancelled"}]
    assert json.loads(_last_event(cancelled.reply))["outcome"] == {"type": "cancelled"}
    assert again.status == 200 and json.loads(_last_event(again.reply))["outcome"] == {"type": "success"}
    assert report["pageErrors"] == []
    assert [line for line in report["console"] if line["type"] in ("error", "warning")] == []


async def test_without_the_shim_copilotkit_fails_the_cancelled_outcome(
    node_for_copilotkit: str,
    chromium: str,
    pages: Path,
    recorded: tuple[str, list[Exchange]],
    workspace: Path,
    tmp_path: Path,
) -> None:
    """The negative control: CopilotKit's @ag-ui/client 0.0.59 rejects the 1.0 outcome.

    When a CopilotKit release that knows the cancelled outcome is pinned, this
    test fails: then examples/copilotkit/cancelled-outcome.mjs can go.
    """
    agui_url, exchanges = recorded
    async with example_server(node_for_copilotkit, pages, agui_url, workspace, "--no-cancelled-outcome-shim") as url:
        report = await chat(node_for_copilotkit, chromium, url, "v2", tmp_path, flow="cancel-question",
                            stopAfterCancel=True)

    assert report["error"] is None, report["error"]
    assert report["steps"] == ["loaded", "question shown", "question cancelled"]
    _, cancelled = runs(exchanges)
    assert json.loads(_last_event(cancelled.reply))["outcome"] == {"type": "cancelled"}
    # What the person is shown instead of a quiet end: CopilotKit's schema error.
    (banner,) = shown({"transcript": report["afterCancel"]}, "error")
    assert "Expected 'success' | 'interrupt'" in banner, banner


async def test_an_attachment_the_adapter_cannot_use_is_named_and_the_chat_goes_on(
    node_for_copilotkit: str,
    chromium: str,
    pages: Path,
    recorded: tuple[str, list[Exchange]],
    workspace: Path,
    tmp_path: Path,
) -> None:
    """AG-UI 1.0: an SVG attached in CopilotKit's chat is skipped, not fatal.

    CopilotKit sends it inline as an image part; the adapter answers the text,
    and its ``iac-code.input.skipped.v1`` notice reaches the page through
    CopilotKit's runtime, which shows it; the next message is answered.
    """
    agui_url, exchanges = recorded
    async with example_server(node_for_copilotkit, pages, agui_url, workspace) as url:
        report = await chat(node_for_copilotkit, chromium, url, "v2", tmp_path, flow="attachment")

    assert report["error"] is None, (
        f"{report['error']}\nsteps: {report['steps']}\npage: {report['transcript']}\nconsole: {report['console']}"
    )
    assert report["steps"] == ["loaded", "attachment answered", "next turn answered"]
    assert "image/svg+xml" in report["skipped"] and "PNG, JPEG, GIF or WebP" in report["skipped"]
    assert shown({"transcript": report["afterAttachment"]}, "error") == []
    assert shown(report, "error") == [] and shown(report, "skipped") == []  # the next run starts clean
    attached, again = runs(exchanges)
    parts = attached.body["messages"][-1]["content"]
    assert [part["type"] for part in parts] == ["text", "image"], parts
    assert parts[1]["source"]["type"] == "data" and parts[1]["source"]["mimeType"] == "image/svg+xml"
    events = [json.loads(line.removeprefix("data:")) for line in attached.reply.decode().splitlines()
              if line.startswith("data:")]
    assert events[1]["name"] == "iac-code.input.skipped.v1"
    assert events[1]["value"]["parts"] == [
        {"index": 1, "type": "image", "source": "data", "mimeType": "image/svg+xml", "reason": "unsupported_image_type"}
    ]
    assert events[-1]["outcome"] == {"type": "success"} and again.status == 200
    assert report["pageErrors"] == []
    assert [line for line in report["console"] if line["type"] in ("error", "warning")] == []


def _last_event(stream: bytes) -> str:
    """The JSON of the last ``data:`` line of an SSE body."""
    lines = [line for line in stream.decode().splitlines() if line.startswith("data:")]
    return lines[-1].removeprefix("data:").strip()
