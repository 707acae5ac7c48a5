"""The adapter as the official TypeScript client sees it.

Each test starts the adapter in front of the demo runtime (fixtures of
``tests/conftest.py``), runs ``drive.mjs`` — ``HttpAgent`` from
``@ag-ui/client`` 1.0.0, whose ``runAgent`` always passes every event through
``verifyEvents`` — and judges the JSON summary of what the agent ended up
holding. A verification error makes ``runAgent`` reject; the driver records
it, and every test here asserts there was none (``accepted``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from aguiadapter.demo.runtime import DemoRuntime
from tests.support.adapter import RunningAdapter, start_adapter
from tests.support.agui import parse_sse_ids
from tests.support.flaky_link import flaky_link
from tests.support.reattach import joined, whole_events
from tests.support.validation import validate

from .conftest import client_warnings, drive, iac_props

ALLOW = {"status": "resolved", "payload": {"decision": "allow_once"}}
CANCEL = {"status": "cancelled"}


def accepted(summary: dict[str, Any]) -> None:
    """The client verified every stream it got and logged nothing."""
    assert summary["client"] == {"@ag-ui/client": "1.0.0", "@ag-ui/core": "1.0.0"}
    assert summary["verificationErrors"] == [], summary["verificationErrors"]
    assert client_warnings(summary) == []


def runs(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The steps that called ``runAgent``."""
    return [step for step in summary["steps"] if step["kind"] in ("say", "resume", "run")]


def texts_of(summary: dict[str, Any], role: str = "assistant") -> list[str]:
    return [m["content"] for m in summary["messages"] if m["role"] == role and isinstance(m.get("content"), str)]


def sent_texts(demo: DemoRuntime) -> list[str]:
    """The text parts of every user message that reached the runtime."""
    return [part["text"] for m in demo.state.received for part in m["parts"] if "text" in part]


# --------------------------------------------------------------------- (a)


async def test_a_normal_turn(node: str, adapter: RunningAdapter, demo: DemoRuntime, workspace: Path) -> None:
    props = iac_props(workspace)
    summary = await drive(node, adapter.url, "i-normal", props, [{"say": "hello", "id": "u1"}])
    accepted(summary)
    assert summary["errors"] == []
    (run,) = runs(summary)
    request = run["request"]
    assert request["protocolVersion"] == "1.0"
    assert request["forwardedProps"] == props
    assert request["threadId"] == "i-normal" and request["runId"] == run["runId"]
    assert request["messages"] == [{"id": "u1", "role": "user", "content": "hello"}]
    assert run["httpStatus"] == 200
    assert run["eventTypes"][0] == "RUN_STARTED" and run["eventTypes"][-1] == "RUN_FINISHED"
    assert run["outcome"] == {"type": "success"} and run["runError"] is None
    assert summary["roles"] == ["user", "assistant"]
    assert 'You said: "hello"' in texts_of(summary)[0]
    assert summary["pendingInterrupts"] == [] and summary["toolCalls"] == []
    assert sent_texts(demo) == ["hello"]
    # The client verified a stream whose every event carries an id: ids change nothing for it.
    events, ids, _ = parse_sse_ids(run["sse"].encode())
    assert len(ids) == len(events) == len(run["eventTypes"])


@pytest.mark.parametrize("word", ["tool", "think"])
async def test_tool_and_reasoning_turns(node: str, adapter: RunningAdapter, demo: DemoRuntime, workspace: Path, word: str) -> None:
    summary = await drive(node, adapter.url, f"i-{word}", iac_props(workspace), [{"say": word}])
    accepted(summary)
    assert summary["errors"] == []
    if word == "tool":
        assert summary["roles"] == ["user", "assistant", "tool", "assistant"]
        (call,) = summary["toolCalls"]
        assert call["name"] == "list_files" and json.loads(call["arguments"]) == {"path": "."}
        (result,) = summary["toolResults"]
        assert result["toolCallId"] == call["id"] and "README.md" in result["content"]
        assert sum(demo.state.tool_runs.values()) == 1
    else:
        assert summary["roles"] == ["user", "reasoning", "assistant"]
        assert "think" in texts_of(summary, "reasoning")[0]


# --------------------------------------------------------------------- (b)


