"""The demo runtime's scripted pipeline, driven through the project's own A2A client.

Two halves. The first states what the demo does, one rule per test: where it
pauses, what answers each pause, what the state route shows. The second
compares its wire with the recordings of a real ``iac-code a2a`` 0.16.0
(``fixtures/a2a-pipeline/``) for each fact an adapter depends on; shapes are
compared as parsed JSON, since ids, timestamps and the model's words differ.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import AsyncIterator, Callable
from itertools import pairwise
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from aguiadapter.a2a.client import A2AClient, A2ARpcError
from aguiadapter.demo.pipeline import DEPLOY_COMMAND, PipelineIds, selection_input_id
from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.demo.scripts import DENIED_RESULT
from tests.fixtures.pipeline import record
from tests.fixtures.pipeline.record import (
    PIPELINE,
    TOKEN,
    collect,
    envelopes,
    iac_of,
    is_sideband,
    permission_answer,
    pipeline_state,
    state_of,
    user_message,
)
from tests.support.eventually import eventually
from tests.support.serve import demo_runtime

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "pipeline"
REAL = Path(__file__).resolve().parent / "fixtures" / "a2a-pipeline"
Json = dict[str, Any]


@pytest.fixture
async def runtime() -> AsyncIterator[DemoRuntime]:
    async with demo_runtime(token=TOKEN) as demo:
        yield demo


@pytest.fixture
async def client(runtime: DemoRuntime) -> AsyncIterator[A2AClient]:
    async with A2AClient(runtime.url, token=TOKEN) as a2a:
        yield a2a


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


# --- helpers ---------------------------------------------------------------


def kinds(results: list[Json]) -> list[str]:
    return [envelope["eventType"] for envelope in envelopes(results)]


def last_envelope(result: Json) -> Json:
    [envelope] = envelopes([result])
    return envelope


def step_marks(results: list[Json]) -> list[tuple[str, str]]:
    """``(step_started|step_completed, step id)`` in order."""
    marks = ("step_started", "step_completed")
    return [(e["eventType"], e["step"]["id"]) for e in envelopes(results) if e["eventType"] in marks]


def the_only(envelopes_: list[Json], kind: str) -> Json:
    [found] = [e for e in envelopes_ if e["eventType"] == kind]
    return found


async def until_sideband(client: A2AClient, metadata: Json | None = None) -> tuple[str, list[Json], Json]:
    """Start a pipeline and read it up to B's permission, as the adapter does: the
    task id, what was read, the streamed input envelope."""
    first = await collect(client.stream_message(user_message("Plan a service", metadata=metadata)), until_sideband=True)
    return first[0]["task"]["id"], first, iac_of(first[-1])["input"]


async def wait_for_candidate_a(runtime: DemoRuntime, task_id: str) -> None:
    run = runtime.state.tasks[task_id].pipeline
    assert run is not None, f"task {task_id} runs no pipeline"

    def candidate_a_is_done() -> bool:
        evaluate = run.steps.get("evaluate_candidates")
        return evaluate is not None and evaluate["candidates"][0]["status"] == "completed"

    await eventually(candidate_a_is_done, "candidate A finishes")


async def to_selection(
    client: A2AClient, runtime: DemoRuntime, decision: str = "allow_once", metadata: Json | None = None
) -> tuple[str, list[Json], Json]:
    """Run up to the selection: the task id, the subscription and the selection envelope."""
    task_id, _, pending = await until_sideband(client, metadata)
    await wait_for_candidate_a(runtime, task_id)
    reply = await client.send_message(permission_answer(pending, decision))
    assert "message" in reply
    followed = await collect(client.subscribe(task_id))
    return task_id, followed, iac_of(followed[-1])["input"]


async def to_step_permission(client: A2AClient, runtime: DemoRuntime) -> tuple[str, list[Json], Json]:
    """Run up to the deploy step's permission: the task id, the selection answer's
    stream and the permission envelope."""
    task_id, _, _ = await to_selection(client, runtime)
    after = await collect(client.stream_message(user_message("candidate-b", task_id=task_id)))
    return task_id, after, iac_of(after[-2])["input"]


# --- pause: candidate B's permission, while the task works ---------------------------


async def test_the_stream_pauses_with_a_sub_pipeline_input_while_working(client: A2AClient) -> None:
    task_id, first, pending = await until_sideband(client)
    assert first[0]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"
    assert state_of(first[-1]) == "TASK_STATE_WORKING"
    ids = PipelineIds(task_id, first[0]["task"]["contextId"])
    assert pending["kind"] == "permission" and pending["required"] is True
    assert pending["inputId"] == ids.permission_input_id("b/write_file")
    assert pending["toolUseId"] == ids.tool_use_id("b/write_file")
    assert (pending["scope"], pending["subPipelineId"], pending["toolName"]) == (
        "candidate_step",
        ids.candidate_id("b"),
        "write_file",
    )
    assert pending["requestTaskId"] == task_id and pending["contextId"] == first[0]["task"]["contextId"]
    assert pending["isReadOnly"] is False and [o["id"] for o in pending["options"]] == ["allow_once", "deny"]
    asked = last_envelope(first[-1])
    assert (asked["eventType"], asked["scope"], asked["status"]) == ("permission_requested", "candidate_step", "working")
    assert asked["candidate"]["id"] == pending["subPipelineId"]
    assert asked["permission"]["inputId"] == pending["inputId"] and asked["permission"]["pending"] is True


async def test_get_task_lists_the_sub_pipeline_permission_without_its_scope(client: A2AClient) -> None:
    task_id, _, pending = await until_sideband(client)
    task = await client.get_task(task_id)
    assert state_of(task) == "TASK_STATE_WORKING"
    iac = task["metadata"]["iac_code"]
    assert "input" not in iac
    [listed] = iac["pendingPermissions"]
    assert listed == {k: v for k, v in pending.items() if k not in ("scope", "subPipelineId")}


async def test_the_first_part_follows_the_script(client: A2AClient) -> None:
    _, first, _ = await until_sideband(client)
    reply = ("message_started", "text_delta", "text_delta", "usage")
    complete = ("tool_started", "tool_result", "step_completed")
    assert kinds(first) == [
        "pipeline_started",
        *("step_started", "message_started", "thinking_delta", "text_delta", "text_delta", "usage", *complete),
        *("step_started", *reply, *complete),
        *("step_started", "candidate_started", "candidate_started"),
        *("candidate_step_started", "candidate_step_started", "message_started", "message_started"),
        *["text_delta"] * 6,
        *("tool_started", "tool_result", "tool_result", "internal_debug", "stack_progress"),
        *("tool_started", "usage", "permission_requested"),
    ]
    [batch] = [r for r in first if "pipelineBatch" in iac_of(r)]
    texts = iac_of(batch)["pipelineBatch"]["events"]
    assert [e["candidate"]["name"] for e in texts] == ["candidate-a", "candidate-b"] * 3
    assert all(e["candidateStep"]["id"] == "template_generating" and e["scope"] == "candidate_step" for e in texts)
    assert all(e["step"]["id"] == "evaluate_candidates" for e in texts)


async def test_every_event_inside_a_step_names_its_step(client: A2AClient) -> None:
    _, first, _ = await until_sideband(client)
    inside = [e for e in envelopes(first) if e["scope"] in ("step", "candidate", "candidate_step")]
    assert inside and all("step" in e for e in inside)
    assert {e["scope"] for e in envelopes(first) if "step" not in e} == {"pipeline"}


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
    assert [e["sequence"] for e in missed] == list(range(int(cursor) + 1, int(cursor) + 1 + len(missed)))
    assert [e["eventType"] for e in missed][-2:] == ["candidate_step_completed", "candidate_completed"]
    assert {e["candidate"]["name"] for e in missed} == {"candidate-a"}
    snapshot = body["snapshot"]
    assert snapshot["pipelineRunId"] == PipelineIds(task_id, first[0]["task"]["contextId"]).run_id
    assert snapshot["status"] == "working" and snapshot["lastSequence"] == missed[-1]["sequence"]
    assert [(s["id"], s["status"]) for s in snapshot["steps"]] == [
        ("intent_parsing", "completed"),
        ("architecture_planning", "completed"),
        ("evaluate_candidates", "working"),
    ]
    candidates = snapshot["steps"][2]["candidates"]
    assert [(c["name"], c["status"]) for c in candidates] == [("candidate-a", "completed"), ("candidate-b", "working")]
    [shown] = snapshot["display"]["permissions"]
    assert (shown["inputId"], shown["pending"], shown["scope"]) == (pending["inputId"], True, "candidate_step")
    assert snapshot["pendingInput"] is None
    everything = await pipeline_state(http, runtime.url, task_id, 0)
    assert [e["sequence"] for e in everything["events"]] == list(range(1, len(everything["events"]) + 1))


async def test_send_message_acknowledges_the_permission_and_the_pipeline_goes_on(
    client: A2AClient, runtime: DemoRuntime, http: aiohttp.ClientSession
) -> None:
    task_id, _, pending = await until_sideband(client)
    await wait_for_candidate_a(runtime, task_id)
    reply = await client.send_message(permission_answer(pending, "allow_once"))
    [part] = reply["message"]["parts"]
    assert part["data"] == {
        "accepted": True,
        "kind": "permission_ack",
        "schemaVersion": 1.0,
        "toolUseId": pending["toolUseId"],
        "decision": "allow_once",
        "inputId": pending["inputId"],
    }
    task = await client.get_task(task_id)
    assert state_of(task) == "TASK_STATE_WORKING"
    iac = task["metadata"]["iac_code"]
    assert "pendingPermissions" not in iac and "inputReceived" not in iac
    assert iac["pipeline"]["eventType"] == "permission_resolved" and iac["pipeline"]["data"]["inputId"] == pending["inputId"]
    followed = await collect(client.subscribe(task_id))
    assert "task" in followed[0] and state_of(followed[0]) == "TASK_STATE_WORKING"
    assert kinds(followed)[:2] == ["tool_result", "artifact_created"]
    assert kinds(followed)[-3:] == ["tool_result", "step_completed", "input_required"]
    written = the_only(envelopes(followed), "artifact_created")["data"]["filename"]
    assert [r["artifactUpdate"]["artifact"]["name"] for r in followed if "artifactUpdate" in r] == [written]
    assert runtime.state.tool_runs_by_use_id[pending["toolUseId"]] == 1
    assert runtime.state.tool_runs["list_files"] == 1
    shown = (await pipeline_state(http, runtime.url, task_id, 0))["snapshot"]["display"]["permissions"]
    assert [(p["inputId"], p["pending"], p.get("decision")) for p in shown] == [(pending["inputId"], False, "allow_once")]


async def test_a_streaming_answer_gets_only_the_acknowledgement(client: A2AClient, runtime: DemoRuntime) -> None:
    task_id, _, pending = await until_sideband(client)
    await wait_for_candidate_a(runtime, task_id)
    answered = await collect(client.stream_message(permission_answer(pending, "allow_once")))
    assert [list(result) for result in answered] == [["message"]]
    assert answered[0]["message"]["parts"][0]["data"]["kind"] == "permission_ack"
    # The acknowledgement is not the end of the turn: the pipeline goes on to the selection.
    followed = await collect(client.subscribe(task_id))
    assert state_of(followed[-1]) == "TASK_STATE_INPUT_REQUIRED"
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
    gap = (await pipeline_state(http, client.url, task_id, cursor))["events"]
    assert "permission_resolved" in [e["eventType"] for e in gap if e["sequence"] < live[0]]
    assert [e["sequence"] for e in gap if e["sequence"] < live[0]] == list(range(int(cursor) + 1, int(live[0])))


async def test_deny_does_not_run_the_tool(client: A2AClient, runtime: DemoRuntime, http: aiohttp.ClientSession) -> None:
    task_id, followed, _ = await to_selection(client, runtime, "deny")
    result = envelopes(followed)[0]
    assert result["eventType"] == "tool_result" and result["data"]["isError"] is True
    assert result["data"]["result"] == DENIED_RESULT and result["candidate"]["name"] == "candidate-b"
    assert not [r for r in followed if "artifactUpdate" in r]
    assert runtime.state.tool_runs["write_file"] == 0
    shown = (await pipeline_state(http, client.url, task_id, 0))["snapshot"]["display"]["permissions"]
    assert [p["decision"] for p in shown] == ["deny"]


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        ({"inputId": "permission-0000"}, "pending permission is not active"),
        ({"toolUseId": "call_0"}, "permission correlation does not match"),
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
    assert body["snapshot"]["status"] == "canceled" and body["snapshot"]["pendingInput"] is None
    with pytest.raises(A2ARpcError, match=r"canceled|no permission"):
        await client.send_message(permission_answer(pending, "allow_once"))
    assert runtime.state.tool_runs["write_file"] == 0


# --- pause: the candidate selection ------------------------------------------------------


async def test_the_selection_is_asked_once_its_step_has_completed(
    client: A2AClient, runtime: DemoRuntime, http: aiohttp.ClientSession
) -> None:
    task_id, followed, envelope = await to_selection(client, runtime)
    assert state_of(followed[-1]) == "TASK_STATE_INPUT_REQUIRED"
    *_, completed, asked = envelopes(followed)
    assert (completed["eventType"], completed["step"]["id"]) == ("step_completed", "confirm_and_select")
    assert (asked["eventType"], asked["status"], asked["data"]["kind"]) == (
        "input_required",
        "input_required",
        "candidate_selection",
    )
    assert envelope["kind"] == "candidate_selection" and envelope["required"] is True
    assert envelope["inputId"] == selection_input_id(asked["eventId"]) and "toolUseId" not in envelope
    assert [(o["id"], o["label"]) for o in envelope["options"]] == [("0", "candidate-a"), ("1", "candidate-b")]
    assert all({"architectureDiagram", "totalMonthlyCost", "costItems"} <= set(o) for o in envelope["options"])
    assert "metadata" not in envelope
    task = await client.get_task(task_id)
    assert state_of(task) == "TASK_STATE_INPUT_REQUIRED" and task["metadata"]["iac_code"]["input"] == envelope
    snapshot = (await pipeline_state(http, client.url, task_id, 0))["snapshot"]
    assert snapshot["status"] == "waiting_input"
    assert snapshot["pendingInput"]["eventId"] == asked["eventId"]
    assert snapshot["pendingInput"]["stepId"] == "confirm_and_select"


@pytest.mark.parametrize("presentation", [None, "rich", "standard"])
async def test_only_rich_v1_gives_rich_candidates(
    client: A2AClient, runtime: DemoRuntime, presentation: str | None
) -> None:
    metadata = {key: value for key, value in PIPELINE.items() if key != "candidatePresentation"}
    if presentation is not None:
        metadata["candidatePresentation"] = presentation
    _, _, envelope = await to_selection(client, runtime, "deny", metadata)
    assert [set(option) for option in envelope["options"]] == [{"id", "label", "summary"}] * 2


async def test_after_the_selection_the_same_step_goes_on_and_completes_again(
    client: A2AClient, runtime: DemoRuntime
) -> None:
    task_id, _, _ = await to_selection(client, runtime)
    after = await collect(client.stream_message(user_message("candidate-b", task_id=task_id)))
    assert set(iac_of(after[0])) == {"pipeline"}  # no inputReceived for a text answer
    received = envelopes(after)[0]
    assert received["eventType"] == "input_received" and received["step"]["id"] == "confirm_and_select"
    assert received["data"]["selectedValue"] == "candidate-b" and received["data"]["selectedIndex"] == 1.0
    assert step_marks(after) == [("step_completed", "confirm_and_select"), ("step_started", "deploying")]
    selected = the_only(envelopes(after), "candidate_selected")
    assert selected["data"]["candidateName"] == "candidate-b" and selected["step"]["id"] == "confirm_and_select"


async def test_an_answer_that_names_no_candidate_is_asked_again(client: A2AClient, runtime: DemoRuntime) -> None:
    task_id, _, first = await to_selection(client, runtime)
    again = await collect(client.stream_message(user_message("the cheap one", task_id=task_id)))
    received = envelopes(again)[0]
    assert received["eventType"] == "input_received" and "selectedIndex" not in received["data"]
    assert state_of(again[-1]) == "TASK_STATE_INPUT_REQUIRED"
    second = iac_of(again[-1])["input"]
    assert second["kind"] == "candidate_selection" and second["inputId"] != first["inputId"]
    assert step_marks(again) == []
    done = await collect(client.stream_message(user_message('{"selected_candidate_index": 0}', task_id=task_id)))
    assert the_only(envelopes(done), "candidate_selected")["data"]["candidateName"] == "candidate-a"


# --- pause: the deploy step's own permission ---------------------------------------------


async def test_a_step_permission_pauses_twice_and_the_second_pause_has_no_envelope(
    client: A2AClient, runtime: DemoRuntime
) -> None:
    task_id, after, envelope = await to_step_permission(client, runtime)
    asked, committed = after[-2:]
    assert [state_of(r) for r in (asked, committed)] == ["TASK_STATE_INPUT_REQUIRED"] * 2
    assert set(iac_of(asked)) == {"pipeline", "input"} and set(iac_of(committed)) == {"pipeline"}
    requested, ack = last_envelope(asked), last_envelope(committed)
    assert (requested["eventType"], requested["scope"], requested["visibility"]) == ("permission_requested", "step", "committed")
    assert ack["eventType"] == "backup_committed" and ack["status"] == "input_required"
    assert ack["data"] == {
        "committedEventId": requested["eventId"],
        "committedEventType": "permission_requested",
        "committedSequence": requested["sequence"],
    }
    assert (envelope["kind"], envelope["scope"], envelope["toolName"]) == ("permission", "step", "bash")
    assert DEPLOY_COMMAND in envelope["target"] and "subPipelineId" not in envelope
    assert runtime.state.commands_run == []
    assert runtime.state.tasks[task_id].runner is None  # the stream closed after the second pause


async def test_get_task_shows_no_input_while_the_step_permission_still_waits(
    client: A2AClient, runtime: DemoRuntime, http: aiohttp.ClientSession
) -> None:
    task_id, after, envelope = await to_step_permission(client, runtime)
    task = await client.get_task(task_id)
    iac = task["metadata"]["iac_code"]
    assert state_of(task) == "TASK_STATE_INPUT_REQUIRED"
    assert set(iac) == {"iacCodeSessionId", "executionControl", "pipeline"}
    assert iac["pipeline"]["eventType"] == "backup_committed"
    assert iac["executionControl"]["executionStatus"] == "working"
    # The permission still waits: the state route says so.
    cursor = envelopes(after)[-2]["sequence"]
    body = await pipeline_state(http, client.url, task_id, cursor)
    snapshot = body["snapshot"]
    assert snapshot["status"] == "waiting_input" and snapshot["pendingInput"] is None
    waiting = snapshot["display"]["permissions"][-1]
    assert (waiting["inputId"], waiting["pending"], waiting["id"]) == (
        envelope["inputId"],
        True,
        f"perm-{envelope['toolUseId']}",
    )
    assert [e["eventType"] for e in body["events"]] == ["backup_committed"]
    log = (await pipeline_state(http, client.url, task_id, 0))["events"]
    assert [e.get("visibility") for e in log if e["eventType"] == "permission_requested" and e["scope"] == "step"] == [
        "pending_backup",
        "committed",
    ]
    assert "status" not in log[-1] and log[-1]["eventType"] == "backup_committed"


async def test_the_answer_to_the_step_permission_runs_the_command_once_and_completes(
    client: A2AClient, runtime: DemoRuntime, http: aiohttp.ClientSession
) -> None:
    task_id, _, envelope = await to_step_permission(client, runtime)
    done = await collect(client.stream_message(permission_answer(envelope, "allow_once")))
    assert iac_of(done[0]) == {
        "inputReceived": {"inputId": envelope["inputId"], "toolUseId": envelope["toolUseId"], "kind": "permission"}
    }
    resolved = envelopes(done)[0]
    assert resolved["eventType"] == "permission_resolved" and resolved["data"]["decision"] == "allow_once"
    tail = [(state_of(r), last_envelope(r)["eventType"]) for r in done[-3:]]
    assert tail == [
        ("TASK_STATE_COMPLETED", "pipeline_completed"),
        ("TASK_STATE_COMPLETED", "backup_committed"),
        ("TASK_STATE_COMPLETED", "pipeline_handoff_ready"),
    ]
    assert runtime.state.commands_run == [DEPLOY_COMMAND]
    assert runtime.state.tool_runs_by_use_id[envelope["toolUseId"]] == 1
    task = await client.get_task(task_id)
    assert state_of(task) == "TASK_STATE_COMPLETED"
    snapshot = (await pipeline_state(http, client.url, task_id, 0))["snapshot"]
    assert snapshot["status"] == "completed" and {s["status"] for s in snapshot["steps"]} == {"completed"}
    mine = [(p["id"], p["pending"]) for p in snapshot["display"]["permissions"] if p["inputId"] == envelope["inputId"]]
    assert mine == [(f"perm-{envelope['toolUseId']}", True), (envelope["inputId"], False)]
    with pytest.raises(A2ARpcError, match="pending permission is not active"):
        await client.send_message(permission_answer(envelope, "allow_once"))
    assert runtime.state.commands_run == [DEPLOY_COMMAND]


async def test_a_denied_deploy_command_never_runs(client: A2AClient, runtime: DemoRuntime) -> None:
    _, _, envelope = await to_step_permission(client, runtime)
    done = await collect(client.stream_message(permission_answer(envelope, "deny")))
    [result] = [e for e in envelopes(done) if e["eventType"] == "tool_result" and e["data"]["toolName"] == "bash"]
    assert result["data"]["isError"] is True and result["data"]["result"] == DENIED_RESULT
    assert state_of(done[-1]) == "TASK_STATE_COMPLETED"
    assert runtime.state.commands_run == [] and runtime.state.tool_runs["bash"] == 0


async def test_send_message_answers_the_step_permission_with_the_finished_task(
    client: A2AClient, runtime: DemoRuntime
) -> None:
    task_id, _, envelope = await to_step_permission(client, runtime)
    reply = await client.send_message(permission_answer(envelope, "allow_once"))
    assert reply["task"]["id"] == task_id and state_of(reply["task"]) == "TASK_STATE_COMPLETED"
    assert runtime.state.commands_run == [DEPLOY_COMMAND]


# --- the clarifying question ---------------------------------------------------------------


async def test_a_question_pauses_the_first_step_and_its_answer_is_named(
    client: A2AClient, http: aiohttp.ClientSession
) -> None:
    first = await collect(client.stream_message(user_message("question: plan a service")))
    task_id = first[0]["task"]["id"]
    ids = PipelineIds(task_id, first[0]["task"]["contextId"])
    assert state_of(first[-1]) == "TASK_STATE_INPUT_REQUIRED"
    envelope = iac_of(first[-1])["input"]
    assert envelope["kind"] == "ask_user_question" and envelope["inputId"] == f"ask-{envelope['toolUseId']}"
    assert envelope["inputId"] == ids.question_input_id and envelope["allowFreeText"] is True
    pending = (await pipeline_state(http, client.url, task_id, 0))["snapshot"]["pendingInput"]
    assert pending["inputId"] == envelope["inputId"] and pending["eventId"] == last_envelope(first[-1])["eventId"]
    answered = await collect(client.stream_message(user_message("Production", task_id=task_id)), until_sideband=True)
    received = envelopes(answered)[0]
    assert received["eventType"] == "input_received" and received["step"]["id"] == "intent_parsing"
    assert (received["data"]["inputId"], received["data"]["selectedId"]) == (envelope["inputId"], "env-prod")
    assert step_marks(answered)[0] == ("step_completed", "intent_parsing")
    steps = (await pipeline_state(http, client.url, task_id, 0))["snapshot"]["steps"]
    assert steps[0]["inputReceived"]["inputId"] == envelope["inputId"]
    await client.cancel_task(task_id)


async def test_a_full_run_has_both_candidates_ask_at_once(client: A2AClient, runtime: DemoRuntime) -> None:
    first = await collect(client.stream_message(user_message("full: plan a service")))
    task_id = first[0]["task"]["id"]
    answered = await collect(client.stream_message(user_message("Test", task_id=task_id)), until_sideband=True)
    seen = iac_of(answered[-1])["input"]
    assert last_envelope(answered[-1])["candidate"]["name"] == "candidate-a"
    waiting = (await client.get_task(task_id))["metadata"]["iac_code"]["pendingPermissions"]
    assert [p["target"] for p in waiting] == ["templates/1-candidate-a.yml", "templates/2-candidate-b.yml"]
    assert waiting[0]["inputId"] == seen["inputId"]
    acks = [await client.send_message(permission_answer(p, "allow_once")) for p in waiting]
    assert [a["message"]["parts"][0]["data"]["inputId"] for a in acks] == [p["inputId"] for p in waiting]
    followed = await collect(client.subscribe(task_id))
    assert iac_of(followed[-1])["input"]["kind"] == "candidate_selection"
    assert runtime.state.tool_runs["write_file"] == 2
    assert len([r for r in followed if "artifactUpdate" in r]) == 2


# --- the whole run -------------------------------------------------------------------


async def test_sequences_grow_by_one_except_the_replay_and_what_waits_for_a_backup(
    client: A2AClient, runtime: DemoRuntime, http: aiohttp.ClientSession
) -> None:
    walked = await record.record_run(runtime.url)
    streams = ["01-until-sideband.jsonl", "03-subscribe-until-selection.jsonl", "04-after-selection.jsonl"]
    task_id = walked["01-until-sideband.jsonl"][0]["task"]["id"]
    log = (await pipeline_state(http, runtime.url, task_id, 0))["events"]
    assert [e["sequence"] for e in log] == list(range(1, len(log) + 1))
    seen = [e for name in [*streams, "05-after-step-permission.jsonl"] for e in envelopes(walked[name])]
    replays = [(a, b) for a, b in pairwise(seen) if b["sequence"] == a["sequence"]]
    [(original, replay)] = replays
    assert replay == original and replay["eventType"] == "tool_result"
    # Never sent: what waited for a backup, what the subscriber joined too late for,
    # and the hand-off's acknowledgement.
    sent = {e["eventId"] for e in seen} | {e["eventId"] for e in walked["02-state-after-cursor.json"]["events"]}
    unsent = [e for e in log if e["eventId"] not in sent]
    assert [e["eventType"] for e in unsent if e.get("visibility") == "pending_backup"] == [
        "permission_requested",
        "pipeline_completed",
        "pipeline_handoff_ready",
    ]
    assert unsent[-1]["eventType"] == "backup_committed" and unsent[-1]["data"]["committedEventType"] == (
        "pipeline_handoff_ready"
    )
    ids = PipelineIds(task_id, walked["01-until-sideband.jsonl"][0]["task"]["contextId"])
    assert all(e["eventId"] == ids.event_id(int(e["sequence"])) for e in seen)
    assert {e["pipelineRunId"] for e in seen} == {ids.run_id}
    assert {(e["schemaVersion"], e["extensionUri"]) for e in seen} == {("1.0", "urn:iac-code:a2a:pipeline-events:v1")}
    assert {(e["taskId"], e["pipelineName"]) for e in seen} == {(task_id, "selling")}
    assert [e["eventType"] for e in seen].count("internal_debug") == 1


async def test_cleanup_only_runs_just_the_cleanup_path(client: A2AClient, http: aiohttp.ClientSession) -> None:
    results = await collect(client.stream_message(user_message("clean", metadata={**PIPELINE, "cleanupOnly": True})))
    assert kinds(results) == [
        *("cleanup_started", "cleanup_progress", "cleanup_progress", "cleanup_completed"),
        *("pipeline_completed", "backup_committed", "pipeline_handoff_ready"),
    ]
    assert state_of(results[-1]) == "TASK_STATE_COMPLETED"
    task_id = results[0]["task"]["id"]
    snapshot = (await pipeline_state(http, client.url, task_id, 0))["snapshot"]
    assert snapshot["status"] == "completed" and snapshot["steps"] == []


async def test_a_canceled_pipeline_task_can_run_another_that_keeps_counting(
    client: A2AClient, http: aiohttp.ClientSession
) -> None:
    task_id, first, _ = await until_sideband(client)
    await client.cancel_task(task_id)
    cleanup = {**PIPELINE, "cleanupOnly": True}
    again = await collect(client.stream_message(user_message("clean again", task_id=task_id, metadata=cleanup)))
    log = (await pipeline_state(http, client.url, task_id, 0))["events"]
    assert envelopes(again)[0]["sequence"] > max(e["sequence"] for e in envelopes(first))
    context_id = first[0]["task"]["contextId"]
    assert {e["pipelineRunId"] for e in envelopes(again)} == {PipelineIds(task_id, context_id, 2).run_id}
    assert [e["sequence"] for e in log] == list(range(1, len(log) + 1))


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


# =====================================================================================
# The same facts, side by side with the real iac-code a2a 0.16.0 (recorded)
# =====================================================================================


def real(name: str) -> list[Json]:
    """The exchanges of a recorded real pipeline (``direct``, ``full``, ``rich``)."""
    with gzip.open(REAL / f"{name}.a2a-exchanges.jsonl.gz", "rt", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines]


def results_of(exchange: Json) -> list[Json]:
    return [event.get("result", event) for event in exchange["events"]]


def real_calls(name: str, rpc: str) -> list[list[Json]]:
    """The results of every call of JSON-RPC method *rpc* (or ``state`` for the state route)."""
    if rpc == "state":
        return [results_of(x) for x in real(name) if x["path"].startswith("/iac-code/pipeline/state")]
    return [results_of(x) for x in real(name) if x["rpcMethod"] == rpc]


def real_streams(name: str) -> list[list[Json]]:
    return real_calls(name, "SendStreamingMessage")


def first_where(calls: list[list[Json]], test: Callable[[list[Json]], bool]) -> list[Json]:
    return next(results for results in calls if test(results))


def shape(value: Any) -> Any:
    """Keys and leaf types, ignoring values and key order (lists: their first item)."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in sorted(value.items())}
    if isinstance(value, list):
        return [shape(item) for item in value[:1]]
    if isinstance(value, bool) or value is None:
        return type(value).__name__
    return "number" if isinstance(value, int | float) else type(value).__name__


