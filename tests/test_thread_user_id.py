"""The shared token's ``userId`` is checked on every thread route, as on the list and on connect.

A backend that holds the shared token names its user with ``userId``
(``?userId=`` on the thread routes, ``forwardedProps.iacCode.userId`` on
``POST /connect``). A thread started with another ``userId`` then answers
exactly as a thread that does not exist, on every route; and nothing of it
changes (a cancel naming another ``userId`` cancels nothing).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from aguiadapter.demo.runtime import DemoRuntime
from tests.support.adapter import RunningAdapter, run_body, start_adapter
from tests.support.tokens import bearer

TOKEN = bearer("shared-secret")
CANCEL = "extensions/iac-code/v1/executions/{}/cancel"


@pytest.fixture
async def shared(tmp_path: Path, demo: DemoRuntime) -> AsyncIterator[RunningAdapter]:
    running = await start_adapter(
        tmp_path / "state", demo.url, allowed_cwds=(str(tmp_path / "workspaces"),), auth_token="shared-secret",
    )
    try:
        yield running
    finally:
        await running.close()


async def started(adapter: RunningAdapter, workspace: Path) -> tuple[dict[str, Any], str]:
    """Alice's thread ``t-a``, waiting for her answer: its interrupt and execution id."""
    body = run_body(thread_id="t-a", text="permission notes.txt", cwd=str(workspace), run_id="r1", userId="alice")
    events = (await adapter.run(body, TOKEN)).events()
    (interrupt,) = events[-1]["outcome"]["interrupts"]
    (session,) = [e["value"] for e in events if e.get("name") == "iac-code.session.v1"]
    return dict(interrupt), str(session["executionId"])


async def reply_of(adapter: RunningAdapter, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    reply = await (adapter.get(path, TOKEN) if method == "GET" else adapter.post(path, body, TOKEN))
    return reply.status, reply.json() if reply.headers.get("Content-Type", "").startswith("application/json") else None


def routes(thread_id: str, execution_id: str, user_id: str, cwd: Path) -> list[tuple[str, str, Any]]:
    query = f"?userId={user_id}"
    cancel = {"threadId": thread_id, "rosInvocationId": "invocation-1"}
    connect = run_body(thread_id=thread_id, text=None, cwd=str(cwd), userId=user_id)
    return [
        ("GET", f"threads/{thread_id}{query}", None),
        ("GET", f"threads/{thread_id}/messages{query}", None),
        ("GET", f"threads/{thread_id}/runs/r1/events{query}", None),
        ("POST", "connect", connect),
        ("POST", CANCEL.format(execution_id) + query, cancel),
    ]


async def test_another_user_ids_thread_answers_as_an_unknown_one_on_every_route(
    shared: RunningAdapter, workspace: Path
) -> None:
    interrupt, execution_id = await started(shared, workspace)
    for (method, path, body), (_, unknown_path, unknown_body) in zip(
        routes("t-a", execution_id, "bob", workspace), routes("t-never", execution_id, "bob", workspace),
        strict=True,
    ):
        theirs = await reply_of(shared, method, path, body)
        nothing = await reply_of(shared, method, unknown_path, unknown_body)
        assert theirs == nothing, (path, theirs, nothing)
        assert theirs[0] == 404, (path, theirs)
    # Nothing of alice's thread changed: it still waits for her answer, and she sees it.
    status, view = await reply_of(shared, "GET", "threads/t-a?userId=alice")
    assert status == 200 and view["state"] == "interrupted" and view["pendingInterrupts"] == [interrupt]
    status, _ = await reply_of(shared, "GET", "threads/t-a/messages?userId=alice")
    assert status == 200, status
    status, _ = await reply_of(shared, "GET", "threads/t-a/runs/r1/events?userId=alice")
    assert status == 200
    status, cancelled = await reply_of(shared, "POST", CANCEL.format(execution_id) + "?userId=alice",
                                       {"threadId": "t-a", "rosInvocationId": "invocation-1"})
    assert (status, cancelled["status"]) == (200, "cancelled")


async def test_without_a_user_id_the_backend_decides_as_before(shared: RunningAdapter, workspace: Path) -> None:
    """A caller naming nobody is not limited (the reference's cancel has no userId)."""
    _, execution_id = await started(shared, workspace)
    assert (await reply_of(shared, "GET", "threads/t-a"))[0] == 200
    status, cancelled = await reply_of(shared, "POST", CANCEL.format(execution_id),
                                       {"threadId": "t-a", "rosInvocationId": "invocation-1"})
    assert (status, cancelled["status"]) == (200, "cancelled")


@pytest.mark.parametrize("query", ["?userId=", "?userId=" + "x" * 1025])
async def test_a_bad_user_id_is_refused_before_the_thread_is_looked_up(
    shared: RunningAdapter, workspace: Path, query: str
) -> None:
    _, execution_id = await started(shared, workspace)
    for path in ("threads/t-a", "threads/t-never"):
        status, answer = await reply_of(shared, "GET", path + query)
        assert status == 400 and answer["error"]["code"] == "INVALID_INPUT", (path, answer)
    status, answer = await reply_of(shared, "POST", CANCEL.format(execution_id) + query,
                                    {"threadId": "t-a", "rosInvocationId": "invocation-1"})
    assert status == 400 and answer["error"]["code"] == "INVALID_INPUT"
