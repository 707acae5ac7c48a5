"""The demo runtime's scripted pipeline, driven through the project's own A2A client.

One sentence of the brief per test where it makes sense: the stream pauses with
``pendingPermissions`` while WORKING, SendMessage answers it and the pipeline
goes on, the state route fills the gap, the selection is an interrupt, and the
sequences grow by one except for the deliberate replay.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from aguiadapter.a2a.client import A2AClient, A2ARpcError
from aguiadapter.demo.pipeline import PipelineIds
from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.demo.scripts import DENIED_RESULT
from tests.fixtures.pipeline import record
from tests.fixtures.pipeline.record import (
    PIPELINE,
    TOKEN,
    collect,
    envelopes,
    iac_of,
    permission_answer,
    pipeline_state,
    user_message,
)
from tests.support.eventually import eventually

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "pipeline"
Json = dict[str, Any]


@pytest.fixture
async def runtime() -> AsyncIterator[DemoRuntime]:
    demo = DemoRuntime(token=TOKEN)
    await demo.start()
    yield demo
    await demo.close()


@pytest.fixture
async def client(runtime: DemoRuntime) -> AsyncIterator[A2AClient]:
    async with A2AClient(runtime.url, token=TOKEN) as a2a:
        yield a2a


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


# --- helpers ---------------------------------------------------------------


def state_of(result: Json) -> str:
    holder = result.get("statusUpdate") or result.get("task") or result
    return str(holder["status"]["state"])


def kinds(results: list[Json]) -> list[str]:
    return [envelope["eventType"] for envelope in envelopes(results)]


async def until_sideband(client: A2AClient, metadata: Json | None = None) -> tuple[str, list[Json], Json]:
    """Start a pipeline and read it up to B's permission, as the adapter does."""
    first = await collect(client.stream_message(user_message("Plan a service", metadata=metadata)), until_sideband=True)
    [pending] = iac_of(first[-1])["pendingPermissions"]
    return first[0]["task"]["id"], first, pending


async def wait_for_candidate_a(runtime: DemoRuntime, task_id: str) -> None:
    run = runtime.state.tasks[task_id].pipeline
    assert run is not None, f"task {task_id} runs no pipeline"
    await eventually(lambda: run.candidates["candidate-a"] == "completed", "candidate A finishes")


async def to_selection(
    client: A2AClient, runtime: DemoRuntime, decision: str = "allow_once"
) -> tuple[str, list[Json], Json]:
    """Run up to the selection interrupt: the task id, the subscription and the envelope."""
    task_id, _, pending = await until_sideband(client)
    await wait_for_candidate_a(runtime, task_id)
    reply = await client.send_message(permission_answer(pending, decision))
    assert state_of(reply["task"]) == "TASK_STATE_WORKING"
    followed = await collect(client.subscribe(task_id))
    return task_id, followed, iac_of(followed[-1])["input"]


def assert_end_of_turn(result: Json) -> None:
    assert state_of(result) == "TASK_STATE_INPUT_REQUIRED"
    assert set(iac_of(result)) == {"iacCodeSessionId"}


# --- pause 1: the side-band permission ---------------------------------------------


async def test_the_stream_pauses_with_pending_permissions_while_working(client: A2AClient) -> None:
    task_id, first, pending = await until_sideband(client)
    assert first[0]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"
    assert state_of(first[-1]) == "TASK_STATE_WORKING"
    ids = PipelineIds(task_id)
    assert pending["kind"] == "permission" and pending["required"] is True
    assert pending["inputId"] == ids.permission_input_id
    assert pending["toolUseId"] == ids.tool_use_id("sub-b/write_file")
    assert (pending["scope"], pending["subPipelineId"], pending["toolName"]) == ("candidate", "sub-b", "write_file")
    assert pending["requestTaskId"] == task_id and pending["contextId"] == first[0]["task"]["contextId"]
    assert pending["isReadOnly"] is False and [o["id"] for o in pending["options"]] == ["allow_once", "deny"]
    assert {"title", "purpose", "effect", "target", "prompt", "safeSummary", "operation", "displayParameters"} <= set(
        pending
    )
    asked = iac_of(first[-1])["pipeline"]
    assert asked["eventType"] == "input_required" and asked["input"] == pending
    task = await client.get_task(task_id)
    assert state_of(task) == "TASK_STATE_WORKING"
    assert task["metadata"]["iac_code"]["pendingPermissions"] == [pending]


