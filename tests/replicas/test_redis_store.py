"""The Redis store against a real redis-server: CAS, fencing, leases, signals."""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from aguiadapter.store.redis import store as rs
from aguiadapter.threads.listing import list_owner
from aguiadapter.threads.record import ThreadRecord
from aguiadapter.store.contract import Claim, CorruptRecord, PersistenceError, StoreUnavailable
from tests.support.eventually import eventually

from .redis_server import RedisServer

RedisSettings, RedisStoreError, RedisThreadStore = rs.RedisSettings, rs.RedisStoreError, rs.RedisThreadStore

DAY_MS = 86_400_000
MakeStore = Callable[..., Awaitable[Any]]


@pytest.fixture
async def make_store(redis_server: RedisServer) -> AsyncIterator[MakeStore]:
    """``await make_store(**settings)``: a started store on the test's Redis."""
    stores: list[Any] = []

    async def make(**settings: Any) -> Any:
        store = RedisThreadStore(redis_server.url, RedisSettings(**settings))
        await store.start()
        stores.append(store)
        return store

    try:
        yield make
    finally:
        await asyncio.gather(*(store.close() for store in stores))


@pytest.fixture
async def raw(redis_server: RedisServer) -> AsyncIterator[Any]:
    """A plain client, to look at the keys."""
    client = aioredis.Redis.from_url(redis_server.url)
    try:
        yield client
    finally:
        await client.aclose()


def record(thread_id: str = "t-1", state: str = "idle") -> ThreadRecord:
    return ThreadRecord(thread_id=thread_id, context_id="ctx-1", cwd="/tmp", state=state)


async def test_a_record_round_trips_and_its_version_grows(make_store: MakeStore) -> None:
    store = await make_store()
    assert await store.load("t-1") is None
    rec = record()
    claim = await store.claim("t-1", "run-1")
    assert claim is not None
    (await store.save(rec, claim)).stamp(rec)
    (await store.save(rec, claim)).stamp(rec)
    loaded = await store.load("t-1")
    assert loaded == rec and loaded is not None and loaded.version == 2
    assert store.kind == "redis" and store.lease_seconds == 5.0 and await store.ping()


async def test_concurrent_compare_and_set_lets_exactly_one_writer_win(make_store: MakeStore) -> None:
    first, second = await make_store(), await make_store()
    await first.save(record())
    copies = [await first.load("t-1"), await second.load("t-1")]
    assert copies[0] is not None and copies[1] is not None
    copies[0].cwd, copies[1].cwd = "/first", "/second"
    results = await asyncio.gather(first.save(copies[0]), second.save(copies[1]), return_exceptions=True)
    assert sorted(type(result).__name__ for result in results) == ["PersistenceError", "Saved"]
    won = next(n for n, result in enumerate(results) if not isinstance(result, BaseException))
    winner, loser = copies[won], copies[1 - won]
    stored = await first.load("t-1")
    assert stored is not None and stored.cwd == winner.cwd and stored.version == 2
    assert loser.version == 1, "a refused save leaves the caller's version as it was"


async def test_a_save_on_a_record_that_moved_on_is_refused(make_store: MakeStore) -> None:
    store = await make_store()
    await store.save(record())
    stale = await store.load("t-1")
    fresh = await store.load("t-1")
    assert stale is not None and fresh is not None
    await store.save(fresh)
    with pytest.raises(PersistenceError, match="version conflict"):
        await store.save(stale)


async def test_a_stale_fencing_token_cannot_write_release_or_renew(make_store: MakeStore) -> None:
    dead, alive = await make_store(lease_seconds=0.3), await make_store()
    old = await dead.claim("t-1", "run-old")
    assert old is not None
    assert await alive.claim("t-1", "run-new") is None, "the lease is held"
    await asyncio.sleep(0.5)  # the first replica stalled: its lease lapsed
    assert not await dead.renew(old)
    new = await alive.claim("t-1", "run-new")
    assert new is not None and new.token > old.token
    rec = record()
    with pytest.raises(PersistenceError, match="claim was lost"):
        await dead.save(rec, old)
    assert rec.version == 0
    await dead.release(old)
    assert await alive.renew(new), "releasing with a stale token leaves the new lease alone"
    (await alive.save(rec, new)).stamp(rec)
    assert (await alive.load("t-1")) == rec


async def test_a_save_with_a_lapsed_claim_is_refused_even_if_nobody_took_it(make_store: MakeStore) -> None:
    store = await make_store(lease_seconds=0.2)
    claim = await store.claim("t-1", "run-1")
    assert claim is not None
    await asyncio.sleep(0.35)
    with pytest.raises(PersistenceError):
        await store.save(record(), claim)
    assert await store.load("t-1") is None