def pause(result: Json) -> tuple[str, list[str], str, str, str | None]:
    """What a paused stream's result says: state, metadata keys, event, scope, status."""
    envelope = last_envelope(result)
    return state_of(result), sorted(iac_of(result)), envelope["eventType"], envelope["scope"], envelope.get("status")


def ends_with_step_permission(results: list[Json]) -> bool:
    return bool(envelopes(results)) and envelopes(results)[-1]["eventType"] == "backup_committed"


def answers_step_permission(results: list[Json]) -> bool:
    return "inputReceived" in iac_of(results[0])


@pytest.fixture
async def walked(runtime: DemoRuntime) -> dict[str, Any]:
    """One whole demo pipeline, driven as the recorder drives it: file name → results."""
    return await record.record_run(runtime.url)


@pytest.mark.parametrize("name", ["direct", "full", "rich"])
async def test_like_the_real_runtime_a_step_permission_pauses_twice(name: str, walked: dict[str, Any]) -> None:
    recorded = first_where(real_streams(name), ends_with_step_permission)
    ours = walked["04-after-selection.jsonl"]
    assert [pause(r) for r in ours[-2:]] == [pause(r) for r in recorded[-2:]] == [
        ("TASK_STATE_INPUT_REQUIRED", ["input", "pipeline"], "permission_requested", "step", "input_required"),
        ("TASK_STATE_INPUT_REQUIRED", ["pipeline"], "backup_committed", "pipeline", "input_required"),
    ]
    for mine, theirs in zip(ours[-2:], recorded[-2:], strict=True):
        assert set(last_envelope(mine)) == set(last_envelope(theirs))
        assert set(last_envelope(mine)["data"]) == set(last_envelope(theirs)["data"])
    assert shape(iac_of(ours[-2])["input"]) == shape(iac_of(recorded[-2])["input"])
    assert shape(last_envelope(ours[-2])["permission"]) == shape(last_envelope(recorded[-2])["permission"])
    for results in (ours, recorded):
        requested, ack = last_envelope(results[-2]), last_envelope(results[-1])
        assert ack["data"]["committedEventId"] == requested["eventId"]
        assert ack["data"]["committedSequence"] == requested["sequence"]
        assert requested["permission"]["permissionId"] == f"perm-{requested['data']['toolUseId']}"