async def test_the_first_part_follows_the_script(client: A2AClient) -> None:
    _, first, _ = await until_sideband(client)
    assert kinds(first) == [
        "pipeline_started",
        *("step_started", "thinking_delta", "text_delta", "text_delta", "usage", "step_completed"),
        *("step_started", "candidate_started", "candidate_started"),
        *("candidate_step_started", "candidate_step_started"),
        *["text_delta"] * 6,
        *("tool_started", "tool_result", "tool_result", "internal_debug", "stack_progress"),
        *("tool_started", "input_required"),
    ]
    [batch] = [r for r in first if "pipelineBatch" in iac_of(r)]
    texts = iac_of(batch)["pipelineBatch"]["events"]
    assert [e["candidate"]["id"] for e in texts] == ["candidate-a", "candidate-b"] * 3
    assert all(e["candidateStep"]["id"] == "template_generating" and e["scope"] == "candidate_step" for e in texts)
    listing = next(e for e in envelopes(first) if e["eventType"] == "tool_started")
    assert listing["data"]["toolName"] == "list_files" and listing["candidate"]["subPipelineId"] == "sub-a"


async def test_leaving_the_stream_does_not_cancel_the_task(client: A2AClient, runtime: DemoRuntime) -> None:
    task_id, _, _ = await until_sideband(client)
    await wait_for_candidate_a(runtime, task_id)
    task = runtime.state.tasks[task_id]
    assert task.state == "TASK_STATE_WORKING" and task.runner is not None
    assert runtime.state.total_cancel_calls == 0


async def test_the_state_route_returns_the_missed_events_and_the_snapshot(
    client: A2AClient, runtime: DemoRuntime, http: aiohttp.ClientSession
) -> None:
    task_id, first, pending = await until_sideband(client)
    cursor = max(e["sequence"] for e in envelopes(first))
    await wait_for_candidate_a(runtime, task_id)
    body = await pipeline_state(http, runtime.url, task_id, cursor)
    missed = body["events"]
    assert [(e["eventType"], e["sequence"]) for e in missed] == [
        ("candidate_step_completed", cursor + 1),
        ("candidate_completed", cursor + 2),
    ]
    assert all(e["candidate"]["id"] == "candidate-a" for e in missed)
    snapshot = body["snapshot"]
    assert snapshot["pipelineRunId"] == PipelineIds(task_id).run_id and snapshot["pipelineName"] == "selling"
    assert snapshot["status"] == "running" and snapshot["lastSequence"] == cursor + 2
    assert snapshot["steps"] == [
        {"id": "requirements", "status": "completed"},
        {"id": "candidates", "status": "running"},
        {"id": "selection", "status": "pending"},
        {"id": "deploy", "status": "pending"},
    ]
    assert snapshot["candidates"] == [
        {"id": "candidate-a", "status": "completed"},
        {"id": "candidate-b", "status": "running"},
    ]
    assert snapshot["pendingInputs"] == [pending]
    everything = await pipeline_state(http, runtime.url, task_id, 0)
    assert [e["sequence"] for e in everything["events"]] == [float(n) for n in range(1, int(cursor) + 3)]


async def test_send_message_answers_the_permission_and_the_pipeline_goes_on(
    client: A2AClient, runtime: DemoRuntime
) -> None:
    task_id, _, pending = await until_sideband(client)
    await wait_for_candidate_a(runtime, task_id)
    reply = await client.send_message(permission_answer(pending, "allow_once"))
    task = reply["task"]
    assert task["id"] == task_id and state_of(task) == "TASK_STATE_WORKING"
    assert "pendingPermissions" not in task["metadata"]["iac_code"]
    assert task["metadata"]["iac_code"]["inputReceived"]["inputId"] == pending["inputId"]
    followed = await collect(client.subscribe(task_id))
    assert "task" in followed[0] and state_of(followed[0]) == "TASK_STATE_WORKING"
    assert kinds(followed) == [
        *("input_received", "tool_result", "candidate_step_completed", "candidate_completed"),
        *("step_completed", "step_started", "input_required"),
    ]
    result = next(e for e in envelopes(followed) if e["eventType"] == "tool_result")
    assert result["data"]["isError"] is False and result["data"]["toolName"] == "write_file"
    assert runtime.state.tool_runs_by_use_id[pending["toolUseId"]] == 1
    assert runtime.state.tool_runs["list_files"] == 1