async def test_release_frees_the_thread_and_renew_keeps_it(make_store: MakeStore, raw: Any) -> None:
    store = await make_store(lease_seconds=0.4)
    claim = await store.claim("t-1", "run-1")
    assert claim is not None
    for _ in range(4):
        await asyncio.sleep(0.2)
        assert await store.renew(claim)
    assert await store.claim("t-1", "run-2") is None
    assert 0 < await raw.pttl("aguiadapter:claim:{:t-1}") <= 400
    await store.release(claim)
    again = await store.claim("t-1", "run-2")
    assert again is not None and again.token > claim.token


async def test_retention_applies_to_idle_and_terminal_records_only(make_store: MakeStore, raw: Any) -> None:
    store = await make_store(retention_days=2)
    ttl = {}
    for state in ("idle", "running", "interrupted", "terminal"):
        rec = record(f"t-{state}", state)
        await store.save(rec)
        ttl[state] = await raw.pttl(f"aguiadapter:thread:{{:t-{state}}}")
    assert 2 * DAY_MS - 60_000 < ttl["idle"] <= 2 * DAY_MS
    assert 2 * DAY_MS - 60_000 < ttl["terminal"] <= 2 * DAY_MS
    assert ttl["running"] == ttl["interrupted"] == -1
    # A thread that becomes interrupted loses its expiry; back to idle, it gets it again.
    rec = await store.load("t-idle")
    assert rec is not None
    rec.state = "interrupted"
    await store.save(rec)
    assert await raw.pttl("aguiadapter:thread:{:t-idle}") == -1
    forever = await make_store(retention_days=0)
    await forever.save(record("t-kept"))
    assert await raw.pttl("aguiadapter:thread:{:t-kept}") == -1


async def test_deadlines_live_in_a_sorted_set(make_store: MakeStore, raw: Any) -> None:
    store = await make_store()
    await store.set_deadline("t-1", 100.5)
    await store.set_deadline("t-2", 200.0)
    await store.set_deadline("t-1", 150.0)
    assert await store.deadlines() == {"t-1": 150.0, "t-2": 200.0}
    await store.set_deadline("t-2", None)
    await store.set_deadline("t-unknown", None)
    assert await raw.zrange(store.keys.deadlines("t-1"), 0, -1, withscores=True) == [(b"t-1", 150.0)]
    assert await raw.exists(store.keys.deadlines("t-2")) == 0 or await raw.zscore(store.keys.deadlines("t-2"), "t-2") is None


async def test_due_deadlines_go_to_one_replica_at_a_time(make_store: MakeStore, raw: Any) -> None:
    first, second = await make_store(), await make_store()
    await first.set_deadline("t-past", 100.0)
    await first.set_deadline("t-future", 10_000.0)
    results = await asyncio.gather(first.due_deadlines(1000.0), second.due_deadlines(1000.0))
    assert sorted(results) == [[], ["t-past"]]
    holder, other = (first, second) if results[0] else (second, first)
    assert await holder.due_deadlines(1000.0) == ["t-past"], "the holder keeps sweeping"
    assert await other.due_deadlines(1000.0) == []
    assert 0 < await raw.pttl("aguiadapter:sweeper") <= 4000
    await raw.delete("aguiadapter:sweeper")  # the holder died: its sweeper lease lapsed
    assert await other.due_deadlines(1000.0) == ["t-past"]


async def test_cancels_reach_every_replica(make_store: MakeStore) -> None:
    publisher, listener = await make_store(), await make_store()
    heard: list[str] = []
    listener.on_cancel(heard.append)
    listener.on_cancel(lambda _: 1 / 0)  # a failing callback does not stop the others
    await asyncio.wait_for(listener.listening.wait(), 5)
    await publisher.publish_cancel("exec-1")
    await eventually(lambda: heard == ["exec-1"], "the other replica hears the cancel")


async def test_the_cancel_listener_reconnects_after_redis_restarts(
    make_store: MakeStore, redis_server: RedisServer
) -> None:
    store = await make_store()
    heard: list[str] = []
    store.on_cancel(heard.append)
    await asyncio.wait_for(store.listening.wait(), 5)
    await redis_server.restart()
    # Cancels published before the listener is back are lost: keep sending.
    attempts = itertools.count()

    async def heard_one() -> list[str]:
        await store.publish_cancel(f"exec-{next(attempts)}")
        return heard

    await eventually(heard_one, "the cancel listener is back after the restart", interval=0.2)
    assert heard[0].startswith("exec-")



