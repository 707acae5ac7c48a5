"""Does an input still wait? The rules, against what the real runtime sent.

The normal-mode cases read ``tests/fixtures/a2a-multi-input/``: turns with
two inputs, and runtime restarts, each followed by every read an adapter
can make. The pipeline cases replay ``tests/fixtures/a2a-pipeline/``: complete
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
from aguiadapter.runtime.evidence import (
    Findings,
    InputStatus,
    TaskFate,
    TaskView,
    assess,
    input_status,
    task_fate,
    waiting_inputs,
)

RECORDINGS = Path(__file__).resolve().parents[1] / "fixtures" / "a2a-pipeline"


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


def test_after_a_runtime_restart_a_pipeline_that_took_the_deploy_answer_is_orphaned() -> None:
    # direct-restart: the deploy permission answered, the command ran, the
    # runtime killed mid-step and restarted. GetTask is a bare WORKING
    # summary that nothing runs; the state route, kept on disk, logs the
    # answer's resolution.
    flow = "direct-restart"
    (permission,) = streamed_inputs(flow, 1)
    assert permission.kind == "permission" and permission.fields["scope"] == "step"
    restarted = view(flow, 3, 4)
    assert restarted.bare and restarted.state == "TASK_STATE_WORKING"
    raised_after = int(exchanges(flow)[4]["path"].rsplit("=", 1)[1])
    assert input_status(permission, raised_after, restarted, in_doubt=True) is InputStatus.TAKEN
    assert task_fate(restarted, [permission], {permission.input_id}) == (TaskFate.ORPHANED, [])
    # A WORKING task the runtime still runs has metadata, and is followed.
    assert not view("full", 14, 16).bare and task_fate(view("full", 14, 16))[0] is TaskFate.WORKS


def test_a_restarted_pipeline_that_asks_again_for_an_answer_in_doubt_is_never_answered_again() -> None:
    # direct-restart-unsent: the deploy permission's answer went out, its
    # connection broke, the runtime restarted. GetTask is a bare
    # INPUT_REQUIRED summary and the state route lists the permission as
    # pending: nothing says whether the answer arrived.
    flow = "direct-restart-unsent"
    (permission,) = streamed_inputs(flow, 1)
    restarted = view(flow, 2, 3)
    assert restarted.bare and restarted.state == "TASK_STATE_INPUT_REQUIRED"
    raised_after = int(exchanges(flow)[3]["path"].rsplit("=", 1)[1])
    (again,) = waiting_inputs(restarted, [permission])
    assert again.input_id == permission.input_id, "the restarted runtime asks for it again"
    carried = [(permission, raised_after)]
    findings = assess(carried, restarted, [permission], in_doubt={permission.input_id})
    assert findings.statuses == {permission.input_id: InputStatus.GONE}
    assert findings.fate is TaskFate.ORPHANED and findings.asks == ()
    # Not in doubt (never sent): the restarted runtime takes it, answer it.
    sure = assess(carried, restarted, [permission])
    assert sure.waiting() == {permission.input_id} and sure.fate is TaskFate.ASKS


MULTI = Path(__file__).resolve().parents[1] / "fixtures" / "a2a-multi-input"


def reply(name: str) -> Any:
    """One recorded reply of ``a2a-multi-input`` (the JSON-RPC result, or the
    route's body; ``None`` for a route that answered 404)."""
    lines = [json.loads(line) for line in (MULTI / f"{name}.jsonl").read_text().splitlines() if line]
    if len(lines) == 1 and set(lines[0]) == {"error"}:
        return None
    return lines[0].get("result", lines[0]) if len(lines) == 1 else lines


def raised(name: str) -> list[InputEnvelope]:
    """The inputs a recorded stream raised, as the adapter saw them."""
    found: list[InputEnvelope] = []
    for line in reply(name):
        update = line.get("result", {}).get("statusUpdate") or {}
        found += required_inputs(update.get("metadata", {}).get("iac_code", {}), found)
    return found


def reads(flow: str, get_task: str, execution: str, recovery: str) -> TaskView:
    """The three reads an adapter can make, as one view."""
    document = reply(f"{flow}.{recovery}")
    return TaskView(reply(f"{flow}.{get_task}"), None, False, reply(f"{flow}.{execution}"),
                    None if document is None else document["messages"])


TWO = "01-two-permissions"


def test_get_task_keeps_naming_the_first_input_after_the_second_is_raised() -> None:
    (first,) = raised(f"{TWO}.01-send")
    (second,) = raised(f"{TWO}.05-answer-input1")
    at_second = reads(TWO, "06-get-task-at-input2", "07-execution-state-at-input2", "08-session-recovery-at-input2")
    assert [item.input_id for item in required_inputs(at_second.iac)] == [first.input_id], "GetTask is frozen"
    assert input_status(first, 0, at_second) is InputStatus.TAKEN, "its tool call has a result"
    assert input_status(second, 0, at_second) is InputStatus.WAITS
    assert task_fate(at_second, [second], {first.input_id}) == (TaskFate.ASKS, [second])


def test_an_input_the_transcript_waits_on_that_no_stream_announced_is_unseen() -> None:
    # The adapter died while the answer to #1 streamed: #2 was raised with nobody listening.
    (first,) = raised(f"{TWO}.01-send")
    at_second = reads(TWO, "06-get-task-at-input2", "07-execution-state-at-input2", "08-session-recovery-at-input2")
    assert task_fate(at_second, [first], {first.input_id})[0] is TaskFate.UNSEEN


def test_without_the_transcript_a_waiting_execution_decides_nothing() -> None:
    (second,) = raised(f"{TWO}.05-answer-input1")
    at_second = reads(TWO, "06-get-task-at-input2", "07-execution-state-at-input2", "08-session-recovery-at-input2")
    blind = TaskView(at_second.task, None, False, at_second.execution, None)
    assert input_status(second, 0, blind) is InputStatus.WAITS, "no positive evidence: the answer is sent"
    assert task_fate(blind, [second])[0] is TaskFate.UNKNOWN


def test_after_the_turn_every_answer_was_taken_and_the_turn_ended() -> None:
    (first,) = raised(f"{TWO}.01-send")
    (second,) = raised(f"{TWO}.05-answer-input1")
    after = reads(TWO, "10-get-task-after-turn", "11-execution-state-after-turn", "12-session-recovery-after-turn")
    assert input_status(first, 0, after) is InputStatus.TAKEN
    assert input_status(second, 0, after) is InputStatus.TAKEN
    assert task_fate(after, [first, second], {first.input_id, second.input_id}) == (TaskFate.TURN_ENDED, [])


def test_at_the_first_input_it_waits() -> None:
    (first,) = raised(f"{TWO}.01-send")
    at_first = reads(TWO, "02-get-task-at-input1", "03-execution-state-at-input1", "04-session-recovery-at-input1")
    assert input_status(first, 0, at_first) is InputStatus.WAITS
    assert task_fate(at_first, [first]) == (TaskFate.ASKS, [first])


def test_after_a_runtime_restart_a_pending_input_waits_and_nothing_runs_the_task() -> None:
    flow = "02-restart-while-pending"
    (pending,) = raised(f"{flow}.01-send")
    restarted = reads(flow, "05-get-task-after-restart", "06-execution-state-after-restart",
                      "07-session-recovery-after-restart")
    assert restarted.bare and restarted.execution is None and restarted.transcript is None
    assert input_status(pending, 0, restarted) is InputStatus.WAITS, "a bare task is no evidence: answer it"
    assert task_fate(restarted, [pending])[0] is TaskFate.ORPHANED


def test_an_answer_that_may_have_reached_a_runtime_that_restarted_since_is_lost() -> None:
    # Sent, the stream broke before any receipt, and the runtime restarted:
    # answered again, iac-code carries the decision out from its checkpoint,
    # a second time if it had begun. Nothing can tell: the execution is lost.
    flow = "02-restart-while-pending"
    (pending,) = raised(f"{flow}.01-send")
    restarted = reads(flow, "05-get-task-after-restart", "06-execution-state-after-restart",
                      "07-session-recovery-after-restart")
    assert input_status(pending, 0, restarted, in_doubt=True) is InputStatus.GONE
    # The runtime that was sent the answer is still up: its own word decides.
    (first,) = raised(f"{TWO}.01-send")
    at_first = reads(TWO, "02-get-task-at-input1", "03-execution-state-at-input1", "04-session-recovery-at-input1")
    assert input_status(first, 0, at_first, in_doubt=True) is InputStatus.WAITS


def test_after_a_runtime_restart_a_working_task_is_orphaned() -> None:
    flow = "03-restart-after-command-ran"
    restarted = reads(flow, "06-get-task-after-restart", "07-execution-state-after-restart",
                      "08-session-recovery-after-restart")
    assert restarted.state == "TASK_STATE_WORKING" and restarted.bare
    assert task_fate(restarted)[0] is TaskFate.ORPHANED


def normal_task(state: str, *, envelope: dict[str, Any] | None = None) -> TaskView:
    iac: dict[str, Any] = {"iacCodeSessionId": "session-1"}
    if envelope is not None:
        iac["input"] = envelope
    return TaskView({"id": "task-1", "contextId": "ctx-1", "status": {"state": state}, "metadata": {"iac_code": iac}})


PERMISSION = {"kind": "permission", "inputId": "permission-1", "toolUseId": "call-1", "required": True}


@pytest.mark.parametrize(("task_view", "status"), [
    (normal_task("TASK_STATE_INPUT_REQUIRED", envelope=PERMISSION), InputStatus.WAITS),
    # No positive evidence, whatever GetTask shows: the answer is sent and the runtime decides.
    (normal_task("TASK_STATE_INPUT_REQUIRED"), InputStatus.WAITS),
    (normal_task("TASK_STATE_WORKING"), InputStatus.WAITS),
    (normal_task("TASK_STATE_INPUT_REQUIRED", envelope={**PERMISSION, "inputId": "permission-2"}), InputStatus.WAITS),
    (normal_task("TASK_STATE_COMPLETED"), InputStatus.GONE),
    (normal_task("TASK_STATE_CANCELED"), InputStatus.GONE),
    (TaskView(None), InputStatus.GONE),
])
def test_outside_a_pipeline_only_positive_evidence_says_taken(task_view: TaskView, status: InputStatus) -> None:
    (envelope,) = required_inputs({"input": PERMISSION})
    assert input_status(envelope, 0, task_view) is status


def test_an_execution_that_works_on_took_the_input_it_waited_for() -> None:
    # The execution route follows the turn (GetTask does not): a turn that
    # waited for this input and works again went past it.
    (envelope,) = required_inputs({"input": PERMISSION})
    task = normal_task("TASK_STATE_INPUT_REQUIRED", envelope=PERMISSION).task
    working = TaskView(task, execution={"taskId": "task-1", "executionStatus": "working"})
    assert input_status(envelope, 0, working) is InputStatus.TAKEN
    waiting = TaskView(task, execution={"taskId": "task-1", "executionStatus": "input-required"})
    assert input_status(envelope, 0, waiting) is InputStatus.WAITS
    another = TaskView(task, execution={"taskId": "task-2", "executionStatus": "working"})
    assert input_status(envelope, 0, another) is InputStatus.WAITS, "another task's execution says nothing"


def test_an_input_received_status_names_the_input_it_took() -> None:
    (envelope,) = required_inputs({"input": PERMISSION})
    received = normal_task("TASK_STATE_WORKING")
    received.task["metadata"]["iac_code"]["inputReceived"] = {"inputId": "permission-1", "kind": "permission"}
    assert input_status(envelope, 0, received) is InputStatus.TAKEN


def test_a_task_that_waits_only_for_an_input_nobody_can_read_is_unanswerable() -> None:
    # Recovery cancels such a task: no answer can reach it, and it would wait forever.
    assert Findings({}, TaskFate.UNSEEN).unanswerable
    assert not Findings({"perm-1": InputStatus.WAITS}, TaskFate.UNSEEN).unanswerable, "a carried input waits"
    assert not Findings({}, TaskFate.ASKS).unanswerable