@pytest.mark.parametrize("name", ["direct", "full"])
async def test_like_the_real_runtime_get_task_drops_the_input_of_a_waiting_step_permission(
    name: str, walked: dict[str, Any]
) -> None:
    recorded = first_where(real_calls(name, "GetTask"), lambda r: r[0]["metadata"]["iac_code"]["pipeline"]["eventType"] == "backup_committed")
    [ours] = walked["04.1-get-task-step-permission.jsonl"]
    [theirs] = recorded
    for task in (ours, theirs):
        assert state_of(task) == "TASK_STATE_INPUT_REQUIRED"
        assert sorted(task["metadata"]["iac_code"]) == ["executionControl", "iacCodeSessionId", "pipeline"]
    assert set(ours) == set(theirs)


@pytest.mark.parametrize("name", ["direct", "full"])
async def test_like_the_real_runtime_the_state_route_shows_the_waiting_step_permission(
    name: str, walked: dict[str, Any]
) -> None:
    [recorded] = first_where(
        real_calls(name, "state"), lambda r: [e["eventType"] for e in r[0]["events"]] == ["backup_committed"]
    )
    ours = walked["04.2-state-step-permission.json"]
    for body in (ours, recorded):
        snapshot = body["snapshot"]
        assert (snapshot["status"], snapshot["pendingInput"]) == ("waiting_input", None)
        assert snapshot["display"]["permissions"][-1]["pending"] is True
        assert snapshot["display"]["permissions"][-1]["scope"] == "step"
        assert [sorted(e) for e in body["events"]] == [sorted(recorded["events"][0])]
        assert "status" not in body["events"][0]
    assert set(ours["snapshot"]) == set(recorded["snapshot"])
    assert set(ours["snapshot"]["display"]) == set(recorded["snapshot"]["display"])
    assert set(ours["snapshot"]["display"]["permissions"][-1]) == set(recorded["snapshot"]["display"]["permissions"][-1])
    assert isinstance(ours["snapshot"]["lastSequence"], int) and isinstance(ours["events"][0]["sequence"], int)


