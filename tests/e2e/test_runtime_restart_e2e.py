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
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.e2e.crash_harness import CrashRig, resume_body
from tests.e2e.test_multi_input_e2e import answer_body, post_events, ran, turn_body
from tests.support.a2a_proxy import A2AProxy, Instant
from tests.support.adapter import RunningAdapter, run_body, start_adapter
from tests.support.agui import interrupts_of
from tests.support.eventually import eventually
from tests.support.iac_runtime import IacRuntime


async def serving(a2a_url: str, runtime: IacRuntime, tmp_path: Path) -> AsyncIterator[RunningAdapter]:
    """An adapter in front of ``a2a_url`` (the runtime, or a proxy before it)."""
    running = await start_adapter(
        tmp_path / "state", a2a_url, a2a_token=runtime.token, allowed_cwds=(str(runtime.workspaces_root),)
    )
    try:
        yield running
    finally:
        await running.close()


@pytest.fixture
async def adapter(own_runtime: IacRuntime, tmp_path: Path) -> AsyncIterator[RunningAdapter]:
    async for running in serving(own_runtime.url, own_runtime, tmp_path):
        yield running


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


#: What the client is told when it retries its answer after the runtime was
#: killed at each instant of the answer's exchange, and restarted. The
#: runtime keeps no receipt across a restart, and answered again it carries
#: a decision it had begun out a second time: an answer it may have had is
#: never sent again.
RETRY_AFTER_RESTART = {
    # The adapter saw the runtime take the answer: it was applied.
    Instant.TOOL_RUNNING: (409, "RESUME_ALREADY_APPLIED", ["1"]),
    # The runtime took it and ran the command, the adapter saw nothing of it.
    Instant.AFTER_SENT: (409, "EXECUTION_LOST", ["1"]),
    # The request never reached the runtime, but the adapter cannot know:
    # its connection broke after the request went out.
    Instant.BEFORE_SENT: (409, "EXECUTION_LOST", []),
}


@pytest.fixture
async def proxy(own_runtime: IacRuntime) -> AsyncIterator[A2AProxy]:
    async with A2AProxy(own_runtime.url) as running:
        yield running


@pytest.fixture
async def proxied_adapter(proxy: A2AProxy, own_runtime: IacRuntime, tmp_path: Path) -> AsyncIterator[RunningAdapter]:
    async for running in serving(proxy.url, own_runtime, tmp_path):
        yield running


@pytest.mark.parametrize("instant", list(RETRY_AFTER_RESTART), ids=lambda instant: instant.value)
async def test_an_answer_the_runtime_may_have_had_when_it_died_is_never_applied_twice(
    proxied_adapter: RunningAdapter, proxy: A2AProxy, own_runtime: IacRuntime, instant: Instant
) -> None:
    adapter = proxied_adapter
    # The model stalls after the command's result: the runtime dies with the
    # turn unfinished.
    thread_id, cwd, interrupt_id = await ask(adapter, own_runtime, f"restart-{instant.value}", stall="20")

    async def kill_the_runtime() -> None:
        if instant is not Instant.BEFORE_SENT:
            await eventually(lambda: ran(cwd) == ["1"], "the approved command ran", timeout=20)
        await own_runtime.restart()

    trap = proxy.arm(instant, kill_the_runtime)
    cut = await adapter.run(answer_body(thread_id, cwd, interrupt_id))
    assert trap.fired.is_set(), cut.body[-300:]
    assert cut.events()[-1]["type"] == "RUN_ERROR" and cut.events()[-1]["code"] == "A2A_UNAVAILABLE"
    status, code, runs = RETRY_AFTER_RESTART[instant]
    again = await adapter.run(answer_body(thread_id, cwd, interrupt_id))
    assert again.status == status and again.json()["error"]["code"] == code, again.body[:300]
    assert ran(cwd) == runs, "never run twice"
    thread = (await adapter.get(f"/threads/{thread_id}")).json()
    assert thread["state"] == "terminal" and thread["pendingInterrupts"] == [], thread
    once_more = await adapter.run(answer_body(thread_id, cwd, interrupt_id))
    assert once_more.status == status and once_more.json()["error"]["code"] == code, "the same truth again"
    assert ran(cwd) == runs
    next_turn = run_body(thread_id=thread_id, text="[scenario:normal] and now?", cwd=str(cwd))
    events = await post_events(adapter, next_turn)
    assert events[-1]["outcome"] == {"type": "success"}, "the thread is usable again"


