"""A whole pipeline through the adapter: pauses, resumes, restarts."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.translate.mapper import RunIdentity, RunTranslator
from aguiadapter.translate.pipeline import CUSTOM_TYPES
from tests.support.adapter import RunningAdapter, run_body, start_adapter
from tests.support.agui import check_models, check_order, judge_events

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "pipeline"
PIPELINE = {"runMode": "pipeline", "pipelineName": "selling"}


def pipeline_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["value"] for e in events if e.get("name") == "iac-code.pipeline.v1"]


def resume(thread_id: str, cwd: Path, interrupt: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    body = run_body(thread_id=thread_id, text=None, cwd=str(cwd), **PIPELINE)
    body["resume"] = [{"interruptId": interrupt["id"], "status": "resolved", "payload": payload}]
    return body


async def walk_pipeline(
    run: Callable[[dict[str, Any]], Awaitable[list[dict[str, Any]]]], thread_id: str, cwd: Path
) -> list[list[dict[str, Any]]]:
    """Start, allow B's permission, pick candidate B, allow the deploy
    command: the four runs' events."""
    first = await run(run_body(thread_id=thread_id, text="sell me something", cwd=str(cwd), **PIPELINE))
    (permission,) = first[-1]["outcome"]["interrupts"]
    second = await run(resume(thread_id, cwd, permission, {"decision": "allow_once"}))
    (selection,) = second[-1]["outcome"]["interrupts"]
    (option,) = [item for item in selection["metadata"]["options"] if item["label"] == "candidate-b"]
    third = await run(resume(thread_id, cwd, selection, {"selectedId": option["id"]}))
    (deploy,) = third[-1]["outcome"]["interrupts"]
    fourth = await run(resume(thread_id, cwd, deploy, {"decision": "allow_once"}))
    return [first, second, third, fourth]


async def test_a_pipeline_pauses_twice_and_resumes_to_the_end(
    adapter: RunningAdapter, demo: DemoRuntime, workspace: Path
) -> None:
    async def run(body: dict[str, Any]) -> list[dict[str, Any]]:
        return (await adapter.run(body)).events()  # balanced, valid models: checked inside

    first, second, third, fourth = await walk_pipeline(run, "p-walk", workspace)
    (permission,) = first[-1]["outcome"]["interrupts"]
    assert permission["reason"] == "tool_call" and permission["metadata"]["scope"] == "candidate_step"
    assert permission["metadata"]["subPipelineId"].startswith("evaluate_candidate_")
    (selection,) = second[-1]["outcome"]["interrupts"]
    assert selection["metadata"]["kind"] == "candidate_selection"
    ids = {branch["properties"]["selectedId"]["const"] for branch in selection["responseSchema"]["oneOf"]}
    assert ids == {"0", "1"}
    (deploy,) = third[-1]["outcome"]["interrupts"]
    assert deploy["metadata"]["scope"] == "step" and deploy["metadata"]["toolName"] == "bash"
    assert fourth[-1]["outcome"] == {"type": "success"}
    assert [v["eventType"] for v in pipeline_events(fourth)].count("pipeline_completed") == 1
    assert len(demo.state.commands_run) == 1, "the permitted deploy command ran exactly once"


async def test_parallel_candidates_stream_with_their_own_messages(adapter: RunningAdapter, workspace: Path) -> None:
    events = (await adapter.run(run_body(thread_id="p-par", text="go", cwd=str(workspace), **PIPELINE))).events()
    open_at_once: set[str] = set()
    widest = 0
    for event in events:
        if event["type"] == "TEXT_MESSAGE_START":
            open_at_once.add(event["messageId"])
        elif event["type"] == "TEXT_MESSAGE_END":
            open_at_once.discard(event["messageId"])
        widest = max(widest, len(open_at_once))
    assert widest >= 2
    steps = [e["stepName"] for e in events if e["type"] == "STEP_STARTED"]
    candidate_steps = [name for name in steps if name.startswith("candidate:evaluate_candidate_")]
    assert len(set(candidate_steps)) == 2 and all(name.endswith(":template_generating") for name in candidate_steps)


