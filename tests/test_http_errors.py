"""Every error code of a run, through HTTP, in English and in Chinese."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from aguiadapter.a2a.client import A2AClient
from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.threads.record import ThreadRecord
from aguiadapter.store.file.store import FileThreadStore
from aguiadapter.store.contract import PersistenceError, Saved
from tests.support.adapter import Reply, RunningAdapter, run_body, start_adapter
from tests.support.stops import assert_stopped
from tests.support.serve import on_loopback

CJK = re.compile(r"[\u4e00-\u9fff]")
LANGUAGES = ["en", "zh-CN"]


@pytest.fixture(params=LANGUAGES)
def language(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def expect_http_error(reply: Reply, status: int, code: str, language: str) -> str:
    """The reply is an HTTP JSON error (no stream) in the caller's language."""
    assert reply.status == status, reply.body
    assert reply.headers["Content-Type"].startswith("application/json")
    error = reply.json()["error"]
    assert error["code"] == code
    assert bool(CJK.search(error["message"])) is (language == "zh-CN"), error["message"]
    return str(error["message"])


def expect_run_error(reply: Reply, code: str, language: str) -> dict[str, Any]:
    """The stream opened and ended with one ``RUN_ERROR`` of that code."""
    events = reply.events()
    error = events[-1]
    assert error["type"] == "RUN_ERROR" and error["code"] == code, events
    assert bool(CJK.search(error["message"])) is (language == "zh-CN"), error["message"]
    return error


def lang_header(language: str) -> dict[str, str]:
    return {"Accept-Language": "zh-CN,zh;q=0.9" if language == "zh-CN" else "en-US,en;q=0.8"}


def body(workspace: Path, text: str = "hello", thread_id: str | None = None, **kw: Any) -> dict[str, Any]:
    return run_body(thread_id=thread_id or f"t-{uuid.uuid4()}", text=text, cwd=str(workspace), **kw)


# ------------------------------------------------------------ before the stream
async def test_unauthorized(tmp_path: Path, demo: DemoRuntime, workspace: Path, language: str) -> None:
    running = await start_adapter(tmp_path / "s", demo.url, auth_token="s3cret")
    try:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic s3cret"}):
            reply = await running.run(body(workspace), {**lang_header(language), **headers})
            expect_http_error(reply, 401, "UNAUTHORIZED", language)
        ok = await running.run(body(workspace), {"Authorization": "Bearer s3cret"})
        assert ok.status == 200
    finally:
        await running.close()


async def test_unsupported_media_type(adapter: RunningAdapter, workspace: Path, language: str) -> None:
    reply = await adapter.post("/", json.dumps(body(workspace)).encode(),
                               {"Content-Type": "text/plain", **lang_header(language)})
    expect_http_error(reply, 415, "UNSUPPORTED_MEDIA_TYPE", language)


async def test_request_too_large(adapter: RunningAdapter, workspace: Path, language: str) -> None:
    big = body(workspace, text="x" * (12 * 1024 * 1024))
    reply = await adapter.run(big, lang_header(language))
    expect_http_error(reply, 413, "REQUEST_TOO_LARGE", language)


async def test_request_too_large_without_content_length(adapter: RunningAdapter, workspace: Path) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(13):
            yield b" " * (1024 * 1024)

    async with adapter.session.post(adapter.url, data=chunks(), headers={"Content-Type": "application/json"}) as resp:
        assert resp.status == 413
        assert (await resp.json())["error"]["code"] == "REQUEST_TOO_LARGE"


async def test_invalid_json(adapter: RunningAdapter, language: str) -> None:
    reply = await adapter.post("/", b'{"threadId": ', lang_header(language))
    expect_http_error(reply, 400, "INVALID_JSON", language)


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (lambda b: b["forwardedProps"]["iacCode"].pop("rosInvocationId"), "forwardedProps.iacCode.rosInvocationId"),
        (lambda b: b["forwardedProps"]["iacCode"].update(surprise=1), "forwardedProps.iacCode.surprise"),
        (lambda b: b["forwardedProps"]["iacCode"].update(schemaVersion="1"), "forwardedProps.iacCode.schemaVersion"),
        (lambda b: b.update(tools=[{"name": "t", "description": "d", "parameters": {}}]), "tools"),
        (lambda b: b.update(threadId=7), "threadId"),
        (lambda b: b["messages"][0].update(content=[{"type": "image", "source": {"type": "url", "value": "http://x/y.png"}}]),
         "messages[0].content"),
    ],
)
async def test_invalid_input_names_the_field(
    adapter: RunningAdapter, workspace: Path, language: str, mutate: Any, path: str
) -> None:
    request = body(workspace)
    mutate(request)
    reply = await adapter.run(request, lang_header(language))
    message = expect_http_error(reply, 400, "INVALID_INPUT", language)
    assert path in message