async def test_an_interrupt_answered_through_the_clients_own_resume(
    node: str, adapter: RunningAdapter, demo: DemoRuntime, workspace: Path
) -> None:
    props = iac_props(workspace)
    steps: list[dict[str, Any]] = [
        {"say": "permission x.txt", "id": "u1"},
        {"run": True},  # leaves the interrupt unanswered: the client refuses it
        {"resume": ALLOW},  # buildResumeArray(agent.pendingInterrupts, ...) + runAgent({runId, forwardedProps, resume})
    ]
    summary = await drive(node, adapter.url, "i-perm", props, steps)
    accepted_but_refusal(summary)
    first, refused, resumed = runs(summary)

    # The interrupt outcome, kept as agent.pendingInterrupts.
    outcome = first["outcome"]
    assert outcome["type"] == "interrupt"
    (interrupt,) = outcome["interrupts"]
    assert first["pendingInterruptsAfter"] == outcome["interrupts"]
    assert interrupt["reason"] == "tool_call" and interrupt["responseSchema"]["required"] == ["decision"]

    # A run that leaves it unanswered never leaves the client.
    assert refused["requestSent"] is False
    assert refused["error"]["constructor"] == "AGUIError"
    assert refused["error"]["message"] == f"Thread has 1 pending interrupt(s) not addressed by resume: {interrupt['id']}"
    assert refused["pendingInterruptsAfter"] == outcome["interrupts"]

    # The resume: same thread and forwardedProps, a new runId, the whole conversation.
    request = resumed["request"]
    assert request["resume"] == [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "allow_once"}}]
    assert request["runId"] == resumed["runId"] != first["runId"]
    assert request["forwardedProps"] == props and request["protocolVersion"] == "1.0"
    assert [m["role"] for m in request["messages"]] == ["user", "assistant", "assistant"]
    assert request["messages"][2]["toolCalls"][0]["id"] == interrupt["toolCallId"]
    assert resumed["outcome"] == {"type": "success"} and resumed["pendingInterruptsAfter"] == []

    # What the agent holds in the end: one tool call, its result right after it, the reply.
    assert summary["roles"] == ["user", "assistant", "assistant", "tool", "assistant"]
    (call,) = summary["toolCalls"]
    assert call["id"] == interrupt["toolCallId"] and json.loads(call["arguments"])["path"] == "x.txt"
    (result,) = summary["toolResults"]
    assert result["toolCallId"] == call["id"] and "Successfully wrote" in result["content"]
    assert "x.txt was written" in texts_of(summary)[-1]
    assert summary["pendingInterrupts"] == []
    assert sum(demo.state.tool_runs.values()) == 1


def accepted_but_refusal(summary: dict[str, Any]) -> None:
    """Like :func:`accepted`, where the only error is the client's own refusal."""
    assert summary["verificationErrors"] == []
    assert [e["message"].split(":")[0] for e in summary["errors"]] == ["Thread has 1 pending interrupt(s) not addressed by resume"]
    assert client_warnings(summary) == []


async def test_a_payload_the_adapter_refuses_leaves_the_interrupt_pending_in_both(
    node: str, adapter: RunningAdapter, demo: DemoRuntime, workspace: Path
) -> None:
    steps: list[dict[str, Any]] = [
        {"say": "permission y.txt"},
        {"resume": {"status": "resolved", "payload": {"decision": "maybe"}}},
        {"resume": ALLOW},
    ]
    summary = await drive(node, adapter.url, "i-bad", iac_props(workspace), steps)
    first, bad, good = runs(summary)
    assert summary["verificationErrors"] == []
    # HTTP 400 before any stream: runAgent rejects with the status and the JSON body.
    assert bad["httpStatus"] == 400 and bad["eventTypes"] == []
    assert bad["error"]["status"] == 400 and bad["error"]["payload"]["error"]["code"] == "RESUME_PAYLOAD_INVALID"
    assert bad["pendingInterruptsAfter"] == first["pendingInterruptsAfter"] != []
    assert good["outcome"] == {"type": "success"} and summary["pendingInterrupts"] == []
    assert sum(demo.state.tool_runs.values()) == 1
    # The client logs the failed run (console.error), and nothing else.
    assert [line["text"].split(":")[0] for line in summary["console"]] == ["Agent execution failed"]


# --------------------------------------------------------------------- (c)


