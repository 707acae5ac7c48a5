"""A draining run asked for again hands over even if the first stop was lost.

The replica a client re-attached to asks the run's holder every second.
The holder stops its relay by cancelling it; on Python 3.11 a cancel that
lands as an awaited ``asyncio.wait_for`` call completes (an append to the
run's Redis log, say) is lost: the call returns its result and the relay
goes on. Asked again, the holder stops the relay again, so the handover
happens at the next ask instead of never (the replica then streamed the
whole reply itself, and the one the client re-attached to waited).
"""

from __future__ import annotations

import asyncio

from aguiadapter.runs.driver import Phase, RunDriver


async def relay(step: asyncio.Future[None]) -> None:
    """A relay between two deltas: an append to the log, then the next delta."""
    await asyncio.wait_for(step, 10)
    await asyncio.sleep(3600)


def draining_driver(inner: asyncio.Task[None]) -> RunDriver:
    """Only the parts of a driver its hand-off touches (its phase, why it stops, its relay)."""
    driver = RunDriver.__new__(RunDriver)
    driver.phase = Phase.HANDING_OFF
    driver.stop_reason = None
    driver._inner = inner  # type: ignore[assignment]
    return driver


async def test_a_hand_off_asked_again_stops_a_relay_that_lost_the_first_stop() -> None:
    step: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    inner = asyncio.create_task(relay(step))
    await asyncio.sleep(0)  # the relay waits for its append
    driver = draining_driver(inner)
    step.set_result(None)  # the append completes as the ask arrives
    driver.hand_off()
    for _ in range(3):
        await asyncio.sleep(0)
    driver.hand_off()  # the asker's next ask, a second later
    for _ in range(3):
        await asyncio.sleep(0)
    assert inner.cancelled() and driver.stop_reason == "handoff"

async def test_a_run_that_let_go_is_not_asked_again() -> None:
    inner = asyncio.create_task(asyncio.sleep(3600))
    driver = draining_driver(inner)
    assert driver.hand_off()
    await asyncio.sleep(0)
    driver.phase = Phase.ENDED
    assert not driver.hand_off() and not driver.handing_off
