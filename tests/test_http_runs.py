"""Runs over HTTP: the adapter on a real socket in front of the demo A2A runtime."""

from __future__ import annotations

import asyncio
import json
import stat
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.store.file.store import FileThreadStore
from aguiadapter.threads.record import ThreadRecord
from aguiadapter.web.keys import STREAMS
from tests.support.adapter import RunningAdapter, run_body, start_adapter
from tests.support.agui import parse_sse, texts, types
from tests.support.eventually import eventually
from tests.support.serve import on_loopback


def session_of(events: list[dict[str, Any]]) -> dict[str, Any]:
    (event,) = [e for e in events if e.get("name") == "iac-code.session.v1"]
    return dict(event["value"])


async def leave_after_the_first_text(adapter: RunningAdapter, body: dict[str, Any]) -> None:
    """Start a run, read it up to its first text delta, and close the connection mid-run."""
    async with aiohttp.ClientSession() as session, session.post(adapter.url, json=body) as resp:
        seen = b""
        while b"TEXT_MESSAGE_CONTENT" not in seen:
            seen += await resp.content.readany()


async def test_a_normal_turn_streams_a_complete_valid_run(adapter: RunningAdapter, workspace: Path) -> None:
    body = run_body(thread_id="thread-1", text="hello there", cwd=str(workspace))
    reply = await adapter.run(body)
    assert reply.headers["Content-Type"].startswith("text/event-stream")
    assert reply.headers["Cache-Control"] == "no-cache"
    assert reply.headers["X-Accel-Buffering"] == "no"
    events = reply.events()
    assert events[0] == {
        "type": "RUN_STARTED",
        "threadId": "thread-1",
        "runId": body["runId"],
        "protocolVersion": "1.0",
    }
    assert "hello there" in texts(events)
    finished = events[-1]
    assert finished["type"] == "RUN_FINISHED" and finished["outcome"] == {"type": "success"}
    assert all(isinstance(value, int) for value in finished["usage"][0].values() if not isinstance(value, str))


async def test_reasoning_and_tool_turns_map_to_standard_events(adapter: RunningAdapter, workspace: Path) -> None:
    think = (await adapter.run(run_body(thread_id="t-think", text="think twice", cwd=str(workspace)))).events()
    assert "REASONING_MESSAGE_CONTENT" in types(think)
    tool = (await adapter.run(run_body(thread_id="t-tool", text="tool", cwd=str(workspace)))).events()
    kinds = types(tool)
    assert [k for k in kinds if k.startswith("TOOL_CALL_") and k != "TOOL_CALL_RESULT"] == ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"]
    assert "TOOL_CALL_RESULT" in kinds
    names = {e.get("name") for e in tool}
    assert {"iac-code.tool-progress.v1", "iac-code.artifact.v1"} <= names


async def test_turns_of_one_thread_share_context_and_session_but_not_execution(
    adapter: RunningAdapter, workspace: Path
) -> None:
    first = session_of((await adapter.run(run_body(thread_id="t2", text="one", cwd=str(workspace)))).events())
    second = session_of((await adapter.run(run_body(thread_id="t2", text="two", cwd=str(workspace)))).events())
    assert first["contextId"] == second["contextId"]
    assert first["sessionId"] == second["sessionId"]
    assert first["executionId"] != second["executionId"]
    assert first["taskId"] != second["taskId"]


async def test_a_whole_conversation_sends_only_the_newest_user_message(
    adapter: RunningAdapter, demo: DemoRuntime, workspace: Path
) -> None:
    first = run_body(thread_id="t3", text="first question", cwd=str(workspace), message_id="u1")
    events = (await adapter.run(first)).events()
    conversation = first["messages"] + [
        {"id": "a1", "role": "assistant", "content": texts(events)},
        {"id": "u2", "role": "user", "content": "second question"},
    ]
    second = {**first, "runId": "run-2", "messages": conversation, "protocolVersion": "1.0"}
    assert "second question" in texts((await adapter.run(second)).events())
    assert [message["messageId"] for message in demo.state.received] == ["u1", "u2"]
    again = {**second, "runId": "run-3"}
    reply = await adapter.run(again)
    assert reply.status == 400 and reply.json()["error"]["code"] == "INVALID_INPUT"


async def test_heartbeats_keep_a_quiet_stream_alive(tmp_path: Path, demo: DemoRuntime, workspace: Path) -> None:
    running = await start_adapter(tmp_path / "state", demo.url, heartbeat_seconds=0.2)
    try:
        async with running.session.post(
            running.url,
            json=run_body(thread_id="t-hb", text="slow 1.2", cwd=str(workspace)),
        ) as resp:
            body = await resp.read()
    finally:
        await running.close()
    _, comments = parse_sse(body)
    # The demo's slow script pauses 0.2 s between deltas, so heartbeats only
    # appear where nothing else was written for the whole interval.
    assert all(comment == ": heartbeat" for comment in comments)


