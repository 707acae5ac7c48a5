"""A person's answer survives a crash of the adapter: applied exactly once,
never lost, and the client is told the truth (issue 10).

Against the real ``iac-code a2a``: a permission interrupt for a bash command
that appends a line to ``marker.txt`` per run, the client allows it, the
adapter is ``kill -9``-ed at an instant of that resume (see
``tests/support/a2a_proxy.py``), restarted on the same state folder, and the
thread is touched again: the same answer retried, a new user turn, the
cancel route, or nobody until the interrupt expires. The lines of
``marker.txt`` count the runs.

``test_random_kills_lose_and_duplicate_nothing`` kills at random instants;
``AGUIADAPTER_CRASH_CYCLES`` (default 50), ``AGUIADAPTER_CRASH_SEED`` and
``AGUIADAPTER_CRASH_BUDGET_SECONDS`` (default 240) tune it. It runs under
``--durability process`` too (writes reach the page cache, which a kill -9
keeps), with ``AGUIADAPTER_CRASH_PROCESS_CYCLES`` (default 12) cycles.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.crash_harness import (
    CORRECT,
    DUPLICATED,
    FALSE_FAILURE,
    LOST,
    Asked,
    CrashRig,
    Cycle,
    Outcome,
    kill_phase,
    resume_body,
    retry_cycle,
    tally_table,
)
from tests.support.a2a_proxy import Instant
from tests.support.adapter import run_body
from tests.support.eventually import eventually
from tests.support.iac_runtime import IacRuntime

CANCELED = "TASK_STATE_CANCELED"
#: Short enough to wait out, long enough for ask + resume + kill + restart.
EXPIRY_TTL_SECONDS = 3.0
#: The expiry timer fires at the deadline; give its CancelTask this long.
EXPIRY_MARGIN_SECONDS = 1.5
#: How long past that margin an expiry may still come (a periodic sweep).
EXPIRY_LATE_SECONDS = 6.0
#: How long the command takes, per instant: TOOL_RUNNING needs a tool that
#: outlives the restart, so that the next touch finds it still running.
TOOL_SECONDS = {Instant.BEFORE_SENT: 0, Instant.AFTER_SENT: 0, Instant.TOOL_RUNNING: 2.0, Instant.AFTER_END: 0}
INSTANTS = list(Instant)
#: The instants at which the runtime has the answer.
AFTER_SENT = [Instant.AFTER_SENT, Instant.TOOL_RUNNING, Instant.AFTER_END]


@pytest.fixture
async def rig(iac_runtime: IacRuntime, tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[CrashRig]:
    """The rig, its adapter under ``--durability`` of the test's parameter (default fsync)."""
    async with CrashRig(iac_runtime, tmp_path, durability=getattr(request, "param", "fsync")) as running:
        yield running


@pytest.fixture
async def short_ttl_rig(iac_runtime: IacRuntime, tmp_path: Path) -> AsyncIterator[CrashRig]:
    async with CrashRig(iac_runtime, tmp_path, interrupt_ttl_seconds=EXPIRY_TTL_SECONDS) as running:
        yield running


async def crash_the_resume(rig: CrashRig, instant: Instant, name: str) -> tuple[Asked, Outcome, float]:
    """Ask, answer allow_once, and have the adapter killed at ``instant`` of
    that resume; returns once the adapter serves again."""
    asked = await rig.ask(name, TOOL_SECONDS[instant])
    since = time.monotonic()
    trap = rig.arm(instant, asked)
    first = await rig.post(resume_body(asked.thread_id, asked.cwd, asked.interrupt["id"]))
    try:
        await asyncio.wait_for(trap.fired.wait(), 10)
    except asyncio.TimeoutError:
        pytest.fail(f"the adapter was never killed: the resume got {first} {first.body or ''}")
    await rig.restarted()
    return asked, first, since


def again(asked: Asked) -> Callable[[], dict[str, Any]]:
    """The same answer, a new runId each call."""
    return lambda: resume_body(asked.thread_id, asked.cwd, asked.interrupt["id"])


# ------------------------------------------------------------------ retry


