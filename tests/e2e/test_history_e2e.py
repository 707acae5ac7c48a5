"""``GET /threads/{threadId}/messages`` against the real ``iac-code a2a``.

A conversation with text, an image, reasoning, a read-only tool call, a
permission answered and a closing turn comes back whole, in order, as AG-UI
messages whose tool call ids are the ones the live streams used. After a
runtime restart iac-code's recovery route answers 404 until the thread's
next turn: history is unavailable (503), unless the adapter owns the
runtime's folder (``--spawn-iac-code``), which serves it from the session file.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from ag_ui.core import Message
from pydantic import TypeAdapter

from tests.e2e.test_images_e2e import vision_stub_model  # noqa: F401 (a fixture)
from tests.support.adapter import RunningAdapter, start_adapter
from tests.support.conversation import TURNS, converse, live_tool_call_ids
from tests.support.iac_runtime import IacRuntime
from tests.support.model_stub import ModelStub

MESSAGES = TypeAdapter(list[Message])


async def history(adapter: RunningAdapter, thread_id: str, query: str = "") -> tuple[int, dict[str, Any]]:
    reply = await adapter.get(f"/threads/{thread_id}/messages{query}")
    return reply.status, reply.json()


async def every_page(adapter: RunningAdapter, thread_id: str, limit: int) -> list[dict[str, Any]]:
    """The whole conversation, read back page by page from the newest."""
    status, page = await history(adapter, thread_id, f"?limit={limit}")
    assert status == 200, page
    messages = page["messages"]
    while page["before"] is not None:
        status, page = await history(adapter, thread_id, f"?limit={limit}&before={page['before']}")
        assert status == 200, page
        messages = page["messages"] + messages
    return messages


@pytest.mark.usefixtures("vision_stub_model")
async def test_the_whole_conversation_comes_back_with_the_live_tool_call_ids(
    iac_adapter: RunningAdapter, iac_workspace: Path
) -> None:
    thread_id = f"history-{uuid.uuid4().hex[:8]}"
    runs = await converse(iac_adapter, thread_id, iac_workspace)
    status, body = await history(iac_adapter, thread_id)
    assert status == 200, body
    messages = body["messages"]
    MESSAGES.validate_python(messages)
    assert [message["role"] for message in messages] == [
        "user", "reasoning", "assistant",
        "user", "assistant",
        "user", "assistant", "tool", "assistant",
        "user", "assistant", "assistant", "tool", "assistant",
        "user", "assistant",
    ]
    users = [message["content"] for message in messages if message["role"] == "user"]
    assert [content if isinstance(content, str) else content[0]["text"] for content in users] == list(TURNS)
    assert users[1][1]["type"] == "image"
    calls = [call["id"] for message in messages for call in message.get("toolCalls") or ()]
    assert calls == live_tool_call_ids(runs) and len(calls) == 2
    results = [(e["toolCallId"], e["content"]) for events in runs for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert [(m["toolCallId"], m["content"]) for m in messages if m["role"] == "tool"] == results
    assert body["before"] is None
    # Page by page (two turns each) to the first turn: the same messages, none twice.
    assert await every_page(iac_adapter, thread_id, 2) == messages


async def test_after_a_runtime_restart_history_is_unavailable_unless_the_adapter_owns_its_folder(
    own_runtime: IacRuntime, tmp_path: Path
) -> None:
    common = {"a2a_token": own_runtime.token, "allowed_cwds": (str(own_runtime.workspaces_root),),
              "history_cache_seconds": 0}
    thread_id = f"restart-{uuid.uuid4().hex[:8]}"
    remote = await start_adapter(tmp_path / "state", own_runtime.url, **common)
    try:
        runs = await converse(remote, thread_id, own_runtime.workspace("history-restart"), TURNS[2:4])
        status, before = await history(remote, thread_id)
        assert status == 200 and len(before["messages"]) == 9, before  # 4 + 5 messages
        await own_runtime.restart()
        reply = await remote.get(f"/threads/{thread_id}/messages")
        assert reply.status == 503, reply.body
        assert reply.json()["error"]["code"] == "HISTORY_UNAVAILABLE"
        assert "Retry-After" not in reply.headers, "only the thread's next turn brings it back"
    finally:
        await remote.close()
    # The same thread behind an adapter that owns the runtime and its config folder (--spawn-iac-code).
    owner = await start_adapter(tmp_path / "state", own_runtime.url, spawned_runtime=True,
                                runtime_config_dir=own_runtime.config_dir, **common)
    try:
        status, from_disk = await history(owner, thread_id)
        assert status == 200, from_disk
        assert from_disk == before, "the session file holds what the route served"
        calls = [call["id"] for message in from_disk["messages"] for call in message.get("toolCalls") or ()]
        assert calls == live_tool_call_ids(runs)
    finally:
        await owner.close()


async def test_a_pipeline_thread_says_its_history_is_unavailable_rather_than_empty(
    iac_adapter: RunningAdapter, iac_workspace: Path, model_stub: ModelStub
) -> None:
    """iac-code 0.16 keeps a pipeline's conversation out of the session transcript,
    which holds one hidden hand-off row: an empty page would tell a reloaded page
    that nothing was said."""
    from tests.e2e.test_pipeline_e2e import Client
    from tests.support.pipeline_script import scenario

    plan = scenario("direct")

    async def post(body: dict[str, Any]) -> bytes:
        reply = await iac_adapter.run(body)
        assert reply.status == 200, reply.body
        return reply.body

    with model_stub.use_pipeline_script(plan.script, plan.name):
        await Client(post, plan, "history-pipeline", iac_workspace).start()
    reply = await iac_adapter.get("/threads/history-pipeline/messages")
    assert reply.status == 503 and reply.json()["error"]["code"] == "HISTORY_UNAVAILABLE", reply.body
    assert "Retry-After" not in reply.headers, "asking again does not help"
