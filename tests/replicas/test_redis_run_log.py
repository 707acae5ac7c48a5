"""A run's log on a real redis-server: an append its run's stop cut off."""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aioredis

from aguiadapter.store.redis.run_log import RedisRunLogs
from aguiadapter.store.run_log import LogBounds

from .redis_server import RedisServer


def text(delta: str) -> dict[str, Any]:
    return {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": delta}


async def test_an_append_cut_off_after_it_reached_redis_leaves_the_log_writable(redis_server: RedisServer) -> None:
    # A run stopped (cancel route, end of a grace) while an append was on its
    # way: the entry is in Redis, the writer never heard back. The run's end
    # must still be written after it, for a client that re-attached.
    client = aioredis.Redis.from_url(redis_server.url)
    try:
        logs = RedisRunLogs(client, "agui:", LogBounds())
        log = await logs.open("thread-1", "run-1")
        await log.append([text("a")])
        landed = asyncio.Event()
        real_pipeline = client.pipeline

        def slow_pipeline(*args: Any, **kwargs: Any) -> Any:
            pipe = real_pipeline(*args, **kwargs)
            execute = pipe.execute

            async def execute_then_wait() -> Any:
                answer = await execute()
                landed.set()
                await asyncio.sleep(30)  # the reply never reaches the writer
                return answer

            pipe.execute = execute_then_wait
            return pipe

        client.pipeline = slow_pipeline  # type: ignore[method-assign]
        cut = asyncio.ensure_future(log.append([text("b"), text("c")]))
        await asyncio.wait_for(landed.wait(), 5)
        cut.cancel()
        await asyncio.gather(cut, return_exceptions=True)
        client.pipeline = real_pipeline  # type: ignore[method-assign]
        await log.append([{"type": "RUN_ERROR", "message": "cancelled", "code": "CANCELLED"}])
        replayed = b"".join([piece async for piece in logs.read("thread-1", "run-1", 0)])
        assert replayed.count(b"id: ") == 4, replayed
        assert b"id: 4\n" in replayed and b'"RUN_ERROR"' in replayed, "the end follows the cut-off entry"
    finally:
        await client.aclose()
