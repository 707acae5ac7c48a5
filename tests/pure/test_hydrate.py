"""The hydrate run of ``POST /connect``, built without a socket.

What a reloaded page is told: one lawful AG-UI run whose snapshot never
holds what a following run re-creates, whose outcome restores exactly the
interrupts still waiting, and which never shows an empty history as true.
"""

from __future__ import annotations

from typing import Any

from aguiadapter.protocol.events import encode_sse
from aguiadapter.web.hydrate import (
    HISTORY_EVENT, HistoryMissing, HistoryPage, Hydration, announced_interrupts, before_active_run, hydrate_events,
    hydrate_run_id, pipeline_activity,
)
from aguiadapter.runtime.envelope import envelope_of
from aguiadapter.threads.machine import new_pending
from aguiadapter.threads.record import RunKind, ThreadRecord, ThreadState
from aguiadapter.translate.pipeline import PipelineState
from tests.support.agui import check_stream

NOW = 1_000_000.0

TURN_1 = [
    {"id": "u1", "role": "user", "content": "list the files"},
    {"id": "a1", "role": "assistant", "content": "Listing.",
     "toolCalls": [{"id": "call-1", "type": "function", "function": {"name": "list_files", "arguments": "{}"}}]},
    {"id": "r1", "role": "tool", "toolCallId": "call-1", "content": "main.tf"},
    {"id": "a2", "role": "assistant", "content": "There is main.tf."},
]
TURN_2_ASKED = [
    {"id": "u2", "role": "user", "content": "write notes.txt"},
    {"id": "a3", "role": "assistant", "content": "I will write it.",
     "toolCalls": [{"id": "call-2", "type": "function", "function": {"name": "write_file", "arguments": "{}"}}]},
]
TURN_2_ANSWERED = [
    *TURN_2_ASKED,
    {"id": "r2", "role": "tool", "toolCallId": "call-2", "content": "Wrote notes.txt"},
    {"id": "a4", "role": "assistant", "content": "Done."},
]


def record(state: ThreadState = ThreadState.IDLE, **fields: Any) -> ThreadRecord:
    return ThreadRecord(thread_id="thread-1", context_id="ctx-1", cwd="/w", state=state, **fields)


def permission(tool_use_id: str, *, expires_at: float) -> Any:
    envelope = envelope_of({"inputId": f"permission-{tool_use_id}", "kind": "permission", "toolUseId": tool_use_id,
                            "toolName": "write_file"})
    return new_pending(envelope, expires_at=expires_at)


def test_the_hydrate_run_is_one_lawful_run_with_the_snapshot_and_the_interrupts() -> None:
    waiting = permission("call-2", expires_at=NOW + 60)
    events = hydrate_events(Hydration("thread-1", "hydrate-1", HistoryPage([*TURN_1, *TURN_2_ASKED], "turn:0"),
                                      [waiting.interrupt]))
    assert check_stream(encode_sse(events)) == events, "every event parses with ag-ui-protocol; one balanced run"
    assert [event["type"] for event in events] == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    assert events[0] == {"type": "RUN_STARTED", "threadId": "thread-1", "runId": "hydrate-1", "protocolVersion": "1.0"}
    assert events[1]["messages"] == [*TURN_1, *TURN_2_ASKED]
    assert events[1]["metadata"] == {"iacCode": {"schemaVersion": 1, "before": "turn:0"}}
    assert events[2]["outcome"] == {"type": "interrupt", "interrupts": [waiting.interrupt]}


def test_a_snapshot_from_the_first_turn_has_no_cursor_and_an_idle_thread_finishes_with_success() -> None:
    events = hydrate_events(Hydration("thread-1", "h", HistoryPage(TURN_1)))
    assert events[1]["metadata"] == {"iacCode": {"schemaVersion": 1}}
    assert events[-1]["outcome"] == {"type": "success"}
    check_stream(encode_sse(events))


def test_unreadable_history_is_said_so_and_the_interrupts_are_still_restored() -> None:
    waiting = permission("call-2", expires_at=NOW + 60)
    events = hydrate_events(Hydration("thread-1", "h", HistoryMissing("cannot read it", 5), [waiting.interrupt]))
    check_stream(encode_sse(events))
    assert "MESSAGES_SNAPSHOT" not in [event["type"] for event in events], "no empty history shown as the truth"
    (said,) = [event for event in events if event["type"] == "CUSTOM"]
    assert said == {"type": "CUSTOM", "name": HISTORY_EVENT, "value": {
        "schemaVersion": 1, "status": "unavailable", "code": "HISTORY_UNAVAILABLE", "message": "cannot read it",
        "retryAfterSeconds": 5}}
    assert events[-1]["outcome"]["interrupts"] == [waiting.interrupt]