@pytest.mark.parametrize("name", ["direct", "full"])
async def test_like_the_real_runtime_the_step_permission_answer_runs_to_completed(
    name: str, walked: dict[str, Any]
) -> None:
    recorded = first_where(real_streams(name), answers_step_permission)
    ours = walked["05-after-step-permission.jsonl"]
    for results in (ours, recorded):
        assert sorted(iac_of(results[0])["inputReceived"]) == ["inputId", "kind", "toolUseId"]
        assert [last_envelope(r)["eventType"] for r in results[1:2]] == ["permission_resolved"]
        # The stream ends COMPLETED: the completion, its backup_committed (two further on),
        # then (in direct and rich; full's client had left) the hand-off between them.
        ended = [(last_envelope(r)["eventType"], last_envelope(r)["sequence"]) for r in results if state_of(r) == "TASK_STATE_COMPLETED"]
        (done, at), (ack, ack_at), *rest = ended
        assert (done, ack, ack_at) == ("pipeline_completed", "backup_committed", at + 2)
        assert rest in ([], [("pipeline_handoff_ready", at + 1)])
        assert all(state_of(r) != "TASK_STATE_COMPLETED" for r in results[: len(results) - len(ended)])
    assert shape(last_envelope(ours[1])) == shape(last_envelope(recorded[1]))
    final = first_where(real_calls(name, "state"), lambda r: r[0]["snapshot"]["status"] == "completed")[0]
    mine = walked["06-state-complete.json"]
    assert [(e["eventType"], e.get("visibility")) for e in mine["events"][-6:]] == [
        (e["eventType"], e.get("visibility")) for e in final["events"][-6:]
    ]
    theirs_shown, ours_shown = final["snapshot"]["display"]["permissions"], mine["snapshot"]["display"]["permissions"]
    assert [(set(p), p["pending"]) for p in ours_shown[-2:]] == [(set(p), p["pending"]) for p in theirs_shown[-2:]]