async def test_a_workspace_outside_the_allowed_roots_is_refused(
    adapter: RunningAdapter, tmp_path: Path, workspace: Path, language: str
) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (tmp_path / "workspaces" / "link").symlink_to(outside)
    for cwd in (outside, tmp_path / "workspaces" / "link", Path("relative/path")):
        reply = await adapter.run(run_body(thread_id="t", text="x", cwd=str(cwd)), lang_header(language))
        expect_http_error(reply, 400, "INVALID_INPUT", language)


async def test_a_new_run_needs_a_new_user_message(adapter: RunningAdapter, workspace: Path, language: str) -> None:
    without = body(workspace, text=None, thread_id="t-silent")
    message = expect_http_error(await adapter.run(without, lang_header(language)), 400, "INVALID_INPUT", language)
    assert "messages" in message
    assert (await adapter.run(body(workspace, thread_id="t-repeat", message_id="m-1"))).status == 200
    # A new runId that carries the previous turn's message again asks nothing new.
    repeated = body(workspace, thread_id="t-repeat", message_id="m-1")
    expect_http_error(await adapter.run(repeated, lang_header(language)), 400, "INVALID_INPUT", language)


async def test_preferred_language_beats_accept_language(adapter: RunningAdapter, workspace: Path) -> None:
    request = body(workspace, preferredLanguage="zh-CN")
    request["forwardedProps"]["iacCode"].pop("rosInvocationId")
    reply = await adapter.run(request, {"Accept-Language": "en"})
    expect_http_error(reply, 400, "INVALID_INPUT", "zh-CN")


async def test_duplicate_run_id_and_run_id_conflict(adapter: RunningAdapter, workspace: Path, language: str) -> None:
    request = body(workspace)
    assert (await adapter.run(request)).status == 200
    expect_http_error(await adapter.run(request, lang_header(language)), 409, "DUPLICATE_RUN_ID", language)
    changed = {**request, "messages": [{"id": "other", "role": "user", "content": "different"}]}
    expect_http_error(await adapter.run(changed, lang_header(language)), 409, "RUN_ID_CONFLICT", language)


async def test_a_resume_under_the_interrupted_runs_id_is_refused_with_how_to_fix_it(
    adapter: RunningAdapter, workspace: Path, language: str
) -> None:
    """A resume is a new run. One sent under the runId of the run it answers
    (what CopilotKit's useInterrupt up to 1.74 does) gets ``RUN_ID_CONFLICT``
    with a message that says so; the interrupt stays pending."""
    greeting = body(workspace, text="hello", thread_id="t-reuse")
    assert (await adapter.run(greeting)).status == 200
    asking = body(workspace, text="permission x.txt", thread_id="t-reuse")
    (interrupt,) = (await adapter.run(asking)).events()[-1]["outcome"]["interrupts"]
    answer = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "allow_once"}}]
    # CopilotKit's resume: the whole history, no new message, the interrupted run's runId.
    resume = {**asking, "messages": greeting["messages"] + asking["messages"], "resume": answer}

    specific = expect_http_error(await adapter.run(resume, lang_header(language)), 409, "RUN_ID_CONFLICT", language)
    assert "runId" in specific and "CopilotKit" in specific and "docs/front-ends.md" in specific
    # The runId of a turn that did not end in an interrupt: the plain conflict.
    reused_turn = {**resume, "runId": greeting["runId"]}
    plain = expect_http_error(await adapter.run(reused_turn, lang_header(language)), 409, "RUN_ID_CONFLICT", language)
    assert "CopilotKit" not in plain

    fresh = await adapter.run({**resume, "runId": f"run-{uuid.uuid4()}"})
    assert fresh.events()[-1]["outcome"] == {"type": "success"}


