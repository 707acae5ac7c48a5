"""``GET /threads/{threadId}/messages`` against the demo runtime (real sockets).

The demo runtime serves the session transcript the way iac-code does (and
forgets it on a restart, as iac-code's route does until the next turn).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from ag_ui.core import Message
from pydantic import TypeAdapter

from aguiadapter.demo.runtime import DemoRuntime
from tests.support.adapter import RunningAdapter, run_body, start_adapter

MESSAGES = TypeAdapter(list[Message])


@contextlib.asynccontextmanager
async def started(tmp_path: Path, url: str, **config: Any) -> AsyncIterator[RunningAdapter]:
    running = await start_adapter(tmp_path / "state", url, allowed_cwds=(str(tmp_path / "workspaces"),), **config)
    try:
        yield running
    finally:
        await running.close()


async def messages(adapter: RunningAdapter, thread_id: str, query: str = "", **headers: str) -> tuple[int, Any]:
    reply = await adapter.get(f"/threads/{thread_id}/messages{query}", headers=headers)
    return reply.status, reply.json()


def live_tool_call_ids(events: list[dict[str, Any]]) -> list[str]:
    return [event["toolCallId"] for event in events if event["type"] == "TOOL_CALL_START"]


async def test_the_conversation_comes_back_in_order_with_the_live_tool_call_ids(
    adapter: RunningAdapter, workspace: Path
) -> None:
    first = (await adapter.run(run_body(thread_id="t-h", text="tool", cwd=str(workspace)))).events()
    await adapter.run(run_body(thread_id="t-h", text="hello again", cwd=str(workspace)))
    status, body = await messages(adapter, "t-h")
    assert status == 200, body
    parsed = MESSAGES.validate_python(body["messages"])
    roles = [message.role for message in parsed]
    assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant"], roles
    assert body["messages"][0]["content"] == "tool"
    assert body["messages"][4]["content"] == "hello again"
    (call_id,) = live_tool_call_ids(first)
    assert body["messages"][1]["toolCalls"][0]["id"] == call_id
    assert body["messages"][2]["toolCallId"] == call_id
    assert body["before"] is None


async def test_pages_go_back_turn_by_turn_to_the_first(adapter: RunningAdapter, workspace: Path) -> None:
    for text in ("hello one", "tool", "hello three"):
        await adapter.run(run_body(thread_id="t-p", text=text, cwd=str(workspace)))
    status, newest = await messages(adapter, "t-p", "?limit=1")
    assert status == 200 and newest["messages"][0]["content"] == "hello three"
    status, middle = await messages(adapter, "t-p", f"?limit=1&before={newest['before']}")
    assert [message["role"] for message in middle["messages"]] == ["user", "assistant", "tool", "assistant"]
    status, oldest = await messages(adapter, "t-p", f"?limit=5&before={middle['before']}")
    assert oldest["messages"][0]["content"] == "hello one" and oldest["before"] is None


async def test_bad_limits_and_cursors_are_refused_in_the_callers_language(adapter: RunningAdapter) -> None:
    for query in ("?limit=0", "?limit=abc", "?limit=100000", "?before=nonsense", "?before=t0"):
        status, body = await messages(adapter, "t-any", query)
        assert status == 400 and body["error"]["code"] == "INVALID_INPUT", (query, body)
    status, body = await messages(adapter, "t-any", "?limit=-1", **{"Accept-Language": "zh-CN"})
    assert status == 400 and "limit" in body["error"]["message"] and "整数" in body["error"]["message"]


async def test_an_unknown_thread_is_not_found(adapter: RunningAdapter) -> None:
    status, body = await messages(adapter, "t-nobody")
    assert status == 404 and body["error"]["code"] == "THREAD_NOT_FOUND"


async def test_after_a_runtime_restart_history_is_unavailable_with_retry_after(
    tmp_path: Path, workspace: Path
) -> None:
    demo = DemoRuntime()
    url = await demo.start()
    port = int(url.rstrip("/").rsplit(":", 1)[1])
    async with started(tmp_path, url, history_cache_seconds=0) as adapter:
        await adapter.run(run_body(thread_id="t-r", text="hello", cwd=str(workspace)))
        assert (await messages(adapter, "t-r"))[0] == 200
        await demo.close()
        reply = await adapter.get("/threads/t-r/messages")
        assert reply.status == 503 and reply.json()["error"]["code"] == "HISTORY_UNAVAILABLE"
        assert reply.headers["Retry-After"] == "5"
        restarted = DemoRuntime()  # a new process: it knows no session
        await restarted.start(port=port)
        try:
            reply = await adapter.get("/threads/t-r/messages")
            assert reply.status == 503 and reply.json()["error"]["code"] == "HISTORY_UNAVAILABLE"
        finally:
            await restarted.close()


async def test_concurrent_reads_of_a_thread_share_one_runtime_call(adapter: RunningAdapter, workspace: Path) -> None:
    await adapter.run(run_body(thread_id="t-c", text="hello", cwd=str(workspace)))
    from aguiadapter.web.keys import HISTORY

    reader = adapter.app[HISTORY]
    before = reader.reads
    replies = await asyncio.gather(*(messages(adapter, "t-c") for _ in range(10)))
    assert all(status == 200 for status, _ in replies)
    assert reader.reads - before == 1
