"""``GET /threads``: a user's threads, newest first, in every auth mode; never another user's."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from aguiadapter.config import Config
from aguiadapter.demo.runtime import DemoRuntime
from tests.support.adapter import RunningAdapter, run_body, start_adapter
from tests.support.tokens import SigningKey, bearer, write_jwks
from tests.test_embedding_api import cookie_host, serve, signed_in
from tests.test_identity import jwt_settings

TOKEN = "shared-secret-token"


async def listed(adapter: RunningAdapter, query: str = "", headers: dict[str, str] | None = None) -> list[str]:
    """Every thread id of a walk of the list, page by page (3 a page)."""
    found: list[str] = []
    cursor = None
    while True:
        params = f"?limit=3{query}" + (f"&cursor={cursor}" if cursor else "")
        reply = await adapter.get("/threads" + params, headers)
        assert reply.status == 200, reply.body
        assert reply.headers["Cache-Control"] == "no-store"
        page = reply.json()
        found += [item["threadId"] for item in page["threads"]]
        cursor = page["nextCursor"]
        if cursor is None:
            return found


async def start_run(adapter: RunningAdapter, thread_id: str, workspace: Path, headers: dict[str, str] | None = None,
                    text: str = "hi", **iac: Any) -> None:
    reply = await adapter.run(run_body(thread_id=thread_id, text=text, cwd=str(workspace), **iac), headers)
    assert reply.events()[-1]["type"] == "RUN_FINISHED"


def error_of(reply: Any) -> tuple[int, str, str]:
    error = reply.json()["error"]
    return reply.status, error["code"], error["message"]


@pytest.fixture
async def shared(tmp_path: Path, demo: DemoRuntime) -> AsyncIterator[RunningAdapter]:
    running = await start_adapter(tmp_path / "state", demo.url, allowed_cwds=(str(tmp_path / "workspaces"),),
                                  auth_token=TOKEN)
    try:
        yield running
    finally:
        await running.close()


@pytest.fixture
def key() -> SigningKey:
    return SigningKey("ES256", kid="es-1")


@pytest.fixture
async def jwt_adapter(tmp_path: Path, demo: DemoRuntime, key: SigningKey) -> AsyncIterator[RunningAdapter]:
    jwks = tmp_path / "jwks.json"
    write_jwks(jwks, key)
    running = await start_adapter(tmp_path / "state", demo.url, allowed_cwds=(str(tmp_path / "workspaces"),),
                                  jwt=jwt_settings(jwks))
    try:
        yield running
    finally:
        await running.close()


async def test_an_open_server_lists_by_user_id_newest_first_with_what_each_thread_waits_for(
    adapter: RunningAdapter, workspace: Path
) -> None:
    for name in ("t-1", "t-2", "t-3", "t-4"):
        await start_run(adapter, name, workspace)
    await start_run(adapter, "carols", workspace, userId="carol")
    waiting = await adapter.run(run_body(thread_id="t-wait", text="permission notes.txt", cwd=str(workspace)))
    assert waiting.events()[-1]["outcome"]["type"] == "interrupt"
    assert await listed(adapter) == ["t-wait", "t-4", "t-3", "t-2", "t-1"]
    assert await listed(adapter, "&userId=carol") == ["carols"]
    assert await listed(adapter, "&state=interrupted") == ["t-wait"]
    page = (await adapter.get("/threads?limit=2")).json()
    first, second = page["threads"]
    assert first["threadId"] == "t-wait" and first["state"] == "interrupted" and first["pendingInterrupts"] == 1
    assert second == {"threadId": "t-4", "state": "idle", "createdAt": second["createdAt"],
                      "updatedAt": second["updatedAt"], "pendingInterrupts": 0, "runtime": "default"}
    assert second["createdAt"] <= second["updatedAt"] <= first["updatedAt"]
    assert second["updatedAt"].endswith("Z") and len(second["updatedAt"]) == len("2026-12-01T20:55:00.123Z")
    # Used again, a thread moves to the front.
    await start_run(adapter, "t-1", workspace, text="again")
    assert (await listed(adapter))[0] == "t-1"


async def test_the_shared_token_needs_a_user_id_and_lists_only_that_users_threads(
    shared: RunningAdapter, workspace: Path
) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    await start_run(shared, "alices", workspace, auth, userId="alice")
    await start_run(shared, "bobs", workspace, auth, userId="bob")
    await start_run(shared, "nobodys", workspace, auth)
    assert await listed(shared, "&userId=alice", auth) == ["alices"]
    assert await listed(shared, "&userId=bob", auth) == ["bobs"]
    assert await listed(shared, "&userId=mallory", auth) == []
    refused = await shared.get("/threads", auth)
    assert error_of(refused)[:2] == (400, "INVALID_INPUT") and "userId" in error_of(refused)[2]
    assert (await shared.get("/threads?userId=alice")).status == 401


async def test_a_verified_user_lists_their_own_threads_and_never_anyone_elses(
    jwt_adapter: RunningAdapter, key: SigningKey, workspace: Path
) -> None:
    alice, bob = bearer(key.token("alice")), bearer(key.token("bob"))
    for name in ("thread-1", "alice-only"):
        await start_run(jwt_adapter, name, workspace, alice)
    await start_run(jwt_adapter, "thread-1", workspace, bob)  # bob's own thread-1
    assert await listed(jwt_adapter, "", alice) == ["alice-only", "thread-1"]
    assert await listed(jwt_adapter, "", bob) == ["thread-1"]
    assert await listed(jwt_adapter, "&userId=alice", alice) == ["alice-only", "thread-1"]
    # Naming someone else is refused, not answered with their threads.
    assert error_of(await jwt_adapter.get("/threads?userId=alice", bob))[:2] == (400, "INVALID_INPUT")
    # The other routes agree: bob's view of alice's thread is an unknown thread.
    theirs, unknown = await jwt_adapter.get("/threads/alice-only", bob), await jwt_adapter.get("/threads/never", bob)
    assert (theirs.status, theirs.body) == (unknown.status, unknown.body) and theirs.status == 404
    assert (await jwt_adapter.get("/threads")).status == 401


async def test_an_embedding_hooks_user_lists_their_own_threads(
    tmp_path: Path, demo: DemoRuntime
) -> None:
    config = Config(state_dir=tmp_path / "state", a2a_url=demo.url, allowed_cwds=(str(tmp_path),))
    runner, base = await serve(cookie_host(config, by_key=True))
    alice, bob = await signed_in(base, "alice"), await signed_in(base, "bob")
    try:
        for session, thread_id in ((alice, "shared-name"), (alice, "alices"), (bob, "shared-name")):
            body = run_body(thread_id=thread_id, text="hello", cwd=str(tmp_path))
            async with session.post(f"{base}/agui/", json=body) as resp:
                assert resp.status == 200
                await resp.read()
        pages = {}
        for name, session in (("alice", alice), ("bob", bob)):
            async with session.get(f"{base}/agui/threads") as resp:
                pages[name] = [item["threadId"] for item in (await resp.json())["threads"]]
        assert pages == {"alice": ["alices", "shared-name"], "bob": ["shared-name"]}
        async with aiohttp.ClientSession() as nobody, nobody.get(f"{base}/agui/threads") as resp:
            assert resp.status == 401
    finally:
        for session in (alice, bob):
            await session.close()
        await runner.cleanup()


@pytest.mark.parametrize(
    ("query", "english", "chinese"),
    [
        ("limit=0", "limit must be a whole number from 1 to 200.", "limit 必须是 1 到 200 之间的整数。"),
        ("limit=201", "limit must be a whole number from 1 to 200.", "limit 必须是 1 到 200 之间的整数。"),
        ("limit=ten", "limit must be a whole number from 1 to 200.", "limit 必须是 1 到 200 之间的整数。"),
        ("limit=" + "9" * 5000, "limit must be a whole number from 1 to 200.", "limit 必须是 1 到 200 之间的整数。"),
        ("cursor=not-a-cursor", "cursor must be a nextCursor", "cursor 必须原样使用"),
        ("cursor=WzEsMl0", "cursor must be a nextCursor", "cursor 必须原样使用"),
        ("state=paused", "state must be one or more of idle, running, interrupted, terminal",
         "state 必须是 idle, running, interrupted, terminal 中的一个或多个"),
        ("state=idle,", "state must be one or more of", "state 必须是"),
        ("userId=", "userId must not be empty", "userId 不能为空"),
    ],
)
async def test_bad_parameters_get_invalid_input_in_the_callers_language(
    adapter: RunningAdapter, query: str, english: str, chinese: str
) -> None:
    status, code, message = error_of(await adapter.get(f"/threads?{query}"))
    assert (status, code) == (400, "INVALID_INPUT") and message.startswith(english)
    status, code, message = error_of(await adapter.get(f"/threads?{query}", {"Accept-Language": "zh-CN"}))
    assert (status, code) == (400, "INVALID_INPUT") and message.startswith(chinese)


async def test_the_capabilities_name_the_thread_list(adapter: RunningAdapter) -> None:
    document = json.loads((await adapter.get("/capabilities")).body)
    assert document["custom"]["iacCode"]["threadList"] == "/threads"


def _cursor_of(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


#: Cursors an attacker writes: each one once made the adapter fail (500 and a
#: traceback, or a false 503 on Redis) instead of refusing it.
HOSTILE_CURSORS = {
    "nested": _cursor_of(b"[" * 3000),
    "nested after a number": _cursor_of(b"[1," + b"[" * 3000),
    "400 digits": _cursor_of(b"[" + b"9" * 400 + b',"k"]'),
    "NaN": _cursor_of(b'[NaN,"k"]'),
    "Infinity": _cursor_of(b'[-Infinity,"k"]'),
    "1e999": _cursor_of(b'[1e999,"k"]'),
}


@pytest.mark.parametrize("cursor", HOSTILE_CURSORS.values(), ids=HOSTILE_CURSORS.keys())
async def test_a_hostile_cursor_is_invalid_input_with_one_log_line_at_most(
    adapter: RunningAdapter, workspace: Path, cursor: str, caplog: pytest.LogCaptureFixture
) -> None:
    await start_run(adapter, "t-1", workspace)
    caplog.clear()
    caplog.set_level(logging.DEBUG)
    status, code, message = error_of(await adapter.get(f"/threads?cursor={cursor}"))
    assert (status, code) == (400, "INVALID_INPUT") and message.startswith("cursor must be a nextCursor")
    assert len(caplog.records) <= 1 and not any(record.exc_info for record in caplog.records), caplog.text
