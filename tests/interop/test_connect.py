"""A reloaded client gets its thread back: ``POST /connect`` as the official client applies it.

``drive.mjs`` gives ``@ag-ui/client`` 1.0.0's ``HttpAgent`` the small
``connect()`` of ``examples/browser/static/connect-agent.mjs`` (POST
``{url}/connect``; the client has ``connectAgent()`` but no transport for it),
so the hydrate stream goes through the same ``enforceEvents`` →
``verifyEvents`` → reducer as a run. A fresh agent on the thread (a reloaded
page) must end up holding what the agent that lived through the turns held:
the messages, the tool call paired with its result, the pending approval,
which it then answers with the client's own resume. Every connect stream is
also judged by ``ag-ui-validate`` (CLI and pytest helper, no rule off) and
parsed with the ``ag-ui-protocol`` models (``tests/support/validation.py``).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from ag_ui_validate.pytest_plugin import assert_valid_agui

from aguiadapter.demo.runtime import DemoRuntime
from tests.support.adapter import RunningAdapter, run_body, start_adapter
from tests.support.agui import parse_sse
from tests.support.connect import runs_of
from tests.support.flaky_link import flaky_link
from tests.support.validation import run_validator, validate

from .conftest import client_warnings, drive, iac_props

ALLOW = {"status": "resolved", "payload": {"decision": "allow_once"}}


def accepted(summary: dict[str, Any]) -> None:
    """The client verified every stream it got, refused nothing and logged nothing."""
    assert summary["client"] == {"@ag-ui/client": "1.0.0", "@ag-ui/core": "1.0.0"}
    assert summary["verificationErrors"] == [] and summary["errors"] == [], summary["errors"]
    assert client_warnings(summary) == []


def step(summary: dict[str, Any], kind: str, nth: int = 0) -> dict[str, Any]:
    return [item for item in summary["steps"] if item["kind"] == kind][nth]


def conversation(messages: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """What a person reads of a message list: role and text, tool calls by name and arguments."""
    seen: list[tuple[str, Any]] = []
    for message in messages:
        if message["role"] == "assistant":
            if message.get("content"):
                seen.append(("assistant", message["content"]))
            for call in message.get("toolCalls", []):
                seen.append(("call", (call["id"], call["function"]["name"], json.loads(call["function"]["arguments"]))))
        elif message["role"] == "tool":
            seen.append(("result", (message["toolCallId"], message["content"])))
        else:
            seen.append((message["role"], message["content"]))
    return seen


async def test_a_fresh_client_connects_gets_the_thread_back_and_answers_the_approval(
    node: str, adapter: RunningAdapter, demo: DemoRuntime, workspace: Path, tmp_path: Path
) -> None:
    props = iac_props(workspace)
    lived = await drive(node, adapter.url, "k-reload", props, [
        {"say": "hello", "id": "u1"},
        {"say": "tool", "id": "u2"},
        {"say": "permission notes.txt", "id": "u3"},
    ])
    accepted(lived)
    (interrupt,) = lived["pendingInterrupts"]

    reloaded = await drive(node, adapter.url, "k-reload", props, [{"connect": True}, {"resume": ALLOW}])
    accepted(reloaded)
    connect = step(reloaded, "connect")
    assert connect["connectStatus"] == 200 and connect["exchanges"][0]["url"] == adapter.url + "connect"
    assert connect["request"]["threadId"] == "k-reload" and connect["request"]["runId"] == connect["runId"]
    assert connect["eventTypes"] == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    # The fresh agent holds what the one that lived through the turns held:
    # every message in order, each tool call with its result, the approval.
    restored = connect["events"][1]["messages"]
    assert conversation(restored) == conversation(lived["messages"])
    assert connect["outcome"] == {"type": "interrupt", "interrupts": [interrupt]}
    assert connect["pendingInterruptsAfter"] == [interrupt]
    calls = [call for kind, call in conversation(restored) if kind == "call"]
    results = [result for kind, result in conversation(restored) if kind == "result"]
    assert [name for _, name, _ in calls] == ["list_files", "write_file"]
    assert [tool_call_id for tool_call_id, _ in results] == [calls[0][0]], "the waiting call has no result yet"
    assert interrupt["toolCallId"] == calls[1][0]

    # The answer from the reloaded client goes through; the tool runs once.
    resumed = step(reloaded, "resume")
    assert resumed["httpStatus"] == 200 and resumed["outcome"] == {"type": "success"}
    assert resumed["request"]["resume"][0]["interruptId"] == interrupt["id"]
    assert demo.state.tool_runs["write_file"] == 1
    assert reloaded["pendingInterrupts"] == []
    assert "notes.txt was written" in conversation(reloaded["messages"])[-1][1]

    # ag-ui-validate and the ag-ui-protocol models on the hydrate stream.
    await validate(tmp_path, "connect-waiting", connect["sse"].encode())

    # Connected again after the answer: the whole thread, nothing pending.
    after = await drive(node, adapter.url, "k-reload", props, [{"connect": True}])
    accepted(after)
    again = step(after, "connect")
    assert again["outcome"] == {"type": "success"} and after["pendingInterrupts"] == []
    assert conversation(after["messages"])[: len(conversation(restored))] == conversation(restored)
    assert [kind for kind, _ in conversation(after["messages"])][-2:] == ["result", "assistant"]
    await validate(tmp_path, "connect-finished", again["sse"].encode())


async def test_an_unknown_thread_has_no_history_and_the_client_starts_afresh(
    node: str, adapter: RunningAdapter, workspace: Path
) -> None:
    summary = await drive(node, adapter.url, "k-never-seen", iac_props(workspace), [{"connect": True}, {"say": "hello"}])
    accepted(summary)
    connect = step(summary, "connect")
    assert connect["connectStatus"] == 404 and connect["eventTypes"] == []
    assert step(summary, "say")["outcome"] == {"type": "success"}
    assert summary["roles"] == ["user", "assistant"]


async def test_a_client_that_connects_during_a_run_gets_the_run_live_to_its_end_once(
    node: str, adapter: RunningAdapter, workspace: Path, tmp_path: Path
) -> None:
    """Connect while ``slow 3`` streams: the snapshot stops at the run's user
    message, the hydrate run closes, and the run goes on in the same stream
    from its ``RUN_STARTED``: every delta once, in order, and the run's end."""
    body = run_body(thread_id="k-live", text="slow 3", cwd=str(workspace))
    running = asyncio.create_task(adapter.run(body))
    for _ in range(100):
        thread = json.loads((await adapter.get("threads/k-live")).body)
        if thread.get("state") == "running":
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("the run never started")

    summary = await drive(node, adapter.url, "k-live", iac_props(workspace), [{"connect": True}], resumable=True)
    original = await running
    accepted(summary)
    connect = step(summary, "connect")
    types = connect["eventTypes"]
    assert types[:3] == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    assert types[3] == "RUN_STARTED" and types[-1] == "RUN_FINISHED"
    assert connect["events"][3]["runId"] == body["runId"], "the live run is the thread's run"
    assert connect["events"][1]["messages"][-1]["role"] == "user", "the snapshot stops where the run starts"
    ticks = "".join(f"tick {n}. " for n in range(1, 16))
    assert [(role, text) for role, text in conversation(summary["messages"])] == [("user", "slow 3"), ("assistant", ticks)]
    # The live part is the run's own stream, event for event.
    live, _ = parse_sse(original.body)
    assert connect["events"][3:] == live
    assert summary["reattaches"] == []
    # ag-ui-validate on the whole stream (two runs); each run judged as one (its ids: runs_of).
    capture = tmp_path / "connect-live.sse"
    capture.write_bytes(connect["sse"].encode())
    code, _, report = await run_validator(capture)
    assert code == 0, report
    assert_valid_agui([event for run in runs_of(capture.read_bytes()) for event in run], max_warnings=0)


