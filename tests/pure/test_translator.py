"""The A2A → AG-UI translator, fed with streams recorded from `iac-code a2a`.

No socket here: the translator is a plain object, so each recording goes in
and the AG-UI events that come out are judged by the AG-UI 1.0 models and
the ordering rules of real clients.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from aguiadapter.protocol.events import run_finished, run_started
from aguiadapter.translate.mapper import IdentityLearned, IdentityMismatch, RunIdentity, RunTranslator
from tests.support.agui import check_models, check_order, judge_events, texts, types
from tests.support.recordings import names_with, recorded_objects


def load(name: str) -> list[dict[str, Any]]:
    """The ``result`` objects of one recorded SSE reply."""
    return [obj["result"] for obj in recorded_objects(name)]


def translate(results: list[dict[str, Any]], task_id: str | None = None) -> tuple[RunTranslator, list[dict[str, Any]]]:
    """Run results through a translator inside a RUN_STARTED/RUN_FINISHED pair."""
    first = results[0]
    context_id = (first.get("task") or first.get("statusUpdate") or {})["contextId"]
    if task_id is None and "task" not in first:
        task_id = first["statusUpdate"]["taskId"]
    translator = RunTranslator(RunIdentity("thread-1", "run-1", "exec-1", context_id, "inv-1", task_id=task_id))
    events: list[dict[str, Any]] = [run_started("thread-1", "run-1")]
    for result in results:
        events += translator.feed(result)
    events += translator.finish()
    outcome = {"type": "success"}
    if translator.outcome is not None and translator.outcome.kind == "interrupt":
        outcome = {"type": "interrupt", "interrupts": [{"id": "x", "reason": "input_required"}]}
    events.append(run_finished("thread-1", "run-1", outcome, translator.usage()))
    check_models(events)
    check_order(events)
    judge_events(events)
    return translator, events


SSE_RECORDINGS = names_with("text/event-stream")


@pytest.mark.parametrize("name", SSE_RECORDINGS)
def test_every_recorded_stream_translates_to_a_valid_balanced_run(name: str) -> None:
    translator, events = translate(load(name))
    assert translator.outcome is not None, "every recorded stream ends its turn"
    assert [e.get("name") for e in events].count("iac-code.session.v1") == 1


def test_text_deltas_stream_once_and_the_final_repeat_is_dropped() -> None:
    translator, events = translate(load("01-normal-text"))
    assert texts(events) == "Hello from the fake model. This is a normal turn with several deltas."
    assert types(events).count("TEXT_MESSAGE_START") == 1
    assert translator.outcome is not None and translator.outcome.kind == "success"


def test_usage_is_summed_as_integers() -> None:
    translator, _ = translate(load("04-readonly-tool"))
    (usage,) = translator.usage()
    assert usage["inputTokens"] == 200 and usage["totalTokens"] == 206
    assert all(isinstance(usage[key], int) for key in ("inputTokens", "outputTokens", "totalTokens"))


def test_raw_thinking_becomes_a_reasoning_span_before_the_text() -> None:
    _, events = translate(load("03-reasoning"))
    kinds = types(events)
    assert kinds.index("REASONING_START") < kinds.index("REASONING_END") < kinds.index("TEXT_MESSAGE_START")
    reasoning = "".join(e["delta"] for e in events if e["type"] == "REASONING_MESSAGE_CONTENT")
    assert reasoning == "Thinking about the answer step by step."


def test_a_tool_call_carries_its_arguments_and_result() -> None:
    _, events = translate(load("04-readonly-tool"))
    start = next(e for e in events if e["type"] == "TOOL_CALL_START")
    args = "".join(e["delta"] for e in events if e["type"] == "TOOL_CALL_ARGS")
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert start["toolCallName"] == "list_files"
    assert json.loads(args) == {"path": "."}
    assert result["toolCallId"] == start["toolCallId"] and "README.txt" in result["content"]


def test_a_denied_tool_reports_the_denial_as_its_result() -> None:
    _, events = translate(load("06-permission-deny.2"))
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert "denied" in result["content"]


def test_artifacts_become_custom_events_without_raw_bytes() -> None:
    _, events = translate(load("05-permission-allow.3"))
    (artifact,) = [e for e in events if e.get("name") == "iac-code.artifact.v1"]
    assert artifact["value"]["name"] == "allowed.txt"
    assert artifact["value"]["parts"][0]["url"].startswith("iac-code-artifact://")


def test_a_required_input_envelope_is_an_interrupt_and_the_open_spans_close() -> None:
    translator, _events = translate(load("05-permission-allow.1"))
    assert translator.outcome is not None and translator.outcome.kind == "interrupt"
    (envelope,) = translator.outcome.inputs
    assert envelope.kind == "permission" and envelope.tool_name == "write_file"


def test_input_required_without_an_envelope_is_a_normal_end_of_turn() -> None:
    translator, _ = translate(load("02-second-turn.2"))
    assert translator.outcome is not None and translator.outcome.kind == "success"


def test_the_session_event_names_every_identifier_once_they_are_known() -> None:
    _, events = translate(load("01-normal-text"))
    (session,) = [e for e in events if e.get("name") == "iac-code.session.v1"]
    value = session["value"]
    assert value["taskId"] == "714c1e5f-3bed-421f-877a-6dbbdf9c8555"
    assert value["sessionId"] == "164bd11c-b566-404e-a7eb-6cc7e2770aaf"
    assert {"threadId", "aguiRunId", "executionId", "contextId", "rosInvocationId"} <= set(value)


def _status(state: str, text: str | None = None, **iac: Any) -> dict[str, Any]:
    status: dict[str, Any] = {"state": state}
    if text is not None:
        status["message"] = {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": text}]}
    update: dict[str, Any] = {"taskId": "task-1", "contextId": "ctx-1", "status": status}
    if iac:
        update["metadata"] = {"iac_code": iac}
    return {"statusUpdate": update}


def _translator() -> RunTranslator:
    return RunTranslator(RunIdentity("t", "r", "e", "ctx-1", "inv", task_id="task-1"))


@pytest.mark.parametrize(
    ("state", "kind"),
    [
        ("TASK_STATE_COMPLETED", "success"),
        ("TASK_STATE_FAILED", "failed"),
        ("TASK_STATE_REJECTED", "failed"),
        ("TASK_STATE_AUTH_REQUIRED", "failed"),
        ("TASK_STATE_CANCELED", "canceled"),
        ("TASK_STATE_INPUT_REQUIRED", "success"),
    ],
)
def test_end_states_map_to_outcomes(state: str, kind: str) -> None:
    translator = _translator()
    translator.feed(_status(state))
    assert translator.outcome is not None and translator.outcome.kind == kind


def test_a_final_text_that_was_never_streamed_is_shown_once() -> None:
    translator = _translator()
    events = translator.feed(_status("TASK_STATE_WORKING", "Whole answer.", assistantFinal={"complete": True}))
    events += translator.finish()
    assert texts(events) == "Whole answer."
    assert types(events).count("TEXT_MESSAGE_END") == 1


def test_a_final_text_longer_than_the_deltas_adds_only_the_missing_tail() -> None:
    translator = _translator()
    events = translator.feed(_status("TASK_STATE_WORKING", "Hello "))
    events += translator.feed(_status("TASK_STATE_WORKING", "Hello world", assistantFinal={"complete": True}))
    assert texts(events) == "Hello world"


def test_empty_deltas_are_not_sent() -> None:
    translator = _translator()
    assert translator.feed(_status("TASK_STATE_WORKING", "")) == []


@pytest.mark.parametrize(
    "result",
    [
        {"statusUpdate": {"taskId": "task-1", "contextId": "ctx-other", "status": {"state": "TASK_STATE_WORKING"}}},
        {"statusUpdate": {"taskId": "task-other", "contextId": "ctx-1", "status": {"state": "TASK_STATE_WORKING"}}},
        {"artifactUpdate": {"taskId": "task-other", "contextId": "ctx-1", "artifact": {}}},
    ],
)
def test_an_event_of_another_task_or_context_is_a_protocol_error(result: dict[str, Any]) -> None:
    with pytest.raises(IdentityMismatch):
        _translator().feed(result)


def test_a_changed_session_on_a_known_session_is_a_protocol_error() -> None:
    translator = RunTranslator(
        RunIdentity("t", "r", "e", "ctx-1", "inv", task_id="task-1", session_id="s-1"), known_session=True
    )
    with pytest.raises(IdentityMismatch):
        translator.feed(_status("TASK_STATE_WORKING", iacCodeSessionId="s-2"))


def test_the_ids_a_stream_names_are_handed_out_once_and_the_given_identity_stays_as_it_was() -> None:
    given = RunIdentity("t", "r", "e", "ctx-1", "inv")
    translator = RunTranslator(given)
    working = {"statusUpdate": {"taskId": "task-9", "contextId": "ctx-1", "status": {"state": "TASK_STATE_WORKING"}}}
    translator.feed(working)
    assert translator.learned() == IdentityLearned("task-9", None)
    translator.feed(working)
    assert translator.learned() is None, "nothing new was named"
    assert given.task_id is None, "the run's own identity changes only when it takes what was learned"


def delta(text: str) -> dict[str, Any]:
    """A text delta of task-1, as iac-code streams one."""
    message = {"messageId": "task-1-message", "role": "ROLE_AGENT", "parts": [{"text": text}]}
    status = {"state": "TASK_STATE_WORKING", "message": message}
    return {"statusUpdate": {"taskId": "task-1", "contextId": "ctx-1", "status": status}}


def test_a_handover_leaves_the_reply_in_flight_open_for_the_adopter_to_go_on_with() -> None:
    """A shutdown mid-reply: the stopping relay closes nothing of a lone text
    message and names it; the adopting relay's deltas go on in it, and the
    run it writes is one message, well-formed."""
    identity = RunIdentity("thread-1", "run-1", "exec-1", "ctx-1", "inv-1", task_id="task-1")
    first = RunTranslator(identity)
    events = [run_started("thread-1", "run-1"), *first.feed(delta("This reply streams slowl"))]
    closing, open_text = first.hand_over()
    assert open_text is not None and "TEXT_MESSAGE_END" not in types(closing)
    adopter = RunTranslator(identity, span_prefix="run-1.1")
    adopter.continue_text(open_text)
    events += closing + adopter.feed(delta("y, and ends.")) + adopter.finish()
    events.append(run_finished("thread-1", "run-1", {"type": "success"}, adopter.usage()))
    check_models(events)
    check_order(events)
    assert texts(events) == "This reply streams slowly, and ends."
    assert {e["messageId"] for e in events if e["type"].startswith("TEXT_MESSAGE")} == {open_text}
    assert types(events).count("TEXT_MESSAGE_START") == 1 and types(events).count("TEXT_MESSAGE_END") == 1


def test_a_handover_with_more_than_a_text_open_closes_everything_as_before() -> None:
    translator = RunTranslator(RunIdentity("thread-1", "run-1", "exec-1", "ctx-1", "inv-1", task_id="task-1"))
    translator.feed(delta("Working on it."))
    translator.spans.open_step([], "deploy", close_messages=False)  # a pipeline step around the text
    closing, open_text = translator.hand_over()
    assert open_text is None
    assert [e["type"] for e in closing if e["type"] != "CUSTOM"] == ["TEXT_MESSAGE_END", "STEP_FINISHED"]


def test_a_chunk_hands_out_its_events_outcome_and_ids_and_is_forgotten_if_its_writes_fail() -> None:
    """A chunk taken on trust (it carries an answer's acceptance) whose write
    fails is forgotten: nothing closes the reply it opened, whose start never
    went out. One whose writes succeed keeps its spans."""
    translator = RunTranslator(RunIdentity("t", "r", "e", "ctx-1", "inv"))
    named = translator.take([_status("TASK_STATE_WORKING", iacCodeSessionId="s-1")])
    assert named.learned == IdentityLearned("task-1", "s-1"), "the ids the chunk named, to store first"
    batch = [delta("Half a reply"), _status("TASK_STATE_COMPLETED")]
    lost = translator.take(batch, tentative=True)
    assert batch == [], "the chunk is emptied: its results are not kept while its events wait"
    assert "TEXT_MESSAGE_START" in types(lost.events)
    assert lost.outcome is not None and lost.outcome.kind == "success"
    translator.forget(lost)
    assert translator.finish() == [], "no end for a start that was never sent"

    kept = translator.take([delta("Another reply")], tentative=True)
    assert kept.outcome is None, "an outcome is handed out with its chunk, not kept for the next"
    assert types(translator.finish()) == ["TEXT_MESSAGE_END"]


def test_a_chunk_that_names_another_task_still_hands_out_the_ids_it_named_before() -> None:
    translator = RunTranslator(RunIdentity("t", "r", "e", "ctx-1", "inv"))
    other = _status("TASK_STATE_WORKING")
    other["statusUpdate"]["taskId"] = "task-2"
    chunk = translator.take([_status("TASK_STATE_WORKING", iacCodeSessionId="s-1"), other])
    assert isinstance(chunk.error, IdentityMismatch)
    assert chunk.learned == IdentityLearned("task-1", "s-1"), "stored before the error ends the run"
