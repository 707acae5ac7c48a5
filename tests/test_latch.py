"""The latch a run's end is awaited with."""

from __future__ import annotations

import asyncio

from aguiadapter.runs.latch import Latch


async def test_every_waiter_wakes_when_it_is_set_and_a_late_one_does_not_wait() -> None:
    latch = Latch()
    waiters = [asyncio.ensure_future(latch.wait()) for _ in range(3)]
    await asyncio.sleep(0)
    assert not any(waiter.done() for waiter in waiters)
    latch.set()
    await asyncio.wait_for(asyncio.gather(*waiters), 1)
    assert latch.is_set()
    await asyncio.wait_for(latch.wait(), 0.1)


async def test_a_waiter_that_gives_up_leaves_the_others_waiting() -> None:
    latch = Latch()
    impatient = asyncio.ensure_future(asyncio.wait_for(latch.wait(), 0.01))
    patient = asyncio.ensure_future(latch.wait())
    await asyncio.gather(impatient, return_exceptions=True)
    assert isinstance(impatient.exception(), TimeoutError) and not patient.done()
    latch.set()
    await asyncio.wait_for(patient, 1)
