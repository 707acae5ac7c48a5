"""Interrupt expiry and the disconnect grace by the service's clock: no
test waits for the time they are about to pass.

The service, its expiry scheduler and its runs take the clock they are
given; here it is the test's, moved by hand. The expiry timer's callback
(``expire_thread``) is called as the timer would call it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from aguiadapter.a2a.client import A2AClient
from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.protocol.digest import canonical_digest
from aguiadapter.protocol.parsing import parse_run_input
from aguiadapter.store.file.store import FileThreadStore
from aguiadapter.threads.record import ThreadState
from aguiadapter.service.thread_service import ThreadService
from aguiadapter.runs.shell import SinkClosed
from tests.support.adapter import run_body
from tests.support.agui import parse_sse
from tests.support.eventually import eventually
from tests.support.serve import thread_service
from tests.test_lost_writes import FullDisk, as_stored, moves

TTL = 600.0


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


class Sink:
    def __init__(self) -> None:
        self.events: list[dict[str, object]] = []

    async def send(self, chunk: bytes, count: int, *, last: bool = False) -> None:
        self.events += parse_sse(chunk)[0]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def service(tmp_path: Path, demo: DemoRuntime, clock: Clock) -> AsyncIterator[ThreadService]:
    async with thread_service(FileThreadStore(tmp_path / "state"), demo.url, interrupt_ttl_seconds=TTL,
                              clock=clock) as running:
        yield running


async def interrupted(service: ThreadService, thread_id: str, workspace: Path) -> list[dict[str, object]]:
    body = run_body(thread_id=thread_id, text="permission notes.txt", cwd=str(workspace))
    ticket = await service.admit(parse_run_input(body), canonical_digest(body), "en", str(workspace))
    sink = Sink()
    await service.run(ticket, sink)
    return sink.events


async def test_an_interrupt_expires_at_its_deadline_by_the_clock_and_not_before(
    service: ThreadService, clock: Clock, demo: DemoRuntime, workspace: Path
) -> None:
    events = await interrupted(service, "t-clock", workspace)
    outcome = events[-1]["outcome"]
    assert isinstance(outcome, dict) and outcome["type"] == "interrupt"
    store = service.store
    assert await store.deadlines() == {"t-clock": clock.now + TTL}
    # The timer fires early (a clock step, a restart): nothing expires yet.
    clock.now += TTL - 1
    await service.expire_thread("t-clock")
    record = await store.load("t-clock")
    assert record is not None and record.state is ThreadState.INTERRUPTED
    assert demo.state.total_cancel_calls == 0
    # At the deadline: the interrupts expire, the task is cancelled.
    clock.now += 1
    await service.expire_thread("t-clock")
    record = await store.load("t-clock")
    assert record is not None and record.state is ThreadState.TERMINAL and record.last_error == "EXECUTION_EXPIRED"
    assert record.pending_interrupts == [] and await store.deadlines() == {}
    assert [task.state for task in demo.state.tasks.values()] == ["TASK_STATE_CANCELED"]


class LeavingSink(Sink):
    """A client that goes away after its first events."""

    async def send(self, chunk: bytes, count: int, *, last: bool = False) -> None:
        if len(self.events) >= 3:
            raise SinkClosed()
        await super().send(chunk, count)


async def test_a_run_without_its_client_goes_on_until_the_grace_ends_by_the_clock(
    tmp_path: Path, demo: DemoRuntime, clock: Clock, workspace: Path
) -> None:
    client = A2AClient(demo.url)
    service = ThreadService(FileThreadStore(tmp_path / "state"), client, clock=clock, grace_seconds=30.0)
    await service.start()
    try:
        body = run_body(thread_id="t-grace", text="slow 60", cwd=str(workspace))
        ticket = await service.admit(parse_run_input(body), canonical_digest(body), "en", str(workspace))
        began = clock.now
        running = asyncio.create_task(service.run(ticket, LeavingSink()))

        async def parked() -> bool:
            record = await service.store.load("t-grace")
            return record is not None and record.parked_until == began + 30.0

        await eventually(parked, "the run is parked for the grace")
        assert [task.state for task in demo.state.tasks.values()] == ["TASK_STATE_WORKING"]
        clock.now = began + 30.0
        await asyncio.wait_for(running, 10)
        record = await service.store.load("t-grace")
        assert record is not None and record.state is ThreadState.TERMINAL and record.last_error == "CANCELLED"
        assert [task.state for task in demo.state.tasks.values()] == ["TASK_STATE_CANCELED"]
    finally:
        await service.shutdown()
        await client.close()


async def test_an_expiry_that_cannot_be_stored_changes_nothing_and_is_taken_once_the_disk_is_back(
    tmp_path: Path, demo: DemoRuntime, clock: Clock, workspace: Path
) -> None:
    disk = FullDisk(tmp_path / "state")
    client = A2AClient(demo.url)
    service = ThreadService(disk, client, interrupt_ttl_seconds=TTL, clock=clock)
    await service.start()
    try:
        await interrupted(service, "t-full", workspace)
        disk.trips = moves(ThreadState.INTERRUPTED, ThreadState.TERMINAL)
        clock.now += TTL
        await service.expire_thread("t-full")  # the timer fires; the write is lost
        assert disk.full
        assert as_stored(await disk.load("t-full")) == as_stored(disk.kept)
        assert await disk.deadlines() == {"t-full": clock.now}, "the deadline stays for the sweeper"
        disk.heal()
        await service.expire_thread("t-full")  # the sweeper finds it due
        record = await disk.load("t-full")
        assert record is not None and record.state is ThreadState.TERMINAL and record.last_error == "EXECUTION_EXPIRED"
        assert await disk.deadlines() == {}
    finally:
        await service.shutdown()
        await client.close()
