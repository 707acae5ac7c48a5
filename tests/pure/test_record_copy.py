"""The fast copy of a thread record the shell and the stores make per save."""

from __future__ import annotations

import attrs

from aguiadapter.threads.record import (
    AppliedAnswer,
    EarlierConversation,
    RunEntry,
    RunPhase,
    ThreadRecord,
    ThreadState,
    copy_record,
)


def _full_record() -> ThreadRecord:
    """A record with most fields away from their defaults."""
    record = ThreadRecord("t-1", "ctx-1", "/w", user_id="u", principal="p", namespaced=True,
                          state=ThreadState.RUNNING, session_id="s", execution_id="e", ros_invocation_id="i",
                          task_id="k", active_run_id="r", last_user_message_id="m", last_error="x",
                          runs={"r": RunEntry("d", "success")}, earlier_runs=3,
                          applied_answers={"a": AppliedAnswer("d2", False, "tool")}, parked_until=9.0,
                          run_phase=RunPhase.PARKED, adoptions=2, handed_off_text="h", handed_off_streamed="hs",
                          updated_at=5.0, runtime="rt", earlier=[EarlierConversation("old", "ctx-0")],
                          created_at=1.0, version=7)
    return record


def test_a_copy_is_what_evolve_made_and_a_new_record() -> None:
    record = _full_record()
    copied = copy_record(record)
    assert copied is not record
    assert attrs.asdict(copied, recurse=False) == attrs.asdict(attrs.evolve(record), recurse=False)
    copied.version = 8
    assert record.version == 7
