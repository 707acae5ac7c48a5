"""Does an input still wait? The rules, against what the real runtime sent.

The pipeline cases replay ``tests/fixtures/a2a-pipeline/``: complete
exchanges of the real ``iac-code a2a`` 0.16.0. Each case takes an input
envelope as the stream announced it, and the runtime's ``GetTask`` and
pipeline state answers from a later moment of the same recording.
"""

from __future__ import annotations

import gzip
import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from aguiadapter.runtime.envelope import InputEnvelope, required_inputs
from aguiadapter.runtime.evidence import InputStatus, TaskFate, TaskView, input_status, task_fate, waiting_inputs

RECORDINGS = Path(__file__).resolve().parent / "fixtures" / "a2a-pipeline"


@cache
def exchanges(name: str) -> dict[int, dict[str, Any]]:
    with gzip.open(RECORDINGS / f"{name}.a2a-exchanges.jsonl.gz", "rt", encoding="utf-8") as handle:
        return {item["seq"]: item for item in map(json.loads, handle)}


def streamed_inputs(name: str, seq: int) -> list[InputEnvelope]:
    """The inputs a stream of the recording announced, as the adapter saw them."""
    found: list[InputEnvelope] = []
    for event in exchanges(name)[seq]["events"]:
        update = event["result"].get("statusUpdate")
        if update:
            found += required_inputs(update.get("metadata", {}).get("iac_code", {}), found)
    return found


def task(name: str, seq: int) -> dict[str, Any]:
    (reply,) = exchanges(name)[seq]["events"]
    return dict(reply["result"])


def state(name: str, seq: int) -> dict[str, Any]:
    (document,) = exchanges(name)[seq]["events"]
    return dict(document)


def view(name: str, task_seq: int, state_seq: int | None) -> TaskView:
    return TaskView(task(name, task_seq), None if state_seq is None else state(name, state_seq), is_pipeline=True)


def test_a_step_permission_still_waits_although_get_task_shows_no_envelope() -> None:
    # direct: the deploy step asks for permission, then sends one more
    # INPUT_REQUIRED status without the envelope (backup_committed).
    (permission,) = streamed_inputs("direct", 5)
    assert permission.kind == "permission" and not permission.sideband
    later = view("direct", 7, 8)
    assert required_inputs(later.iac) == [], "GetTask no longer shows the envelope"
    assert input_status(permission, 0, later) is InputStatus.WAITS


def test_without_the_pipeline_state_an_envelope_less_task_decides_nothing() -> None:
    (permission,) = streamed_inputs("direct", 5)
    assert input_status(permission, 0, view("direct", 7, None)) is InputStatus.UNKNOWN
    assert task_fate(view("direct", 7, None))[0] is TaskFate.UNKNOWN


def test_a_permission_the_pipeline_resolved_was_taken() -> None:
    (permission,) = streamed_inputs("direct", 5)
    assert input_status(permission, 0, view("direct", 7, 10)) is InputStatus.TAKEN


def test_the_pipeline_state_rebuilds_a_permission_get_task_no_longer_shows() -> None:
    (permission,) = streamed_inputs("direct", 5)
    (rebuilt,) = waiting_inputs(view("direct", 7, 8), [permission])
    assert rebuilt.input_id == permission.input_id and rebuilt.kind == "permission"
    assert rebuilt.tool_use_id == permission.tool_use_id and rebuilt.request_task_id == task("direct", 7)["id"]
    assert task_fate(view("direct", 7, 8), [permission]) == (TaskFate.ASKS, [rebuilt])


def test_a_selection_waits_until_the_runtime_moves_past_it() -> None:
    (selection,) = streamed_inputs("direct", 1)
    assert selection.kind == "candidate_selection"
    assert input_status(selection, 0, view("direct", 3, 4)) is InputStatus.WAITS
    # After the answer the same task asks for the deploy permission instead.
    raised_after = int(exchanges("direct")[4]["path"].rsplit("=", 1)[1])
    assert input_status(selection, raised_after, view("direct", 7, 8)) is InputStatus.TAKEN


def test_sub_pipeline_permissions_keep_the_scope_they_were_first_seen_with() -> None:
    # full: the stream names scope candidate_step; GetTask lists both
    # waiting permissions again, without scope or subPipelineId.
    (first,) = streamed_inputs("full", 5)
    assert first.fields["scope"] == "candidate_step" and first.sideband
    listed = required_inputs(task("full", 7)["metadata"]["iac_code"], [first])
    assert [item.sideband for item in listed] == [True, True]
    assert listed[0].fields["scope"] == "candidate_step", "the first sighting's scope is kept"
    assert "scope" not in listed[1].fields, "a permission never streamed has no scope to keep"
    for envelope in listed:
        assert input_status(envelope, 0, view("full", 7, 8)) is InputStatus.WAITS
    # The pipeline's display entries still know the scope of the one never streamed.
    announced = waiting_inputs(view("full", 7, 8), [first])
    assert [item.fields["scope"] for item in announced] == ["candidate_step", "candidate_step"]
    assert all(isinstance(item.fields["subPipelineId"], str) for item in announced)


def test_acknowledged_sub_pipeline_permissions_were_taken() -> None:
    listed = required_inputs(task("full", 7)["metadata"]["iac_code"])
    for envelope in listed:
        assert input_status(envelope, 49, view("full", 14, 16)) is InputStatus.TAKEN
    assert task_fate(view("full", 14, 16))[0] is TaskFate.WORKS


def test_a_question_waits_while_get_task_shows_it() -> None:
    (question,) = streamed_inputs("full", 1)
    assert question.kind == "ask_user_question"
    assert input_status(question, 0, view("full", 3, 4)) is InputStatus.WAITS


def normal_task(state: str, *, envelope: dict[str, Any] | None = None) -> TaskView:
    iac: dict[str, Any] = {"iacCodeSessionId": "session-1"}
    if envelope is not None:
        iac["input"] = envelope
    return TaskView({"id": "task-1", "contextId": "ctx-1", "status": {"state": state}, "metadata": {"iac_code": iac}})


PERMISSION = {"kind": "permission", "inputId": "permission-1", "toolUseId": "call-1", "required": True}


@pytest.mark.parametrize(("task_view", "status"), [
    (normal_task("TASK_STATE_INPUT_REQUIRED", envelope=PERMISSION), InputStatus.WAITS),
    # The end-of-turn status replaced the request: the answer was taken and the turn ended.
    (normal_task("TASK_STATE_INPUT_REQUIRED"), InputStatus.TAKEN),
    (normal_task("TASK_STATE_WORKING"), InputStatus.TAKEN),
    (normal_task("TASK_STATE_INPUT_REQUIRED", envelope={**PERMISSION, "inputId": "permission-2"}), InputStatus.TAKEN),
    (normal_task("TASK_STATE_COMPLETED"), InputStatus.TAKEN),
    (normal_task("TASK_STATE_CANCELED"), InputStatus.GONE),
    (TaskView(None), InputStatus.GONE),
])
def test_outside_a_pipeline_the_task_status_tells(task_view: TaskView, status: InputStatus) -> None:
    (envelope,) = required_inputs({"input": PERMISSION})
    assert input_status(envelope, 0, task_view) is status


def test_an_input_received_status_names_the_input_it_took() -> None:
    (envelope,) = required_inputs({"input": PERMISSION})
    received = normal_task("TASK_STATE_WORKING")
    received.task["metadata"]["iac_code"]["inputReceived"] = {"inputId": "permission-1", "kind": "permission"}
    assert input_status(envelope, 0, received) is InputStatus.TAKEN
