"""Re-attach against the real ``iac-code a2a``: a connection cut mid-answer.

The client's TCP connection is aborted (no FIN, as a dropped network does)
while the scripted model streams ``[scenario:slow]`` ticks through the
runtime; it re-attaches with ``Last-Event-ID``. The two halves joined are
one stream with every event once, judged by ``ag-ui-validate`` (its command
line and its pytest helper) and this project's checks. Without a grace the
same cut cancels the runtime's task, as the protocol reference says, and the
log ends it as AG-UI 1.0 ends a stop.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.adapter import RunningAdapter, run_body, start_adapter
from tests.support.agui import parse_sse, texts
from tests.support.eventually import eventually
from tests.support.iac_runtime import IacRuntime
from tests.support.model_stub import ModelStub
from tests.support.reattach import joined, read_then_cut, reattach
from tests.support.stops import assert_stopped
from tests.support.validation import validate

TICKS = "".join(f"tick {n} " for n in range(15))


async def adapter_for(tmp_path: Path, runtime: IacRuntime, **config: Any) -> RunningAdapter:
    return await start_adapter(
        tmp_path / "state", runtime.url, a2a_token=runtime.token,
        allowed_cwds=(str(runtime.workspaces_root),), **config,
    )


@pytest.fixture
async def graceful(tmp_path: Path, iac_runtime: IacRuntime) -> AsyncIterator[RunningAdapter]:
    """The adapter in front of the real runtime, keeping a clientless run for 30 s."""
    running = await adapter_for(tmp_path, iac_runtime, disconnect_grace_seconds=30.0)
    try:
        yield running
    finally:
        await running.close()


def task_of(raw: bytes) -> str:
    events, _ = parse_sse(raw)
    return str(next(e for e in events if e.get("name") == "iac-code.session.v1")["value"]["taskId"])


async def test_a_cut_connection_re_attaches_and_the_real_runtimes_answer_arrives_once(
    graceful: RunningAdapter, iac_runtime: IacRuntime, model_stub: ModelStub, iac_workspace: Path, tmp_path: Path
) -> None:
    body = run_body(thread_id="e2e-cut", text="[scenario:slow seconds=3] e2e-cut", cwd=str(iac_workspace))
    half = await read_then_cut(graceful.url, body, events=6)
    assert half.last_id is not None
    status, rest = await reattach(graceful.url, "e2e-cut", body["runId"], half.last_id)
    assert status == 200
    events = joined(half, rest)
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"] == {"type": "success"}
    assert texts(events) == TICKS, "every delta once, in order"
    await validate(tmp_path, "e2e-cut-joined", half.raw + rest)
    # iac-code ends a turn waiting for the next message; a cut would have cancelled it.
    assert await iac_runtime.task_state(task_of(half.raw)) == "TASK_STATE_INPUT_REQUIRED", "the turn ran to its end"
    (call,) = model_stub.calls_with("e2e-cut")
    assert call.outcome == "completed", "the runtime never hung up on the model"
    # The same cursor through ?after=, after the end: the same rest, then the stream closes.
    assert await reattach(graceful.url, "e2e-cut", body["runId"], half.last_id, query=True) == (200, rest)


async def test_without_a_grace_a_cut_cancels_the_real_runtimes_task(
    tmp_path: Path, iac_runtime: IacRuntime, model_stub: ModelStub, iac_workspace: Path
) -> None:
    adapter = await adapter_for(tmp_path, iac_runtime)
    try:
        body = run_body(thread_id="e2e-cut-0", text="[scenario:slow seconds=20] e2e-cut-0", cwd=str(iac_workspace))
        half = await read_then_cut(adapter.url, body, events=5)
        task_id = task_of(half.raw)

        async def cancelled() -> bool:
            return await iac_runtime.task_state(task_id) == "TASK_STATE_CANCELED"

        await eventually(cancelled, "iac-code cancels the task of the run its client left", interval=0.1)
        # What the run's log says to a client that comes back anyway: it was cancelled.
        status, rest = await reattach(adapter.url, "e2e-cut-0", body["runId"], half.last_id)
        events = joined(half, rest)
        assert status == 200
        assert_stopped(events)  # AG-UI 1.0: closed in order, RUN_FINISHED with the cancelled outcome
        await validate(tmp_path, "e2e-cut-0-joined", half.raw + rest)
        await eventually(lambda: [c.outcome for c in model_stub.calls_with("e2e-cut-0")] == ["disconnected"],
                         "the runtime hung up on the model")
    finally:
        await adapter.close()
