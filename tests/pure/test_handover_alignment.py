"""Lining a subscription's opening Task up with the text relayed before a handover.

The snapshots have the real runtime's shape (iac-code 0.16.0 on a2a-sdk
1.2.0, as ``tests/fixtures/a2a`` and ``a2a-multi-input`` record it): every
text delta of the turn is an agent message of its own with the id
``<task>-message``, the newest in ``status.message``; the final repeat of
the reply, a cancellation notice and the user's message carry other ids.
"""

from __future__ import annotations

from typing import Any

import pytest

from aguiadapter.translate.alignment import TailOverlap, missing_text, turn_deltas
from aguiadapter.translate.mapper import RunIdentity, RunTranslator

TASK = "task-1"


def agent(text: str, message_id: str = f"{TASK}-message") -> dict[str, Any]:
    return {"role": "ROLE_AGENT", "messageId": message_id, "parts": [{"text": text}]}


def user(text: str) -> dict[str, Any]:
    return {"role": "ROLE_USER", "messageId": "msg-u", "parts": [{"text": text}]}


def snapshot(history: list[dict[str, Any]], newest: dict[str, Any] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"state": "TASK_STATE_WORKING"}
    if newest is not None:
        status["message"] = newest
    return {"id": TASK, "contextId": "ctx-1", "status": status, "history": history}


@pytest.mark.parametrize(
    ("task", "deltas"),
    [
        # A first turn: iac-code keeps no user message in the history.
        (snapshot([agent("tick 0 "), agent("tick 1 ")], agent("tick 2 ")), ["tick 0 ", "tick 1 ", "tick 2 "]),
        # A later turn on the same task starts after its user message and the last reply's final repeat.
        (snapshot([agent("Hi"), agent("Hi", f"{TASK}-2"), user("more"), agent("a")], agent("b")), ["a", "b"]),
        (snapshot([agent("x"), agent("Task canceled.", f"{TASK}-5")], agent("y")), ["y"]),
        # Nothing of the turn streamed yet.
        (snapshot([agent("Hi"), user("more")]), []),
        ({"status": {"state": "TASK_STATE_WORKING"}}, []),
    ],
)
def test_the_turns_deltas_are_the_trailing_run_of_the_runtimes_delta_messages(
    task: dict[str, Any], deltas: list[str]
) -> None:
    assert turn_deltas(task) == deltas


def test_only_the_text_beyond_what_was_relayed_is_missing() -> None:
    assert missing_text("tick 0 tick 1 ", ["tick 0 ", "tick 1 ", "tick 2 ", "tick 3 "]) == "tick 2 tick 3 "
    assert missing_text("tick 0 tick 1 ", ["tick 0 ", "tick 1 "]) == ""
    # A snapshot that is not of the text relayed sends nothing (never someone else's words).
    assert missing_text("After the answer", ["I will write ", "the file now."]) is None
    assert missing_text("", ["anything"]) is None


@pytest.mark.parametrize(
    ("tail", "live", "sent"),
    [
        (["a", "b", "c"], ["d", "e"], ["d", "e"]),  # no repeat
        (["a", "b", "c"], ["c", "d"], ["d"]),  # the newest delta came again
        (["a", "b", "c"], ["b", "c", "d"], ["d"]),  # two came again
        (["a", "b", "c"], ["b", "x"], ["b", "x"]),  # looked like a repeat, was not
        (["a", "b", "a"], ["a", "b", "a", "z"], ["z"]),  # the longest repeat wins
    ],
)
def test_live_deltas_that_repeat_the_snapshots_tail_are_dropped_once(
    tail: list[str], live: list[str], sent: list[str]
) -> None:
    overlap = TailOverlap(tail)
    out = [piece for delta in live for piece in overlap.take(delta)]
    assert out + overlap.settle() == sent
    assert overlap.take("later") == ["later"], "settled: everything after passes"


def text_of(events: list[dict[str, Any]]) -> str:
    return "".join(event["delta"] for event in events if event["type"] == "TEXT_MESSAGE_CONTENT")


def status(text: str, **iac: Any) -> dict[str, Any]:
    update: dict[str, Any] = {"taskId": TASK, "contextId": "ctx-1",
                              "status": {"state": "TASK_STATE_WORKING", "message": agent(text)}}
    if iac:
        update["metadata"] = {"iac_code": iac}
    return {"statusUpdate": update}


def adopter() -> RunTranslator:
    identity = RunIdentity(thread_id="t", run_id="run-1", execution_id="e", context_id="ctx-1", task_id=TASK, ros_invocation_id=None,
                           session_id="s")
    translator = RunTranslator(identity, known_session=True, span_prefix="run-1.2")
    translator.resume_text("run-1-m1", "tick 0 tick 1 ")
    return translator


def test_the_adopter_sends_the_gap_once_and_goes_on_in_the_same_message() -> None:
    translator = adopter()
    task = snapshot([agent("tick 0 "), agent("tick 1 "), agent("tick 2 ")], agent("tick 3 "))
    events = translator.align(task) + translator.feed({"task": task})
    # a2a-sdk fanned "tick 3 " out after the tap: it comes again, then the reply goes on.
    for update in (status("tick 3 "), status("tick 4 ")):
        events += translator.feed(update)
    final = {"statusUpdate": {**status("tick 0 tick 1 tick 2 tick 3 tick 4 ")["statusUpdate"],
                              "metadata": {"iac_code": {"assistantFinal": {"complete": True}}}}}
    events += translator.feed(final)
    assert text_of(events) == "tick 2 tick 3 tick 4 "
    assert {event["messageId"] for event in events if event["type"].startswith("TEXT_MESSAGE")} == {"run-1-m1"}
    assert not [event for event in events if event["type"] == "TEXT_MESSAGE_START"], "the same message goes on"


def test_a_snapshot_of_other_text_adds_nothing() -> None:
    translator = adopter()
    events = translator.align(snapshot([agent("I will write ")], agent("the file now.")))
    events += translator.feed(status("tick 2 "))
    assert text_of(events) == "tick 2 "


def test_a_second_subscription_of_the_adopted_run_is_lined_up_too() -> None:
    """A subscription that ended early is followed by another: what the
    runtime streamed between the two is in the second one's Task."""
    translator = adopter()
    events = translator.align(snapshot([agent("tick 0 ")], agent("tick 1 ")))
    events += translator.align(snapshot([agent("tick 0 "), agent("tick 1 ")], agent("tick 2 ")))
    assert text_of(events) == "tick 2 "


def test_a_run_not_handed_over_lines_nothing_up() -> None:
    identity = RunIdentity(thread_id="t", run_id="run-1", execution_id="e", context_id="ctx-1", task_id=TASK,
                           ros_invocation_id=None, session_id="s")
    translator = RunTranslator(identity, known_session=True)
    assert translator.align(snapshot([agent("tick 0 ")], agent("tick 1 "))) == []
