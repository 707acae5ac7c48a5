"""Interrupts, resume and cancel end to end against the real `iac-code a2a`."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp

from aguiadapter.protocol.interrupts import PERMISSION_SCHEMA
from aguiadapter.store.file.store import FileThreadStore
from tests.support.adapter import RunningAdapter, run_body, start_adapter
from tests.support.adapter_process import AdapterProcess
from tests.support.agui import check_stream
from tests.support.eventually import eventually
from tests.support.iac_runtime import IacRuntime


def resume_body(thread_id: str, cwd: Path, answers: list[dict[str, Any]]) -> dict[str, Any]:
    body = run_body(thread_id=thread_id, text=None, cwd=str(cwd))
    body["resume"] = answers
    return body


def decide(interrupt: dict[str, Any], decision: str) -> list[dict[str, Any]]:
    return [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": decision}}]


async def ask_permission(adapter: RunningAdapter, thread_id: str, cwd: Path, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A turn that asks to write ``name``; returns (interrupt, session event value)."""
    body = run_body(thread_id=thread_id, text=f"[scenario:permission file={name}] write it", cwd=str(cwd))
    events = (await adapter.run(body)).events()
    assert events[-1]["type"] == "RUN_FINISHED", events[-1]
    (interrupt,) = events[-1]["outcome"]["interrupts"]
    (session,) = [e["value"] for e in events if e.get("name") == "iac-code.session.v1"]
    return interrupt, session


async def test_a_permission_interrupt_has_schema_and_expiry_and_allow_writes_once(
    iac_adapter: RunningAdapter, iac_workspace: Path
) -> None:
    interrupt, _ = await ask_permission(iac_adapter, "e-allow", iac_workspace, "allowed.txt")
    assert interrupt["reason"] == "tool_call" and interrupt["responseSchema"] == PERMISSION_SCHEMA
    assert interrupt["metadata"]["toolName"] == "write_file" and interrupt["metadata"]["schemaVersion"] == 1
    assert datetime.fromisoformat(interrupt["expiresAt"].replace("Z", "+00:00")).timestamp() > 0
    assert not (iac_workspace / "allowed.txt").exists()
    events = (await iac_adapter.run(resume_body("e-allow", iac_workspace, decide(interrupt, "allow_once")))).events()
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert result["toolCallId"] == interrupt["toolCallId"] and "allowed.txt" in result["content"]
    assert events[-1]["outcome"] == {"type": "success"}
    assert (iac_workspace / "allowed.txt").exists()


async def test_deny_and_cancelled_never_write(iac_adapter: RunningAdapter, iac_workspace: Path) -> None:
    interrupt, _ = await ask_permission(iac_adapter, "e-deny", iac_workspace, "denied.txt")
    events = (await iac_adapter.run(resume_body("e-deny", iac_workspace, decide(interrupt, "deny")))).events()
    assert "denied" in next(e for e in events if e["type"] == "TOOL_CALL_RESULT")["content"]
    interrupt, _ = await ask_permission(iac_adapter, "e-cancel", iac_workspace, "cancelled.txt")
    cancelled = [{"interruptId": interrupt["id"], "status": "cancelled"}]
    events = (await iac_adapter.run(resume_body("e-cancel", iac_workspace, cancelled))).events()
    assert events[-1]["outcome"] == {"type": "success"}
    assert not (iac_workspace / "denied.txt").exists() and not (iac_workspace / "cancelled.txt").exists()


async def test_an_invalid_payload_then_a_valid_one(iac_adapter: RunningAdapter, iac_workspace: Path) -> None:
    interrupt, _ = await ask_permission(iac_adapter, "e-inv", iac_workspace, "retry.txt")
    bad = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "maybe"}}]
    reply = await iac_adapter.run(resume_body("e-inv", iac_workspace, bad))
    assert reply.status == 400 and reply.json()["error"]["code"] == "RESUME_PAYLOAD_INVALID"
    events = (await iac_adapter.run(resume_body("e-inv", iac_workspace, decide(interrupt, "allow_once")))).events()
    assert events[-1]["outcome"] == {"type": "success"} and (iac_workspace / "retry.txt").exists()


async def test_a_duplicate_resume_is_already_applied(iac_adapter: RunningAdapter, iac_workspace: Path) -> None:
    interrupt, _ = await ask_permission(iac_adapter, "e-dup", iac_workspace, "once.txt")
    body = resume_body("e-dup", iac_workspace, decide(interrupt, "allow_once"))
    assert (await iac_adapter.run(body)).status == 200
    (iac_workspace / "once.txt").unlink()
    again = {**body, "runId": f"run-{uuid.uuid4()}"}
    reply = await iac_adapter.run(again)
    assert reply.json()["error"]["code"] == "RESUME_ALREADY_APPLIED"
    assert not (iac_workspace / "once.txt").exists(), "the tool must not run a second time"


