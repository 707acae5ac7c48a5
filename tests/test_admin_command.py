"""``python -m aguiadapter threads ...`` against the file store, as an operator runs it.

The adapter runs in the test process (a real app on a loopback socket, in
front of the demo runtime, a real A2A server); the command runs as its own
process, with the same settings, as an operator would type it. The file store
belongs to one process: while an app that serves no control socket (an
embedding, as here) holds its folder the command lists and shows, and
refuses to change anything; once the server is stopped it cancels (the
runtime's task too) and deletes. With ``python -m aguiadapter``, which
serves one, see test_admin_control.py.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest

from aguiadapter.cli import main
from aguiadapter.config import JwtSettings
from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.store.file.store import FileThreadStore
from aguiadapter.threads.listing import list_owner
from aguiadapter.threads.record import ThreadRecord, ThreadState
from aguiadapter.store.contract import Claim
from tests.support.adapter import RunningAdapter, run_body, start_adapter
from tests.support.tokens import AUDIENCE, ISSUER, SigningKey, bearer, write_jwks

REPO = Path(__file__).resolve().parents[1]


@attrs.frozen
class Outcome:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


async def threads(*args: str, env: dict[str, str] | None = None) -> Outcome:
    """Run ``python -m aguiadapter threads ARGS`` and wait for it."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aguiadapter", "threads", *args, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return Outcome(process.returncode, out.decode(), err.decode())


async def ask_permission(adapter: RunningAdapter, thread_id: str, cwd: Path,
                         headers: dict[str, str] | None = None) -> dict[str, Any]:
    """A run that ends waiting for a permission: its interrupt and session event."""
    reply = await adapter.run(run_body(thread_id=thread_id, text="permission notes.txt", cwd=str(cwd)), headers)
    events = reply.events()
    (interrupt,) = events[-1]["outcome"]["interrupts"]
    (session,) = [e["value"] for e in events if e.get("name") == "iac-code.session.v1"]
    return {"interrupt": interrupt, "session": session}


async def test_list_and_show_while_the_server_runs_then_cancel_and_delete_once_it_stopped(
    tmp_path: Path, demo: DemoRuntime, workspace: Path,
) -> None:
    state = tmp_path / "state"
    adapter = await start_adapter(state, demo.url, allowed_cwds=(str(tmp_path / "workspaces"),))
    settings = ("--state-dir", str(state))
    try:
        asked = await ask_permission(adapter, "t-stuck", workspace)
        await adapter.run(run_body(thread_id="t-done", text="hello", cwd=str(workspace)))
        task_id = asked["session"]["taskId"]

        listed = await threads("list", *settings, "--json")
        assert listed.code == 0, listed.err
        rows = {row["threadId"]: row for row in listed.json()["threads"]}
        assert rows["t-stuck"]["state"] == "interrupted" and rows["t-stuck"]["pendingInterrupts"] == 1
        assert rows["t-done"]["state"] == "idle" and listed.json()["more"] is False
        only = await threads("list", *settings, "--state", "interrupted")
        assert only.code == 0 and "t-stuck" in only.out and "t-done" not in only.out, only.out
        assert only.out.splitlines()[0].split()[:3] == ["THREAD", "STATE", "UPDATED"]
        old = await threads("list", *settings, "--older-than", "1h", "--json")
        assert old.json() == {"threads": [], "more": False}, "both threads changed seconds ago"

        shown = await threads("show", "t-stuck", *settings, "--json")
        assert shown.code == 0, shown.err
        view = shown.json()
        assert view["state"] == "interrupted" and view["runtime"]["taskId"] == task_id
        assert view["runtime"]["contextId"] == asked["session"]["contextId"]
        assert [item["id"] for item in view["pendingInterrupts"]] == [asked["interrupt"]["id"]]
        assert view["pendingInterrupts"][0]["reason"] == asked["interrupt"]["reason"]
        human = await threads("show", "t-stuck", *settings)
        assert asked["interrupt"]["id"] in human.out and task_id in human.out

        # The server owns the folder: nothing is changed behind its back.
        refused = await threads("cancel", "t-stuck", *settings, "--a2a-url", demo.url)
        assert refused.code == 1 and "holds the state folder" in refused.err and refused.out == ""
        assert len(refused.err.strip().splitlines()) == 1
        assert (await threads("delete", "t-done", *settings)).code == 1
        assert demo.state.cancel_calls == {}
        still = await adapter.get("/threads/t-stuck")
        assert still.json()["state"] == "interrupted"
    finally:
        await adapter.close()

    # Stopped: a delete of a thread that waits for answers is refused, a cancel ends it and its task.
    waiting = await threads("delete", "t-stuck", *settings)
    assert waiting.code == 1 and "cancel it first" in waiting.err, waiting.err
    cancelled = await threads("cancel", "t-stuck", *settings, "--a2a-url", demo.url, "--json")
    assert cancelled.code == 0, cancelled.err
    assert cancelled.json()["outcome"] == "cancelled" and cancelled.json()["state"] == "terminal"
    assert cancelled.json()["runtimeTask"] == {"taskId": task_id, "state": "TASK_STATE_CANCELED", "note": None}
    assert demo.state.cancel_calls[task_id] == 1
    again = await threads("cancel", "t-stuck", *settings, "--json")
    assert again.code == 0 and again.json()["outcome"] == "nothing"

    deleted = await threads("delete", "t-stuck", *settings)
    assert deleted.code == 0, deleted.err
    assert "deleted thread t-stuck" in deleted.out and asked["session"]["sessionId"] in deleted.out
    assert "the runtime keeps" in deleted.out
    gone = await threads("show", "t-stuck", *settings)
    assert gone.code == 1 and "no thread 't-stuck'" in gone.err
    assert (await threads("delete", "t-stuck", *settings)).code == 1

    # A server started again on the folder knows nothing of it; the other thread stays.
    adapter = await start_adapter(state, demo.url, allowed_cwds=(str(tmp_path / "workspaces"),))
    try:
        assert (await adapter.get("/threads/t-stuck")).status == 404
        assert (await adapter.get("/threads/t-done")).json()["state"] == "idle"
        listing = (await adapter.get("/threads")).json()
        assert [item["threadId"] for item in listing["threads"]] == ["t-done"]
        fresh = await adapter.run(run_body(thread_id="t-stuck", text="hello", cwd=str(workspace)))
        assert fresh.events()[-1]["type"] == "RUN_FINISHED", "the id starts a new thread"
    finally:
        await adapter.close()


