"""The adapter killed between two permissions of one turn, against the real
`iac-code a2a` (issue 22): each command runs exactly once, the second
permission is shown even when the runtime raised it while no stream of ours
followed the task, and the client is never told success for a command that
did not run.

A turn of the model stub's ``bashes`` scenario runs two permissioned
commands in a row (``echo 1`` then ``echo 2`` into ``log.txt``), the model
pausing briefly after each result. The client allows the first; the adapter
is ``kill -9``-ed at a random instant of that resume and restarted on the
same state folder; the client retries the first answer until it is settled,
answers whatever it is then shown, and the log says what ran.

The adapter shares the runtime's config folder here (``--config-dir``, as
when both run on one machine): it is where the ids of a permission raised
with nobody listening can be read (``aguiadapter/runtime/checkpoints.py``).
``AGUIADAPTER_CRASH_MULTI_CYCLES`` (default 30), ``AGUIADAPTER_CRASH_SEED``
and ``AGUIADAPTER_CRASH_BUDGET_SECONDS`` (default 240) tune it; under
``--durability process`` it runs ``AGUIADAPTER_CRASH_PROCESS_CYCLES`` (default 12) cycles.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import aiohttp
import pytest

from tests.e2e.crash_harness import CrashRig, Outcome, resume_body
from tests.e2e.test_multi_input_e2e import ran, turn_body
from tests.support.iac_runtime import IacRuntime

STALL = "0.6"
LOST, DUPLICATED, NOT_SHOWN, FALSE_FAILURE, CORRECT = "lost", "duplicated", "not shown", "false failure", "correct"
VERDICTS = (LOST, DUPLICATED, NOT_SHOWN, FALSE_FAILURE, CORRECT)


@pytest.fixture
async def rig(iac_runtime: IacRuntime, tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[CrashRig]:
    """The rig, its adapter under ``--durability`` of the test's parameter (default fsync)."""
    durability = getattr(request, "param", "fsync")
    async with CrashRig(iac_runtime, tmp_path, beside=True, durability=durability) as running:
        yield running


@dataclass
class Turn:
    thread_id: str
    cwd: Path
    first: str
    #: Every interrupt the client was shown, in order.
    shown: list[str] = field(default_factory=list)
    trail: list[str] = field(default_factory=list)
    final: Outcome | None = None


async def start_turn(rig: CrashRig, name: str) -> Turn:
    thread_id = f"{name}-{uuid.uuid4().hex[:8]}"
    cwd = rig.runtime.workspace(name)
    body = turn_body(thread_id, cwd, 2)
    body["messages"][0]["content"] = body["messages"][0]["content"].replace("]", f" stall={STALL}]", 1)
    outcome = await rig.post(body)
    assert outcome.kind == "interrupt", f"the turn should ask permission, got {outcome} {outcome.body}"
    (interrupt,) = outcome.events[-1]["outcome"]["interrupts"]
    return Turn(thread_id, cwd, str(interrupt["id"]), shown=[str(interrupt["id"])])


async def pending_of(rig: CrashRig, thread_id: str) -> list[str]:
    assert rig.session is not None
    async with rig.session.get(f"{rig.url}threads/{thread_id}") as response:
        document = await response.json()
    return [str(item["id"]) for item in document.get("pendingInterrupts") or ()]


async def answer_until_done(rig: CrashRig, turn: Turn, interrupt_id: str) -> None:
    """Answer ``interrupt_id`` (retrying while the outcome says so), then
    whatever the thread asks next, until it asks nothing."""
    for _ in range(4):
        attempts = await rig.touch_until_settled(partial(resume_body, turn.thread_id, turn.cwd, interrupt_id))
        turn.trail += [attempt.label for attempt in attempts]
        last = attempts[-1]
        turn.final = last
        if last.kind == "interrupt":
            (asked,) = last.events[-1]["outcome"]["interrupts"]
            interrupt_id = str(asked["id"])
        elif last.code == "RESUME_ALREADY_APPLIED" and (waiting := await pending_of(rig, turn.thread_id)):
            interrupt_id = waiting[0]
        else:
            return
        if interrupt_id not in turn.shown:
            turn.shown.append(interrupt_id)


def verdict(turn: Turn) -> str:
    lines = Counter(ran(turn.cwd))
    if any(count > 1 for count in lines.values()):
        return DUPLICATED
    if lines["1"] == 0:
        return LOST
    if len(turn.shown) < 2:
        return NOT_SHOWN
    if lines["2"] == 0:
        return LOST
    return CORRECT if turn.final is not None and turn.final.kind == "success" else FALSE_FAILURE


async def settle(turn: Turn) -> None:
    """Give a command the runtime may still be starting a moment to show up."""
    before = ran(turn.cwd)
    for _ in range(10):
        await asyncio.sleep(0.3)
        now = ran(turn.cwd)
        if now == before:
            return
        before = now


