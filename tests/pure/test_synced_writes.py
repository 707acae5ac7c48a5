"""Which writes of a run may wait for the thread's next durable save
(runs/shell.py ``needs_sync``): a turn's task binding, and nothing else."""

from __future__ import annotations

import pytest

from aguiadapter.runs.shell import needs_sync
from aguiadapter.threads import machine as tm
from aguiadapter.threads.record import RunKind, ThreadRecord


def running(kind: RunKind) -> ThreadRecord:
    return ThreadRecord(thread_id="t", context_id="c", cwd="/w", active_run_kind=kind)


def test_a_turns_binding_waits_for_the_next_durable_save() -> None:
    assert not needs_sync(tm.BindTask("task-1", "session-1"), running(RunKind.TURN))


@pytest.mark.parametrize("kind", [kind for kind in RunKind if kind is not RunKind.TURN])
def test_the_binding_of_a_run_that_carries_answers_is_synced(kind: RunKind) -> None:
    # Recovery settles the answers of such a run by looking at its task: it must know it.
    assert needs_sync(tm.BindTask("task-1", "session-1"), running(kind))


def test_every_other_write_of_a_turn_is_synced() -> None:
    assert needs_sync(tm.Accept(["i-1"]), running(RunKind.TURN))