async def test_the_second_answer_of_a_turn_in_doubt_after_a_restart_is_never_applied_twice(
    proxied_adapter: RunningAdapter, proxy: A2AProxy, own_runtime: IacRuntime
) -> None:
    # Two permissions in a row: the first is applied normally; the runtime
    # dies after running the second command, before the adapter saw any
    # receipt of the second answer.
    adapter = proxied_adapter
    thread_id = f"restart-second-{uuid.uuid4().hex[:8]}"
    cwd = own_runtime.workspace("restart-second")
    (first,) = interrupts_of(await post_events(adapter, turn_body(thread_id, cwd, 2)))
    (second,) = interrupts_of(await post_events(adapter, answer_body(thread_id, cwd, str(first["id"]))))
    assert ran(cwd) == ["1"]

    async def kill_the_runtime() -> None:
        await eventually(lambda: ran(cwd) == ["1", "2"], "the second command ran", timeout=20)
        await own_runtime.restart()

    trap = proxy.arm(Instant.AFTER_SENT, kill_the_runtime)
    cut = await adapter.run(answer_body(thread_id, cwd, str(second["id"])))
    assert trap.fired.is_set() and cut.events()[-1]["code"] == "A2A_UNAVAILABLE", cut.body[-300:]
    again = await adapter.run(answer_body(thread_id, cwd, str(second["id"])))
    assert again.status == 409 and again.json()["error"]["code"] == "EXECUTION_LOST", again.body[:300]
    first_again = await adapter.run(answer_body(thread_id, cwd, str(first["id"])))
    assert first_again.status == 409 and first_again.json()["error"]["code"] == "RESUME_ALREADY_APPLIED"
    assert ran(cwd) == ["1", "2"], "each command once"


async def test_an_answer_whose_stream_broke_is_followed_on_a_runtime_that_kept_running(
    proxied_adapter: RunningAdapter, proxy: A2AProxy, own_runtime: IacRuntime
) -> None:
    # The link breaks before the adapter sees anything of the answer's
    # stream; the runtime took it and goes on. The retry asks it, and
    # follows the turn to its end instead of answering twice.
    adapter = proxied_adapter
    thread_id, cwd, interrupt_id = await ask(adapter, own_runtime, "link-cut")

    async def command_ran() -> None:
        await eventually(lambda: ran(cwd) == ["1"], "the approved command ran", timeout=20)

    trap = proxy.arm(Instant.AFTER_SENT, command_ran)
    cut = await adapter.run(answer_body(thread_id, cwd, interrupt_id))
    assert trap.fired.is_set() and cut.events()[-1]["code"] == "A2A_UNAVAILABLE", cut.body[-300:]
    events = await post_events(adapter, answer_body(thread_id, cwd, interrupt_id))
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"] == {"type": "success"}, events[-1]
    assert ran(cwd) == ["1"]
    again = await adapter.run(answer_body(thread_id, cwd, interrupt_id))
    assert again.status == 409 and again.json()["error"]["code"] == "RESUME_ALREADY_APPLIED", again.body[:300]


async def test_an_answer_in_flight_when_adapter_and_runtime_both_die_is_never_applied_twice(
    own_runtime: IacRuntime, tmp_path: Path
) -> None:
    # A machine that reboots: the adapter dies with the answer sent and no
    # receipt seen, the runtime dies after running the command. The adapter
    # that comes back finds a dead resume and a runtime that forgot it.
    async with CrashRig(own_runtime, tmp_path) as rig:
        asked = await rig.ask("both-die", 0)

        async def both_die() -> None:
            await eventually(lambda: asked.runs() == 1, "the approved command ran", timeout=20)
            await rig.crash()
            await own_runtime.restart()

        trap = rig.proxy.arm(Instant.AFTER_SENT, both_die)
        since = time.monotonic()
        first = await rig.post(resume_body(asked.thread_id, asked.cwd, asked.interrupt["id"]))
        await asyncio.wait_for(trap.fired.wait(), 30)
        await rig.restarted()
        attempts = [first, *await rig.touch_until_settled(
            lambda: resume_body(asked.thread_id, asked.cwd, asked.interrupt["id"])
        )]  # fmt: skip
        trail = [attempt.label for attempt in attempts]
        assert attempts[-1].code == "EXECUTION_LOST", trail
        runs = await rig.settle(asked, since)
        assert runs == 1, f"the command ran {runs} times; the client: {trail}"
        turn = run_body(thread_id=asked.thread_id, text="[scenario:normal] and now?", cwd=str(asked.cwd))
        assert (await rig.post(turn)).kind == "success", "the thread is usable again"
        assert asked.runs() == 1