async def test_an_outage_of_redis_is_logged_once_and_so_is_its_end(
    make_store: MakeStore, redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "aguiadapter.store.redis.store")
    store = await make_store()
    await asyncio.wait_for(store.listening.wait(), 5)
    await redis_server.kill()

    def said() -> list[str]:
        return [record.getMessage() for record in caplog.records if record.getMessage().startswith("redis store")]

    await eventually(lambda: any("unreachable" in line for line in said()), "the outage is told", timeout=10)
    await asyncio.sleep(2 * rs.WATCH_SECONDS)  # still down: nothing more from the watch
    await redis_server.start()
    await eventually(lambda: any("reconnected" in line for line in said()), "its end is told", timeout=10)
    lines = said()
    assert len(lines) == 2 and lines[0].startswith("redis store unreachable") and "store=redis://" in lines[0], lines
    assert lines[1].startswith("redis store reconnected") and "outage_seconds=" in lines[1], lines


async def test_redis_down_maps_to_the_documented_errors(make_store: MakeStore, redis_server: RedisServer) -> None:
    store = await make_store()
    claim = await store.claim("t-1", "run-1")
    assert claim is not None
    rec = record()
    (await store.save(rec, claim)).stamp(rec)
    await redis_server.kill()
    assert not await store.ping()
    with pytest.raises(StoreUnavailable):
        await store.load("t-1")
    with pytest.raises(StoreUnavailable):
        await store.claim("t-2", "run-2")
    with pytest.raises(StoreUnavailable):
        await store.renew(claim)
    with pytest.raises(StoreUnavailable):
        await store.deadlines()
    with pytest.raises(StoreUnavailable):
        await store.due_deadlines(0.0)
    with pytest.raises(PersistenceError):
        await store.save(rec, claim)
    assert rec.version == 1
    with pytest.raises(PersistenceError):
        await store.set_deadline("t-1", 1.0)
    await store.release(claim)  # never raises: the lease lapses by itself
    await store.publish_cancel("exec-1")  # logged only


