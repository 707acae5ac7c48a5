"""``POST /connect`` against the real `iac-code a2a`: a reloaded page gets its
conversation, in order and under the live stream's tool call ids, and its
pending permission back; also after an adapter restart, and during a run."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any


from ag_ui.core import MessagesSnapshotEvent
from ag_ui_validate.pytest_plugin import assert_valid_agui

from tests.support.adapter import RunningAdapter, run_body, start_adapter
from tests.support.connect import applied, connect_body, runs_of, snapshot_of
from tests.support.eventually import eventually
from tests.support.iac_runtime import IacRuntime
from tests.support.model_stub import ModelStub
from tests.support.validation import run_validator

TURNS = (
    "[scenario:normal] hello",
    "[scenario:readonly-tool] what is here?",
    "[scenario:reasoning] think first",
    "[scenario:permission file=notes.txt] write notes",
)


async def converse(adapter: RunningAdapter, thread_id: str, cwd: Path) -> list[tuple[Any, ...]]:
    """Run the four turns; what a page that followed them live shows."""
    shown: list[tuple[Any, ...]] = []
    for text in TURNS:
        events = (await adapter.run(run_body(thread_id=thread_id, text=text, cwd=str(cwd)))).events()
        shown += [("user", text), *applied([], [events])]
    return shown


async def connect(adapter: RunningAdapter, thread_id: str, captures: Path) -> list[list[dict[str, Any]]]:
    """Connect, and judge the stream: run by run, and by ``ag-ui-validate``
    (its command line on the capture, and its pytest helper) with no finding."""
    reply = await adapter.post("/connect", connect_body(thread_id))
    assert reply.status == 200, reply.body
    runs = runs_of(reply.body)
    captures.mkdir(exist_ok=True)
    path = captures / f"{thread_id}-{len(list(captures.iterdir()))}.sse"
    path.write_bytes(reply.body)
    code, _, text = await run_validator(path)
    assert code == 0, text
    assert_valid_agui([event for run in runs for event in run], max_warnings=0)
    return runs


def expect_restored(hydrate: list[dict[str, Any]], live: list[tuple[Any, ...]], interrupt: dict[str, Any]) -> None:
    (snapshot,) = [event for event in hydrate if event["type"] == "MESSAGES_SNAPSHOT"]
    MessagesSnapshotEvent.model_validate(snapshot)
    assert applied(snapshot_of(hydrate), []) == live, "every message, in order, as the live streams showed them"
    calls = {call["id"] for item in snapshot["messages"] for call in item.get("toolCalls") or ()}
    results = [item["toolCallId"] for item in snapshot["messages"] if item["role"] == "tool"]
    assert set(results) <= calls and interrupt["toolCallId"] in calls - set(results), (
        "every result meets its call; the call the permission gates waits for its result"
    )
    assert hydrate[-1]["outcome"] == {"type": "interrupt", "interrupts": [interrupt]}


async def test_a_reloaded_page_gets_the_conversation_and_the_pending_permission(
    tmp_path: Path, iac_runtime: IacRuntime, iac_workspace: Path
) -> None:
    config = {"a2a_token": iac_runtime.token, "allowed_cwds": (str(iac_runtime.workspaces_root),)}
    adapter = await start_adapter(tmp_path / "state", iac_runtime.url, **config)
    try:
        live = await converse(adapter, "e-hydrate", iac_workspace)
        reply = await adapter.get("threads/e-hydrate")
        (interrupt,) = reply.json()["pendingInterrupts"]
        (hydrate,) = await connect(adapter, "e-hydrate", tmp_path / "captures")
        expect_restored(hydrate, live, interrupt)
    finally:
        await adapter.close()
    restarted = await start_adapter(tmp_path / "state", iac_runtime.url, **config)
    try:
        (hydrate,) = await connect(restarted, "e-hydrate", tmp_path / "captures")
        expect_restored(hydrate, live, interrupt)
        # The page answers the restored permission; the next reload has the whole turn and nothing pending.
        resume = run_body(thread_id="e-hydrate", text=None, cwd=str(iac_workspace))
        resume["resume"] = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "allow_once"}}]
        resumed = (await restarted.run(resume)).events()
        assert resumed[-1]["outcome"] == {"type": "success"}
        (after,) = await connect(restarted, "e-hydrate", tmp_path / "captures")
        assert applied(snapshot_of(after), []) == applied(snapshot_of(hydrate), [resumed]), (
            "what the page showed after the resume is what a reload shows"
        )
        assert after[-1]["outcome"] == {"type": "success"}
    finally:
        await restarted.close()


async def test_a_connect_during_a_run_shows_every_message_once(
    tmp_path: Path, iac_adapter: RunningAdapter, iac_workspace: Path
) -> None:
    first = (await iac_adapter.run(run_body(thread_id="e-live", text=TURNS[0], cwd=str(iac_workspace)))).events()
    body = run_body(thread_id="e-live", text="[scenario:slow seconds=4] count", cwd=str(iac_workspace))
    streaming = asyncio.ensure_future(iac_adapter.run(body))

    async def running() -> bool:
        reply = await iac_adapter.get("threads/e-live")
        return reply.json()["state"] == "running"

    await eventually(running, "the second turn streams")
    hydrate, followed = await connect(iac_adapter, "e-live", tmp_path / "captures")
    own = (await streaming).events()
    assert followed == own, "the run in progress, from its start, as its own client got it"
    shown = applied(snapshot_of(hydrate), [followed])
    assert shown == [("user", TURNS[0]), *applied([], [first]), ("user", body["messages"][0]["content"]),
                     *applied([], [own])], "no message twice, none missing"


async def test_a_connect_during_a_resume_shows_the_answered_tool_once(
    tmp_path: Path, iac_adapter: RunningAdapter, iac_workspace: Path
) -> None:
    """The resumed run streams the tool's result, then (a stall later) the
    reply: a connect in between gets the turn up to the call, then the run."""
    text = "[scenario:bashes n=1 file=log.txt stall=3] append"
    asked = (await iac_adapter.run(run_body(thread_id="e-resume", text=text, cwd=str(iac_workspace)))).events()
    (interrupt,) = asked[-1]["outcome"]["interrupts"]
    resume = run_body(thread_id="e-resume", text=None, cwd=str(iac_workspace))
    resume["resume"] = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "allow_once"}}]
    streaming = asyncio.ensure_future(iac_adapter.run(resume))

    async def ran() -> bool:
        return (iac_workspace / "log.txt").exists()

    await eventually(ran, "the answered command runs")
    hydrate, followed = await connect(iac_adapter, "e-resume", tmp_path / "captures")
    own = (await streaming).events()
    assert followed == own and own[-1]["outcome"] == {"type": "success"}
    before = snapshot_of(hydrate)
    assert ("tool", interrupt["toolCallId"]) not in applied(before, []), "the result is the followed run's to show"
    shown = applied(before, [followed])
    assert shown == [("user", text), *applied([], [asked, own])], "no message twice, none missing"
    assert shown.count(("tool", interrupt["toolCallId"])) == 1
    (later,) = await connect(iac_adapter, "e-resume", tmp_path / "captures")
    assert applied(snapshot_of(later), []) == shown, "what a reload after the end shows"


async def test_after_a_runtime_restart_the_permission_comes_back_and_history_says_unavailable(
    own_runtime: IacRuntime, tmp_path: Path
) -> None:
    adapter = await start_adapter(tmp_path / "state", own_runtime.url, a2a_token=own_runtime.token,
                                  allowed_cwds=(str(own_runtime.workspaces_root),))
    try:
        cwd = own_runtime.workspace("connect-restart")
        body = run_body(thread_id="e-restart", text=TURNS[3], cwd=str(cwd))
        (interrupt,) = (await adapter.run(body)).events()[-1]["outcome"]["interrupts"]
        await own_runtime.restart()  # iac-code's recovery route answers 404 until the thread's next turn
        (hydrate,) = await connect(adapter, "e-restart", tmp_path / "captures")
    finally:
        await adapter.close()
    assert [event["type"] for event in hydrate] == ["RUN_STARTED", "CUSTOM", "RUN_FINISHED"], (
        "no snapshot: an empty one would erase the page's conversation"
    )
    assert hydrate[1]["name"] == "iac-code.history.v1" and hydrate[1]["value"]["code"] == "HISTORY_UNAVAILABLE"
    assert "retryAfterSeconds" not in hydrate[1]["value"], "after a restart only the thread's next turn helps"
    assert hydrate[-1]["outcome"] == {"type": "interrupt", "interrupts": [interrupt]}


async def test_a_reloaded_pipeline_shows_where_it_stands_and_what_it_waits_for(
    tmp_path: Path, iac_adapter: RunningAdapter, iac_workspace: Path, model_stub: ModelStub
) -> None:
    from tests.e2e.test_pipeline_e2e import Client
    from tests.support.pipeline_script import scenario

    plan = scenario("direct")

    async def post(body: dict[str, Any]) -> bytes:
        reply = await iac_adapter.run(body)
        assert reply.status == 200, reply.body
        return reply.body

    with model_stub.use_pipeline_script(plan.script, plan.name):
        first = await Client(post, plan, "e-pipeline", iac_workspace).start()
        (hydrate,) = await connect(iac_adapter, "e-pipeline", tmp_path / "captures")
    interrupts = first[-1]["outcome"]["interrupts"]
    assert interrupts and hydrate[-1]["outcome"] == {"type": "interrupt", "interrupts": interrupts}
    (activity,) = [event for event in hydrate if event["type"] == "ACTIVITY_SNAPSHOT"]
    assert activity["activityType"] == "iac-code.pipeline.v1" and activity["replace"] is True
    snapshot = activity["content"]["snapshot"]
    assert snapshot and activity["messageId"] == f"pipeline:{activity['content']['pipelineRunId']}"
    (said,) = [event for event in hydrate if event["type"] == "CUSTOM"]
    assert said["name"] == "iac-code.history.v1" and "retryAfterSeconds" not in said["value"], (
        "iac-code keeps no pipeline conversation in the session: said so, never shown as an empty one"
    )
