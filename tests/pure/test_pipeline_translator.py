"""Pipeline envelopes through the translator, without a socket."""

from __future__ import annotations

from itertools import count
from typing import Any

import pytest

from aguiadapter.protocol.events import run_finished, run_started
from aguiadapter.translate.mapper import IdentityLearned, RunIdentity, RunTranslator
from aguiadapter.translate.pipeline import CUSTOM_TYPES, PipelineState
from tests.support.agui import check_models, check_order, judge_events, types

_seq = count(1)


def envelope(kind: str, *, data: dict[str, Any] | None = None, sequence: int | None = None,
             event_id: str | None = None, **coords: Any) -> dict[str, Any]:
    number = sequence if sequence is not None else next(_seq)
    value: dict[str, Any] = {
        "schemaVersion": "1.0", "eventId": event_id or f"ev-{number}-{kind}", "sequence": float(number),
        "eventType": kind, "scope": "candidate_step" if "candidate" in coords else "step",
        "pipelineRunId": "prun-1", "taskId": "task-1", "contextId": "ctx-1", "data": data or {},
    }
    value.update(coords)
    return value


def update(*envelopes: dict[str, Any], **iac: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = dict(iac)
    if len(envelopes) == 1:
        metadata["pipeline"] = envelopes[0]
    elif envelopes:
        metadata["pipelineBatch"] = {"events": list(envelopes)}
    return {"statusUpdate": {"taskId": "task-1", "contextId": "ctx-1",
                             "status": {"state": "TASK_STATE_WORKING"}, "metadata": {"iac_code": metadata}}}


def translator(state: PipelineState | None = None) -> RunTranslator:
    return RunTranslator(RunIdentity("t", "r", "e", "ctx-1", "inv", task_id="task-1"), pipeline=state or PipelineState())


def run(tr: RunTranslator, *results: dict[str, Any], prefix: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Feed results inside one run and judge the whole stream."""
    events = [run_started("t", "r"), *(prefix or [])]
    for result in results:
        events += tr.feed(result)
    events += tr.finish()
    events.append(run_finished("t", "r", {"type": "success"}))
    check_models(events)
    check_order(events)
    judge_events(events)
    return events


A = {"candidate": {"id": "cand-a", "subPipelineId": "sub-a"}}
B = {"candidate": {"id": "cand-b", "subPipelineId": "sub-b"}}
GEN = {"candidateStep": {"id": "template_generating"}}


def test_step_lifecycle_maps_to_balanced_steps_with_unique_candidate_names() -> None:
    events = run(translator(), update(
        envelope("step_started", step={"id": "candidates"}),
        envelope("candidate_step_started", **A, **GEN),
        envelope("candidate_step_started", **B, **GEN),
        envelope("candidate_step_completed", **A, **GEN),
        envelope("candidate_step_completed", **B, **GEN),
        envelope("step_completed", step={"id": "candidates"}),
    ))
    started = [e["stepName"] for e in events if e["type"] == "STEP_STARTED"]
    assert started == ["candidates", "candidate:cand-a:template_generating", "candidate:cand-b:template_generating"]


def test_a_step_finished_without_being_open_announces_no_empty_step() -> None:
    events = run(translator(), update(envelope("step_completed", step={"id": "late"})))
    assert [e for e in events if e["type"].startswith("STEP")] == []


def test_content_of_a_completed_step_opens_it_again_until_it_completes_again() -> None:
    # iac-code completes confirm_and_select before asking for the selection,
    # then goes on in the same step after the answer without a step_started.
    step = {"step": {"id": "confirm_and_select"}}
    events = run(translator(), update(
        envelope("step_started", **step),
        envelope("step_completed", **step),
        envelope("text_delta", data={"text": "Deploying single-ecs."}, **step),
        envelope("step_completed", **step),
    ))
    steps = [(e["type"], e["stepName"]) for e in events if e["type"].startswith("STEP")]
    assert steps == [("STEP_STARTED", "confirm_and_select"), ("STEP_FINISHED", "confirm_and_select")] * 2
    text_at = types(events).index("TEXT_MESSAGE_CONTENT")
    assert types(events)[:text_at].count("STEP_STARTED") == 2, "the text arrives inside the reopened step"


@pytest.mark.parametrize("kind", sorted(CUSTOM_TYPES))
def test_allow_listed_types_go_out_as_custom_pipeline_events(kind: str) -> None:
    events = run(translator(), update(envelope(kind, data={"x": 1})))
    customs = [e for e in events if e.get("name") == "iac-code.pipeline.v1"]
    assert len(customs) == 1 and customs[0]["value"]["eventType"] == kind


@pytest.mark.parametrize(
    ("kind", "data", "standard"),
    [
        ("text_delta", {"text": "hi"}, "TEXT_MESSAGE_CONTENT"),
        ("thinking_delta", {"text": "hmm"}, "REASONING_MESSAGE_CONTENT"),
        ("tool_started", {"toolUseId": "c1", "toolName": "list_files", "input": {"path": "."}}, "TOOL_CALL_START"),
        ("usage", {"inputTokens": 3.0, "outputTokens": 2.0, "totalTokens": 5.0}, None),
        ("step_started", {}, "STEP_STARTED"),
    ],
)
def test_signals_with_a_standard_mapping_never_also_go_out_as_custom(
    kind: str, data: dict[str, Any], standard: str | None
) -> None:
    tr = translator()
    events = run(tr, update(envelope(kind, data=data, step={"id": "s"})))
    assert not [e for e in events if e.get("name") == "iac-code.pipeline.v1"]
    if standard is not None:
        assert standard in types(events)
    else:
        assert tr.usage()[0]["totalTokens"] == 5


def test_unknown_types_are_dropped_without_breaking_the_run() -> None:
    events = run(translator(), update(envelope("internal_debug", data={"secret": "no"}), envelope("pipeline_started")))
    assert [e["value"]["eventType"] for e in events if e.get("name") == "iac-code.pipeline.v1"] == ["pipeline_started"]


def test_replays_are_dropped_by_event_id_and_by_sequence() -> None:
    tr = translator()
    first = envelope("pipeline_started", sequence=10, event_id="same")
    events = run(tr, update(first), update(dict(first)), update(envelope("stack_progress", sequence=9)),
                 update(envelope("stack_progress", sequence=11)))
    kinds = [e["value"]["eventType"] for e in events if e.get("name") == "iac-code.pipeline.v1"]
    assert kinds == ["pipeline_started", "stack_progress"]
    assert tr.pipeline.last_sequence == 11


def test_parallel_candidates_stream_text_with_their_own_message_ids() -> None:
    events = run(translator(), update(
        envelope("text_delta", data={"text": "A1"}, **A, **GEN),
        envelope("text_delta", data={"text": "B1"}, **B, **GEN),
        envelope("text_delta", data={"text": "A2"}, **A, **GEN),
    ))
    by_message: dict[str, str] = {}
    for e in events:
        if e["type"] == "TEXT_MESSAGE_CONTENT":
            by_message[e["messageId"]] = by_message.get(e["messageId"], "") + e["delta"]
    assert sorted(by_message.values()) == ["A1A2", "B1"]


def test_pending_permissions_while_working_are_an_interrupt() -> None:
    tr = translator()
    permission = {"kind": "permission", "inputId": "permission-1", "required": True, "scope": "candidate",
                  "subPipelineId": "sub-b", "toolUseId": "call-1"}
    tr.feed(update(pendingPermissions=[permission]))
    assert tr.outcome is not None and tr.outcome.kind == "interrupt"
    (envelope,) = tr.outcome.inputs
    assert envelope.fields == permission and envelope.sideband, "answered with SendMessage while the task works"


def test_steps_left_open_by_an_interrupt_are_re_opened_by_the_next_run() -> None:
    state = PipelineState()
    first = translator(state)
    events = run(first, update(envelope("step_started", step={"id": "deploy"})))
    assert types(events).count("STEP_FINISHED") == 1, "the interrupted run closes its steps"
    assert state.open_steps == ["step:deploy"]
    second = translator(state)
    events = run(second, update(envelope("step_completed", step={"id": "deploy"})), prefix=second.reopen_steps())
    assert [e["type"] for e in events if e["type"].startswith("STEP")] == ["STEP_STARTED", "STEP_FINISHED"]
    assert state.open_steps == []


def test_recovery_sends_a_snapshot_then_only_the_events_after_the_cursor() -> None:
    state = PipelineState(pipeline_run_id="prun-1", last_sequence=5)
    tr = translator(state)
    document = {
        "snapshot": {"pipelineRunId": "prun-1", "status": "running", "lastSequence": 7},
        "events": [envelope("stack_progress", sequence=5), envelope("stack_progress", sequence=6),
                   envelope("candidate_completed", sequence=7, **A)],
    }
    events = run(tr, prefix=tr.recover(document))
    assert events[1]["type"] == "ACTIVITY_SNAPSHOT" and events[1]["activityType"] == "iac-code.pipeline.v1"
    assert events[1]["content"]["snapshot"]["lastSequence"] == 7 and events[1]["replace"] is True
    assert [e["value"]["sequence"] for e in events if e.get("name") == "iac-code.pipeline.v1"] == [6.0, 7.0]


def test_a_pipeline_names_its_session_inside_its_events() -> None:
    # iac-code puts iacCodeSessionId in each pipeline event, not beside it.
    tr = RunTranslator(RunIdentity("t", "r", "e", "ctx-1", "inv"), pipeline=PipelineState())
    first = update(envelope("pipeline_started", iacCodeSessionId="session-7"))
    first["statusUpdate"]["taskId"] = "task-1"
    events = tr.feed(first)
    assert tr.learned() == IdentityLearned("task-1", "session-7")
    assert tr.learned() is None, "handed out once"
    (session,) = [e for e in events if e.get("name") == "iac-code.session.v1"]
    assert session["value"]["sessionId"] == "session-7"
