"""A power cut between a turn's unsynced task binding and its end's write,
against the real `iac-code a2a` (see tests/test_unsynced_binding.py for the
model of a power cut): the record on disk names no task, and recovery finds
the turn's task from the runtime's execution state and cancels it."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from aguiadapter.protocol.digest import canonical_digest
from aguiadapter.protocol.parsing import parse_run_input
from aguiadapter.threads.record import ThreadState
from tests.support.adapter import run_body
from tests.support.eventually import eventually
from tests.support.iac_runtime import IacRuntime
from tests.test_unsynced_binding import FrozenAfterSession, PowerCut, start_service, stored

CANCELED = "TASK_STATE_CANCELED"


async def test_a_power_cut_after_the_binding_orphans_no_task_of_the_real_runtime(
    tmp_path: Path, iac_runtime: IacRuntime, iac_workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cut = PowerCut(monkeypatch)
    thread_id = f"e-cut-{uuid.uuid4()}"
    body = run_body(thread_id=thread_id, text="[scenario:slow seconds=20] take your time", cwd=str(iac_workspace))
    before, client = await start_service(tmp_path / "before", iac_runtime.url, iac_runtime.token)
    sink = FrozenAfterSession()
    try:
        ticket = await before.admit(parse_run_input(body), canonical_digest(body), "en", str(iac_workspace))
        running = asyncio.ensure_future(before.run(ticket, sink))
        await asyncio.wait_for(sink.frozen.wait(), 30)
        assert sink.session is not None
        task_id, session_id = sink.session["taskId"], sink.session["sessionId"]
        cut.restore(tmp_path / "before" / "threads", tmp_path / "after" / "threads")
        image = stored(tmp_path / "after")
        assert image.state is ThreadState.RUNNING and image.task_id is None
        assert await iac_runtime.task_state(task_id) == "TASK_STATE_WORKING"

        after, after_client = await start_service(tmp_path / "after", iac_runtime.url, iac_runtime.token)
        try:
            again = {**body, "runId": f"run-{uuid.uuid4()}",
                     "messages": [{"id": f"m-{uuid.uuid4()}", "role": "user", "content": "hello again"}]}
            ticket = await after.admit(parse_run_input(again), canonical_digest(again), "en", str(iac_workspace))
            await after.run(ticket, None)
        finally:
            await after.shutdown()
            await after_client.close()

        async def cancelled() -> bool:
            return await iac_runtime.task_state(task_id) == CANCELED

        await eventually(cancelled, "the dead turn's task cancelled on the runtime")
        record = stored(tmp_path / "after")
        assert record.runs[body["runId"]].outcome == "EXECUTION_LOST"
        assert record.session_id == session_id
        # Left running, the turn's task would refuse the thread's next turn ("Task is already working").
        assert record.runs[again["runId"]].outcome == "success"
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await before.shutdown()
        await client.close()