async def test_the_resumed_run_restores_the_view_and_re_opens_open_steps(
    adapter: RunningAdapter, workspace: Path
) -> None:
    first = (await adapter.run(run_body(thread_id="p-view", text="go", cwd=str(workspace), **PIPELINE))).events()
    (permission,) = first[-1]["outcome"]["interrupts"]
    second = (await adapter.run(resume("p-view", workspace, permission, {"decision": "allow_once"}))).events()
    assert second[1]["name"] == "iac-code.session.v1" and second[1]["value"]["sessionId"]
    assert second[2]["type"] == "STEP_STARTED" and second[2]["stepName"] == "evaluate_candidates"
    assert [e["type"] for e in second].count("ACTIVITY_SNAPSHOT") == 1
    snapshots = [e for e in second if e["type"] == "ACTIVITY_SNAPSHOT"]
    assert snapshots and snapshots[0]["activityType"] == "iac-code.pipeline.v1"
    # What candidate A did while no stream was open reaches the client.
    waiting = permission["metadata"]["subPipelineId"]
    assert any(v["eventType"] == "candidate_completed" and v.get("candidate", {}).get("id") not in (None, waiting)
               for v in pipeline_events(second))


@pytest.mark.parametrize("restart", [False, True], ids=["one-adapter", "restarted-between-runs"])
async def test_only_allow_listed_events_and_never_one_twice(
    tmp_path: Path, demo: DemoRuntime, workspace: Path, restart: bool
) -> None:
    state = tmp_path / "state"
    holder: dict[str, RunningAdapter] = {"adapter": await start_adapter(state, demo.url)}

    async def run(body: dict[str, Any]) -> list[dict[str, Any]]:
        if restart:
            await holder["adapter"].close()
            holder["adapter"] = await start_adapter(state, demo.url)
        return (await holder["adapter"].run(body)).events()

    try:
        runs = await walk_pipeline(run, "p-once", workspace)
    finally:
        await holder["adapter"].close()
    relayed = [value for events in runs for value in pipeline_events(events)]
    assert {value["eventType"] for value in relayed} <= CUSTOM_TYPES
    event_ids = [value["eventId"] for value in relayed]
    assert len(event_ids) == len(set(event_ids)), "a pipeline event reached the client twice"
    sequences = [value["sequence"] for value in relayed]
    assert sequences == sorted(sequences)


async def test_cleanup_only_runs_the_cleanup_path(adapter: RunningAdapter, workspace: Path) -> None:
    body = run_body(thread_id="p-clean", text="clean up", cwd=str(workspace), cleanupOnly=True, **PIPELINE)
    events = (await adapter.run(body)).events()
    kinds = [value["eventType"] for value in pipeline_events(events)]
    assert kinds[0] == "cleanup_started" and "cleanup_completed" in kinds
    assert events[-1]["outcome"] == {"type": "success"}


RECORDED_STREAMS = ["01-until-sideband.jsonl", "03-subscribe-until-selection.jsonl", "04-after-selection.jsonl"]


@pytest.mark.parametrize("name", RECORDED_STREAMS)
def test_recorded_pipeline_streams_translate_to_balanced_runs(name: str) -> None:
    lines = [json.loads(line) for line in (FIXTURES / name).read_text().splitlines() if line.strip()]
    results = [line.get("result", line) for line in lines]
    first = results[0]
    holder = first.get("task") or first.get("statusUpdate") or {}
    task_id = holder.get("id") or holder.get("taskId")
    translator = RunTranslator(RunIdentity("t", "r", "e", holder["contextId"], "inv", task_id=task_id))
    events: list[dict[str, Any]] = [{"type": "RUN_STARTED", "threadId": "t", "runId": "r", "protocolVersion": "1.0"}]
    for result in results:
        events += translator.feed(result)
        if translator.outcome is not None:
            break
    events += translator.finish()
    events.append({"type": "RUN_FINISHED", "threadId": "t", "runId": "r"})
    check_models(events)
    check_order(events)
    judge_events(events)
    kinds = [value["eventType"] for value in pipeline_events(events)]
    assert set(kinds) <= CUSTOM_TYPES and "internal_debug" not in kinds
    assert translator.outcome is not None