async def test_a_streaming_answer_follows_the_task_itself(client: A2AClient, runtime: DemoRuntime) -> None:
    task_id, _, pending = await until_sideband(client)
    await wait_for_candidate_a(runtime, task_id)
    followed = await collect(client.stream_message(permission_answer(pending, "allow_once")))
    assert kinds(followed)[0] == "input_received" and kinds(followed)[-1] == "input_required"
    assert iac_of(followed[-1])["input"]["kind"] == "candidate_selection"


async def test_an_early_answer_loses_no_event(client: A2AClient, http: aiohttp.ClientSession) -> None:
    # Answered while candidate A may still be finishing: whatever the subscriber
    # missed before it joined is in the state route, the rest it sees live.
    task_id, first, pending = await until_sideband(client)
    cursor = max(e["sequence"] for e in envelopes(first))
    await client.send_message(permission_answer(pending, "allow_once"))
    followed = await collect(client.subscribe(task_id))
    live = [e["sequence"] for e in envelopes(followed)]
    assert live == [float(n) for n in range(int(live[0]), int(live[-1]) + 1)]
    assert "input_received" in kinds(followed) and kinds(followed)[-1] == "input_required"
    gap = [e["sequence"] for e in (await pipeline_state(http, client.url, task_id, cursor))["events"]]
    assert [s for s in gap if s < live[0]] == [float(n) for n in range(int(cursor) + 1, int(live[0]))]


async def test_deny_does_not_run_the_tool(client: A2AClient, runtime: DemoRuntime) -> None:
    _, followed, _ = await to_selection(client, runtime, "deny")
    [result] = [e for e in envelopes(followed) if e["eventType"] == "tool_result"]
    assert result["data"]["isError"] is True and result["data"]["result"] == DENIED_RESULT
    assert result["status"] == "failed"
    received = envelopes(followed)[0]
    assert received["eventType"] == "input_received" and received["data"]["decision"] == "deny"
    assert runtime.state.tool_runs["write_file"] == 0


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        ({"inputId": "permission-0000"}, "inputId does not match"),
        ({"toolUseId": "call_0"}, "toolUseId does not match"),
        ({"decision": "maybe"}, "allow_once or deny"),
    ],
    ids=["wrong-input", "wrong-tool-use", "bad-decision"],
)
async def test_bad_side_band_answers_are_refused(
    client: A2AClient, runtime: DemoRuntime, change: Json, refusal: str
) -> None:
    task_id, _, pending = await until_sideband(client)
    message = permission_answer(pending, "allow_once")
    message["parts"][0]["data"].update(change)
    with pytest.raises(A2ARpcError, match=refusal) as refused:
        await client.send_message(message)
    assert refused.value.code == -32602
    assert pending["inputId"] in runtime.state.tasks[task_id].side_pending
    with pytest.raises(A2ARpcError, match="still working"):
        await client.send_message(user_message("hello", task_id=task_id))


async def test_a_second_answer_is_refused(client: A2AClient, runtime: DemoRuntime) -> None:
    task_id, _, pending = await until_sideband(client)
    await client.send_message(permission_answer(pending, "allow_once"))
    with pytest.raises(A2ARpcError) as refused:
        await client.send_message(permission_answer(pending, "allow_once"))
    assert refused.value.code == -32602
    await collect(client.subscribe(task_id))
    assert runtime.state.tool_runs["write_file"] == 1


async def test_cancel_while_b_waits_drops_the_permission(
    client: A2AClient, runtime: DemoRuntime, http: aiohttp.ClientSession
) -> None:
    task_id, _, pending = await until_sideband(client)
    canceled = await client.cancel_task(task_id)
    assert state_of(canceled) == "TASK_STATE_CANCELED"
    assert "pendingPermissions" not in canceled["metadata"]["iac_code"]
    body = await pipeline_state(http, runtime.url, task_id, 0)
    assert body["snapshot"]["status"] == "canceled" and body["snapshot"]["pendingInputs"] == []
    with pytest.raises(A2ARpcError, match=r"canceled|no permission"):
        await client.send_message(permission_answer(pending, "allow_once"))
    assert runtime.state.tool_runs["write_file"] == 0


# --- pause 2: the selection ------------------------------------------------------------


