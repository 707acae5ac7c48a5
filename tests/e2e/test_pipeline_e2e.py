"""Complete pipelines through the adapter, against the real `iac-code a2a`.

A client runs a ``selling`` pipeline as a person would: one user turn, then
one resume per pause, each answer given the way the recorded client gave it,
until the runtime reports ``pipeline_completed``. Every run is judged on its
own (the ``ag-ui-protocol`` models, the AG-UI ordering rules and
``ag-ui-validate`` at zero warnings), every pause must reach the client with
its scope, every answer must reach the runtime once, and the deploy step's
permitted command must run exactly once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest
from ag_ui_validate.pytest_plugin import assert_valid_agui

from tests.support.adapter import RunningAdapter, run_body
from tests.support.adapter_process import AdapterProcess
from tests.support.agui import assert_content_inside_steps, assert_no_empty_step, check_stream, interrupts_of
from tests.support.iac_runtime import IacRuntime
from tests.support.model_stub import ModelStub
from tests.support.pipeline_script import PipelineScenario, deploy_count, scenario

PIPELINE_EVENT = "iac-code.pipeline.v1"
#: More runs than any scenario has pauses: a client stuck in a loop fails.
MAX_RUNS = 8


class Client:
    """A person at an AG-UI client: posts a run, reads it to its end."""

    def __init__(self, post: Any, plan: PipelineScenario, thread_id: str, cwd: Path) -> None:
        self.post = post
        self.plan = plan
        self.thread_id = thread_id
        self.cwd = cwd
        self.runs: list[list[dict[str, Any]]] = []

    async def start(self) -> list[dict[str, Any]]:
        body = run_body(thread_id=self.thread_id, text=self.plan.prompt, cwd=str(self.cwd), **self.plan.agui_options())
        return await self._run(body)

    async def answer(self, interrupts: list[dict[str, Any]], run_id: str | None = None) -> list[dict[str, Any]]:
        body = run_body(thread_id=self.thread_id, text=None, cwd=str(self.cwd), run_id=run_id,
                        **self.plan.agui_options())
        body["resume"] = self.plan.resume(interrupts)
        return await self._run(body)

    async def _run(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        raw = await self.post(body)
        events = check_stream(raw)
        assert_valid_agui(events, max_warnings=0)
        self.runs.append(events)
        return events


def pipeline_types(runs: list[list[dict[str, Any]]]) -> list[str]:
    return [e["value"]["eventType"] for run in runs for e in run if e.get("name") == PIPELINE_EVENT]


async def drive_to_completion(client: Client, first: list[dict[str, Any]]) -> list[str]:
    """Answer every pause until the pipeline completes; the pauses seen, by name."""
    pauses: list[str] = []
    events = first
    while interrupts := interrupts_of(events):
        assert len(client.runs) < MAX_RUNS, "the pipeline does not end"
        names = {client.plan.pause_for(i["metadata"]).name for i in interrupts}
        assert len(names) == 1, f"one pause at a time: {names}"
        pause = client.plan.pause_for(interrupts[0]["metadata"])
        assert len(interrupts) == pause.count, f"{pause.name}: every input of the pause at once"
        pauses.append(pause.name)
        events = await client.answer(interrupts)
    return pauses


def judge(client: Client, pauses: list[str]) -> None:
    plan = client.plan
    assert pauses == [pause.name for pause in plan.pauses], "every pause reaches the client once, in order"
    for index, events in enumerate(client.runs):
        assert_content_inside_steps(events)
        assert_no_empty_step(events)
        snapshots = [e for e in events if e["type"] == "ACTIVITY_SNAPSHOT"]
        assert len(snapshots) == (0 if index == 0 else 1), f"run {index}: one snapshot per resumed run"
    kinds = pipeline_types(client.runs)
    assert kinds.count("pipeline_completed") == 1 and kinds.count("pipeline_started") == 1
    assert deploy_count(client.cwd) == 1, "the permitted deploy command ran exactly once"


@pytest.mark.parametrize("name", ["direct", "full"])
async def test_a_pipeline_runs_to_completion_through_the_adapter(
    name: str, iac_adapter: RunningAdapter, iac_workspace: Path, model_stub: ModelStub
) -> None:
    plan = scenario(name)

    async def post(body: dict[str, Any]) -> bytes:
        reply = await iac_adapter.run(body)
        assert reply.status == 200, reply.body
        return reply.body

    with model_stub.use_pipeline_script(plan.script, plan.name):
        client = Client(post, plan, f"e2e-pipeline-{name}", iac_workspace)
        pauses = await drive_to_completion(client, await client.start())
    judge(client, pauses)


async def test_rich_candidates_reach_the_runtime_as_rich_v1(
    iac_adapter: RunningAdapter, iac_workspace: Path, model_stub: ModelStub
) -> None:
    plan = scenario("rich")

    async def post(body: dict[str, Any]) -> bytes:
        reply = await iac_adapter.run(body)
        assert reply.status == 200, reply.body
        return reply.body

    with model_stub.use_pipeline_script(plan.script, plan.name):
        client = Client(post, plan, "e2e-pipeline-rich", iac_workspace)
        first = await client.start()
        (selection,) = interrupts_of(first)
        options = selection["metadata"]["options"]
        assert all("architectureDiagram" in option for option in options), "the runtime presented rich candidates"
        pauses = await drive_to_completion(client, first)
    judge(client, pauses)


async def test_a_pipeline_survives_a_killed_adapter_between_two_pauses(
    tmp_path: Path, iac_runtime: IacRuntime, iac_workspace: Path, model_stub: ModelStub
) -> None:
    plan = scenario("full")
    adapter = AdapterProcess(a2a_url=iac_runtime.url, a2a_token=iac_runtime.token, state_dir=tmp_path / "state",
                             allowed_cwd=iac_runtime.workspaces_root, log_path=tmp_path / "adapter.log")

    async def post(body: dict[str, Any]) -> bytes:
        async with aiohttp.ClientSession() as session, session.post(adapter.url, json=body) as resp:
            raw = await resp.read()
            assert resp.status == 200, raw
            return raw

    async with adapter:
        with model_stub.use_pipeline_script(plan.script, plan.name):
            client = Client(post, plan, "e2e-pipeline-kill", iac_workspace)
            first = await client.start()
            question = interrupts_of(first)
            second = await client.answer(question)
            # Killed while the candidates' permissions wait: nothing is in flight.
            await adapter.restart()
            pauses = [plan.pause_for(question[0]["metadata"]).name]
            pauses += await drive_to_completion(client, second)
    judge(client, pauses)