async def test_like_the_real_runtime_a_sub_pipeline_permission_streams_while_working(walked: dict[str, Any]) -> None:
    recorded = first_where(real_streams("full"), lambda r: is_sideband(r[-1]) or any(is_sideband(x) for x in r))
    theirs = next(r for r in recorded if is_sideband(r))
    ours = walked["01-until-sideband.jsonl"][-1]
    assert pause(ours) == pause(theirs) == (
        "TASK_STATE_WORKING",
        ["input", "pipeline"],
        "permission_requested",
        "candidate_step",
        "working",
    )
    for result in (ours, theirs):
        envelope, asked = last_envelope(result), iac_of(result)["input"]
        assert asked["scope"] == "candidate_step" and asked["subPipelineId"] == envelope["candidate"]["id"]
        assert envelope["permission"]["permissionId"] == asked["inputId"]
    assert shape(iac_of(ours)["input"]) == shape(iac_of(theirs)["input"])
    assert set(last_envelope(ours)) == set(last_envelope(theirs))
    for coordinate in ("step", "candidate", "candidateStep", "permission", "data"):
        assert set(last_envelope(ours)[coordinate]) == set(last_envelope(theirs)[coordinate]), coordinate


async def test_like_the_real_runtime_get_task_lists_sub_pipeline_permissions_without_scope(
    walked: dict[str, Any],
) -> None:
    [theirs] = first_where(real_calls("full", "GetTask"), lambda r: "pendingPermissions" in r[0]["metadata"]["iac_code"])
    [ours] = walked["02.1-get-task-sideband.jsonl"]
    for task in (ours, theirs):
        iac = task["metadata"]["iac_code"]
        assert state_of(task) == "TASK_STATE_WORKING"
        assert sorted(iac) == ["executionControl", "iacCodeSessionId", "pendingPermissions", "pipeline"]
        assert all("scope" not in p and "subPipelineId" not in p for p in iac["pendingPermissions"])
    assert shape(ours["metadata"]["iac_code"]["pendingPermissions"][0]) == shape(
        theirs["metadata"]["iac_code"]["pendingPermissions"][0]
    )
    assert shape(ours["metadata"]["iac_code"]["executionControl"]) == shape(
        theirs["metadata"]["iac_code"]["executionControl"]
    )


