"""A lost write of the thread record against the real `iac-code a2a`: the
rows of ``tests/test_lost_writes.py`` that carry the person's answer.

The disk fills up at the save of one transition (and stays full until it is
back): the client's stream ends with ``RUN_ERROR STATE_PERSISTENCE_FAILED``
(or the request answers 503 before it), the record on disk is the one
before the lost write, the runtime's task is cancelled only when recovery
needs the lost write (never after it took the person's answer), and once
the disk is back the retried answer ends normally with the file written once.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from aguiadapter.threads.record import ThreadState
from tests.support.adapter import RunningAdapter, run_body
from tests.support.eventually import eventually
from tests.support.iac_runtime import IacRuntime
from tests.test_lost_writes import FullDisk, Trip, accepts, as_stored, last_seen, moves, serve

RUNNING, IDLE, INTERRUPTED = ThreadState.RUNNING, ThreadState.IDLE, ThreadState.INTERRUPTED
CANCELED = "TASK_STATE_CANCELED"


@pytest.fixture
async def disk(tmp_path: Path) -> FullDisk:
    return FullDisk(tmp_path / "state")


@pytest.fixture
async def adapter(disk: FullDisk, iac_runtime: IacRuntime) -> AsyncIterator[RunningAdapter]:
    running = await serve(
        disk, disk.state_dir, iac_runtime.url, a2a_token=iac_runtime.token,
        allowed_cwds=(str(iac_runtime.workspaces_root),),
    )
    try:
        yield running
    finally:
        await running.close()


def ask(thread_id: str, cwd: Path, name: str) -> dict[str, Any]:
    return run_body(thread_id=thread_id, text=f"[scenario:permission file={name}] write it", cwd=str(cwd))


def allow(thread_id: str, cwd: Path, interrupt: dict[str, Any]) -> dict[str, Any]:
    body = run_body(thread_id=thread_id, text=None, cwd=str(cwd))
    body["resume"] = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "allow_once"}}]
    return body


ANSWER_ROWS = [
    ("resume", moves(INTERRUPTED, RUNNING), ("HTTP 503", "STATE_PERSISTENCE_FAILED")),
    ("accept", accepts, ("RUN_ERROR", "STATE_PERSISTENCE_FAILED")),
    ("finish after an answer", moves(RUNNING, IDLE), ("RUN_ERROR", "STATE_PERSISTENCE_FAILED")),
]


@pytest.mark.parametrize(("transition", "trips", "seen"), ANSWER_ROWS, ids=[row[0] for row in ANSWER_ROWS])
async def test_a_lost_write_of_an_answer_is_never_cancelled_and_never_applied_twice(
    transition: str, trips: Trip, seen: tuple[str, str], adapter: RunningAdapter, disk: FullDisk,
    iac_runtime: IacRuntime, iac_workspace: Path,
) -> None:
    thread_id = f"e-lost-{uuid.uuid4()}"
    events = (await adapter.run(ask(thread_id, iac_workspace, "kept.txt"))).events()
    (interrupt,) = events[-1]["outcome"]["interrupts"]
    (session,) = [e["value"] for e in events if e.get("name") == "iac-code.session.v1"]
    disk.trips = trips
    answer = allow(thread_id, iac_workspace, interrupt)
    assert last_seen(await adapter.run(answer)) == seen
    assert disk.full
    assert as_stored(await disk.load(thread_id)) == as_stored(disk.kept), "the record changed after a lost write"
    if transition != "resume":
        # The runtime took the answer: it carries it out, its task is not cancelled.
        await eventually(lambda: (iac_workspace / "kept.txt").exists(), "the approved write happened")
        assert await iac_runtime.task_state(session["taskId"]) != CANCELED
    disk.heal()
    again = (await adapter.run({**answer, "runId": f"run-{uuid.uuid4()}"})).events()
    assert again[-1]["type"] == "RUN_FINISHED" and again[-1]["outcome"] == {"type": "success"}, again[-1]
    assert (iac_workspace / "kept.txt").exists()
    assert await iac_runtime.task_state(session["taskId"]) != CANCELED


async def test_an_interrupt_that_cannot_be_stored_cancels_its_task_and_the_thread_goes_on(
    adapter: RunningAdapter, disk: FullDisk, iac_runtime: IacRuntime, iac_workspace: Path
) -> None:
    thread_id = f"e-lost-{uuid.uuid4()}"
    disk.trips = moves(RUNNING, INTERRUPTED)
    reply = await adapter.run(ask(thread_id, iac_workspace, "never.txt"))
    assert last_seen(reply) == ("RUN_ERROR", "STATE_PERSISTENCE_FAILED")
    (session,) = [e["value"] for e in reply.events() if e.get("name") == "iac-code.session.v1"]
    assert as_stored(await disk.load(thread_id)) == as_stored(disk.kept)
    assert await iac_runtime.task_state(session["taskId"]) == CANCELED
    disk.heal()
    events = (await adapter.run(run_body(thread_id=thread_id, text="say hello", cwd=str(iac_workspace)))).events()
    assert events[-1]["type"] == "RUN_FINISHED", events[-1]
    assert not (iac_workspace / "never.txt").exists()
