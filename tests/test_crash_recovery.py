"""A resume whose process died, recovered by whatever touches the thread next.

The adapter's record is left exactly as a process that died mid-resume
leaves it (the resume's opening transition written, the answer perhaps on
its way), by applying the machine's own ``resume`` transition and saving it,
then another adapter starts on the same state folder in front of the same
demo runtime. Whether the answer reached the runtime is decided by the
runtime's task, never by the adapter's hope: the kill tests against the
real ``iac-code a2a`` (tests/e2e) check the same rules at every instant.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aguiadapter.a2a.client import A2AClient
from aguiadapter.a2a.messages import permission_part
from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.protocol.inputs import ResumeEntry
from aguiadapter.protocol.resume import check_resume
from aguiadapter.threads import machine as tm
from aguiadapter.store.file.store import FileThreadStore
from aguiadapter.threads.record import ThreadState
from tests.support.adapter import RunningAdapter, run_body, start_adapter
from tests.support.eventually import eventually


def resume_body(thread_id: str, cwd: Path, interrupt: dict[str, Any], **extra: Any) -> dict[str, Any]:
    body = run_body(thread_id=thread_id, text=None, cwd=str(cwd), **extra)
    body["resume"] = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "allow_once"}}]
    return body


async def interrupted(adapter: RunningAdapter, thread_id: str, cwd: Path) -> dict[str, Any]:
    events = (await adapter.run(run_body(thread_id=thread_id, text="permission note.txt", cwd=str(cwd)))).events()
    (interrupt,) = events[-1]["outcome"]["interrupts"]
    return dict(interrupt)


async def die_mid_resume(state_dir: Path, thread_id: str, *, runtime: str | None = None) -> None:
    """Leave the record as a resume that died before its answer's fate was
    written; ``runtime`` (a demo URL): the answer did reach the runtime."""
    store = FileThreadStore(state_dir)
    record = await store.load(thread_id)
    assert record is not None and record.state is ThreadState.INTERRUPTED
    item = record.pending_interrupts[0]
    entry = ResumeEntry(interrupt_id=item.id, status="resolved", payload={"decision": "allow_once"})
    answers = check_resume([entry], [item.interrupt], {})
    tm.apply(record, tm.Resume(tm.RunBinding("run-dead", "digest", "exec-x", "invocation-1"), answers))
    await store.save(record)
    if runtime is not None:
        client = A2AClient(runtime)
        try:
            message = {"messageId": "sent-before-the-crash", "contextId": record.context_id,
                       "taskId": record.task_id, "role": "ROLE_USER",
                       "parts": [permission_part(item.envelope.fields, "allow_once")]}
            async for _ in client.stream_message(message):
                pass
        finally:
            await client.close()


async def test_an_answer_that_never_arrived_is_pending_again_and_applied_once(
    tmp_path: Path, demo: DemoRuntime, workspace: Path
) -> None:
    first = await start_adapter(tmp_path / "state", demo.url)
    try:
        interrupt = await interrupted(first, "t-never", workspace)
    finally:
        await first.close()
    await die_mid_resume(tmp_path / "state", "t-never")
    second = await start_adapter(tmp_path / "state", demo.url)
    try:
        events = (await second.run(resume_body("t-never", workspace, interrupt))).events()
        assert events[-1]["outcome"] == {"type": "success"}
        assert sum(demo.state.tool_runs.values()) == 1
        again = await second.run(resume_body("t-never", workspace, interrupt))
        assert again.json()["error"]["code"] == "RESUME_ALREADY_APPLIED"
    finally:
        await second.close()
    assert sum(demo.state.tool_runs.values()) == 1 and demo.state.cancel_calls == {}


async def test_an_answer_the_runtime_took_is_reported_to_the_retry_and_never_sent_again(
    tmp_path: Path, demo: DemoRuntime, workspace: Path
) -> None:
    first = await start_adapter(tmp_path / "state", demo.url)
    try:
        interrupt = await interrupted(first, "t-took", workspace)
    finally:
        await first.close()
    await die_mid_resume(tmp_path / "state", "t-took", runtime=demo.url)
    assert sum(demo.state.tool_runs.values()) == 1
    second = await start_adapter(tmp_path / "state", demo.url)
    try:
        events = (await second.run(resume_body("t-took", workspace, interrupt))).events()
        assert events[-1]["outcome"] == {"type": "success"}, "a false failure for a command that ran"
        again = await second.run(resume_body("t-took", workspace, interrupt))
        assert again.json()["error"]["code"] == "RESUME_ALREADY_APPLIED"
    finally:
        await second.close()
    assert sum(demo.state.tool_runs.values()) == 1 and demo.state.cancel_calls == {}


async def test_a_new_turn_after_a_taken_answer_settles_the_execution_and_proceeds(
    tmp_path: Path, demo: DemoRuntime, workspace: Path
) -> None:
    first = await start_adapter(tmp_path / "state", demo.url)
    try:
        await interrupted(first, "t-next", workspace)
    finally:
        await first.close()
    await die_mid_resume(tmp_path / "state", "t-next", runtime=demo.url)
    second = await start_adapter(tmp_path / "state", demo.url)
    try:
        events = (await second.run(run_body(thread_id="t-next", text="and now?", cwd=str(workspace)))).events()
        assert events[-1]["outcome"] == {"type": "success"}
    finally:
        await second.close()
    assert sum(demo.state.tool_runs.values()) == 1 and demo.state.cancel_calls == {}


async def test_the_expiry_timer_recovers_a_dead_resume_and_expires_an_answer_that_never_arrived(
    tmp_path: Path, demo: DemoRuntime, workspace: Path
) -> None:
    first = await start_adapter(tmp_path / "state", demo.url, interrupt_ttl_seconds=0.5)
    try:
        interrupt = await interrupted(first, "t-late", workspace)
    finally:
        await first.close()
    await die_mid_resume(tmp_path / "state", "t-late")
    second = await start_adapter(tmp_path / "state", demo.url, interrupt_ttl_seconds=0.5)
    store = FileThreadStore(tmp_path / "state")
    try:
        async def expired() -> bool:
            record = await store.load("t-late")
            return record is not None and record.state is ThreadState.TERMINAL

        await eventually(expired, "the expiry timer settles the dead resume", timeout=5)
        refused = await second.run(resume_body("t-late", workspace, interrupt))
        assert refused.json()["error"]["code"] == "EXECUTION_EXPIRED"
    finally:
        await second.close()
    assert [task.state for task in demo.state.tasks.values()] == ["TASK_STATE_CANCELED"]
    assert sum(demo.state.tool_runs.values()) == 0


async def test_expiry_never_cancels_a_task_that_carries_a_taken_answer(
    tmp_path: Path, demo: DemoRuntime, workspace: Path
) -> None:
    first = await start_adapter(tmp_path / "state", demo.url, interrupt_ttl_seconds=0.5)
    try:
        interrupt = await interrupted(first, "t-kept", workspace)
    finally:
        await first.close()
    await die_mid_resume(tmp_path / "state", "t-kept", runtime=demo.url)
    second = await start_adapter(tmp_path / "state", demo.url, interrupt_ttl_seconds=0.5)
    store = FileThreadStore(tmp_path / "state")
    try:
        async def settled() -> bool:
            record = await store.load("t-kept")
            return record is not None and record.state is ThreadState.IDLE

        await eventually(settled, "the expiry timer settles the dead resume as taken", timeout=5)

        async def reported() -> Any:
            # The expiry's claim may outlive the record's change by a moment.
            reply = await second.run(resume_body("t-kept", workspace, interrupt))
            if reply.status == 409 and reply.json()["error"]["code"] == "THREAD_BUSY":
                return None
            return reply

        events = (await eventually(reported, "the retry finds the thread free", timeout=5)).events()
        assert events[-1]["outcome"] == {"type": "success"}
    finally:
        await second.close()
    assert demo.state.cancel_calls == {} and sum(demo.state.tool_runs.values()) == 1


async def test_the_cancel_route_recovers_first_and_then_cancels(
    tmp_path: Path, demo: DemoRuntime, workspace: Path
) -> None:
    first = await start_adapter(tmp_path / "state", demo.url)
    try:
        await interrupted(first, "t-cancel", workspace)
        record = await FileThreadStore(tmp_path / "state").load("t-cancel")
        assert record is not None
        execution_id = record.execution_id
    finally:
        await first.close()
    await die_mid_resume(tmp_path / "state", "t-cancel")
    second = await start_adapter(tmp_path / "state", demo.url)
    try:
        reply = await second.session.post(
            f"{second.url}extensions/iac-code/v1/executions/{execution_id}/cancel",
            json={"threadId": "t-cancel", "rosInvocationId": "invocation-1"},
        )
        assert (await reply.json())["status"] == "cancelled"
    finally:
        await second.close()
    assert [task.state for task in demo.state.tasks.values()] == ["TASK_STATE_CANCELED"]
    assert sum(demo.state.tool_runs.values()) == 0


async def test_the_thread_route_settles_a_dead_resume_before_it_answers(
    tmp_path: Path, demo: DemoRuntime, workspace: Path
) -> None:
    """A page reloaded after the adapter died mid-resume sees what the runtime
    says, not a run nobody streams: the interrupt waiting again when its
    answer never arrived, a settled thread when the runtime took it."""
    first = await start_adapter(tmp_path / "state", demo.url)
    try:
        never = await interrupted(first, "t-seen-never", workspace)
        await interrupted(first, "t-seen-took", workspace)
    finally:
        await first.close()
    await die_mid_resume(tmp_path / "state", "t-seen-never")
    await die_mid_resume(tmp_path / "state", "t-seen-took", runtime=demo.url)
    second = await start_adapter(tmp_path / "state", demo.url)
    try:
        async with second.session.get(second.url + "threads/t-seen-never") as resp:
            waiting = await resp.json()
        assert waiting["state"] == "interrupted" and waiting["pendingInterrupts"] == [never]
        assert "activeRunId" not in waiting
        async with second.session.get(second.url + "threads/t-seen-took") as resp:
            settled = await resp.json()
        assert settled["state"] == "idle" and settled["pendingInterrupts"] == []
        # The page resumes what it was shown; the answer runs once.
        events = (await second.run(resume_body("t-seen-never", workspace, waiting["pendingInterrupts"][0]))).events()
        assert events[-1]["outcome"] == {"type": "success"}
    finally:
        await second.close()
    assert sum(demo.state.tool_runs.values()) == 2 and demo.state.cancel_calls == {}