async def test_like_the_real_runtime_a_second_sub_pipeline_permission_may_be_only_in_get_task(
    walked: dict[str, Any],
) -> None:
    # The real client stopped reading at the first permission; GetTask listed two.
    read = real_streams("full")[1]
    [listed] = first_where(real_calls("full", "GetTask"), lambda r: "pendingPermissions" in r[0]["metadata"]["iac_code"])
    ours_read, [ours_listed] = walked["08.2-after-answer-until-sideband.jsonl"], walked["08.3-get-task-two-permissions.jsonl"]
    for stream, task in ((ours_read, ours_listed), (read, listed)):
        streamed = {iac_of(r)["input"]["inputId"] for r in stream if is_sideband(r)}
        waiting = [p["inputId"] for p in task["metadata"]["iac_code"]["pendingPermissions"]]
        assert len(waiting) == 2 and len(streamed) == 1 and waiting[0] in streamed
    assert len(walked["08.4-permission-acks.jsonl"]) == len(real_calls("full", "SendMessage")) == 2


async def test_like_the_real_runtime_a_sub_pipeline_answer_is_acknowledged(walked: dict[str, Any]) -> None:
    [theirs] = real_calls("full", "SendMessage")[0]
    [ours] = walked["02.2-permission-ack.jsonl"]
    assert shape(ours) == shape(theirs)
    for ack in (ours, theirs):
        assert ack["message"]["messageId"].startswith("permission-ack-") and ack["message"]["role"] == "ROLE_AGENT"
    [after] = first_where(
        real_calls("full", "GetTask"), lambda r: r[0]["metadata"]["iac_code"]["pipeline"]["eventType"] == "permission_resolved"
    )
    [mine] = walked["02.3-get-task.jsonl"]
    for task in (mine, after):
        assert state_of(task) == "TASK_STATE_WORKING"
        assert sorted(task["metadata"]["iac_code"]) == ["executionControl", "iacCodeSessionId", "pipeline"]
    resolved, real_resolved = mine["metadata"]["iac_code"]["pipeline"], after["metadata"]["iac_code"]["pipeline"]
    assert set(resolved) == set(real_resolved) and set(resolved["data"]) == set(real_resolved["data"])
    assert set(resolved["permission"]) == set(real_resolved["permission"])
    subscribed = real_calls("full", "SubscribeToTask")[0][0]
    assert state_of(walked["03-subscribe-until-selection.jsonl"][0]) == state_of(subscribed) == "TASK_STATE_WORKING"
    assert "task" in walked["03-subscribe-until-selection.jsonl"][0] and "task" in subscribed


