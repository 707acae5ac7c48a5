"""The process's lease keeper: one loop renews every claim held, with a lease's rules."""

from __future__ import annotations

import asyncio
from typing import Any

from aguiadapter.service.leases import LeaseKeeper
from aguiadapter.store.contract import Claim, StoreUnavailable
from tests.support.eventually import eventually

LEASE = 0.15


class FakeStore:
    """Just what the keeper uses: a lease and ``renew``."""

    lease_seconds = LEASE

    def __init__(self) -> None:
        self.renewed: list[Claim] = []
        self.lost: set[Claim] = set()
        self.down = False
        #: How many times a renewal was asked for (answered or not).
        self.asked = 0

    async def renew(self, claim: Claim) -> bool:
        self.asked += 1
        if self.down:
            raise StoreUnavailable("no answer")
        self.renewed.append(claim)
        return claim not in self.lost


class Clock:
    """The keeper's clock, moved by the test (the renewals still come every
    third of the short lease; whether a lease ran out is this clock's say)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def claim(n: int) -> Claim:
    return Claim(f"thread-{n}", f"run-{n}", n)


def tasks_named_like_the_keeper() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if "_renew_while_held" in repr(t.get_coro())]


async def test_one_task_renews_every_held_claim_and_stops_when_none_is_held() -> None:
    store = FakeStore()
    keeper = LeaseKeeper(store)  # type: ignore[arg-type]
    claims = [claim(n) for n in range(50)]
    for each in claims:
        keeper.hold(each)
    assert len(tasks_named_like_the_keeper()) == 1
    await eventually(lambda: set(store.renewed) == set(claims), "every claim renewed", timeout=2.0)
    for each in claims:
        keeper.drop(each)
    await eventually(lambda: not tasks_named_like_the_keeper(), "the keeper stopped", timeout=2.0)
    renewed = len(store.renewed)
    keeper.hold(claim(99))
    await eventually(lambda: claim(99) in store.renewed, "a new claim renewed", timeout=2.0)
    assert set(store.renewed[renewed:]) == {claim(99)}, "a dropped claim is not renewed any more"
    await keeper.close()


async def test_a_claim_the_store_refuses_is_lost_and_its_holder_told_once() -> None:
    store = FakeStore()
    keeper = LeaseKeeper(store)  # type: ignore[arg-type]
    lost: list[str] = []
    kept, taken = claim(1), claim(2)
    keeper.hold(kept, lambda: lost.append("kept"))
    keeper.hold(taken, lambda: lost.append("taken"))
    store.lost.add(taken)
    await eventually(lambda: lost == ["taken"], "the lost claim reported", timeout=2.0)
    rounds = store.renewed.count(kept)
    await eventually(lambda: store.renewed.count(kept) >= rounds + 2, "two more rounds", timeout=2.0)
    assert lost == ["taken"] and keeper.held == 1
    await keeper.close()


async def test_a_silent_store_is_asked_again_until_the_lease_would_have_run_out() -> None:
    store = FakeStore()
    clock = Clock()
    keeper = LeaseKeeper(store, clock=clock)  # type: ignore[arg-type]
    lost: list[float] = []
    store.down = True
    keeper.hold(claim(1), lambda: lost.append(clock.now))
    await eventually(lambda: store.asked >= 3, "asked again and again", timeout=2.0)
    assert not lost, "not before the lease ran out"
    clock.now = LEASE
    await eventually(lambda: bool(lost), "the lease ran out", timeout=2.0)
    assert lost == [LEASE]
    await keeper.close()


async def test_a_store_that_answers_again_in_time_keeps_the_claim() -> None:
    store = FakeStore()
    clock = Clock()
    keeper = LeaseKeeper(store, clock=clock)  # type: ignore[arg-type]
    lost: list[str] = []
    store.down = True
    keeper.hold(claim(1), lambda: lost.append("lost"))
    clock.now = LEASE / 2
    store.down = False
    await eventually(lambda: claim(1) in store.renewed, "renewed again", timeout=2.0)
    # Renewed at LEASE / 2: its lease runs from there, whatever the store does next.
    store.down = True
    clock.now = LEASE
    asked = store.asked
    await eventually(lambda: store.asked >= asked + 2, "asked while down", timeout=2.0)
    assert not lost and keeper.held == 1
    await keeper.close()


async def test_holds_nest_and_a_released_claim_is_forgotten() -> None:
    store = FakeStore()
    keeper = LeaseKeeper(store)  # type: ignore[arg-type]
    keeper.hold(claim(1))
    async with keeper.holding(claim(1)):
        assert keeper.held == 1
    assert keeper.held == 1, "the run still holds it after the slow call"
    keeper.hold(claim(1))
    keeper.forget(claim(1))
    assert keeper.held == 0
    await keeper.close()
