"""Prove the e2e harness: the real `iac-code a2a`, driven by the model stub,
spoken to directly in A2A 1.0 JSON-RPC (no adapter involved)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from tests.support.eventually import eventually
from tests.support.iac_runtime import IacRuntime, permission_answer, user_message
from tests.support.model_stub import NORMAL_TEXT, ModelStub, written_content

INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"


# ---------------------------------------------------------------- stream reading


def updates(responses: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``statusUpdate`` objects, after checking nothing came back as an error."""
    errors = [r["error"] for r in responses if "error" in r]
    assert not errors, errors
    return [r["result"]["statusUpdate"] for r in responses if "statusUpdate" in r["result"]]


def iac(update: dict[str, Any]) -> dict[str, Any]:
    return dict(update.get("metadata", {}).get("iac_code", {}))


def text_deltas(responses: list[dict[str, Any]]) -> list[str]:
    """Streamed assistant text, without the final repeat marked ``assistantFinal``."""
    return [
        part["text"]
        for u in updates(responses)
        if "message" in u["status"] and "assistantFinal" not in iac(u)
        for part in u["status"]["message"]["parts"]
        if "text" in part
    ]


def final_update(responses: list[dict[str, Any]]) -> dict[str, Any]:
    return updates(responses)[-1]


def required_input(update: dict[str, Any]) -> dict[str, Any] | None:
    envelope = iac(update).get("input")
    return envelope if envelope and envelope.get("required") else None


def tool_events(responses: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [iac(u)["tool"] for u in updates(responses) if "tool" in iac(u)]


def assert_turn_ended(responses: list[dict[str, Any]]) -> None:
    """A finished iac-code turn: INPUT_REQUIRED with nothing pending."""
    last = final_update(responses)
    assert last["status"]["state"] == INPUT_REQUIRED
    assert required_input(last) is None


def tagged(scenario: str) -> tuple[str, str]:
    """User text with a unique tag, so the stub's records can be told apart."""
    tag = f"tag-{uuid.uuid4().hex[:10]}"
    return f"{scenario} {tag}", tag


def new_context() -> str:
    return f"ctx-{uuid.uuid4().hex}"


# ---------------------------------------------------------------- tests


async def test_normal_turn_streams_text_and_ends_without_pending_input(
    iac_runtime: IacRuntime, model_stub: ModelStub, iac_workspace: Path
) -> None:
    text, tag = tagged("[scenario:normal]")
    responses = await iac_runtime.send_streaming(user_message(text, new_context(), iac_workspace))

    assert "task" in responses[0]["result"]  # a new task per turn
    deltas = text_deltas(responses)
    assert len(deltas) > 1 and "".join(deltas) == NORMAL_TEXT
    assert_turn_ended(responses)
    assert len(model_stub.calls_with(tag)) == 1


async def test_second_turn_request_carries_the_first_turn(
    iac_runtime: IacRuntime, model_stub: ModelStub, iac_workspace: Path
) -> None:
    context = new_context()
    first, tag = tagged("[scenario:normal]")
    await iac_runtime.send_streaming(user_message(first, context, iac_workspace))
    responses = await iac_runtime.send_streaming(user_message("again", context, iac_workspace))

    assert_turn_ended(responses)
    first_call, second_call = model_stub.calls_with(tag)  # turn 2 repeats turn 1's text
    messages = second_call.body["messages"]
    assert [m["role"] for m in messages[-3:]] == ["user", "assistant", "user"]
    assert messages[-1]["content"] == "again"
    assert first_call.body["messages"][-1]["content"] == first


async def test_reasoning_arrives_as_raw_thinking(
    iac_runtime: IacRuntime, iac_workspace: Path
) -> None:
    text, _ = tagged("[scenario:reasoning]")
    responses = await iac_runtime.send_streaming(user_message(text, new_context(), iac_workspace))

    thinking = [iac(u)["thinking"] for u in updates(responses) if "thinking" in iac(u)]
    assert thinking and {t["type"] for t in thinking} == {"raw_thinking"}
    assert_turn_ended(responses)


async def test_readonly_tool_runs_without_permission_and_shows_tool_events(
    iac_runtime: IacRuntime, model_stub: ModelStub, iac_workspace: Path
) -> None:
    (iac_workspace / "main.tf").write_text("# empty\n")
    text, tag = tagged("[scenario:readonly-tool]")
    responses = await iac_runtime.send_streaming(user_message(text, new_context(), iac_workspace))

    events = tool_events(responses)
    statuses = [e["status"] for e in events]
    assert statuses[0] == "started" and events[0]["name"] == "list_files"
    assert "input_delta" in statuses and statuses[-1] == "completed"
    complete = next(e for e in events if e["status"] == "input_complete")
    assert complete["toolInput"] == {"path": "."}
    assert "main.tf" in events[-1]["result"]
    assert "".join(text_deltas(responses)).startswith("Finished: ")
    assert_turn_ended(responses)
    assert [c.reply for c in model_stub.calls_with(tag)] == ["readonly-tool", "tool-result"]


async def test_permission_interrupt_then_allow_once_writes_the_file_once(
    iac_runtime: IacRuntime, model_stub: ModelStub, iac_workspace: Path
) -> None:
    text, tag = tagged("[scenario:permission file=x.txt]")
    asked = await iac_runtime.send_streaming(user_message(text, new_context(), iac_workspace))

    last = final_update(asked)
    envelope = required_input(last)
    assert last["status"]["state"] == INPUT_REQUIRED and envelope is not None
    assert envelope["kind"] == "permission" and envelope["toolName"] == "write_file"
    assert envelope["target"] == "x.txt" and envelope["requestTaskId"] == last["taskId"]
    assert {o["id"] for o in envelope["options"]} >= {"allow_once", "deny"}
    assert not (iac_workspace / "x.txt").exists()

    answered = await iac_runtime.send_streaming(
        permission_answer(envelope, "allow_once", iac_workspace)
    )

    first = updates(answered)[0]
    assert iac(first)["inputReceived"]["inputId"] == envelope["inputId"]
    completed = [e for e in tool_events(answered) if e["status"] == "completed"]
    assert [e["name"] for e in completed] == ["write_file"]
    assert_turn_ended(answered)
    assert (iac_workspace / "x.txt").read_text() == written_content("x.txt")
    assert [c.reply for c in model_stub.calls_with(tag)] == ["permission", "tool-result"]


async def test_slow_turn_can_be_cancelled_and_the_stub_sees_the_hang_up(
    iac_runtime: IacRuntime, model_stub: ModelStub, iac_workspace: Path
) -> None:
    """The `slow` scenario is meant for disconnect/cancel tests: check that a
    cancel ends the stream and the stub records the model call as cut off."""
    text, tag = tagged("[scenario:slow seconds=5]")
    stream = iac_runtime.stream(user_message(text, new_context(), iac_workspace))
    task_id = (await anext(stream))["result"]["task"]["id"]
    [call] = await model_stub.wait_for_calls(tag)

    canceled = await iac_runtime.rpc("CancelTask", {"id": task_id})
    assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    rest = [response async for response in stream]  # the server closes the stream
    assert updates(rest)[-1]["status"]["state"] == "TASK_STATE_CANCELED"
    await eventually(lambda: call.outcome == "disconnected", "iac-code drops the model stream of the cancelled task")
