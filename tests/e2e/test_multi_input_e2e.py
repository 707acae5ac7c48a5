"""Several inputs in one turn, against the real `iac-code a2a`: each one is
shown when raised and each answer is applied exactly once.

iac-code's ``GetTask`` keeps naming a task's first input after a second one
is raised (and after the turn ended), so these tests are where an adapter
that trusted it would report a second answer applied without sending it.
The scripted model's ``bashes`` scenario runs N permissioned commands one
after the other, the k-th appending ``k`` to a log file: the file says which
commands ran, and how often.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.adapter import RunningAdapter, run_body
from tests.support.agui import check_stream, interrupts_of


def turn_body(thread_id: str, cwd: Path, commands: int, log_name: str = "log.txt") -> dict[str, Any]:
    text = f"[scenario:bashes n={commands} file={log_name}] run them one by one"
    return run_body(thread_id=thread_id, text=text, cwd=str(cwd))


def answer_body(thread_id: str, cwd: Path, interrupt_id: str, decision: str = "allow_once") -> dict[str, Any]:
    body = run_body(thread_id=thread_id, text=None, cwd=str(cwd))
    body["resume"] = [{"interruptId": interrupt_id, "status": "resolved", "payload": {"decision": decision}}]
    return body


def ran(cwd: Path, log_name: str = "log.txt") -> list[str]:
    """The commands that ran, in order, one line each (a repeat shows twice)."""
    path = cwd / log_name
    return path.read_text().split() if path.exists() else []


async def post_events(adapter: RunningAdapter, body: dict[str, Any]) -> list[dict[str, Any]]:
    reply = await adapter.run(body)
    assert reply.status == 200, reply.body[:500]
    return check_stream(reply.body)


@pytest.mark.parametrize("commands", [2, 3, 5])
async def test_each_permission_of_a_turn_is_shown_and_applied_once(
    iac_adapter: RunningAdapter, iac_workspace: Path, commands: int
) -> None:
    thread_id = f"multi-{commands}-{uuid.uuid4().hex[:8]}"
    events = await post_events(iac_adapter, turn_body(thread_id, iac_workspace, commands))
    shown: list[str] = []
    for step in range(1, commands + 1):
        assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"]["type"] == "interrupt", events[-1]
        (interrupt,) = interrupts_of(events)
        assert interrupt["id"] not in shown, "an answered input is never shown again"
        assert f"echo {step} >>" in str(interrupt), "each interrupt names the command it gates"
        shown.append(interrupt["id"])
        status = (await iac_adapter.get(f"/threads/{thread_id}")).json()
        assert [item["id"] for item in status["pendingInterrupts"]] == [interrupt["id"]]
        assert ran(iac_workspace) == [str(k) for k in range(1, step)], "nothing runs before its answer"
        events = await post_events(iac_adapter, answer_body(thread_id, iac_workspace, interrupt["id"]))
        results = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
        assert [e["toolCallId"] for e in results] == [interrupt["toolCallId"]], "the answered command's result"
    assert events[-1]["outcome"] == {"type": "success"}, events[-1]
    assert ran(iac_workspace) == [str(k) for k in range(1, commands + 1)], "every command ran exactly once"
    status = (await iac_adapter.get(f"/threads/{thread_id}")).json()
    assert status["state"] == "idle" and status["pendingInterrupts"] == []


async def test_a_denied_second_permission_runs_only_the_first(
    iac_adapter: RunningAdapter, iac_workspace: Path
) -> None:
    thread_id = f"multi-deny-{uuid.uuid4().hex[:8]}"
    events = await post_events(iac_adapter, turn_body(thread_id, iac_workspace, 2))
    (first,) = interrupts_of(events)
    events = await post_events(iac_adapter, answer_body(thread_id, iac_workspace, first["id"]))
    (second,) = interrupts_of(events)
    events = await post_events(iac_adapter, answer_body(thread_id, iac_workspace, second["id"], "deny"))
    assert events[-1]["outcome"] == {"type": "success"}
    assert ran(iac_workspace) == ["1"]


async def test_a_repeated_answer_to_the_first_input_neither_reruns_it_nor_hides_the_second(
    iac_adapter: RunningAdapter, iac_workspace: Path
) -> None:
    thread_id = f"multi-repeat-{uuid.uuid4().hex[:8]}"
    events = await post_events(iac_adapter, turn_body(thread_id, iac_workspace, 2))
    (first,) = interrupts_of(events)
    answer = answer_body(thread_id, iac_workspace, first["id"])
    events = await post_events(iac_adapter, answer)
    (second,) = interrupts_of(events)
    again = await iac_adapter.run({**answer, "runId": f"run-{uuid.uuid4()}"})
    assert again.status == 409 and again.json()["error"]["code"] == "RESUME_ALREADY_APPLIED"
    status = (await iac_adapter.get(f"/threads/{thread_id}")).json()
    assert [item["id"] for item in status["pendingInterrupts"]] == [second["id"]]
    events = await post_events(iac_adapter, answer_body(thread_id, iac_workspace, second["id"]))
    assert events[-1]["outcome"] == {"type": "success"}
    assert ran(iac_workspace) == ["1", "2"]