@pytest.mark.parametrize("instant", INSTANTS, ids=[i.value for i in INSTANTS])
async def test_a_retried_answer_after_a_crash_runs_once_and_reports_success(rig: CrashRig, instant: Instant) -> None:
    asked, first, since = await crash_the_resume(rig, instant, f"retry-{instant.value}")
    cycle = await retry_cycle(rig, asked, first, instant.value, since)
    assert cycle.runs == 1, cycle.describe()
    assert cycle.attempts[-1].kind == "success", cycle.describe()
    assert cycle.confirm is not None and cycle.confirm.code == "RESUME_ALREADY_APPLIED", cycle.describe()
    assert cycle.verdict == CORRECT, cycle.describe()


# --------------------------------------------------------------- new turn


@pytest.mark.parametrize("instant", INSTANTS, ids=[i.value for i in INSTANTS])
async def test_a_new_turn_after_a_crash_neither_drops_nor_repeats_the_answer(rig: CrashRig, instant: Instant) -> None:
    asked, _, since = await crash_the_resume(rig, instant, f"turn-{instant.value}")
    message_id = f"msg-next-{asked.thread_id}"

    def turn() -> dict[str, Any]:
        return run_body(
            thread_id=asked.thread_id, text="[scenario:normal] what next?", cwd=str(asked.cwd), message_id=message_id
        )

    attempts = await rig.touch_until_settled(turn)
    trail = [a.label for a in attempts]
    at_kill = "; ".join(map(str, rig.task_at_kill))
    if instant is Instant.BEFORE_SENT:
        # The runtime never got the answer: the thread waits for it again.
        assert attempts[-1].code == "RESUME_REQUIRED", f"new turn: {trail}; runtime at the kill: {at_kill}"
        answered = await rig.touch_until_settled(again(asked))
        assert answered[-1].kind == "success", f"new turn: {trail}; the answer then: {[a.label for a in answered]}"
        attempts = await rig.touch_until_settled(turn)
    # The answer was carried out: the turn proceeds (THREAD_BUSY while the task works).
    assert attempts[-1].kind == "success", f"new turn: {[a.label for a in attempts]}; runtime at the kill: {at_kill}"
    runs = await rig.settle(asked, since)
    assert runs == 1, f"the command ran {runs} times; new turn: {trail}; runtime at the kill: {at_kill}"


# ----------------------------------------------------------------- cancel


@pytest.mark.parametrize("instant", INSTANTS, ids=[i.value for i in INSTANTS])
async def test_the_cancel_route_after_a_crash_tells_what_the_runtime_did(rig: CrashRig, instant: Instant) -> None:
    asked, _, since = await crash_the_resume(rig, instant, f"cancel-{instant.value}")
    if instant in (Instant.AFTER_SENT, Instant.AFTER_END):
        # The runtime carries the answer out while nobody follows it: cancel
        # once its turn is over.
        await eventually(lambda: asked.runs() >= 1, "the runtime carries the taken answer out", interval=0.1)
        await rig.settle(asked, since)
    path = f"extensions/iac-code/v1/executions/{asked.execution_id}/cancel"
    identity = {"threadId": asked.thread_id, "rosInvocationId": "invocation-1"}
    attempts = await rig.touch_until_settled(identity, path)
    reply = attempts[-1]
    status = (reply.body or {}).get("status") if isinstance(reply.body, dict) else None
    runs = await rig.settle(asked, since)
    task = await rig.task_view(asked)
    story = f"cancel: {[a.label for a in attempts]} {reply.body}; ran {runs}x; runtime now: {task}; at the kill: {'; '.join(map(str, rig.task_at_kill))}"
    if instant in (Instant.BEFORE_SENT, Instant.TOOL_RUNNING):
        # The execution was still alive (waiting for the answer, or running
        # the tool): cancelling it is the person's new decision.
        assert status == "cancelled", story
        assert task.state == CANCELED, story
        assert runs == 0 if instant is Instant.BEFORE_SENT else runs <= 1, story
        late = await rig.touch_until_settled(again(asked))
        assert late[-1].kind == "error" and late[-1].status == 409, f"{story}; the answer after the cancel: {late}"
        assert await rig.settle(asked, since) == runs, f"{story}; the answer after the cancel ran the command"
    else:
        # The runtime had carried the answer out: nothing is left to cancel.
        assert status == "already_terminal", story
        assert runs == 1, story
        assert task.state != CANCELED, story


# ----------------------------------------------------------------- expiry