async def test_a_redis_that_hangs_costs_a_bounded_wait() -> None:
    """A server that accepts connections and never answers: calls give up
    after the store's call budget instead of hanging the request."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        store = RedisThreadStore(f"redis://127.0.0.1:{silent.getsockname()[1]}/0")
        started = time.monotonic()
        with pytest.raises(StoreUnavailable):
            await store.load("t-1")
        assert time.monotonic() - started < rs.CALL_TIMEOUT_SECONDS + 1.5
        await store.close()


async def test_a_store_does_not_start_without_redis(redis_server: RedisServer) -> None:
    await redis_server.kill()
    store = RedisThreadStore(redis_server.url)
    with pytest.raises(RedisStoreError, match="cannot reach the redis store"):
        await store.start()
    await store.close()


async def test_an_unreadable_record_is_corrupt(make_store: MakeStore, raw: Any) -> None:
    store = await make_store()
    await raw.hset("aguiadapter:thread:{:t-bad}", mapping={"version": "1", "record": b"{not json"})
    with pytest.raises(CorruptRecord):
        await store.load("t-bad")
    await store.save(record("t-other"))
    await raw.rename("aguiadapter:thread:{:t-other}", "aguiadapter:thread:{:t-moved}")
    with pytest.raises(CorruptRecord, match="another thread"):
        await store.load("t-moved")


async def test_the_same_write_sent_twice_is_applied_once(make_store: MakeStore, raw: Any) -> None:
    """A save retried after its reply was lost is not a conflict."""
    store = await make_store()
    rec = record()
    await store.save(rec)
    keys = [store.keys.thread("t-1"), store.keys.claim("t-1")]
    stored = await raw.hget(keys[0], "record")
    assert await store._save_script(keys=keys, args=[0, 1, stored, "", 0]) == 1
    assert await store._save_script(keys=keys, args=[0, 1, b"{}", "", 0]) == -2
    assert await raw.hget(keys[0], "version") == b"1"


async def test_prefixes_keep_deployments_apart(make_store: MakeStore) -> None:
    blue, green = await make_store(prefix="blue:"), await make_store(prefix="green:")
    await blue.save(record())
    assert await green.load("t-1") is None
    assert await green.claim("t-1", "run-1") is not None
    assert await blue.claim("t-1", "run-1") is not None


def test_store_options_ride_in_the_url() -> None:
    url, settings = rs.split_store_url("redis://:pw@127.0.0.1:6390/2?prefix=x:&lease_seconds=2.5&retention_days=7&socket_timeout=1")
    assert url == "redis://:pw@127.0.0.1:6390/2?socket_timeout=1"
    assert settings == RedisSettings(prefix="x:", lease_seconds=2.5, retention_days=7)
    assert settings.retention_ms == 7 * DAY_MS and settings.lease_ms == 2500
    assert rs.split_store_url("redis://127.0.0.1/0")[1] == RedisSettings()
    assert rs.redact_url("redis://user:secret@host:1/0") == "redis://user:***@host:1/0"
    store = rs.store_from_url("redis://:secret@127.0.0.1:6390/1?prefix=p:")
    assert "secret" not in store.location() and "prefix p:" in store.location()
    for bad in ("http://host/", "redis://h/0?lease_seconds=0", "redis://h/0?retention_days=x"):
        with pytest.raises(RedisStoreError):
            rs.split_store_url(bad)



def test_a_sentinel_url_names_the_sentinels_the_service_and_the_waits() -> None:
    from aguiadapter.store.redis.topology import parse_sentinel_url

    url = "redis+sentinel://:pw@10.0.0.1:26379,10.0.0.2:26380/mymaster/2?sentinel_password=spw&ssl=yes&min_replicas=1"
    redis_url, settings = rs.split_store_url(url)
    assert settings == RedisSettings(min_replicas=1, wait_timeout_ms=500)
    target = parse_sentinel_url(redis_url, {"sentinel_password": "spw", "ssl": "yes"})
    assert target.sentinels == (("10.0.0.1", 26379), ("10.0.0.2", 26380)) and target.service == "mymaster"
    assert (target.db, target.password, target.sentinel_password, target.ssl) == (2, "pw", "spw", True)
    assert rs.split_store_url("redis+cluster://:pw@h1:7000,h2:7001/?ssl=yes&prefix=c:")[1].prefix == "c:"
    shown = rs.store_from_url(url).location()
    assert "pw" not in shown.replace("prefix", "") and "spw" not in shown and "mymaster" in shown
    for bad in ("redis+sentinel://h:1/", "redis+sentinel://h:x/svc", "redis+sentinel://h:1/svc/x",
                "redis+sentinel://h:1/svc?socket_timeout=1", "redis+sentinel://h:1/svc?ssl=maybe",
                "redis://h/0?min_replicas=-1", "redis://h/0?wait_timeout_ms=0", "redis+cluster://h:1/3",
                "redis+cluster:///", "redis+cluster://h:1/?min_replicas=1", "redis+cluster://h:1/?socket_timeout=1"):
        with pytest.raises(RedisStoreError):
            rs.split_store_url(bad)


async def test_delete_thread_erases_the_thread_only_while_its_claim_holds(make_store: MakeStore, raw: Any) -> None:
    store = await make_store()
    kept, gone = record("t-kept"), record("t-gone", state="terminal")
    gone.remember_run("run-1", "digest")
    for each in (kept, gone):
        await store.save(each)
    await store.set_deadline("t-gone", time.time() + 60)
    await raw.xadd(f"aguiadapter:events:{len('t-gone')}:{{:t-gone}}:run-1", {"f": 1, "c": b"x", "t": 1}, id="1-0")
    claim = await store.claim("t-gone", "admin")
    assert claim is not None
    lapsed = Claim("t-gone", "admin", claim.token + 1)
    assert await store.delete_thread(gone, lapsed) is False
    assert await store.load("t-gone") is not None and await store.deadlines() != {}
    assert await store.delete_thread(gone, claim) is True
    await store.release(claim)
    assert await store.load("t-gone") is None and await store.load("t-kept") is not None
    assert await store.deadlines() == {}
    assert [key async for key in raw.scan_iter(match="aguiadapter:*t-gone*")] == []
    page = await store.list_threads(list_owner(None, None), None, 10)
    assert [summary.thread_id for summary in page.threads] == ["t-kept"]
    assert [summary.thread_id async for summary in store.each_summary()] == ["t-kept"]


async def test_a_password_redis_refuses_is_unauthorized_not_unreachable(
    make_store: MakeStore, redis_server: RedisServer, raw: Any
) -> None:
    store = await make_store()
    assert await store.status() == "ok"
    await raw.config_set("requirepass", "the-new-password")
    try:
        await raw.execute_command("AUTH", "the-new-password")
        await raw.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        # The store's connections are gone; its URL carries no password.
        assert await store.status() == "unauthorized" and not await store.ping()
        wrong = RedisThreadStore(redis_server.url.replace("redis://", "redis://:wrong-password@"))
        with pytest.raises(RedisStoreError, match="refuses its credentials") as refused:
            await wrong.start()
        assert "wrong-password" not in str(refused.value)
        await wrong.close()
    finally:
        await raw.config_set("requirepass", "")


async def test_a_redis_save_returns_its_stamp_and_leaves_the_record_alone(make_store: MakeStore) -> None:
    store = await make_store()
    rec = record()
    saved = await store.save(rec)
    assert (rec.version, rec.updated_at) == (0, 0.0), "the caller applies the stamp"
    loaded = await store.load("t-1")
    assert saved.version == 1 and saved.updated_at > 0
    assert loaded is not None and (loaded.version, loaded.updated_at) == (saved.version, saved.updated_at)
    saved.stamp(rec)
    assert loaded == rec
