"""``POST /connect`` on one replica to a thread whose run streams on another.

The run's log is a Redis stream: replica B follows A's run from its start,
live to its end, after the hydrate run it builds itself.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp

from tests.support.adapter import run_body
from tests.support.agui import check_stream
from tests.support.connect import applied, connect_body, runs_of, snapshot_of
from tests.support.reattach import SSE

from .conftest import StartReplicas
from .redis_server import RedisServer
from .replicas import interrupts_of, post
from tests.support.reading import read_until


async def test_a_connect_on_another_replica_follows_the_run_live_to_its_end(
    start_replicas: StartReplicas, redis_server: RedisServer, http: aiohttp.ClientSession, workspace: Path,
) -> None:
    first, second = await start_replicas(2, redis_server.url)
    asked = await post(http, first.url, run_body(thread_id="t-far", text="permission notes.txt", cwd=str(workspace)))
    (interrupt,) = interrupts_of(check_stream(asked.body))
    reply = await post(http, second.url, connect_body("t-far"), "connect")
    (hydrate,) = runs_of(reply.body)
    assert hydrate[-1]["outcome"] == {"type": "interrupt", "interrupts": [interrupt]}, "restored on any replica"
    resume = run_body(thread_id="t-far", text=None, cwd=str(workspace))
    resume["resume"] = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "allow_once"}}]
    await post(http, first.url, resume)

    body = run_body(thread_id="t-far", text="slow 3", cwd=str(workspace))
    async with http.post(first.url, data=json.dumps(body), headers=SSE) as resp:
        raw = await read_until(resp, b"TEXT_MESSAGE_CONTENT", 2)
        connecting = asyncio.ensure_future(post(http, second.url, connect_body("t-far"), "connect"))
        raw += await asyncio.wait_for(resp.read(), 20)
    own = check_stream(raw)
    reply = await asyncio.wait_for(connecting, 20)
    hydrate, followed = runs_of(reply.body)
    assert followed == own, "the run streaming on A, from its start to its end, read on B"
    shown = applied(snapshot_of(hydrate), [followed])
    assert shown[-2:] == [("user", "slow 3"), ("assistant", "".join(f"tick {n}. " for n in range(1, 16)))]
    assert [item for item in shown if item[0] == "user"] == [("user", "permission notes.txt"), ("user", "slow 3")]
    assert len(shown) == len(set(shown)), "no message twice"