@pytest.mark.parametrize("instant", INSTANTS, ids=[i.value for i in INSTANTS])
async def test_expiry_after_a_crash_cancels_only_an_answer_that_never_arrived(
    short_ttl_rig: CrashRig, instant: Instant
) -> None:
    rig = short_ttl_rig
    asked_at = time.time()
    asked, first, since = await crash_the_resume(rig, instant, f"expiry-{instant.value}")
    # Nobody touches the thread until its interrupt's deadline has passed.
    await asyncio.sleep(max(0.0, asked_at + EXPIRY_TTL_SECONDS + EXPIRY_MARGIN_SECONDS - time.time()))
    runs = await rig.settle(asked, since)
    task = await rig.task_view(asked)
    story = f"ran {runs}x; runtime after the deadline: {task}; at the kill: {'; '.join(map(str, rig.task_at_kill))}"
    if instant is Instant.BEFORE_SENT:
        assert runs == 0, story

        async def cancelled() -> bool:
            return (await rig.runtime.task_state(asked.task_id)) == CANCELED

        what = f"expiry cancels the task that waits for the lost answer; {story}"
        await eventually(cancelled, what, timeout=EXPIRY_LATE_SECONDS, interval=0.2)
        late = await rig.touch_until_settled(again(asked))
        assert late[-1].code == "EXECUTION_EXPIRED", f"{story}; the late answer: {late}"
        assert await rig.settle(asked, since) == 0, f"{story}; the late answer ran the command"
        return
    # The runtime took the answer in time: expiry must not cancel its work,
    # and a late retry learns how it went.
    assert task.state != CANCELED, story
    assert runs == 1, story
    cycle = await retry_cycle(rig, asked, first, instant.value, since)
    assert cycle.verdict == CORRECT and cycle.attempts[-1].kind == "success", f"{story}; {cycle.describe()}"


# ----------------------------------------------------------------- random


@pytest.mark.parametrize("rig", ["fsync", "process"], indirect=True)
async def test_random_kills_lose_and_duplicate_nothing(rig: CrashRig, capsys: pytest.CaptureFixture[str]) -> None:
    cycles = (int(os.environ.get("AGUIADAPTER_CRASH_CYCLES") or 50) if rig.durability == "fsync"
              else int(os.environ.get("AGUIADAPTER_CRASH_PROCESS_CYCLES") or 12))
    budget = float(os.environ.get("AGUIADAPTER_CRASH_BUDGET_SECONDS") or 240)
    seed = int(os.environ.get("AGUIADAPTER_CRASH_SEED") or random.randrange(1 << 32))
    rng = random.Random(seed)
    tool_seconds = 0.5
    started = time.monotonic()
    # One clean resume tells how long a resume lasts: kills land in [0, that].
    asked = await rig.ask("random-calibration", tool_seconds)
    sent = time.monotonic()
    clean = await rig.post(resume_body(asked.thread_id, asked.cwd, asked.interrupt["id"]))
    length = time.monotonic() - sent
    assert clean.kind == "success" and await rig.settle(asked, sent) == 1, f"a resume without a crash: {clean}"

    results: list[Cycle] = []
    for index in range(cycles):
        if time.monotonic() - started > budget:
            break
        rig.new_cycle()
        asked = await rig.ask(f"random-{index}", tool_seconds)
        delay = rng.uniform(0.0, length)
        since = time.monotonic()
        killer = asyncio.ensure_future(rig.crash_after(delay, asked))
        first = await rig.post(resume_body(asked.thread_id, asked.cwd, asked.interrupt["id"]))
        done_at = time.monotonic() if first.kind == "success" else None
        await killer
        cycle = await retry_cycle(rig, asked, first, f"cycle {index} (kill at +{delay:.3f} s)", since)
        cycle.phase = kill_phase(rig, since, done_at)
        results.append(cycle)

    elapsed = time.monotonic() - started
    table = tally_table(results)
    header = (
        f"random kills ({rig.durability}): {len(results)} cycles in {elapsed:.0f} s, seed {seed}, "
        f"kills within {length:.2f} s of the resume POST"
    )
    with capsys.disabled():
        print(f"\n{header}\n{table}\n")
    counts = Counter(cycle.verdict for cycle in results)
    assert len(results) == cycles, f"the {budget:g} s budget ran out after {len(results)} of {cycles} cycles\n{table}"
    assert counts[LOST] == counts[DUPLICATED] == counts[FALSE_FAILURE] == 0, f"{header}\n{table}"
