"""Interrupts and resume over HTTP, against the demo A2A runtime."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.protocol.interrupts import PERMISSION_SCHEMA
from aguiadapter.protocol.profile import Profile
from aguiadapter.store.file.store import FileThreadStore
from tests.support.adapter import RunningAdapter, run_body, start_adapter
from tests.support.agui import check_stream, parse_sse, texts, types
from tests.support.eventually import eventually
from tests.support.stops import PROFILES, assert_stopped


def resume_body(thread_id: str, cwd: Path, answers: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    body = run_body(thread_id=thread_id, text=None, cwd=str(cwd))
    body["resume"] = answers
    body.update(extra)
    return body


def allow(interrupt: dict[str, Any], decision: str = "allow_once") -> list[dict[str, Any]]:
    return [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": decision}}]


async def interrupt_on(adapter: RunningAdapter, thread_id: str, cwd: Path, text: str = "permission note.txt") -> dict[str, Any]:
    """Start a turn that stops for input; returns its one interrupt."""
    events = (await adapter.run(run_body(thread_id=thread_id, text=text, cwd=str(cwd)))).events()
    outcome = events[-1]["outcome"]
    assert outcome["type"] == "interrupt"
    (interrupt,) = outcome["interrupts"]
    return dict(interrupt)


async def error_of(adapter: RunningAdapter, body: dict[str, Any]) -> tuple[int, str]:
    reply = await adapter.run(body)
    assert reply.status != 200, reply.body
    return reply.status, reply.json()["error"]["code"]


async def test_a_permission_interrupt_carries_schema_expiry_and_metadata(
    adapter: RunningAdapter, workspace: Path
) -> None:
    before = time.time()
    interrupt = await interrupt_on(adapter, "t-perm", workspace)
    assert interrupt["id"].startswith("permission-")
    assert interrupt["reason"] == "tool_call" and interrupt["toolCallId"]
    assert interrupt["responseSchema"] == PERMISSION_SCHEMA
    expires = datetime.fromisoformat(interrupt["expiresAt"].replace("Z", "+00:00")).timestamp()
    assert before + 3590 < expires < time.time() + 3610
    metadata = interrupt["metadata"]
    assert metadata["schemaVersion"] == 1 and metadata["kind"] == "permission"
    assert {"toolName", "title", "purpose", "safeSummary"} <= set(metadata)
    assert interrupt["message"]


async def test_the_interrupted_run_closes_every_span_before_it_ends(adapter: RunningAdapter, workspace: Path) -> None:
    # check_stream (inside events()) fails on any span left open at RUN_FINISHED.
    events = (await adapter.run(run_body(thread_id="t-spans", text="permission x", cwd=str(workspace)))).events()
    assert "TOOL_CALL_START" in types(events)


@pytest.mark.parametrize(("decision", "runs", "word"), [("allow_once", 1, "Success"), ("deny", 0, "denied")])
async def test_allow_runs_the_tool_once_and_deny_never(
    adapter: RunningAdapter, demo: DemoRuntime, workspace: Path, decision: str, runs: int, word: str
) -> None:
    interrupt = await interrupt_on(adapter, "t-ad", workspace)
    events = (await adapter.run(resume_body("t-ad", workspace, allow(interrupt, decision)))).events()
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert result["toolCallId"] == interrupt["toolCallId"] and word.lower() in result["content"].lower()
    assert events[-1]["outcome"] == {"type": "success"}
    assert sum(demo.state.tool_runs.values()) == runs
    record = await FileThreadStore(adapter.config.state_dir).load("t-ad")
    assert record is not None and record.state == "idle" and record.pending_interrupts == []


async def test_a_cancelled_permission_is_a_deny(adapter: RunningAdapter, demo: DemoRuntime, workspace: Path) -> None:
    interrupt = await interrupt_on(adapter, "t-cd", workspace)
    answer = [{"interruptId": interrupt["id"], "status": "cancelled"}]
    events = (await adapter.run(resume_body("t-cd", workspace, answer))).events()
    assert "denied" in next(e for e in events if e["type"] == "TOOL_CALL_RESULT")["content"]
    assert sum(demo.state.tool_runs.values()) == 0


async def test_an_invalid_payload_leaves_the_interrupt_pending_and_retryable(
    adapter: RunningAdapter, demo: DemoRuntime, workspace: Path
) -> None:
    interrupt = await interrupt_on(adapter, "t-inv", workspace)
    for payload in ({"decision": "maybe"}, {"decision": "allow_once", "extra": 1}, {}):
        bad = [{"interruptId": interrupt["id"], "status": "resolved", "payload": payload}]
        assert await error_of(adapter, resume_body("t-inv", workspace, bad)) == (400, "RESUME_PAYLOAD_INVALID")
    missing = [{"interruptId": interrupt["id"], "status": "resolved"}]
    assert await error_of(adapter, resume_body("t-inv", workspace, missing)) == (400, "RESUME_PAYLOAD_INVALID")
    events = (await adapter.run(resume_body("t-inv", workspace, allow(interrupt)))).events()
    assert events[-1]["outcome"] == {"type": "success"} and sum(demo.state.tool_runs.values()) == 1


async def test_resume_answers_every_pending_interrupt_exactly_once(adapter: RunningAdapter, workspace: Path) -> None:
    interrupt = await interrupt_on(adapter, "t-once", workspace)
    twice = allow(interrupt) * 2
    assert await error_of(adapter, resume_body("t-once", workspace, twice)) == (409, "INCOMPLETE_RESUME")
    unknown = [{"interruptId": "permission-nope", "status": "cancelled"}]
    assert await error_of(adapter, resume_body("t-once", workspace, unknown)) == (409, "UNKNOWN_INTERRUPT")
    extra = [*allow(interrupt), *unknown]
    assert await error_of(adapter, resume_body("t-once", workspace, extra)) == (409, "UNKNOWN_INTERRUPT")


async def test_a_new_message_while_interrupted_needs_a_resume(adapter: RunningAdapter, workspace: Path) -> None:
    await interrupt_on(adapter, "t-rr", workspace)
    reply = await adapter.run(run_body(thread_id="t-rr", text="hello?", cwd=str(workspace)))
    assert (reply.status, reply.json()["error"]["code"]) == (409, "RESUME_REQUIRED")


async def test_a_resent_answer_is_already_applied_and_never_runs_the_tool_twice(
    adapter: RunningAdapter, demo: DemoRuntime, workspace: Path
) -> None:
    interrupt = await interrupt_on(adapter, "t-dup", workspace)
    body = resume_body("t-dup", workspace, allow(interrupt))
    assert (await adapter.run(body)).status == 200
    assert await error_of(adapter, body) == (409, "DUPLICATE_RUN_ID")
    again = {**body, "runId": f"run-{uuid.uuid4()}"}
    assert await error_of(adapter, again) == (409, "RESUME_ALREADY_APPLIED")
    assert sum(demo.state.tool_runs.values()) == 1


async def test_concurrent_resumes_of_one_interrupt_apply_exactly_one(
    adapter: RunningAdapter, demo: DemoRuntime, workspace: Path
) -> None:
    interrupt = await interrupt_on(adapter, "t-race", workspace)
    bodies = [resume_body("t-race", workspace, allow(interrupt)) for _ in range(12)]
    replies = await asyncio.gather(*(adapter.run(body) for body in bodies))
    ok = [reply for reply in replies if reply.status == 200]
    assert len(ok) == 1 and ok[0].events()[-1]["outcome"] == {"type": "success"}
    codes = {reply.json()["error"]["code"] for reply in replies if reply.status != 200}
    assert codes <= {"THREAD_BUSY", "RESUME_ALREADY_APPLIED"}
    assert sum(demo.state.tool_runs.values()) == 1


async def test_a_client_style_resume_with_the_whole_conversation_sends_no_user_message(
    adapter: RunningAdapter, demo: DemoRuntime, workspace: Path
) -> None:
    first = run_body(thread_id="t-client", text="permission report.txt", cwd=str(workspace), message_id="u1")
    events = (await adapter.run(first)).events()
    (interrupt,) = events[-1]["outcome"]["interrupts"]
    tool = next(e for e in events if e["type"] == "TOOL_CALL_START")
    conversation = [
        *first["messages"],
        {"id": "a1", "role": "assistant", "content": texts(events),
         "toolCalls": [{"id": tool["toolCallId"], "type": "function",
                        "function": {"name": tool["toolCallName"], "arguments": "{}"}}]},
    ]
    resume = {
        **first, "runId": "run-2", "messages": conversation, "protocolVersion": "1.0",
        "state": {"anything": True}, "resume": allow(interrupt),
    }
    before = len(demo.state.received)
    assert (await adapter.run(resume)).events()[-1]["outcome"] == {"type": "success"}
    sent = demo.state.received[before:]
    assert len(sent) == 1 and "data" in sent[0]["parts"][0], "only the answer reaches the runtime"


async def test_a_question_is_answered_by_option_or_free_text(adapter: RunningAdapter, workspace: Path) -> None:
    interrupt = await interrupt_on(adapter, "t-q", workspace, text="question")
    assert interrupt["reason"] == "input_required" and interrupt["metadata"]["kind"] == "ask_user_question"
    options = interrupt["metadata"]["options"]
    branches = interrupt["responseSchema"]["oneOf"]
    assert len(branches) == len(options) + 1  # one per option, plus free text
    answer = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"selectedId": options[1]["id"]}}]
    events = (await adapter.run(resume_body("t-q", workspace, answer))).events()
    assert options[1]["label"] in texts(events)
    interrupt = await interrupt_on(adapter, "t-q2", workspace, text="question")
    free = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"freeText": "my own idea"}}]
    assert "my own idea" in texts((await adapter.run(resume_body("t-q2", workspace, free))).events())


@pytest.mark.parametrize("profile", PROFILES)
async def test_a_cancelled_question_cancels_the_task(
    tmp_path: Path, demo: DemoRuntime, workspace: Path, profile: Profile
) -> None:
    adapter = await start_adapter(tmp_path / "state", demo.url, allowed_cwds=(str(tmp_path / "workspaces"),),
                                  profile=profile)
    try:
        interrupt = await interrupt_on(adapter, "t-qc", workspace, text="question")
        answer = [{"interruptId": interrupt["id"], "status": "cancelled"}]
        reply = await adapter.run(resume_body("t-qc", workspace, answer))
        events = check_stream(reply.body, advertised=adapter.advertised())
        assert_stopped(events, profile)
        assert [task.state for task in demo.state.tasks.values()] == ["TASK_STATE_CANCELED"]
        record = await FileThreadStore(adapter.config.state_dir).load("t-qc")
        assert record is not None and record.state == "terminal" and record.last_error == "CANCELLED"
        # A cancelled run waits for nothing: the next run is a new turn.
        assert (await adapter.run(run_body(thread_id="t-qc", text="again", cwd=str(workspace)))).status == 200
    finally:
        await adapter.close()


async def test_an_answer_the_runtime_refuses_stays_pending(adapter: RunningAdapter, workspace: Path) -> None:
    interrupt = await interrupt_on(adapter, "t-ref", workspace)
    store = FileThreadStore(adapter.config.state_dir)
    path = store.path_for("t-ref")
    stored = json.loads(path.read_text())
    good = stored["pending_interrupts"][0]["envelope"]["fields"]["toolUseId"]
    stored["pending_interrupts"][0]["envelope"]["fields"]["toolUseId"] = "call-tampered"
    path.write_text(json.dumps(stored))
    events = (await adapter.run(resume_body("t-ref", workspace, allow(interrupt)))).events()
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "A2A_UNAVAILABLE"
    record = await store.load("t-ref")
    assert record is not None and record.state == "interrupted" and len(record.pending_interrupts) == 1
    stored = json.loads(path.read_text())
    stored["pending_interrupts"][0]["envelope"]["fields"]["toolUseId"] = good
    path.write_text(json.dumps(stored))
    assert (await adapter.run(resume_body("t-ref", workspace, allow(interrupt)))).events()[-1]["type"] == "RUN_FINISHED"


async def test_the_interrupt_survives_an_adapter_restart(tmp_path: Path, demo: DemoRuntime, workspace: Path) -> None:
    first = await start_adapter(tmp_path / "state", demo.url)
    try:
        interrupt = await interrupt_on(first, "t-restart", workspace)
    finally:
        await first.close()
    second = await start_adapter(tmp_path / "state", demo.url)
    try:
        events = (await second.run(resume_body("t-restart", workspace, allow(interrupt)))).events()
    finally:
        await second.close()
    assert events[-1]["outcome"] == {"type": "success"} and sum(demo.state.tool_runs.values()) == 1


async def test_an_expired_interrupt_is_cleaned_and_its_task_cancelled_without_a_call(
    tmp_path: Path, demo: DemoRuntime, workspace: Path
) -> None:
    running = await start_adapter(tmp_path / "state", demo.url, interrupt_ttl_seconds=0.3)
    try:
        interrupt = await interrupt_on(running, "t-exp", workspace)
        store = FileThreadStore(running.config.state_dir)
        async def expired() -> bool:
            record = await store.load("t-exp")
            return record is not None and record.state == "terminal"

        await eventually(expired, "the expired thread is terminal", timeout=3)
        assert [task.state for task in demo.state.tasks.values()] == ["TASK_STATE_CANCELED"]
        assert await error_of(running, resume_body("t-exp", workspace, allow(interrupt))) == (409, "EXECUTION_EXPIRED")
        record = await FileThreadStore(running.config.state_dir).load("t-exp")
        assert record is not None and record.pending_interrupts == [] and record.state == "terminal"
    finally:
        await running.close()


async def test_expiry_timers_are_re_armed_after_a_restart(tmp_path: Path, demo: DemoRuntime, workspace: Path) -> None:
    first = await start_adapter(tmp_path / "state", demo.url, interrupt_ttl_seconds=0.8)
    try:
        await interrupt_on(first, "t-rearm", workspace)
    finally:
        await first.close()
    assert [task.state for task in demo.state.tasks.values()] == ["TASK_STATE_INPUT_REQUIRED"]
    second = await start_adapter(tmp_path / "state", demo.url, interrupt_ttl_seconds=0.8)
    try:
        await eventually(
            lambda: [task.state for task in demo.state.tasks.values()] == ["TASK_STATE_CANCELED"],
            "the re-armed timer cancels the task",
            timeout=3,
        )
    finally:
        await second.close()
    assert [task.state for task in demo.state.tasks.values()] == ["TASK_STATE_CANCELED"]


async def test_an_answer_the_runtime_took_before_a_crash_is_recorded_not_resent(
    adapter: RunningAdapter, demo: DemoRuntime, workspace: Path
) -> None:
    # The adapter died right after the runtime accepted the answer and before
    # it recorded that: the runtime already moved on when the client retries.
    from aguiadapter.a2a.client import A2AClient
    from aguiadapter.a2a.messages import permission_part

    interrupt = await interrupt_on(adapter, "t-window", workspace)
    record = await FileThreadStore(adapter.config.state_dir).load("t-window")
    assert record is not None and record.task_id is not None
    envelope = record.pending_interrupts[0].envelope.fields
    client = A2AClient(demo.url)
    try:
        message = {"messageId": "direct", "contextId": record.context_id, "taskId": record.task_id,
                   "role": "ROLE_USER", "parts": [permission_part(envelope, "allow_once")]}
        async for _ in client.stream_message(message):
            pass
    finally:
        await client.close()
    assert sum(demo.state.tool_runs.values()) == 1
    events = (await adapter.run(resume_body("t-window", workspace, allow(interrupt)))).events()
    assert events[-1]["outcome"] == {"type": "success"}
    assert sum(demo.state.tool_runs.values()) == 1, "the answer must not be sent twice"
    record = await FileThreadStore(adapter.config.state_dir).load("t-window")
    assert record is not None and record.pending_interrupts == [] and interrupt["id"] in record.applied_answers


async def test_the_resumed_run_reopens_the_tool_call_before_its_result(adapter: RunningAdapter, workspace: Path) -> None:
    # AG-UI validators want a TOOL_CALL_RESULT to answer a call of the same
    # run; clients treat the repeated START as the same call (no new arguments).
    interrupt = await interrupt_on(adapter, "t-reopen", workspace)
    events = (await adapter.run(resume_body("t-reopen", workspace, allow(interrupt)))).events()
    tool = [e for e in events if e["type"].startswith("TOOL_CALL")]
    assert [e["type"] for e in tool] == ["TOOL_CALL_START", "TOOL_CALL_END", "TOOL_CALL_RESULT"]
    assert tool[0] == {"type": "TOOL_CALL_START", "toolCallId": interrupt["toolCallId"], "toolCallName": "write_file"}


async def test_a_resume_sent_the_moment_run_finished_arrives_finds_the_thread_free(
    adapter: RunningAdapter, workspace: Path
) -> None:
    import aiohttp

    body = run_body(thread_id="t-quick", text="permission q.txt", cwd=str(workspace))
    async with aiohttp.ClientSession() as first, first.post(adapter.url, json=body) as resp:
        seen = b""
        while b'"RUN_FINISHED"' not in seen or not seen.endswith(b"\n\n"):
            seen += await resp.content.readany()
        finished = parse_sse(seen)[0][-1]
        (interrupt,) = finished["outcome"]["interrupts"]
        # The first response is still open here.
        reply = await adapter.run(resume_body("t-quick", workspace, allow(interrupt)))
    assert reply.status == 200, reply.body


async def test_a_resume_whose_runtime_lost_the_session_is_execution_lost(
    tmp_path: Path, workspace: Path
) -> None:
    # The runtime restarted and kept nothing (the demo keeps sessions in memory).
    first_runtime = DemoRuntime()
    await first_runtime.start(port=0)
    port = int(first_runtime.url.rsplit(":", 1)[1].strip("/"))
    running = await start_adapter(tmp_path / "state", first_runtime.url)
    try:
        interrupt = await interrupt_on(running, "t-lost", workspace)
        await first_runtime.close()
        second_runtime = DemoRuntime()
        await second_runtime.start(port=port)
        try:
            refused = await error_of(running, resume_body("t-lost", workspace, allow(interrupt)))
        finally:
            await second_runtime.close()
    finally:
        await running.close()
    # Found before the stream opens: an HTTP error, like every admission refusal.
    assert refused == (409, "EXECUTION_LOST")


async def test_refused_answers_say_what_would_have_been_right_without_echoing_the_answer(
    adapter: RunningAdapter, workspace: Path
) -> None:
    interrupt = await interrupt_on(adapter, "t-say", workspace)
    secret = "sk-" + "q" * 24

    async def message_of(answers: list[dict[str, Any]], language: str = "en") -> str:
        reply = await adapter.run(resume_body("t-say", workspace, answers), {"Accept-Language": language})
        assert reply.status in (400, 409)
        return str(reply.json()["error"]["message"])

    wrong_id = await message_of([{"interruptId": "permission-nope", "status": "cancelled"}])
    assert "permission-nope" in wrong_id and interrupt["id"] in wrong_id
    value = await message_of([{"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": secret}}])
    assert "payload.decision" in value and '"allow_once"' in value and '"deny"' in value and secret not in value
    zh = await message_of([{"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": secret}}], "zh-CN")
    assert "payload.decision" in zh and secret not in zh
    missing = await message_of([{"interruptId": interrupt["id"], "status": "resolved", "payload": {}}])
    assert "payload.decision" in missing
    extra = await message_of([{"interruptId": interrupt["id"], "status": "resolved",
                               "payload": {"decision": "allow_once", secret: 1}}])
    assert "decision" in extra and secret not in extra
    # Still pending: the right answer works.
    assert (await adapter.run(resume_body("t-say", workspace, allow(interrupt)))).events()[-1]["outcome"] == {"type": "success"}
