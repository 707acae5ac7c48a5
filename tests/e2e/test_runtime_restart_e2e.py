"""The runtime killed and restarted around a person's answer, against the
real `iac-code a2a`: the answer is applied exactly once, or the client is
told the documented truth, and never success for a command that did not run.

After a restart iac-code's ``GetTask`` is a bare summary (no input, no
execution) and its execution and transcript routes answer 404: nothing
says whether an input waits. The adapter then sends the answer it holds,
and the restarted runtime decides: it takes a permission it still has (and
runs the command once), and refuses or acknowledges as a duplicate one it
took before. Each test runs its own runtime, killed with ``kill -9``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.e2e.test_multi_input_e2e import answer_body, post_events, ran, turn_body
from tests.support.adapter import RunningAdapter, run_body, start_adapter
from tests.support.agui import interrupts_of
from tests.support.eventually import eventually
from tests.support.iac_runtime import IacRuntime


@pytest.fixture
async def adapter(own_runtime: IacRuntime, tmp_path: Path) -> AsyncIterator[RunningAdapter]:
    running = await start_adapter(
        tmp_path / "state", own_runtime.url, a2a_token=own_runtime.token,
        allowed_cwds=(str(own_runtime.workspaces_root),),
    )  # fmt: skip
    try:
        yield running
    finally:
        await running.close()


async def ask(adapter: RunningAdapter, runtime: IacRuntime, name: str, **scenario: str) -> tuple[str, Path, str]:
    """A thread whose turn asks permission for one command: (thread, cwd, interrupt id)."""
    thread_id = f"{name}-{uuid.uuid4().hex[:8]}"
    cwd = runtime.workspace(name)
    body = turn_body(thread_id, cwd, 1)
    if scenario:
        extra = " ".join(f"{key}={value}" for key, value in scenario.items())
        body["messages"][0]["content"] = body["messages"][0]["content"].replace("]", f" {extra}]", 1)
    (interrupt,) = interrupts_of(await post_events(adapter, body))
    return thread_id, cwd, str(interrupt["id"])


async def test_an_answer_after_a_runtime_restart_is_applied_once(
    adapter: RunningAdapter, own_runtime: IacRuntime
) -> None:
    thread_id, cwd, interrupt_id = await ask(adapter, own_runtime, "restart-pending")
    await own_runtime.restart()
    events = await post_events(adapter, answer_body(thread_id, cwd, interrupt_id))
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"] == {"type": "success"}, events[-1]
    assert [e["toolCallId"] for e in events if e["type"] == "TOOL_CALL_RESULT"], "the command's result is shown"
    assert ran(cwd) == ["1"], "the restarted runtime ran the approved command, once"
    again = await adapter.run(answer_body(thread_id, cwd, interrupt_id))
    assert again.status == 409 and again.json()["error"]["code"] == "RESUME_ALREADY_APPLIED"
    assert ran(cwd) == ["1"]


async def test_an_answer_sent_while_the_runtime_is_down_stays_pending_then_applies_once(
    adapter: RunningAdapter, own_runtime: IacRuntime
) -> None:
    thread_id, cwd, interrupt_id = await ask(adapter, own_runtime, "restart-down")
    await own_runtime.kill()
    refused = await adapter.run(answer_body(thread_id, cwd, interrupt_id))
    assert refused.status == 503 and refused.json()["error"]["code"] == "A2A_UNAVAILABLE"
    status = (await adapter.get(f"/threads/{thread_id}")).json()
    assert status["state"] == "interrupted" and [i["id"] for i in status["pendingInterrupts"]] == [interrupt_id]
    await own_runtime.restart()
    events = await post_events(adapter, answer_body(thread_id, cwd, interrupt_id))
    assert events[-1]["outcome"] == {"type": "success"}, events[-1]
    assert ran(cwd) == ["1"]


async def test_an_answer_the_runtime_took_before_it_died_is_already_applied(
    adapter: RunningAdapter, own_runtime: IacRuntime
) -> None:
    # The model stalls after the command's result: the runtime dies with the
    # command run and the turn unfinished.
    thread_id, cwd, interrupt_id = await ask(adapter, own_runtime, "restart-took", stall="20")
    answering = asyncio.ensure_future(adapter.run(answer_body(thread_id, cwd, interrupt_id)))
    await eventually(lambda: ran(cwd) == ["1"], "the approved command ran", timeout=20)
    await own_runtime.restart()
    cut = await answering
    assert cut.events()[-1]["type"] == "RUN_ERROR" and cut.events()[-1]["code"] == "A2A_UNAVAILABLE"
    again = await adapter.run(answer_body(thread_id, cwd, interrupt_id))
    assert again.status == 409 and again.json()["error"]["code"] == "RESUME_ALREADY_APPLIED", again.body[:300]
    assert ran(cwd) == ["1"], "never run twice"
    status = (await adapter.get(f"/threads/{thread_id}")).json()
    assert status["state"] in ("idle", "terminal") and status["pendingInterrupts"] == []
    next_turn = run_body(thread_id=thread_id, text="[scenario:normal] and now?", cwd=str(cwd))
    events = await post_events(adapter, next_turn)
    assert events[-1]["outcome"] == {"type": "success"}, "the thread is usable again"