async def test_a_verified_users_threads_are_found_by_the_principal_the_identity_provider_names(
    tmp_path: Path, demo: DemoRuntime, workspace: Path,
) -> None:
    key = SigningKey("ES256", kid="es-1")
    jwks = tmp_path / "jwks.json"
    write_jwks(jwks, key)
    jwt = JwtSettings(jwks_file=jwks, issuer=ISSUER, audience=AUDIENCE, jwks_check_seconds=0)
    state = tmp_path / "state"
    adapter = await start_adapter(state, demo.url, allowed_cwds=(str(tmp_path / "workspaces"),), jwt=jwt)
    alice, bob = "alice@example.com", "bob@example.com"
    try:
        await ask_permission(adapter, "thread-1", workspace, bearer(key.token(alice)))
        await adapter.run(run_body(thread_id="thread-1", text="hello", cwd=str(workspace)), bearer(key.token(bob)))
    finally:
        await adapter.close()
    settings = ("--state-dir", str(state))
    hashed = hashlib.sha256(alice.encode()).hexdigest()[:32]

    hers = await threads("list", "--user", alice, *settings, "--json")
    assert hers.code == 0, hers.err
    (row,) = hers.json()["threads"]
    assert row["threadId"] == "thread-1" and row["key"] == f"u/{hashed}/thread-1" and row["state"] == "interrupted"
    everyone = await threads("list", *settings, "--json")
    assert sorted(item["state"] for item in everyone.json()["threads"]) == ["idle", "interrupted"]
    assert (await threads("list", "--user", "carol@example.com", *settings, "--json")).json()["threads"] == []
    assert (await threads("list", "--user", alice, "--older-than", "1h", *settings, "--json")).json()["threads"] == []
    aged = await threads("list", "--user", alice, "--older-than", "0s", "--state", "interrupted", *settings, "--json")
    assert [item["key"] for item in aged.json()["threads"]] == [row["key"]]

    shown = await threads("show", "thread-1", "--user", alice, *settings, "--json")
    assert shown.code == 0 and shown.json()["principal"] == alice and shown.json()["state"] == "interrupted"
    by_key = await threads("show", f"u/{hashed}/thread-1", *settings, "--json")
    assert by_key.json() == shown.json(), "the key list shows finds the same thread"
    bare = await threads("show", "thread-1", *settings)
    assert bare.code == 1 and "no thread 'thread-1'" in bare.err, "no thread is kept under the bare id"

    # Bob's thread-1 is another thread: deleting it leaves alice's alone.
    assert (await threads("delete", "thread-1", "--user", bob, *settings)).code == 0
    assert (await threads("show", "thread-1", "--user", bob, *settings)).code == 1
    assert (await threads("show", "thread-1", "--user", alice, *settings)).code == 0