async def test_thread_busy(adapter: RunningAdapter, workspace: Path, language: str) -> None:
    slow = body(workspace, text="slow 5", thread_id="t-busy")
    async with adapter.session.post(adapter.url, json=slow) as resp:
        await resp.content.readany()
        reply = await adapter.run(body(workspace, thread_id="t-busy"), lang_header(language))
        expect_http_error(reply, 409, "THREAD_BUSY", language)


async def test_thread_binding_conflict(adapter: RunningAdapter, workspace: Path, language: str) -> None:
    other = workspace.parent / "session-2"
    other.mkdir()
    assert (await adapter.run(body(workspace, thread_id="t-bind", userId="alice"))).status == 200
    for changed in (
        run_body(thread_id="t-bind", text="x", cwd=str(other), userId="alice"),
        run_body(thread_id="t-bind", text="x", cwd=str(workspace), userId="mallory"),
        run_body(thread_id="t-bind", text="x", cwd=str(workspace)),
    ):
        reply = await adapter.run(changed, lang_header(language))
        expect_http_error(reply, 409, "THREAD_BINDING_CONFLICT", language)


async def test_resume_required_while_an_interrupt_waits(adapter: RunningAdapter, workspace: Path, language: str) -> None:
    events = (await adapter.run(body(workspace, text="permission", thread_id="t-wait"))).events()
    assert events[-1]["outcome"]["type"] == "interrupt"
    reply = await adapter.run(body(workspace, text="never mind", thread_id="t-wait"), lang_header(language))
    expect_http_error(reply, 409, "RESUME_REQUIRED", language)


async def test_unknown_interrupt_on_a_thread_with_nothing_pending(
    adapter: RunningAdapter, workspace: Path, language: str
) -> None:
    assert (await adapter.run(body(workspace, thread_id="t-idle"))).status == 200
    resume = body(workspace, text=None, thread_id="t-idle")
    resume["resume"] = [{"interruptId": "permission-x", "status": "resolved", "payload": {"decision": "deny"}}]
    expect_http_error(await adapter.run(resume, lang_header(language)), 409, "UNKNOWN_INTERRUPT", language)


class BrokenDisk(FileThreadStore):
    async def save(self, record: ThreadRecord, claim: Any = None, *, durable: bool = True) -> Saved:
        raise PersistenceError("disk full")


async def test_state_persistence_failed_before_the_stream(
    tmp_path: Path, demo: DemoRuntime, workspace: Path, language: str
) -> None:
    from aguiadapter.config import Config
    from aguiadapter.web.app import create_app
    from tests.support.adapter import RunningAdapter as Running

    config = Config(state_dir=tmp_path / "s", a2a_url=demo.url)
    app = create_app(config, store=BrokenDisk(tmp_path / "s"))
    runner = web.AppRunner(app)
    await on_loopback(runner)
    import aiohttp

    port = runner.addresses[0][1]
    running = Running(f"http://127.0.0.1:{port}/", app, runner, aiohttp.ClientSession(), config)
    try:
        reply = await running.run(body(workspace), lang_header(language))
        expect_http_error(reply, 503, "STATE_PERSISTENCE_FAILED", language)
        assert demo.state.tasks == {}, "no A2A task may exist for a run that was never announced"
    finally:
        await running.close()


# ------------------------------------------------------------- inside the stream
async def test_a2a_unavailable(tmp_path: Path, workspace: Path, language: str) -> None:
    running = await start_adapter(tmp_path / "s", "http://127.0.0.1:9/")
    try:
        reply = await running.run(body(workspace, preferredLanguage=language))
        expect_run_error(reply, "A2A_UNAVAILABLE", language)
    finally:
        await running.close()


@pytest.mark.parametrize("script", ["fail", "rpcerror"])
async def test_a2a_execution_failed(adapter: RunningAdapter, workspace: Path, language: str, script: str) -> None:
    reply = await adapter.run(body(workspace, text=script, preferredLanguage=language))
    expect_run_error(reply, "A2A_EXECUTION_FAILED", language)