async def test_a_cancelled_permission_is_a_deny(node: str, adapter: RunningAdapter, demo: DemoRuntime, workspace: Path) -> None:
    summary = await drive(node, adapter.url, "i-deny", iac_props(workspace), [{"say": "permission z.txt"}, {"resume": CANCEL}])
    accepted(summary)
    assert summary["errors"] == []
    first, resumed = runs(summary)
    (interrupt,) = first["outcome"]["interrupts"]
    assert resumed["request"]["resume"] == [{"interruptId": interrupt["id"], "status": "cancelled"}]
    assert resumed["outcome"] == {"type": "success"}
    (result,) = summary["toolResults"]
    assert result["toolCallId"] == interrupt["toolCallId"] and "denied" in result["content"].lower()
    assert summary["pendingInterrupts"] == []
    assert sum(demo.state.tool_runs.values()) == 0


async def test_a_cancelled_question_ends_as_a_cancelled_run_the_client_moves_past(
    node: str, adapter: RunningAdapter, demo: DemoRuntime, workspace: Path
) -> None:
    steps: list[dict[str, Any]] = [
        {"say": "question"},
        {"resume": CANCEL},
        {"say": "hello again"},  # a cancelled run waits for nothing: the next turn is a new run
    ]
    summary = await drive(node, adapter.url, "i-qc", iac_props(workspace), steps)
    assert summary["verificationErrors"] == [] and summary["errors"] == []
    first, cancelled, again = runs(summary)
    (interrupt,) = first["outcome"]["interrupts"]
    assert interrupt["reason"] == "input_required" and interrupt["metadata"]["kind"] == "ask_user_question"
    assert cancelled["request"]["resume"] == [{"interruptId": interrupt["id"], "status": "cancelled"}]
    # AG-UI 1.0: RUN_FINISHED with the cancelled outcome, which @ag-ui/client 1.0.0 consumes without error.
    assert cancelled["eventTypes"][0] == "RUN_STARTED" and cancelled["eventTypes"][-1] == "RUN_FINISHED"
    assert cancelled["outcome"] == {"type": "cancelled"} and cancelled["error"] is None
    assert cancelled["runError"] is None and cancelled["pendingInterruptsAfter"] == []
    assert next(iter(demo.state.tasks.values())).state == "TASK_STATE_CANCELED"
    assert again["requestSent"] is not False and again["outcome"] == {"type": "success"}
    assert 'You said: "hello again"' in texts_of(summary)[-1]


async def test_the_client_consumes_the_notice_of_a_skipped_part(
    node: str, adapter: RunningAdapter, workspace: Path
) -> None:
    parts = [{"type": "text", "text": "look at this"},
             {"type": "image", "source": {"type": "url", "value": "https://example.invalid/a.png"}}]
    summary = await drive(node, adapter.url, "i-skip", iac_props(workspace), [{"say": parts}])
    assert summary["verificationErrors"] == [] and summary["errors"] == []
    (run,) = runs(summary)
    assert run["eventTypes"][:2] == ["RUN_STARTED", "CUSTOM"] and run["outcome"] == {"type": "success"}
    assert 'You said: "look at this"' in texts_of(summary)[-1]


async def test_a_cancelled_question_ends_in_run_error_cancelled_in_the_compat_profile(
    node: str, tmp_path: Path, demo: DemoRuntime, workspace: Path
) -> None:
    adapter = await start_adapter(tmp_path / "compat", demo.url, allowed_cwds=(str(workspace.parent),),
                                  profile="iac-code-agui")
    try:
        steps: list[dict[str, Any]] = [
            {"say": "question"},
            {"resume": CANCEL},
            {"say": "hello again"},  # refused: the client still holds the question
            {"forgetInterrupts": True},  # what the application has to do after a RUN_ERROR
            {"run": True},  # the refused turn's message is already in agent.messages
        ]
        summary = await drive(node, adapter.url, "i-qc", iac_props(workspace), steps, advertised=adapter.advertised())
    finally:
        await adapter.close()
    assert summary["verificationErrors"] == []
    first, cancelled, refused, retried = runs(summary)
    (interrupt,) = first["outcome"]["interrupts"]
    assert cancelled["request"]["resume"] == [{"interruptId": interrupt["id"], "status": "cancelled"}]
    assert cancelled["eventTypes"][0] == "RUN_STARTED" and cancelled["eventTypes"][-1] == "RUN_ERROR"
    assert cancelled["runError"]["code"] == "CANCELLED" and cancelled["error"] is None
    # @ag-ui/client 1.0.0 clears pendingInterrupts only on RUN_FINISHED: after a RUN_ERROR
    # it keeps the cancelled question and refuses the next turn by itself.
    assert cancelled["pendingInterruptsAfter"] == first["pendingInterruptsAfter"]
    assert refused["requestSent"] is False and refused["error"]["constructor"] == "AGUIError"
    assert retried["outcome"] == {"type": "success"}
    assert 'You said: "hello again"' in texts_of(summary)[-1]
    assert client_warnings(summary) == []