async def test_after_a_runtime_restart_the_client_gets_the_approval_and_the_history_notice(
    node: str, tmp_path: Path, workspace: Path
) -> None:
    """The runtime lost the session: no snapshot (an empty one would erase
    the page), the ``iac-code.history.v1`` notice instead, and the pending
    approval restored all the same."""
    demo = DemoRuntime()
    url = await demo.start()
    port = int(url.rstrip("/").rsplit(":", 1)[1])
    adapter = await start_adapter(tmp_path / "state", url, allowed_cwds=(str(tmp_path / "workspaces"),),
                                  history_cache_seconds=0)
    restarted = DemoRuntime()
    try:
        props = iac_props(workspace)
        lived = await drive(node, adapter.url, "k-restart", props, [{"say": "permission notes.txt"}])
        accepted(lived)
        (interrupt,) = lived["pendingInterrupts"]
        await demo.close()
        await restarted.start(port=port)  # a new process: it knows no session
        summary = await drive(node, adapter.url, "k-restart", props, [{"connect": True}])
    finally:
        await adapter.close()
        await restarted.close()
        await demo.close()
    accepted(summary)
    connect = step(summary, "connect")
    assert connect["eventTypes"] == ["RUN_STARTED", "CUSTOM", "RUN_FINISHED"]
    notice = connect["events"][1]
    assert notice["name"] == "iac-code.history.v1" and notice["value"]["status"] == "unavailable"
    assert summary["messages"] == [] and summary["pendingInterrupts"] == [interrupt]
    await validate(tmp_path, "connect-no-history", connect["sse"].encode())


