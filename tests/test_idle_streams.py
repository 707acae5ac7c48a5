"""Many idle streams open at once in one adapter: each still gets its
heartbeats, and a client that leaves still stops its own run and no other."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.logs import SecretsHidden, scrub
from aguiadapter.store.file.store import FileThreadStore
from tests.support.adapter import run_body, start_adapter
from tests.support.eventually import eventually
from tests.support.reading import read_into

STREAMS = 12
HEARTBEAT = b": heartbeat\n\n"


async def test_every_idle_stream_gets_heartbeats_and_a_leaving_client_stops_only_its_run(
    tmp_path: Path, demo: DemoRuntime, workspace: Path
) -> None:
    running = await start_adapter(tmp_path / "state", demo.url, heartbeat_seconds=0.3)
    connector = aiohttp.TCPConnector(limit=0)
    try:
        async with aiohttp.ClientSession(connector=connector) as session:
            bodies = [run_body(thread_id=f"t-idle-{i}", text="silent 60", cwd=str(workspace)) for i in range(STREAMS)]
            responses = await asyncio.gather(*(session.post(running.url, json=body) for body in bodies))
            seen = [bytearray() for _ in responses]
            # Each sits in the runtime's silence after its first delta...
            await asyncio.wait_for(asyncio.gather(*(
                read_into(resp, got, b"TEXT_MESSAGE_CONTENT", 1) for resp, got in zip(responses, seen, strict=True)
            )), 20)
            # ... and gets its own heartbeats there, every one of them.
            await asyncio.wait_for(asyncio.gather(*(
                read_into(resp, got, HEARTBEAT, 2) for resp, got in zip(responses, seen, strict=True)
            )), 20)
            assert all(b"RUN_FINISHED" not in got and b"RUN_ERROR" not in got for got in seen)

            record = await FileThreadStore(running.config.state_dir).load("t-idle-0")
            assert record is not None
            left = record.context_id
            leaving, staying = responses[0], responses[1:]
            leaving.close()

            def states() -> dict[str, str]:
                return {task.context_id: task.state for task in demo.state.tasks.values()}

            async def cancelled() -> bool:
                return states().get(left) == "TASK_STATE_CANCELED"

            await eventually(cancelled, "the run whose client left is cancelled in the runtime")
            # The others go on, heartbeats and all.
            await asyncio.wait_for(asyncio.gather(*(
                read_into(resp, got, HEARTBEAT, got.count(HEARTBEAT) + 1)
                for resp, got in zip(staying, seen[1:], strict=True)
            )), 20)
            others = [state for context, state in states().items() if context != left]
            assert others == ["TASK_STATE_WORKING"] * (STREAMS - 1)
            for resp in staying:
                resp.close()
    finally:
        await running.close()


def test_secrets_stay_hidden_for_the_block_and_no_longer() -> None:
    secret = "sk-idle-0123456789"
    with SecretsHidden() as hidden:
        assert secret in scrub(f"key {secret}")
        hidden.hide([secret, None])
        assert secret not in scrub(f"key {secret}")
    assert secret in scrub(f"key {secret}")