# --------------------------------------------------------------------- (d)


async def test_a_multi_turn_thread_sends_only_the_newest_message(
    node: str, adapter: RunningAdapter, demo: DemoRuntime, workspace: Path
) -> None:
    steps = [{"say": "hello", "id": "u1"}, {"say": "tell me more", "id": "u2"}, {"say": "tool", "id": "u3"}]
    summary = await drive(node, adapter.url, "i-multi", iac_props(workspace), steps)
    accepted(summary)
    assert summary["errors"] == []
    first, second, third = runs(summary)
    # The client sends the whole conversation every time ...
    assert [m["id"] for m in first["request"]["messages"]] == ["u1"]
    assert [m["role"] for m in second["request"]["messages"]] == ["user", "assistant", "user"]
    assert second["request"]["messages"][1]["content"] == texts_of(summary)[0]
    assert [m["id"] for m in third["request"]["messages"]][-1] == "u3" and len(third["request"]["messages"]) == 5
    # ... and the runtime gets only the newest user message, in one session.
    assert sent_texts(demo) == ["hello", "tell me more", "tool"]
    assert len(demo.state.contexts) == 1
    assert 'You said: "tell me more"' in texts_of(summary)[1]
    assert summary["roles"] == ["user", "assistant", "user", "assistant", "user", "assistant", "tool", "assistant"]


# ------------------------------------------------ the client's verification is on


@pytest.mark.parametrize(
    ("tamper", "complaint"),
    [
        ("second-run-started", "Cannot send 'RUN_STARTED' while a run is still active"),
        ("orphan-content", "Cannot send 'TEXT_MESSAGE_CONTENT' event: No active text message"),
    ],
    ids=["second-run-started", "orphan-content"],
)
async def test_the_clients_verification_rejects_a_broken_stream(
    node: str, adapter: RunningAdapter, workspace: Path, tamper: str, complaint: str
) -> None:
    # A negative control for every `accepted(...)` above: the same pipeline does reject.
    summary = await drive(node, adapter.url, f"i-{tamper}", iac_props(workspace), [{"say": "hello"}], tamper=tamper)
    (error,) = summary["verificationErrors"]
    assert error["message"].startswith(complaint)
    (run,) = runs(summary)
    assert "\nid: " in run["rewrittenSse"], "verification is on for streams that carry ids"


async def test_a_dropped_connection_is_re_attached_and_the_client_verifies_the_joined_stream(
    node: str, tmp_path: Path, demo: DemoRuntime, workspace: Path
) -> None:
    """The browser example's resumableFetch under HttpAgent: the link breaks
    mid-answer, the fetch re-attaches with Last-Event-ID, and the agent gets
    one stream, every event once, that verifyEvents and ag-ui-validate accept."""
    adapter = await start_adapter(tmp_path / "state", demo.url, disconnect_grace_seconds=30.0)
    try:
        port = int(adapter.url.rstrip("/").rsplit(":", 1)[1])
        async with flaky_link(port, b"tick 4.") as link:
            summary = await drive(node, f"http://127.0.0.1:{link.port}/", "i-drop", iac_props(workspace),
                                  [{"say": "slow 2"}], resumable=True)
            assert link.cut.is_set(), "the link broke"
    finally:
        await adapter.close()
    accepted(summary)
    assert summary["errors"] == []
    (run,) = runs(summary)
    post, again = run["exchanges"]
    assert (post["method"], again["method"], again["status"]) == ("POST", "GET", 200)
    half = whole_events(post["body"].encode())
    assert again["lastEventId"] == half.last_id is not None
    assert summary["reattaches"] == [{"threadId": "i-drop", "runId": run["runId"], "lastEventId": half.last_id,
                                      "attempt": 1}]
    events = joined(half, again["body"].encode())
    assert [e["type"] for e in events] == run["eventTypes"], "the agent saw the joined stream, nothing else"
    await validate(tmp_path, "dropped-joined", half.raw + again["body"].encode())
    assert run["outcome"] == {"type": "success"}
    assert texts_of(summary) == ["".join(f"tick {n}. " for n in range(1, 11))]
    assert len(demo.state.tasks) == 1 and demo.state.total_cancel_calls == 0, "one task, never cancelled"