async def test_a_connect_broken_inside_the_followed_run_re_attaches_to_that_run(
    node: str, demo: DemoRuntime, workspace: Path, tmp_path: Path
) -> None:
    """The browser example's ``resumableFetch`` reads a connect past the
    hydrate run's end; broken inside the followed run, it re-attaches to that
    run (its ``runId``, the last id it got) and the agent reads on, once."""
    adapter = await start_adapter(tmp_path / "state", demo.url, allowed_cwds=(str(tmp_path / "workspaces"),),
                                  disconnect_grace_seconds=30.0)
    try:
        body = run_body(thread_id="k-broken", text="slow 3", cwd=str(workspace))
        running = asyncio.create_task(adapter.run(body))
        for _ in range(100):
            if json.loads((await adapter.get("threads/k-broken")).body).get("state") == "running":
                break
            await asyncio.sleep(0.05)
        port = int(adapter.url.rstrip("/").rsplit(":", 1)[1])
        async with flaky_link(port, b"tick 9.") as link:
            summary = await drive(node, f"http://127.0.0.1:{link.port}/", "k-broken", iac_props(workspace),
                                  [{"connect": True}], resumable=True)
            assert link.cut.is_set(), "the link broke"
        await running
    finally:
        await adapter.close()
    accepted(summary)
    connect = step(summary, "connect")
    post, again = connect["exchanges"]
    assert (post["method"], again["method"], again["status"]) == ("POST", "GET", 200)
    assert again["url"].endswith(f"/threads/k-broken/runs/{body['runId']}/events")
    (reattach,) = summary["reattaches"]
    assert reattach["runId"] == body["runId"] and reattach["lastEventId"] == again["lastEventId"] is not None
    ticks = "".join(f"tick {n}. " for n in range(1, 16))
    assert conversation(summary["messages"]) == [("user", "slow 3"), ("assistant", ticks)]
    assert connect["eventTypes"].count("RUN_STARTED") == 2 and connect["eventTypes"][-1] == "RUN_FINISHED"
    assert len(demo.state.tasks) == 1 and demo.state.total_cancel_calls == 0
