"""``GET /threads/{threadId}/messages`` against the demo runtime (real sockets).

The demo runtime serves the session transcript the way iac-code does (and
forgets it on a restart, as iac-code's route does until the next turn).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
from ag_ui.core import Message
from pydantic import TypeAdapter

from aguiadapter.demo.runtime import DemoRuntime
from tests.support.adapter import RunningAdapter, run_body, started
from tests.support.conversation import DEMO_TURNS, converse, live_tool_call_ids
from tests.support.serve import on_loopback

MESSAGES = TypeAdapter(list[Message])




async def messages(adapter: RunningAdapter, thread_id: str, query: str = "", **headers: str) -> tuple[int, Any]:
    reply = await adapter.get(f"/threads/{thread_id}/messages{query}", headers=headers)
    return reply.status, reply.json()


async def test_the_conversation_comes_back_in_order_with_the_live_tool_call_ids(
    adapter: RunningAdapter, workspace: Path
) -> None:
    runs = await converse(adapter, "t-h", workspace, DEMO_TURNS)
    status, body = await messages(adapter, "t-h")
    assert status == 200, body
    history = body["messages"]
    MESSAGES.validate_python(history)
    assert [message["role"] for message in history] == [
        "user", "reasoning", "assistant",  # think
        "user", "assistant",  # an image
        "user", "assistant", "tool", "assistant",  # a read-only tool
        "user", "assistant", "assistant", "tool", "assistant",  # a permission, allowed
        "user", "assistant",
    ]
    users = [message["content"] for message in history if message["role"] == "user"]
    assert users[0] == DEMO_TURNS[0] and users[1][1]["source"]["mimeType"] == "image/png"
    calls = [call["id"] for message in history for call in message.get("toolCalls") or ()]
    assert calls == live_tool_call_ids(runs)
    assert [message["toolCallId"] for message in history if message["role"] == "tool"] == calls
    streamed = "".join(e["delta"] for events in runs for e in events if e["type"] == "REASONING_MESSAGE_CONTENT")
    assert history[1]["content"] == streamed
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
    for query in ("?limit=0", "?limit=abc", "?limit=100000", "?limit=" + "9" * 5000, "?before=nonsense", "?before=t0"):
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
            # It answers, holding no such conversation: only the thread's next turn helps.
            assert "Retry-After" not in reply.headers and "next turn" in reply.json()["error"]["message"]
            await adapter.run(run_body(thread_id="t-r", text="hello again", cwd=str(workspace)))
            assert (await messages(adapter, "t-r"))[0] == 200
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


async def test_another_users_thread_reads_exactly_as_an_unknown_one(tmp_path: Path, demo: DemoRuntime) -> None:
    from aiohttp import web

    from aguiadapter.config import Config
    from aguiadapter.web.app import create_app

    async def user_of(request: web.Request) -> str | None:
        return request.headers.get("X-User")

    config = Config(state_dir=tmp_path / "state", a2a_url=demo.url, allowed_cwds=(str(tmp_path),))
    runner = web.AppRunner(create_app(config, principal=user_of), shutdown_timeout=0.5)
    await on_loopback(runner)
    base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        async with aiohttp.ClientSession() as session:
            body = run_body(thread_id="alices", text="tool", cwd=str(tmp_path))
            async with session.post(f"{base}/", json=body, headers={"X-User": "alice"}) as resp:
                assert resp.status == 200
                await resp.read()

            async def ask(thread_id: str, user: str | None, query: str = "") -> tuple[int, bytes]:
                headers = {"X-User": user} if user else {}
                async with session.get(f"{base}/threads/{thread_id}/messages{query}", headers=headers) as resp:
                    return resp.status, await resp.read()

            status, mine = await ask("alices", "alice")
            assert status == 200 and b'"tool"' in mine
            theirs, unknown = await ask("alices", "bob"), await ask("nobodys", "bob")
            assert theirs == unknown and theirs[0] == 404 and b"THREAD_NOT_FOUND" in theirs[1]
            assert await ask("alices", "bob", "?before=t1") == await ask("nobodys", "bob", "?before=t1")
            assert (await ask("alices", None))[0] == 401
    finally:
        await runner.cleanup()


async def test_a_turn_that_ended_is_in_the_next_page_although_the_last_read_is_kept(
    adapter: RunningAdapter, workspace: Path
) -> None:
    assert adapter.config.history_cache_seconds >= 5
    await adapter.run(run_body(thread_id="t-k", text="hello one", cwd=str(workspace)))
    assert len((await messages(adapter, "t-k"))[1]["messages"]) == 2
    await adapter.run(run_body(thread_id="t-k", text="hello two", cwd=str(workspace)))
    status, body = await messages(adapter, "t-k")
    assert status == 200
    assert [message["content"] for message in body["messages"] if message["role"] == "user"] == [
        "hello one", "hello two"]


async def test_a_waiting_permissions_tool_call_is_there_without_a_result_and_a_denied_one_fails(
    adapter: RunningAdapter, workspace: Path
) -> None:
    from tests.support.agui import interrupts_of

    events = (await adapter.run(run_body(thread_id="t-w", text="permission a.txt", cwd=str(workspace)))).events()
    (interrupt,) = interrupts_of(events)
    status, body = await messages(adapter, "t-w")
    assert status == 200
    (call,) = [message for message in body["messages"] if message.get("toolCalls")]
    assert call["id"] == interrupt["toolCallId"], "the approval card's tool call, by the live id"
    assert not [message for message in body["messages"] if message["role"] == "tool"]
    deny = run_body(thread_id="t-w", text=None, cwd=str(workspace))
    deny["resume"] = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "deny"}}]
    assert (await adapter.run(deny)).events()[-1]["type"] == "RUN_FINISHED"
    status, body = await messages(adapter, "t-w")
    (result,) = [message for message in body["messages"] if message["role"] == "tool"]
    assert result["toolCallId"] == interrupt["toolCallId"] and result["error"] == result["content"]


async def test_a_pipeline_thread_says_its_history_is_unavailable_rather_than_empty(
    adapter: RunningAdapter, workspace: Path
) -> None:
    """iac-code keeps a pipeline's conversation out of the session transcript."""
    body = run_body(thread_id="t-pipe", text="deploy a web site", cwd=str(workspace), runMode="pipeline",
                    pipelineName="selling")
    await adapter.run(body)
    reply = await adapter.get("/threads/t-pipe/messages")
    assert reply.status == 503 and reply.json()["error"]["code"] == "HISTORY_UNAVAILABLE"
    assert "pipeline" in reply.json()["error"]["message"] and "Retry-After" not in reply.headers