async def test_the_selection_is_an_input_required_interrupt(
    client: A2AClient, runtime: DemoRuntime, http: aiohttp.ClientSession
) -> None:
    task_id, followed, envelope = await to_selection(client, runtime)
    ids = PipelineIds(task_id)
    assert state_of(followed[-1]) == "TASK_STATE_INPUT_REQUIRED"
    assert envelope["kind"] == "candidate_selection" and envelope["required"] is True
    assert envelope["inputId"] == ids.selection_input_id and envelope["toolUseId"] == ids.tool_use_id("selection")
    assert envelope["allowFreeText"] is False and envelope["requestTaskId"] == task_id
    assert [(o["id"], o["label"]) for o in envelope["options"]] == [
        ("candidate-a", "Candidate A"),
        ("candidate-b", "Candidate B"),
    ]
    for option in envelope["options"]:
        assert option["summary"] and option["architectureDiagram"]
        assert option["totalMonthlyCost"] == pytest.approx(sum(i["monthlyCost"] for i in option["costItems"]))
    assert envelope["metadata"] == {"candidatePresentation": "rich"}
    task = await client.get_task(task_id)
    assert state_of(task) == "TASK_STATE_INPUT_REQUIRED"
    assert task["metadata"]["iac_code"]["input"] == envelope
    assert "pendingPermissions" not in task["metadata"]["iac_code"]
    snapshot = (await pipeline_state(http, client.url, task_id, 0))["snapshot"]
    assert snapshot["status"] == "input_required" and snapshot["pendingInputs"] == [envelope]


async def test_without_candidate_presentation_nothing_is_echoed(client: A2AClient) -> None:
    plain = {key: value for key, value in PIPELINE.items() if key != "candidatePresentation"}
    task_id, _, pending = await until_sideband(client, plain)
    await client.send_message(permission_answer(pending, "deny"))
    followed = await collect(client.subscribe(task_id))
    assert "metadata" not in iac_of(followed[-1])["input"]


async def test_answering_the_selection_finishes_the_pipeline(
    client: A2AClient, runtime: DemoRuntime, http: aiohttp.ClientSession
) -> None:
    task_id, _, _ = await to_selection(client, runtime)
    with pytest.raises(A2ARpcError, match="Candidate A, Candidate B"):
        await collect(client.stream_message(user_message("the cheap one", task_id=task_id)))
    finished = await collect(client.stream_message(user_message("Candidate B", task_id=task_id)))
    assert iac_of(finished[0])["inputReceived"]["kind"] == "candidate_selection"
    assert kinds(finished) == [
        *("input_received", "candidate_selected", "diagram_shown", "step_completed", "step_started"),
        *("stack_progress", "stack_progress", "step_completed", "pipeline_completed"),
    ]
    selected = envelopes(finished)[1]
    assert selected["data"]["candidateId"] == "candidate-b"
    texts = [r["statusUpdate"]["status"]["message"]["parts"][0]["text"] for r in finished if "message" in r["statusUpdate"]["status"]]
    assert texts == ["Candidate B is deployed as stack demo-candidate-b."]
    assert "usage" in iac_of(finished[-2])
    assert_end_of_turn(finished[-1])
    snapshot = (await pipeline_state(http, client.url, task_id, 0))["snapshot"]
    assert snapshot["status"] == "completed" and snapshot["pendingInputs"] == []
    assert {s["status"] for s in snapshot["steps"]} == {"completed"}


# --- the whole run -------------------------------------------------------------------


async def test_sequences_grow_by_one_except_for_the_one_replay(
    client: A2AClient, runtime: DemoRuntime, http: aiohttp.ClientSession
) -> None:
    task_id, first, pending = await until_sideband(client)
    cursor = max(e["sequence"] for e in envelopes(first))
    await wait_for_candidate_a(runtime, task_id)
    gap = (await pipeline_state(http, runtime.url, task_id, cursor))["events"]
    await client.send_message(permission_answer(pending, "allow_once"))
    followed = await collect(client.subscribe(task_id))
    finished = await collect(client.stream_message(user_message("candidate-a", task_id=task_id)))
    seen = [*envelopes(first), *gap, *envelopes(followed), *envelopes(finished)]
    replays = [(a, b) for a, b in pairwise(seen) if b["sequence"] <= a["sequence"]]
    assert len(replays) == 1
    [(original, replay)] = replays
    assert replay == original and replay["eventType"] == "tool_result"
    unique = [e for e in seen if e is not replay]
    assert [e["sequence"] for e in unique] == [float(n) for n in range(1, len(unique) + 1)]
    assert isinstance(unique[0]["sequence"], float)
    ids = PipelineIds(task_id)
    assert all(e["eventId"] == ids.event_id(e["sequence"]) for e in seen)
    assert {e["pipelineRunId"] for e in seen} == {ids.run_id}
    assert {(e["schemaVersion"], e["extensionUri"]) for e in seen} == {("1.0", "urn:iac-code:a2a:pipeline-events:v1")}
    assert {(e["taskId"], e["pipelineName"]) for e in seen} == {(task_id, "selling")}
    assert [e["eventType"] for e in seen].count("internal_debug") == 1
    log = (await pipeline_state(http, runtime.url, task_id, 0))["events"]
    assert log == unique