async def test_concurrent_resumes_write_once(iac_adapter: RunningAdapter, iac_workspace: Path) -> None:
    interrupt, _ = await ask_permission(iac_adapter, "e-race", iac_workspace, "race.txt")
    bodies = [resume_body("e-race", iac_workspace, decide(interrupt, "allow_once")) for _ in range(8)]
    replies = await asyncio.gather(*(iac_adapter.run(body) for body in bodies))
    assert sum(reply.status == 200 for reply in replies) == 1
    assert (iac_workspace / "race.txt").exists()


async def test_a_new_message_while_waiting_needs_a_resume(iac_adapter: RunningAdapter, iac_workspace: Path) -> None:
    await ask_permission(iac_adapter, "e-rr", iac_workspace, "wait.txt")
    reply = await iac_adapter.run(run_body(thread_id="e-rr", text="[scenario:normal] hi", cwd=str(iac_workspace)))
    assert reply.json()["error"]["code"] == "RESUME_REQUIRED"


async def test_the_cancel_route_answers_its_three_cases(
    iac_adapter: RunningAdapter, iac_runtime: IacRuntime, iac_workspace: Path
) -> None:
    interrupt, session = await ask_permission(iac_adapter, "e-cxl", iac_workspace, "never.txt")
    path = f"/extensions/iac-code/v1/executions/{session['executionId']}/cancel"
    identity = {"threadId": "e-cxl", "rosInvocationId": "invocation-1"}
    assert (await iac_adapter.post(path, identity)).json()["status"] == "cancelled"
    task = (await iac_runtime.rpc("GetTask", {"id": session["taskId"]}))["result"]
    assert task["status"]["state"] == "TASK_STATE_CANCELED"
    assert (await iac_adapter.post(path, identity)).json()["status"] == "already_terminal"
    wrong = await iac_adapter.post(path, {**identity, "rosInvocationId": "someone-else"})
    assert wrong.status == 404 and wrong.json()["error"]["code"] == "EXECUTION_NOT_FOUND"
    resume = await iac_adapter.run(resume_body("e-cxl", iac_workspace, decide(interrupt, "allow_once")))
    assert resume.status == 409 and not (iac_workspace / "never.txt").exists()


async def test_an_expired_interrupt_is_refused_and_its_task_cancelled(
    tmp_path: Path, iac_runtime: IacRuntime, iac_workspace: Path
) -> None:
    running = await start_adapter(
        tmp_path / "state", iac_runtime.url, a2a_token=iac_runtime.token,
        allowed_cwds=(str(iac_runtime.workspaces_root),), interrupt_ttl_seconds=0.5,
    )
    try:
        interrupt, session = await ask_permission(running, "e-exp", iac_workspace, "late.txt")

        async def cancelled() -> bool:
            return await iac_runtime.task_state(session["taskId"]) == "TASK_STATE_CANCELED"

        await eventually(cancelled, "iac-code cancels the expired interrupt's task", interval=0.1)
        store = FileThreadStore(running.config.state_dir)

        async def ended() -> bool:
            record = await store.load("e-exp")
            return record is not None and record.state == "terminal"

        await eventually(ended, "the expired thread ends")
        reply = await running.run(resume_body("e-exp", iac_workspace, decide(interrupt, "allow_once")))
        assert reply.json()["error"]["code"] == "EXECUTION_EXPIRED"
        assert not (iac_workspace / "late.txt").exists()
    finally:
        await running.close()


async def test_a_resume_after_the_adapter_was_killed_applies_once(
    tmp_path: Path, iac_runtime: IacRuntime, iac_workspace: Path
) -> None:
    adapter = AdapterProcess(a2a_url=iac_runtime.url, a2a_token=iac_runtime.token, state_dir=tmp_path / "state",
                             allowed_cwd=iac_runtime.workspaces_root, log_path=tmp_path / "adapter.log")
    body = run_body(thread_id="e-kill", text="[scenario:permission file=survivor.txt] go", cwd=str(iac_workspace))
    async with adapter, aiohttp.ClientSession() as session:
        async with session.post(adapter.url, json=body) as resp:
            events = check_stream(await resp.read())
        (interrupt,) = events[-1]["outcome"]["interrupts"]
        await adapter.restart()  # kill -9, then a new process on the same state folder
        resume = resume_body("e-kill", iac_workspace, decide(interrupt, "allow_once"))
        async with session.post(adapter.url, json=resume) as resp:
            events = check_stream(await resp.read())
        assert events[-1]["outcome"] == {"type": "success"}
        assert (iac_workspace / "survivor.txt").exists()
        (iac_workspace / "survivor.txt").unlink()
        async with session.post(adapter.url, json={**resume, "runId": "run-again"}) as resp:
            assert (await resp.json())["error"]["code"] == "RESUME_ALREADY_APPLIED"
    assert not (iac_workspace / "survivor.txt").exists()
