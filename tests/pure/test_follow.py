"""Following an iac-code task: the decisions, as tables, without a socket.

What counts as the runtime taking an answer, what a refused stream means,
and what a look at the task calls for next (:mod:`aguiadapter.runs.follow`).
"""

from __future__ import annotations

from typing import Any

import pytest

from aguiadapter.a2a.client import A2ARpcError
from aguiadapter.runtime.envelope import InputEnvelope
from aguiadapter.runtime.evidence import TaskFate
from aguiadapter.runs.follow import (
    LostTask,
    Move,
    answer_taken,
    next_move,
    outcome_of,
    refusal,
)
from aguiadapter.runtime.iac_code import AnswerRefused
from aguiadapter.translate.mapper import RunIdentity, RunTranslator, TurnOutcome

INPUT = InputEnvelope(input_id="perm-1", kind="permission", fields={"toolUseId": "call-1"})
OTHER = InputEnvelope(input_id="perm-2", kind="permission", fields={"toolUseId": "call-2"})


def translator(**state: Any) -> RunTranslator:
    made = RunTranslator(RunIdentity("t", "r", "e", "ctx-1", "inv", task_id="task-1"))
    for name, value in state.items():
        setattr(made, name, value)
    return made


@pytest.mark.parametrize(
    ("state", "taken"),
    [
        # Silence is no evidence.
        ({}, False),
        # The runtime's receipt names the input; a duplicate receipt too (taken before).
        ({"received": {"perm-1": False}}, True),
        ({"received": {"perm-1": True}}, True),
        # A receipt of another input says nothing about this one.
        ({"received": {"perm-2": False}}, False),
        # The turn ended, or paused for another input: it went past this one.
        ({"outcome": TurnOutcome("success")}, True),
        ({"outcome": TurnOutcome("interrupt", inputs=(OTHER,))}, True),
        # It asks for this very input again: not taken.
        ({"outcome": TurnOutcome("interrupt", inputs=(INPUT,))}, False),
        # A failed or cancelled turn says nothing about the answer.
        ({"outcome": TurnOutcome("failed")}, False),
        ({"outcome": TurnOutcome("canceled")}, False),
    ],
)
def test_an_answer_is_taken_only_on_positive_evidence(state: dict[str, Any], taken: bool) -> None:
    state = dict(state)
    outcome = state.pop("outcome", None)
    assert answer_taken(translator(**state), outcome, "perm-1") is taken


def test_a_relayed_tool_result_means_the_turn_went_on_past_the_answer() -> None:
    made = translator()
    made._results = 1
    assert answer_taken(made, None, "perm-1")


@pytest.mark.parametrize(
    ("message", "answering", "meant"),
    [
        # Refused as an input it does not wait for: the runtime lost it, and the task may wait forever.
        ("permission_resume_invalid: pending permission is not active", True, "stuck"),
        # Any other refusal of an answer: not applied, it stays pending.
        ("busy", True, "refused"),
        # After its receipt: the runtime cannot go on from an answer it took.
        ("permission_resume_invalid: no checkpoint", False, "lost"),
        # Anything else is the error itself.
        ("internal error", False, None),
    ],
)
def test_what_a_refused_stream_means(message: str, answering: bool, meant: str | None) -> None:
    found = refusal(A2ARpcError(-32603, message), answering=answering)
    if meant is None:
        assert found is None
    elif meant == "refused":
        assert isinstance(found, AnswerRefused)
    else:
        assert isinstance(found, LostTask) and found.cancel is (meant == "stuck")


@pytest.mark.parametrize(
    ("fate", "polled", "subscribable", "move"),
    [
        # A working task the runtime streams to a new subscriber is followed on its stream.
        (TaskFate.WORKS, False, False, Move.SUBSCRIBE),
        (TaskFate.WORKS, True, True, Move.SUBSCRIBE),
        # iac-code streams no turn whose stream lost its client: its execution route is looked at again.
        (TaskFate.WORKS, True, False, Move.LOOK_AGAIN),
        (TaskFate.TURN_ENDED, True, False, Move.STOP),
        (TaskFate.ASKS, True, False, Move.STOP),
        (TaskFate.FAILED, False, False, Move.STOP),
        (TaskFate.CANCELED, False, False, Move.STOP),
        (TaskFate.UNSEEN, True, False, Move.CANCEL_UNSEEN),
        (TaskFate.GONE, False, False, Move.LOST),
        (TaskFate.ORPHANED, False, False, Move.LOST),
        # Never a success without evidence.
        (TaskFate.UNKNOWN, True, False, Move.UNKNOWN),
    ],
)
def test_what_a_look_at_the_task_calls_for(fate: TaskFate, polled: bool, subscribable: bool, move: Move) -> None:
    assert next_move(fate, polled=polled, subscribable=subscribable) is move


def test_every_fate_calls_for_a_move() -> None:
    for fate in TaskFate:
        for polled in (False, True):
            assert isinstance(next_move(fate, polled=polled, subscribable=False), Move)


@pytest.mark.parametrize(
    ("fate", "kind"),
    [(TaskFate.TURN_ENDED, "success"), (TaskFate.FAILED, "failed"), (TaskFate.CANCELED, "canceled")],
)
def test_a_stopped_turn_ends_as_its_fate_says(fate: TaskFate, kind: str) -> None:
    assert outcome_of(fate, (), "detail") == TurnOutcome(kind, detail="detail")  # type: ignore[arg-type]


def test_a_turn_that_asks_announces_what_it_asks_for() -> None:
    assert outcome_of(TaskFate.ASKS, [INPUT, OTHER], None) == TurnOutcome("interrupt", inputs=(INPUT, OTHER))