# ---------------------------- AGUI207: a resumed run's result for a tool of the run before


def tool_pairs(messages: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    """(tool message toolCallId, the toolCallId of the assistant message right before the tool messages)."""
    pairs = []
    for index, message in enumerate(messages):
        if message["role"] != "tool":
            continue
        owner = index - 1
        while owner >= 0 and messages[owner]["role"] == "tool":
            owner -= 1
        calls = messages[owner].get("toolCalls") or [] if owner >= 0 else []
        owner_ids = [call["id"] for call in calls]
        pairs.append((message["toolCallId"], message["toolCallId"] if message["toolCallId"] in owner_ids else None))
    return pairs


def arguments_kind(summary: dict[str, Any]) -> str:
    """How the tool call's arguments look: "json", "empty", "not json", or "no call"."""
    if not summary["toolCalls"]:
        return "no call"
    (call,) = summary["toolCalls"]
    if call["arguments"] == "":
        return "empty"
    try:
        json.loads(call["arguments"])
    except ValueError:
        return "not json"
    return "json"


@pytest.mark.parametrize("variant", ["result-only", "reopen", "reopen-args"])
@pytest.mark.parametrize("client", ["same", "fresh"])
async def test_agui207_options_as_the_client_applies_them(
    node: str, adapter: RunningAdapter, workspace: Path, variant: str, client: str
) -> None:
    """Evidence for tests/interop/README.md ("AGUI207").

    The driver rewrites the adapter's resumed run before the client reads it:
    ``result-only`` (the adapter's shape today), ``reopen`` (START + END before
    the result), ``reopen-args`` (START + ARGS + END).
    ``same``: the client that saw the interrupt resumes; ``fresh``: a new
    ``HttpAgent`` (a reloaded page) resumes with the interrupt it was told about.
    """
    steps: list[dict[str, Any]] = [{"say": "permission w.txt"}]
    steps += [{"resume": ALLOW}] if client == "same" else [{"newClient": True}, {"resume": ALLOW, "fromSaved": True}]
    summary = await drive(node, adapter.url, f"i-207-{variant}-{client}", iac_props(workspace), steps, resumeVariant=variant)
    accepted(summary)
    assert summary["errors"] == []
    (call_id,) = {r["toolCallId"] for r in summary["toolResults"]}
    turn = ["user", "assistant", "assistant", "tool", "assistant"]
    expected: dict[tuple[str, str], tuple[list[str], list[tuple[str, str | None]], str]] = {
        # (roles, (result, owning call) pairs, arguments)
        ("same", "result-only"): (turn, [(call_id, call_id)], "json"),
        ("same", "reopen"): (turn, [(call_id, call_id)], "json"),
        # The args are appended to the call the client already holds: "{...}{...}".
        ("same", "reopen-args"): (turn, [(call_id, call_id)], "not json"),
        # An orphan tool message: no assistant message carries its call.
        ("fresh", "result-only"): (["tool", "assistant"], [(call_id, None)], "no call"),
        ("fresh", "reopen"): (["assistant", "tool", "assistant"], [(call_id, call_id)], "empty"),
        ("fresh", "reopen-args"): (["assistant", "tool", "assistant"], [(call_id, call_id)], "json"),
    }
    roles, pairs, arguments = expected[(client, variant)]
    assert summary["roles"] == roles
    assert tool_pairs(summary["messages"]) == pairs
    assert arguments_kind(summary) == arguments
    assert all(call["name"] == "write_file" for call in summary["toolCalls"])
    if (client, variant) == ("same", "reopen-args"):
        assert re.fullmatch(r"(\{.*\})\1", summary["toolCalls"][0]["arguments"])
