"""The cancel extension: POST /extensions/iac-code/v1/executions/{id}/cancel."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.protocol.profile import Profile
from aguiadapter.store.file.store import FileThreadStore
from tests.support.adapter import Reply, RunningAdapter, run_body, start_adapter
from tests.support.agui import check_stream
from tests.support.stops import PROFILES, assert_stopped
from tests.support.reading import read_until


def session_of(events: list[dict[str, Any]]) -> dict[str, Any]:
    (event,) = [e for e in events if e.get("name") == "iac-code.session.v1"]
    return dict(event["value"])


async def cancel(adapter: RunningAdapter, execution_id: str, body: Any, headers: dict[str, str] | None = None) -> Reply:
    return await adapter.post(f"/extensions/iac-code/v1/executions/{execution_id}/cancel", body, headers)


async def test_cancelling_an_interrupted_execution_clears_its_interrupts(
    adapter: RunningAdapter, demo: DemoRuntime, workspace: Path
) -> None:
    events = (await adapter.run(run_body(thread_id="c-int", text="permission f", cwd=str(workspace)))).events()
    session = session_of(events)
    (interrupt,) = events[-1]["outcome"]["interrupts"]
    reply = await cancel(adapter, session["executionId"], {"threadId": "c-int", "rosInvocationId": "invocation-1"})
    assert reply.status == 200 and reply.json() == {"executionId": session["executionId"], "status": "cancelled"}
    assert demo.state.tasks[session["taskId"]].state == "TASK_STATE_CANCELED"
    record = await FileThreadStore(adapter.config.state_dir).load("c-int")
    assert record is not None and record.state == "terminal" and record.pending_interrupts == []
    resume = run_body(thread_id="c-int", text=None, cwd=str(workspace))
    resume["resume"] = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "allow_once"}}]
    assert (await adapter.run(resume)).json()["error"]["code"] == "UNKNOWN_INTERRUPT"
    assert sum(demo.state.tool_runs.values()) == 0
    again = await cancel(adapter, session["executionId"], {"threadId": "c-int", "rosInvocationId": "invocation-1"})
    assert again.json()["status"] == "already_terminal"
    # The thread takes a new turn afterwards.
    assert (await adapter.run(run_body(thread_id="c-int", text="next", cwd=str(workspace)))).status == 200


@pytest.mark.parametrize("profile", PROFILES)
async def test_cancelling_an_active_run_ends_its_stream_in_the_profiles_form(
    tmp_path: Path, demo: DemoRuntime, workspace: Path, profile: Profile
) -> None:
    adapter = await start_adapter(tmp_path / "state", demo.url, allowed_cwds=(str(tmp_path / "workspaces"),),
                                  profile=profile)
    try:
        await cancel_active_run(adapter, demo, workspace, profile)
    finally:
        await adapter.close()


async def cancel_active_run(adapter: RunningAdapter, demo: DemoRuntime, workspace: Path, profile: Profile) -> None:
    body = run_body(thread_id="c-act", text="slow 20", cwd=str(workspace))
    async with adapter.session.post(adapter.url, json=body) as resp:
        seen = await read_until(resp, b"iac-code.session.v1")
        events_so_far = [line for line in seen.decode().split("\n\n") if "iac-code.session.v1" in line]
        execution_id = events_so_far[0].split('"executionId":"')[1].split('"')[0]
        reply = await cancel(adapter, execution_id, {"threadId": "c-act", "rosInvocationId": "invocation-1"})
        rest = await asyncio.wait_for(resp.read(), 5)
    assert reply.json() == {"executionId": execution_id, "status": "cancelled"}
    events = check_stream(seen + rest, advertised=adapter.advertised())
    assert_stopped(events, profile)
    assert any(e["type"] == "TEXT_MESSAGE_END" for e in events), "the open message was closed before the end"
    (task,) = demo.state.tasks.values()
    assert task.state == "TASK_STATE_CANCELED" and demo.state.cancel_calls[task.id] == 1
    # The thread ends the same way in every profile, and the route's own answers do not change.
    record = await FileThreadStore(adapter.config.state_dir).load("c-act")
    assert record is not None and record.state == "terminal" and record.last_error == "CANCELLED"
    again = await cancel(adapter, execution_id, {"threadId": "c-act", "rosInvocationId": "invocation-1"})
    assert again.json() == {"executionId": execution_id, "status": "already_terminal"}


async def test_a_finished_execution_is_already_terminal(adapter: RunningAdapter, workspace: Path) -> None:
    session = session_of((await adapter.run(run_body(thread_id="c-done", text="hi", cwd=str(workspace)))).events())
    reply = await cancel(adapter, session["executionId"], {"threadId": "c-done", "rosInvocationId": "invocation-1"})
    assert reply.json() == {"executionId": session["executionId"], "status": "already_terminal"}


async def test_unknown_executions_and_mismatched_identities_are_not_found(adapter: RunningAdapter, workspace: Path) -> None:
    session = session_of((await adapter.run(run_body(thread_id="c-id", text="permission", cwd=str(workspace)))).events())
    for execution_id, body in (
        ("exec-unknown", {"threadId": "c-id", "rosInvocationId": "invocation-1"}),
        (session["executionId"], {"threadId": "c-id", "rosInvocationId": "invocation-other"}),
        (session["executionId"], {"threadId": "c-other", "rosInvocationId": "invocation-1"}),
    ):
        reply = await cancel(adapter, execution_id, body)
        assert reply.status == 404 and reply.json()["error"]["code"] == "EXECUTION_NOT_FOUND"
    record = await FileThreadStore(adapter.config.state_dir).load("c-id")
    assert record is not None and record.state == "interrupted", "a refused cancel changes nothing"


async def test_the_cancel_route_checks_its_input_like_runs(tmp_path: Path, demo: DemoRuntime) -> None:
    running = await start_adapter(tmp_path / "s", demo.url, auth_token="tok")
    auth = {"Authorization": "Bearer tok"}
    try:
        ok_body = {"threadId": "t", "rosInvocationId": "i"}
        assert (await cancel(running, "e", ok_body)).status == 401
        assert (await cancel(running, "e", b"{}", {**auth, "Content-Type": "text/plain"})).status == 415
        assert (await cancel(running, "e", b"{", auth)).json()["error"]["code"] == "INVALID_JSON"
        bad = await cancel(running, "e", {"threadId": "t"}, auth)
        assert bad.status == 400 and "rosInvocationId" in bad.json()["error"]["message"]
        wrong = await cancel(running, "e", {**ok_body, "threadId": ["t"]}, auth)
        assert wrong.status == 400 and "threadId" in wrong.json()["error"]["message"]
        extra = await cancel(running, "e", {**ok_body, "more": 1}, auth)
        assert extra.json()["error"]["code"] == "EXECUTION_NOT_FOUND", "other members are ignored"
        big = await cancel(running, "e", {**ok_body, "pad": "x" * 70_000}, auth)
        assert big.status == 413
        zh = await cancel(running, "e", ok_body, {**auth, "Accept-Language": "zh-CN"})
        assert zh.status == 404 and "未找到" in zh.json()["error"]["message"]
    finally:
        await running.close()