@pytest.mark.parametrize("rig", ["fsync", "process"], indirect=True)
async def test_random_kills_between_two_permissions(rig: CrashRig, capsys: pytest.CaptureFixture[str]) -> None:
    cycles = (int(os.environ.get("AGUIADAPTER_CRASH_MULTI_CYCLES") or 30) if rig.durability == "fsync"
              else int(os.environ.get("AGUIADAPTER_CRASH_PROCESS_CYCLES") or 12))
    budget = float(os.environ.get("AGUIADAPTER_CRASH_BUDGET_SECONDS") or 240)
    seed = int(os.environ.get("AGUIADAPTER_CRASH_SEED") or random.randrange(1 << 32))
    rng = random.Random(seed)
    started = time.monotonic()
    # One clean resume tells how long answering the first permission takes.
    turn = await start_turn(rig, "multi-calibration")
    sent = time.monotonic()
    clean = await rig.post(resume_body(turn.thread_id, turn.cwd, turn.first))
    length = time.monotonic() - sent
    assert clean.kind == "interrupt", f"the first answer should lead to the second permission: {clean}"

    rows: list[tuple[str, Turn, float]] = []
    for index in range(cycles):
        if time.monotonic() - started > budget:
            break
        rig.new_cycle()
        turn = await start_turn(rig, f"multi-{index}")
        delay = rng.uniform(0.0, length)
        killer = asyncio.ensure_future(rig.crash_after(delay, None))
        try:
            first = await rig.post(resume_body(turn.thread_id, turn.cwd, turn.first))
        except aiohttp.ClientError:
            first = Outcome("cut")
        turn.trail.append(first.label)
        await killer
        await rig.restarted()
        if first.kind == "interrupt":
            (asked,) = first.events[-1]["outcome"]["interrupts"]
            turn.shown.append(str(asked["id"]))
            await answer_until_done(rig, turn, str(asked["id"]))
        else:
            await answer_until_done(rig, turn, turn.first)
        await settle(turn)
        rows.append((verdict(turn), turn, delay))

    counts = Counter(row[0] for row in rows)
    table = " | ".join(f"{name}: {counts[name]}" for name in VERDICTS) + f" | cycles: {len(rows)}"
    wrong = [
        f"kill at +{delay:.3f} s: {name}; ran {ran(turn.cwd)}; shown {len(turn.shown)}; client: {' -> '.join(turn.trail)}"
        for name, turn, delay in rows if name != CORRECT
    ]  # fmt: skip
    header = (f"kills between two permissions ({rig.durability}): seed {seed}, "
              f"kills within {length:.2f} s of the first answer")
    with capsys.disabled():
        print(f"\n{header}\n{table}\n" + "\n".join(wrong))
    assert len(rows) == cycles, f"the {budget:g} s budget ran out after {len(rows)} of {cycles} cycles\n{table}"
    assert counts[CORRECT] == len(rows), f"{header}\n{table}\n" + "\n".join(wrong)


async def test_without_the_runtimes_folder_an_unseen_permission_is_the_documented_truth(
    iac_runtime: IacRuntime, tmp_path: Path
) -> None:
    # A runtime elsewhere: nothing the adapter can read names the second
    # permission. The retry is told EXECUTION_LOST (never success), the task
    # that would wait forever is cancelled, and the thread takes a new turn.
    async with CrashRig(iac_runtime, tmp_path) as rig:
        turn = await start_turn(rig, "multi-remote")
        body = turn_body(turn.thread_id, turn.cwd, 2)
        answering = asyncio.ensure_future(rig.post(resume_body(turn.thread_id, turn.cwd, turn.first)))
        for _ in range(100):
            if ran(turn.cwd) == ["1"]:
                break
            await asyncio.sleep(0.05)
        await rig.crash()
        await answering
        await rig.restarted()
        await asyncio.sleep(float(STALL) + 1.0)  # the runtime raises the second permission meanwhile
        retried = await rig.touch_until_settled(lambda: resume_body(turn.thread_id, turn.cwd, turn.first))
        assert retried[-1].code == "EXECUTION_LOST", [attempt.label for attempt in retried]
        results = [e for e in retried[-1].events if e["type"] == "TOOL_CALL_RESULT"]
        assert len(results) == 1, "the retry still shows what the first answer did"
        assert (await iac_runtime.get_task(str(retried[-1].events[1]["value"]["taskId"])))["status"]["state"] == (
            "TASK_STATE_CANCELED"
        )
        assert ran(turn.cwd) == ["1"]
        next_turn = {**body, "runId": f"run-{uuid.uuid4()}"}
        next_turn["messages"] = [{"id": f"msg-{uuid.uuid4()}", "role": "user", "content": "[scenario:normal] hi"}]
        assert (await rig.post(next_turn)).kind == "success"
