"""Runs stopped on purpose, against the real ``iac-code a2a``, in each wire profile.

AG-UI 1.0 (the default) closes a stop in order: everything the run opened is
closed, then ``RUN_FINISHED`` with ``outcome: {"type": "cancelled"}``; the
``iac-code-agui`` profile (``--compat``) ends it ``RUN_ERROR CANCELLED``, as
the protocol reference says. Either way the runtime's task is cancelled and
the thread ends the same way. Two stops: the cancel route while the model
streams, and a pipeline's clarifying question answered ``cancelled``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from ag_ui_validate.pytest_plugin import assert_valid_agui

from aguiadapter.protocol.profile import Profile
from aguiadapter.store.file.store import FileThreadStore
from tests.support.adapter import RunningAdapter, run_body, start_adapter
from tests.support.agui import check_stream, interrupts_of, parse_sse
from tests.support.iac_runtime import IacRuntime
from tests.support.model_stub import ModelStub
from tests.support.pipeline_script import scenario
from tests.support.stops import PROFILES, assert_stopped
from tests.support.reading import read_until_all

CANCELED = "TASK_STATE_CANCELED"


async def adapter_for(tmp_path: Path, runtime: IacRuntime, profile: Profile) -> RunningAdapter:
    return await start_adapter(
        tmp_path / "state", runtime.url, a2a_token=runtime.token,
        allowed_cwds=(str(runtime.workspaces_root),), profile=profile,
    )


def session_of(events: list[dict[str, Any]]) -> dict[str, Any]:
    return dict(next(e["value"] for e in events if e.get("name") == "iac-code.session.v1"))


async def thread_ended_cancelled(adapter: RunningAdapter, thread_id: str) -> None:
    record = await FileThreadStore(adapter.config.state_dir).load(thread_id)
    assert record is not None and record.state == "terminal" and record.last_error == "CANCELLED"


@pytest.mark.parametrize("profile", PROFILES)
async def test_the_cancel_route_stops_a_streaming_turn_in_the_profiles_form(
    tmp_path: Path, iac_runtime: IacRuntime, iac_workspace: Path, profile: Profile
) -> None:
    adapter = await adapter_for(tmp_path, iac_runtime, profile)
    thread_id = f"e2e-stop-{profile.value}"
    try:
        body = run_body(thread_id=thread_id, text=f"[scenario:slow seconds=20] {thread_id}", cwd=str(iac_workspace))
        async with adapter.session.post(adapter.url, json=body) as resp:
            seen = await read_until_all(resp, b"TEXT_MESSAGE_CONTENT", b"iac-code.session.v1", seconds=30)
            session = session_of(parse_sse(seen[: seen.rindex(b"\n\n") + 2])[0])
            path = f"/extensions/iac-code/v1/executions/{session['executionId']}/cancel"
            identity = {"threadId": thread_id, "rosInvocationId": "invocation-1"}
            reply = await adapter.post(path, identity)
            rest = await asyncio.wait_for(resp.read(), 15)
        assert reply.json() == {"executionId": session["executionId"], "status": "cancelled"}
        events = check_stream(seen + rest, advertised=adapter.advertised())
        assert_stopped(events, profile)
        assert_valid_agui(events, max_warnings=0)
        assert any(e["type"] == "TEXT_MESSAGE_END" for e in events), "the streaming message was closed first"
        assert await iac_runtime.task_state(session["taskId"]) == CANCELED
        await thread_ended_cancelled(adapter, thread_id)
        assert (await adapter.post(path, identity)).json()["status"] == "already_terminal"
    finally:
        await adapter.close()


@pytest.mark.parametrize("profile", PROFILES)
async def test_a_question_answered_cancelled_ends_the_turn_in_the_profiles_form(
    tmp_path: Path, iac_runtime: IacRuntime, iac_workspace: Path, model_stub: ModelStub, profile: Profile
) -> None:
    plan = scenario("full")
    adapter = await adapter_for(tmp_path, iac_runtime, profile)
    thread_id = f"e2e-question-{profile.value}"
    try:
        with model_stub.use_pipeline_script(plan.script, plan.name):
            first = check_stream((await adapter.run(
                run_body(thread_id=thread_id, text=plan.prompt, cwd=str(iac_workspace), **plan.agui_options())
            )).body, advertised=adapter.advertised())
            (question,) = interrupts_of(first)
            assert question["metadata"]["kind"] == "ask_user_question"
            resume = run_body(thread_id=thread_id, text=None, cwd=str(iac_workspace), **plan.agui_options())
            resume["resume"] = [{"interruptId": question["id"], "status": "cancelled"}]
            events = check_stream((await adapter.run(resume)).body, advertised=adapter.advertised())
        assert_stopped(events, profile)
        assert_valid_agui(events, max_warnings=0)
        assert await iac_runtime.task_state(session_of(first)["taskId"]) == CANCELED
        await thread_ended_cancelled(adapter, thread_id)
    finally:
        await adapter.close()