async def test_a_silent_runtime_gets_heartbeats(tmp_path: Path, workspace: Path) -> None:
    quiet = await _silent_runtime()
    running = await start_adapter(tmp_path / "state", quiet.url, heartbeat_seconds=0.2)
    try:
        async with running.session.post(
            running.url, json=run_body(thread_id="t-quiet", text="hi", cwd=str(workspace))
        ) as resp:
            chunks = b""
            while chunks.count(b": heartbeat\n\n") < 2:
                chunks += await asyncio.wait_for(resp.content.readany(), 5)
    finally:
        await running.close()
        await quiet.close()
    assert chunks.startswith(b"id: 1\ndata: {\"type\":\"RUN_STARTED\"")


async def test_a_client_that_disconnects_gets_its_a2a_task_cancelled(
    adapter: RunningAdapter, demo: DemoRuntime, workspace: Path
) -> None:
    await leave_after_the_first_text(adapter, run_body(thread_id="t-gone", text="slow 30", cwd=str(workspace)))
    store = FileThreadStore(adapter.config.state_dir)

    async def settled() -> ThreadRecord | None:
        record = await store.load("t-gone")
        done = record is not None and record.state == "terminal"
        return record if done and [task.state for task in demo.state.tasks.values()] == ["TASK_STATE_CANCELED"] else None

    record = await eventually(settled, "the runtime's task is cancelled and the thread ends")
    assert record.last_error == "CANCELLED"

    async def next_turn() -> int | None:
        # The record is written before the run lets go of the thread.
        reply = await adapter.run(run_body(thread_id="t-gone", text="again", cwd=str(workspace)))
        return None if reply.status == 409 and reply.json()["error"]["code"] == "THREAD_BUSY" else reply.status

    assert await eventually(next_turn, "the thread is free again for the next turn") == 200


async def test_a_client_that_leaves_while_the_runtime_is_silent_is_noticed(
    adapter: RunningAdapter, demo: DemoRuntime, workspace: Path
) -> None:
    # Nothing is written to the stream after the first delta, so only the
    # app's stream watch can see that the connection closed.
    await leave_after_the_first_text(adapter, run_body(thread_id="t-silent-gone", text="silent 60", cwd=str(workspace)))

    async def cancelled() -> bool:
        return [task.state for task in demo.state.tasks.values()] == ["TASK_STATE_CANCELED"]

    await eventually(cancelled, "the silent run's task is cancelled once its client left")

    async def unwatched() -> bool:
        return len(adapter.app[STREAMS]) == 0 and adapter.app[STREAMS].idle

    await eventually(unwatched, "with no stream open, the app's stream timer stops")


async def test_thread_files_are_private_and_hold_no_secret(adapter: RunningAdapter, demo: DemoRuntime, workspace: Path) -> None:
    secrets = {"llmApiKey": "sk-test-" + uuid.uuid4().hex}
    cloud = {"accessKeyId": "AKID" + uuid.uuid4().hex, "accessKeySecret": "SECRET" + uuid.uuid4().hex,
             "securityToken": "STS" + uuid.uuid4().hex}
    body = run_body(thread_id="t-secret", text="hi", cwd=str(workspace), alibabaCloud=cloud, **secrets)
    reply = await adapter.run(body)
    assert reply.status == 200
    store = FileThreadStore(adapter.config.state_dir)
    path = store.path_for("t-secret")
    content = path.read_text()
    for secret in [*secrets.values(), cloud["accessKeySecret"], cloud["securityToken"]]:
        assert secret not in content
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    # ... and yet the runtime received them.
    (message,) = demo.state.received
    options = message["metadata"]["iac_code"]
    assert options["iac_code_api_key"] == secrets["llmApiKey"]
    assert options["alibaba_cloud_access_key_secret"] == cloud["accessKeySecret"]


async def test_state_survives_a_restart_and_is_loaded_lazily(tmp_path: Path, demo: DemoRuntime, workspace: Path) -> None:
    first = await start_adapter(tmp_path / "state", demo.url)
    try:
        one = session_of((await first.run(run_body(thread_id="t-r", text="one", cwd=str(workspace)))).events())
    finally:
        await first.close()
    second = await start_adapter(tmp_path / "state", demo.url)
    try:
        two = session_of((await second.run(run_body(thread_id="t-r", text="two", cwd=str(workspace)))).events())
    finally:
        await second.close()
    assert one["contextId"] == two["contextId"] and one["sessionId"] == two["sessionId"]