@pytest.mark.parametrize("name", ["direct", "rich"])
async def test_like_the_real_runtime_the_selection_follows_its_completed_step(
    name: str, walked: dict[str, Any], client: A2AClient, runtime: DemoRuntime
) -> None:
    recorded = first_where(real_streams(name), lambda r: state_of(r[-1]) == "TASK_STATE_INPUT_REQUIRED")
    if name == "rich":
        ours = walked["03-subscribe-until-selection.jsonl"]
    else:
        plain = {key: value for key, value in PIPELINE.items() if key != "candidatePresentation"}
        ours = (await to_selection(client, runtime, "allow_once", plain))[1]
    for results in (ours, recorded):
        *_, completed, asked = envelopes(results)
        assert (completed["eventType"], completed["step"]["id"]) == ("step_completed", "confirm_and_select")
        assert pause(results[-1]) == (
            "TASK_STATE_INPUT_REQUIRED",
            ["input", "pipeline"],
            "input_required",
            "step",
            "input_required",
        )
        assert iac_of(results[-1])["input"]["inputId"] == f"input-{asked['eventId']}"
    assert shape(iac_of(ours[-1])["input"]) == shape(iac_of(recorded[-1])["input"])
    assert shape(last_envelope(ours[-1])["data"]) == shape(last_envelope(recorded[-1])["data"])


async def test_like_the_real_runtime_the_state_route_shows_the_selection_as_pending_input(
    walked: dict[str, Any],
) -> None:
    [theirs] = first_where(
        real_calls("direct", "state"), lambda r: (r[0]["snapshot"]["pendingInput"] or {}).get("kind") == "candidate_selection"
    )
    ours = walked["03.1-state-selection.json"]
    asked = envelopes(walked["03-subscribe-until-selection.jsonl"])[-1]
    assert ours["snapshot"]["pendingInput"]["eventId"] == asked["eventId"]
    for body in (ours, theirs):
        assert body["snapshot"]["status"] == "waiting_input"
        assert body["snapshot"]["steps"][-1]["status"] == "waiting_input"
    assert set(ours["snapshot"]["pendingInput"]) == set(theirs["snapshot"]["pendingInput"])