async def cancelled_by_the_runtime(adapter: RunningAdapter, demo: DemoRuntime, workspace: Path, language: str) -> Reply:
    request = body(workspace, text="slow 10", preferredLanguage=language)
    client = A2AClient(demo.url)
    try:
        async with adapter.session.post(adapter.url, json=request) as resp:
            seen = b""
            while b"iac-code.session.v1" not in seen:
                seen += await resp.content.readany()
            (task_id,) = [task.id for task in demo.state.tasks.values() if task.state != "TASK_STATE_CANCELED"]
            await client.cancel_task(task_id)
            return Reply(resp.status, dict(resp.headers), seen + await resp.read(), advertised=adapter.advertised())
    finally:
        await client.close()


async def test_cancelled_by_the_runtime(
    tmp_path: Path, adapter: RunningAdapter, demo: DemoRuntime, workspace: Path, language: str
) -> None:
    # AG-UI 1.0: a stop is no failure; the run closes in order with the cancelled outcome.
    assert_stopped((await cancelled_by_the_runtime(adapter, demo, workspace, language)).events())
    # The reference's profile: RUN_ERROR CANCELLED, in the caller's language.
    compat = await start_adapter(tmp_path / "compat", demo.url, allowed_cwds=(str(tmp_path / "workspaces"),),
                                 profile="iac-code-agui")
    try:
        expect_run_error(await cancelled_by_the_runtime(compat, demo, workspace, language), "CANCELLED", language)
    finally:
        await compat.close()


async def test_a2a_protocol_error_cancels_the_foreign_task(tmp_path: Path, workspace: Path, language: str) -> None:
    cancelled: list[str] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        rpc = await request.json()
        if rpc["method"] == "CancelTask":
            cancelled.append(rpc["params"]["id"])
            return web.json_response({"jsonrpc": "2.0", "id": rpc["id"], "result": {"id": rpc["params"]["id"]}})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        wrong = {"task": {"id": "task-w", "contextId": "ctx-of-someone-else", "status": {"state": "TASK_STATE_SUBMITTED"}}}
        await resp.write(f"data: {json.dumps({'jsonrpc': '2.0', 'id': rpc['id'], 'result': wrong})}\n\n".encode())
        await asyncio.sleep(0.2)
        return resp

    app = web.Application()
    app.router.add_post("/", handle)
    runner = web.AppRunner(app)
    await on_loopback(runner)
    port = runner.addresses[0][1]
    running = await start_adapter(tmp_path / "s", f"http://127.0.0.1:{port}/")
    try:
        reply = await running.run(body(workspace, preferredLanguage=language))
        expect_run_error(reply, "A2A_PROTOCOL_ERROR", language)
    finally:
        await running.close()
        await runner.cleanup()
    assert cancelled == [], "the adapter must not cancel a task that is not its own"


class DiskFailsAfterStart(FileThreadStore):
    """A disk that fills up right after a run started."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.saves = 0

    async def save(self, record: ThreadRecord, claim: Any = None, *, durable: bool = True) -> Saved:
        self.saves += 1
        if self.saves > 1:
            raise PersistenceError("disk full")
        return await super().save(record, claim, durable=durable)


async def test_an_interrupt_that_cannot_be_stored_is_never_announced(
    tmp_path: Path, demo: DemoRuntime, workspace: Path, language: str
) -> None:
    import aiohttp

    from aguiadapter.config import Config
    from aguiadapter.web.app import create_app
    from tests.support.adapter import RunningAdapter as Running

    config = Config(state_dir=tmp_path / "s", a2a_url=demo.url)
    app = create_app(config, store=DiskFailsAfterStart(tmp_path / "s"))
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await on_loopback(runner)
    port = runner.addresses[0][1]
    running = Running(f"http://127.0.0.1:{port}/", app, runner, aiohttp.ClientSession(), config)
    try:
        reply = await running.run(body(workspace, text="permission x.txt", preferredLanguage=language))
    finally:
        await running.close()
    events = reply.events()
    assert "RUN_FINISHED" not in [e["type"] for e in events]
    expect_run_error(reply, "STATE_PERSISTENCE_FAILED", language)
    assert [task.state for task in demo.state.tasks.values()] == ["TASK_STATE_CANCELED"]