async def test_a_corrupt_thread_file_fails_that_thread_alone(adapter: RunningAdapter, workspace: Path) -> None:
    store = FileThreadStore(adapter.config.state_dir)
    assert (await adapter.run(run_body(thread_id="t-bad", text="x", cwd=str(workspace)))).status == 200
    store.path_for("t-bad").write_text("{not json")
    reply = await adapter.run(run_body(thread_id="t-bad", text="y", cwd=str(workspace)))
    assert reply.status == 409 and reply.json()["error"]["code"] == "EXECUTION_LOST"
    assert (await adapter.run(run_body(thread_id="t-good", text="y", cwd=str(workspace)))).status == 200


async def test_thread_file_names_cannot_escape_or_collide(tmp_path: Path) -> None:
    store = FileThreadStore(tmp_path)
    names = {store.path_for(t).name for t in ["../../etc/passwd", "Thread", "thread", "a/b", "a\\b", ""]}
    assert len(names) == 6
    assert all("/" not in name and "\\" not in name and not name.startswith(".") for name in names)
    assert all(store.path_for(t).parent == store.threads_dir for t in ["../x", "/abs"])


async def test_health_reports_protocol_and_runtime(adapter: RunningAdapter, demo: DemoRuntime) -> None:
    async with adapter.session.get(adapter.url + "health") as resp:
        body = await resp.json()
    assert body["protocol"] == "ag-ui" and body["protocolVersion"] == "1.0"
    assert body["a2a"] == {"url": demo.url, "reachable": True, "status": "ok"}
    assert body["status"] == "ok" and body["serverVersion"]


async def _silent_runtime() -> Any:
    """An A2A server that opens a task and then says nothing for a long time."""
    from aiohttp import web

    async def handle(request: web.Request) -> web.StreamResponse:
        rpc = await request.json()
        message = rpc["params"]["message"]
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        task = {"task": {"id": "task-q", "contextId": message["contextId"], "status": {"state": "TASK_STATE_SUBMITTED"}}}
        await resp.write(f"data: {json.dumps({'jsonrpc': '2.0', 'id': rpc['id'], 'result': task})}\n\n".encode())
        await asyncio.sleep(30)
        return resp

    app = web.Application()
    app.router.add_post("/", handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await on_loopback(runner)
    port = runner.addresses[0][1]

    class Quiet:
        url = f"http://127.0.0.1:{port}/"

        async def close(self) -> None:
            await runner.cleanup()

    return Quiet()


async def test_two_processes_cannot_share_one_state_folder(tmp_path: Path, demo: DemoRuntime) -> None:
    import subprocess
    import sys

    first = await start_adapter(tmp_path / "state", demo.url)
    try:
        second = subprocess.run(
            [sys.executable, "-m", "aguiadapter", "--port", "0", "--state-dir", str(tmp_path / "state"),
             "--a2a-url", demo.url],
            capture_output=True, text=True, timeout=20,
        )
    finally:
        await first.close()
    assert second.returncode != 0
    assert "used by another aguiadapter process" in second.stdout + second.stderr


@pytest.mark.parametrize(("documented", "sent"), [("rich", "rich-v1"), ("standard", "standard")])
async def test_the_documented_candidate_presentation_reaches_the_runtime_in_its_own_words(
    adapter: RunningAdapter, demo: DemoRuntime, workspace: Path, documented: str, sent: str
) -> None:
    # iac-code 0.16.0 honours only "rich-v1"; "rich" would silently fall back to standard.
    body = run_body(thread_id=f"t-present-{documented}", text="hi", cwd=str(workspace),
                    candidatePresentation=documented)
    assert (await adapter.run(body)).status == 200
    (message,) = demo.state.received
    assert message["metadata"]["iac_code"]["candidatePresentation"] == sent


async def test_a_request_the_runtime_refuses_is_invalid_input_in_its_own_words(
    adapter: RunningAdapter, demo: DemoRuntime, workspace: Path
) -> None:
    body = run_body(thread_id="t-unknown-pipeline", text="go", cwd=str(workspace), runMode="pipeline",
                    pipelineName="no-such-pipeline")
    events = (await adapter.run(body)).events()
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "INVALID_INPUT"
    assert "Unknown pipeline: no-such-pipeline" in events[-1]["message"]
    assert demo.state.tasks == {}, "nothing started in the runtime"
    # The thread is usable again with a pipeline the runtime has.
    body = run_body(thread_id="t-unknown-pipeline", text="hello", cwd=str(workspace))
    assert (await adapter.run(body)).events()[-1]["outcome"] == {"type": "success"}
