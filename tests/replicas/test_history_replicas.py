"""A thread's history on any replica: the conversation is the runtime's, not a replica's."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp

from tests.support.adapter import run_body

from .conftest import StartReplicas
from .redis_server import RedisServer
from .replicas import post


async def test_any_replica_serves_the_same_history_of_a_thread(
    start_replicas: StartReplicas, redis_server: RedisServer, http: aiohttp.ClientSession, workspace: Path,
) -> None:
    first, second = await start_replicas(2, redis_server.url)
    for text in ("tool", "hello again"):
        reply = await post(http, first.url, run_body(thread_id="t-shared", text=text, cwd=str(workspace)))
        assert reply.status == 200
    pages = []
    for replica in (first, second):
        async with http.get(f"{replica.url}threads/t-shared/messages") as resp:
            assert resp.status == 200
            pages.append(json.loads(await resp.read()))
    assert pages[0] == pages[1]
    assert [message["role"] for message in pages[1]["messages"]] == [
        "user", "assistant", "tool", "assistant", "user", "assistant"]
    async with http.get(f"{second.url}threads/t-unknown/messages") as resp:
        assert resp.status == 404