async def test_cleanup_only_runs_just_the_cleanup_path(client: A2AClient, http: aiohttp.ClientSession) -> None:
    results = await collect(client.stream_message(user_message("clean", metadata={**PIPELINE, "cleanupOnly": True})))
    assert kinds(results) == [
        *("cleanup_started", "cleanup_progress", "cleanup_progress", "cleanup_completed", "pipeline_completed"),
    ]
    assert_end_of_turn(results[-1])
    task_id = results[0]["task"]["id"]
    snapshot = (await pipeline_state(http, client.url, task_id, 0))["snapshot"]
    assert snapshot["status"] == "completed" and snapshot["steps"] == [] and snapshot["candidates"] == []


async def test_a_second_run_on_the_task_keeps_counting(client: A2AClient, http: aiohttp.ClientSession) -> None:
    cleanup = {**PIPELINE, "cleanupOnly": True}
    first = await collect(client.stream_message(user_message("clean", metadata=cleanup)))
    task_id = first[0]["task"]["id"]
    again = await collect(client.stream_message(user_message("clean again", task_id=task_id, metadata=cleanup)))
    assert [state_of(r) for r in again[:2]] == ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"]
    assert [e["sequence"] for e in envelopes(again)] == [6.0, 7.0, 8.0, 9.0, 10.0]
    assert {e["pipelineRunId"] for e in envelopes(again)} == {PipelineIds(task_id, 2).run_id}
    body = await pipeline_state(http, client.url, task_id, 0)
    assert len(body["events"]) == 10 and body["snapshot"]["pipelineRunId"] == f"pipeline-{task_id}-2"


async def test_a_message_without_run_mode_gets_a_text_reply(client: A2AClient, http: aiohttp.ClientSession) -> None:
    results = await collect(client.stream_message(user_message("hello", metadata={"cwd": "/workspace"})))
    assert kinds(results) == [] and any("message" in r.get("statusUpdate", {}).get("status", {}) for r in results)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    params = {"taskId": results[0]["task"]["id"]}
    async with http.get(f"{client.url}iac-code/pipeline/state", params=params, headers=headers) as response:
        assert response.status == 404 and "pipeline" in (await response.json())["error"]


async def test_the_state_route_checks_auth_task_and_cursor(
    client: A2AClient, runtime: DemoRuntime, http: aiohttp.ClientSession
) -> None:
    task_id, _, _ = await until_sideband(client)
    route = f"{runtime.url}iac-code/pipeline/state"
    good = {"Authorization": f"Bearer {TOKEN}"}
    cases = [
        ({"taskId": task_id}, {}, 401),
        ({"taskId": "no-such-task"}, good, 404),
        ({"taskId": task_id, "afterSequence": "soon"}, good, 400),
        ({"taskId": task_id, "afterSequence": "20.0"}, good, 200),
    ]
    for params, headers, status in cases:
        async with http.get(route, params=params, headers=headers) as response:
            assert response.status == status, params
            assert response.content_type == "application/json"
            body = await response.json()
            if status == 200:
                assert all(e["sequence"] > 20 for e in body["events"]) and body["events"]


# --- the fixtures -------------------------------------------------------------------


async def test_the_recorded_fixtures_match_the_runtime(tmp_path: Path) -> None:
    written = await record.record(tmp_path)
    assert (FIXTURES / "README.md").is_file()
    for path in written:
        committed = FIXTURES / path.name
        assert committed.is_file(), f"missing fixture {path.name}: run python -m tests.fixtures.pipeline.record"
        assert committed.read_text() == path.read_text(), f"{path.name} is stale: re-run the recorder"