@pytest.mark.parametrize("name", ["direct", "full"])
async def test_like_the_real_runtime_the_selected_step_goes_on_without_a_new_start(
    name: str, walked: dict[str, Any]
) -> None:
    recorded = first_where(real_streams(name), ends_with_step_permission)
    ours = walked["04-after-selection.jsonl"]
    for results in (ours, recorded):
        assert set(iac_of(results[0])) == {"pipeline"}
        assert last_envelope(results[0])["eventType"] == "input_received"
        assert step_marks(results) == [("step_completed", "confirm_and_select"), ("step_started", "deploying")]
    assert set(last_envelope(ours[0])["data"]) == set(last_envelope(recorded[0])["data"])


async def test_like_the_real_runtime_a_question_and_its_answer(walked: dict[str, Any]) -> None:
    streams = real_streams("full")
    theirs_asked, theirs_answered = streams[0], streams[1]
    ours_asked, ours_answered = walked["08-full-question.jsonl"], walked["08.2-after-answer-until-sideband.jsonl"]
    for asked, answered in ((ours_asked, ours_answered), (theirs_asked, theirs_answered)):
        assert pause(asked[-1])[:3] == ("TASK_STATE_INPUT_REQUIRED", ["input", "pipeline"], "input_required")
        envelope = iac_of(asked[-1])["input"]
        assert envelope["inputId"] == f"ask-{envelope['toolUseId']}"
        assert last_envelope(asked[-1])["data"]["inputId"] == envelope["inputId"]
        received = last_envelope(answered[0])
        assert received["eventType"] == "input_received" and received["data"]["inputId"] == envelope["inputId"]
    assert shape(iac_of(ours_asked[-1])["input"]) == shape(iac_of(theirs_asked[-1])["input"])
    assert shape(last_envelope(ours_asked[-1])["input"]) == shape(last_envelope(theirs_asked[-1])["input"])
    assert set(last_envelope(ours_asked[-1])["data"]) == set(last_envelope(theirs_asked[-1])["data"])
    assert set(last_envelope(ours_answered[0])["data"]) == set(last_envelope(theirs_answered[0])["data"])
    [theirs_state] = real_calls("full", "state")[0]
    assert set(walked["08.1-state-question.json"]["snapshot"]["pendingInput"]) == set(
        theirs_state["snapshot"]["pendingInput"]
    )


def stream_updates(results_lists: list[list[Json]]) -> list[Json]:
    return [r for results in results_lists for r in results if "statusUpdate" in r]


async def test_like_the_real_runtime_pipeline_updates_carry_nothing_but_their_envelope(walked: dict[str, Any]) -> None:
    ours = stream_updates([v for k, v in walked.items() if k.endswith(".jsonl") and not k.startswith("07")])
    theirs = stream_updates([r for name in ("direct", "full") for r in real_streams(name)])
    allowed = [["pipeline"], ["input", "pipeline"], ["inputReceived"], ["pipelineBatch"]]
    for updates in (ours, theirs):
        assert {tuple(sorted(iac_of(u))) for u in updates} <= {tuple(keys) for keys in allowed}
        assert all("timestamp" not in u["statusUpdate"]["status"] for u in updates)
        assert all("iacCodeSessionId" in e for e in envelopes(updates))
    assert all(isinstance(e["sequence"], float) for e in envelopes(ours))


# Event types whose ``data`` the demo gives exactly one of the recorded key sets.
MIRRORED_DATA = (
    "pipeline_started", "step_started", "message_started", "text_delta", "thinking_delta", "usage",
    "tool_started", "tool_result", "step_completed", "candidate_started", "candidate_step_started",
    "candidate_step_completed", "candidate_completed", "permission_requested", "permission_resolved",
    "artifact_created", "input_required", "input_received", "backup_committed", "pipeline_completed",
    "pipeline_handoff_ready",
)  # fmt: skip


def variants(envelopes_: list[Json]) -> dict[str, dict[str, set[Any]]]:
    """Per event type: the envelope key sets, coordinate key sets and data key sets seen."""
    found: dict[str, dict[str, set[Any]]] = {}
    for envelope in envelopes_:
        seen = found.setdefault(envelope["eventType"], {"envelope": set(), "data": set(), "coordinates": set()})
        seen["envelope"].add(frozenset(envelope))
        seen["data"].add(frozenset(envelope["data"]))
        coordinates = {key: frozenset(envelope[key]) for key in ("step", "candidate", "candidateStep") if key in envelope}
        seen["coordinates"].add(frozenset(coordinates.items()))
    return found


async def test_like_the_real_runtime_every_event_the_adapter_reads_has_the_recorded_shape(
    walked: dict[str, Any],
) -> None:
    # (The cleanup path is not in the recordings.)
    ours = variants(envelopes([r for k, v in walked.items() if k.endswith(".jsonl") and not k.startswith("07") for r in v]))
    theirs = variants(envelopes([r for name in ("direct", "full", "rich") for s in real_streams(name) for r in s]))
    for kind in MIRRORED_DATA:
        assert kind in ours, kind
        assert ours[kind]["envelope"] <= theirs[kind]["envelope"], kind
        assert ours[kind]["coordinates"] <= theirs[kind]["coordinates"], kind
        assert ours[kind]["data"] <= theirs[kind]["data"], kind


async def test_like_the_real_runtime_a_paused_pipeline_execution_keeps_working(walked: dict[str, Any]) -> None:
    paused = [r[0] for r in real_calls("direct", "GetTask") + real_calls("full", "GetTask")]
    mine = [walked[name][0] for name in ("02.1-get-task-sideband.jsonl", "04.1-get-task-step-permission.jsonl")]
    for task in paused + mine:
        control = task["metadata"]["iac_code"]["executionControl"]
        assert control["executionStatus"] == "working" and control["streamAvailable"] is True
        assert set(control) == set(paused[0]["metadata"]["iac_code"]["executionControl"])