def test_usage_errors_are_one_line_with_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = logging.getLogger()  # the command sets up logging as the server does: undone after the test
    monkeypatch.setattr(root, "handlers", list(root.handlers))
    monkeypatch.setattr(root, "level", root.level)

    def threads_here(*args: str) -> Outcome:
        code = main(["threads", *args])
        out, err = capsys.readouterr()
        return Outcome(code, out, err)

    for args in (["frob"], ["list", "--older-than", "soon"], ["show"], ["list", "--state", "stuck"],
                 ["list", "--limit", "0"]):
        outcome = threads_here(*args, "--state-dir", str(tmp_path))
        assert outcome.code == 2, (args, outcome)
        assert len(outcome.err.strip().splitlines()) == 1 and outcome.out == "", (args, outcome.err)
    missing = threads_here("list", "--state-dir", str(tmp_path / "mistyped"))
    assert missing.code == 1 and "no state folder" in missing.err and not (tmp_path / "mistyped").exists()
    unreachable = threads_here("list", "--store", "redis://127.0.0.1:1/0", "--json")
    assert unreachable.code == 1 and len(unreachable.err.strip().splitlines()) == 1, unreachable.err
    assert json.loads(unreachable.out)["error"]["code"] == "unavailable"
    helped = threads_here("delete", "--help")
    text = helped.out
    assert helped.code == 0 and "--wait" in text and "--store" in text and "IAC_CODE_AGUI_STORE" in text
    monkeypatch.setenv("IAC_CODE_AGUI_LOG_LEVEL", "LOUD")
    bad_env = threads_here("list", "--state-dir", str(tmp_path))
    assert bad_env.code == 2 and "IAC_CODE_AGUI_LOG_LEVEL" in bad_env.err and len(bad_env.err.splitlines()) == 1


async def test_the_servers_help_points_to_the_command() -> None:
    helped = await threads("--help")
    assert helped.code == 0 and all(action in helped.out for action in ("list", "show", "cancel", "delete"))
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aguiadapter", "--help", cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await server.communicate()
    assert "aguiadapter threads --help" in out.decode()


async def test_the_file_store_deletes_a_thread_only_while_its_claim_holds(tmp_path: Path) -> None:
    store = FileThreadStore(tmp_path / "state", retention_days=0)
    await store.start()
    try:
        kept = ThreadRecord(thread_id="t-kept", context_id="ctx-1", cwd="/tmp")
        gone = ThreadRecord(thread_id="t-gone", context_id="ctx-2", cwd="/tmp", state=ThreadState.TERMINAL)
        for each in (kept, gone):
            await store.save(each)
        await store.set_deadline("t-gone", 4_000_000_000.0)
        assert [s.thread_id for s in (await store.list_threads(list_owner(None, None), None, 10)).threads] == [
            "t-gone", "t-kept"]
        claim = await store.claim("t-gone", "admin")
        assert claim is not None
        assert await store.delete_thread(gone, Claim("t-gone", "admin", claim.token + 1)) is False
        assert await store.load("t-gone") is not None
        assert await store.delete_thread(gone, claim) is True
        await store.release(claim)
        assert await store.load("t-gone") is None and await store.deadlines() == {}
        listed = await store.list_threads(list_owner(None, None), None, 10)
        assert [summary.thread_id for summary in listed.threads] == ["t-kept"]
        assert [summary.thread_id async for summary in store.each_summary()] == ["t-kept"]
        assert [path.name for path in (tmp_path / "state" / "index").rglob("*") if path.is_file()] == [
            store.path_for("t-kept").name.removesuffix(".json") + ".mark"]
    finally:
        await store.close()
