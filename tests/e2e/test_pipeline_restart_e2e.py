"""A pipeline's deploy permission answered while the runtime is killed and
restarted, against the real `iac-code a2a`: the deploy command runs once,
every stream ends with its terminal event, and the client is told the truth.

After a restart iac-code's ``GetTask`` of the pipeline's task is a bare
summary in the state the task died in (``WORKING``), and nothing runs the
task any more (``SubscribeToTask`` is refused: the task is not active). The
pipeline state route, kept on disk, still logs what the pipeline did: the
deploy permission's ``permission_resolved``. That is positive evidence that
the answer was taken, so the adapter never sends it again; the rest of the
pipeline is lost, and the client hears ``EXECUTION_LOST``, never that the
run failed or succeeded.

Killed while the permission still waited, the task comes back as a bare
``INPUT_REQUIRED`` summary whose state route lists the permission as
pending, and the restarted runtime takes an answer to it. An answer that may
have reached the runtime before it died is still never sent again: nothing
says whether it was taken.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ag_ui_validate.pytest_plugin import assert_valid_agui

from tests.e2e.test_pipeline_e2e import Client
from tests.e2e.test_runtime_restart_e2e import proxied_adapter, proxy  # noqa: F401 (fixtures)
from tests.support.a2a_proxy import A2AProxy, Instant
from tests.support.adapter import Reply, RunningAdapter, run_body
from tests.support.agui import interrupts_of
from tests.support.eventually import eventually
from tests.support.iac_runtime import IacRuntime
from tests.support.model_stub import ModelStub
from tests.support.pipeline_script import DEPLOY_STEP, STEP_PERMISSION, PipelineScenario, deploy_count, scenario

#: How long the deploy step's model waits to answer the command's result: the
#: runtime is killed with the command run and the pipeline unfinished.
STALL_SECONDS = 30.0


@pytest.fixture
def plan(model_stub: ModelStub) -> Iterator[PipelineScenario]:
    """The ``direct`` pipeline (a selection, then the deploy permission)."""
    chosen = scenario("direct")
    with model_stub.use_pipeline_script(chosen.script, chosen.name, {DEPLOY_STEP: STALL_SECONDS}):
        yield chosen


def ended(reply: Reply) -> list[dict[str, Any]]:
    """A run's events, judged as any client judges them; it ends with its terminal event."""
    events = reply.events()
    assert_valid_agui(events, max_warnings=0)
    assert events[-1]["type"] in ("RUN_FINISHED", "RUN_ERROR"), events[-1]
    return events


async def to_the_deploy_permission(
    adapter: RunningAdapter, plan: PipelineScenario, cwd: Path
) -> tuple[Client, list[dict[str, Any]]]:
    """A client that ran the pipeline up to the deploy permission, and its interrupts."""

    async def post(body: dict[str, Any]) -> bytes:
        reply = await adapter.run(body)
        assert reply.status == 200, reply.body
        return reply.body

    client = Client(post, plan, f"pipeline-restart-{uuid.uuid4().hex[:8]}", cwd)
    events = await client.start()
    while (interrupts := interrupts_of(events)) and plan.pause_for(interrupts[0]["metadata"]) is not STEP_PERMISSION:
        events = await client.answer(interrupts)
    assert interrupts, "the pipeline reached the deploy permission"
    return client, interrupts


def answer_body(client: Client, interrupts: list[dict[str, Any]]) -> dict[str, Any]:
    """The client's answer to the deploy permission, under a new runId."""
    body = run_body(thread_id=client.thread_id, text=None, cwd=str(client.cwd), **client.plan.agui_options())
    body["resume"] = client.plan.resume(interrupts)
    return body


def told(reply: Reply) -> tuple[int, str]:
    """What a run's reply tells the client: the error code of a refusal, or
    how its stream ended."""
    if reply.status != 200:
        return reply.status, reply.json()["error"]["code"]
    last = ended(reply)[-1]
    return 200, last["code"] if last["type"] == "RUN_ERROR" else last["outcome"]["type"]


#: What the client hears when it retries its answer to the deploy permission,
#: and when it retries again, by the instant of the answer's exchange at
#: which the runtime was killed (it restarts at once).
RETRIES = {
    # The adapter saw nothing of the runtime's reply. The state route says
    # the answer was taken: the retry learns how the run that carried it
    # ended (its execution lost), and from then on that it was applied.
    Instant.AFTER_SENT: [(200, "EXECUTION_LOST"), (409, "RESUME_ALREADY_APPLIED")],
    # The adapter saw the runtime take the answer, and told the client how
    # the stream broke: the answer was applied.
    Instant.TOOL_RUNNING: [(409, "RESUME_ALREADY_APPLIED"), (409, "RESUME_ALREADY_APPLIED")],
    # The answer never reached the runtime, but the adapter cannot know (the
    # connection was made): nothing says it was taken, and it is never sent
    # to a runtime that restarted since.
    Instant.BEFORE_SENT: [(409, "EXECUTION_LOST"), (409, "EXECUTION_LOST")],
}
#: How many times the deploy command ran, by the same instant.
DEPLOYS = {Instant.AFTER_SENT: 1, Instant.TOOL_RUNNING: 1, Instant.BEFORE_SENT: 0}


@pytest.mark.parametrize("instant", list(RETRIES), ids=lambda instant: instant.value)
async def test_a_deploy_answer_the_runtime_died_with_is_applied_once_and_the_loss_is_told(
    proxied_adapter: RunningAdapter,  # noqa: F811
    proxy: A2AProxy,  # noqa: F811
    own_runtime: IacRuntime,
    plan: PipelineScenario,
    instant: Instant,
) -> None:
    adapter = proxied_adapter
    cwd = own_runtime.workspace(f"pipeline-restart-{instant.value}")
    client, interrupts = await to_the_deploy_permission(adapter, plan, cwd)
    assert deploy_count(cwd) == 0

    async def kill_the_runtime() -> None:
        if DEPLOYS[instant]:
            await eventually(lambda: deploy_count(cwd) == 1, "the deploy command ran", timeout=30)
        await own_runtime.restart()

    trap = proxy.arm(instant, kill_the_runtime)
    cut = await adapter.run(answer_body(client, interrupts))
    assert trap.fired.is_set(), cut.body[-300:]
    assert told(cut) == (200, "A2A_UNAVAILABLE")
    retries = [told(await adapter.run(answer_body(client, interrupts))) for _ in RETRIES[instant]]
    assert retries == RETRIES[instant]
    assert deploy_count(cwd) == DEPLOYS[instant], "the deploy command never runs twice"
    thread = (await adapter.get(f"/threads/{client.thread_id}")).json()
    assert thread["state"] == "terminal" and thread["pendingInterrupts"] == [], thread
    assert thread["lastError"] == {"code": "EXECUTION_LOST"}, "a reloaded page says the pipeline was lost"
    next_turn = run_body(thread_id=client.thread_id, text="[scenario:normal] and now?", cwd=str(cwd))
    assert told(await adapter.run(next_turn)) == (200, "success"), "the thread is usable again"
    assert deploy_count(cwd) == DEPLOYS[instant]