def test_only_an_interrupted_threads_live_interrupts_are_announced() -> None:
    live, expired = permission("call-2", expires_at=NOW + 1), permission("call-3", expires_at=NOW)
    waiting = record(ThreadState.INTERRUPTED, pending_interrupts=[live, expired])
    assert announced_interrupts(waiting, NOW) == [live.interrupt], "one past its expiresAt is not announced"
    resuming = record(ThreadState.RUNNING, active_run_id="r2", active_run_kind=RunKind.RESUME,
                      pending_interrupts=[live])
    assert announced_interrupts(resuming, NOW) == [], "a resume in progress carries them: the followed run ends them"


def test_a_turn_in_progress_leaves_only_its_user_message_to_the_snapshot() -> None:
    running = record(ThreadState.RUNNING, active_run_id="r2", active_run_kind=RunKind.TURN)
    written = [*TURN_1, TURN_2_ANSWERED[0], TURN_2_ANSWERED[1]]
    assert before_active_run(written, running) == [*TURN_1, TURN_2_ANSWERED[0]], (
        "the run's log re-creates everything the runtime answered in this turn; not the user's message"
    )


def test_a_resume_in_progress_keeps_its_turn_up_to_the_result_it_streams() -> None:
    resuming = record(ThreadState.RUNNING, active_run_id="r3", active_run_kind=RunKind.RESUME,
                      pending_interrupts=[permission("call-2", expires_at=NOW + 60)])
    history = [*TURN_1, *TURN_2_ANSWERED]
    assert before_active_run(history, resuming) == [*TURN_1, *TURN_2_ASKED]
    # Not written yet: all of the history came before the run.
    assert before_active_run([*TURN_1, *TURN_2_ASKED], resuming) == [*TURN_1, *TURN_2_ASKED]
    # Once the runtime took the answer it is no longer pending: the record says which tool call it let go on.
    following = record(ThreadState.RUNNING, active_run_id="r3", active_run_kind=RunKind.FOLLOW)
    following.remember_answer("permission-call-2", "digest", reported=False, tool_use_id="call-2")
    assert before_active_run(history, following) == [*TURN_1, *TURN_2_ASKED]
    # A result of the same tool call id in an earlier turn is not where this run starts.
    earlier = [*TURN_1, {"id": "r9", "role": "tool", "toolCallId": "call-2", "content": "old"}, *TURN_2_ANSWERED]
    assert before_active_run(earlier, resuming) == [*TURN_1, earlier[4], *TURN_2_ASKED]


def test_nothing_is_cut_from_a_thread_without_a_run_in_progress() -> None:
    for state in (ThreadState.IDLE, ThreadState.INTERRUPTED, ThreadState.TERMINAL):
        assert before_active_run([*TURN_1, *TURN_2_ANSWERED], record(state)) == [*TURN_1, *TURN_2_ANSWERED]


def test_the_hydrate_run_never_takes_the_id_of_one_of_the_threads_runs() -> None:
    known = record()
    known.remember_run("run-1", "digest")
    assert hydrate_run_id("hydrate-7", known) == "hydrate-7"
    fresh = hydrate_run_id("run-1", known)
    assert fresh != "run-1" and fresh.startswith("connect-")
    assert hydrate_run_id(None, known) != hydrate_run_id(None, known)


def test_a_pipeline_thread_gets_the_activity_snapshot_a_run_would_send() -> None:
    pipelined = record(ThreadState.INTERRUPTED, pipeline=PipelineState(pipeline_run_id="pr-1", last_sequence=12))
    state = {"snapshot": {"pipelineRunId": "pr-1", "currentStep": "deploying", "stale": None}, "events": []}
    activity = pipeline_activity(pipelined, state)
    assert activity == {"type": "ACTIVITY_SNAPSHOT", "messageId": "pipeline:pr-1", "activityType": "iac-code.pipeline.v1",
                        "content": {"schemaVersion": 1, "snapshot": {"pipelineRunId": "pr-1", "currentStep": "deploying"},
                                    "pipelineRunId": "pr-1"}, "replace": True}
    events = hydrate_events(Hydration("thread-1", "h", HistoryPage([]), activity=activity))
    assert [event["type"] for event in events] == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "ACTIVITY_SNAPSHOT",
                                                   "RUN_FINISHED"]
    check_stream(encode_sse(events))
    assert pipeline_activity(record(), state) is None, "not a pipeline thread"
    assert pipeline_activity(pipelined, None) is None, "the runtime did not answer"
