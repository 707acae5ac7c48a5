"""One key space per identity mode, and no read of another user's record.

A verified user's thread ``z`` is kept under ``u/<sha256(alice)[:32]>/z``.
A caller of the shared-token (or open) mode names threads by their bare id:
such an id that spells alice's key must be a thread of the shared namespace,
not hers (else a token holder learns which ids she has, 409 against 200, and
takes them first). And no route may read her record to answer someone who
names it, even to answer 404: how long reading and parsing it takes would tell
that it exists.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from aguiadapter.config import JwtSettings
from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.store.file.store import FileThreadStore
from aguiadapter.threads.record import ThreadRecord, thread_key
from aguiadapter.web.keys import SERVICE
from tests.support.adapter import Reply, RunningAdapter, run_body, start_adapter
from tests.support.tokens import AUDIENCE, ISSUER, SigningKey, bearer, write_jwks

CANCEL = "/extensions/iac-code/v1/executions/{}/cancel"
TOKEN = bearer("shared-secret")


def key_of(principal: str, thread_id: str) -> str:
    """The key a verified user's thread is kept under, as an attacker spells it."""
    return f"u/{hashlib.sha256(principal.encode()).hexdigest()[:32]}/{thread_id}"


@pytest.fixture
def signer(tmp_path: Path) -> SigningKey:
    key = SigningKey("HS256", kid="hs256-1")
    write_jwks(tmp_path / "jwks.json", key)
    return key


async def start(tmp_path: Path, demo: DemoRuntime, mode: str) -> RunningAdapter:
    jwt = JwtSettings(jwks_file=tmp_path / "jwks.json", issuer=ISSUER, audience=AUDIENCE, jwks_check_seconds=0)
    return await start_adapter(
        tmp_path / "state", demo.url, allowed_cwds=(str(tmp_path / "workspaces"),),
        **({"jwt": jwt} if mode == "jwt" else {"auth_token": "shared-secret"} if mode == "token" else {}),
    )


def interrupted(reply: Reply) -> tuple[dict[str, Any], str]:
    events = reply.events()
    (interrupt,) = events[-1]["outcome"]["interrupts"]
    (session,) = [e["value"] for e in events if e.get("name") == "iac-code.session.v1"]
    return dict(interrupt), str(session["executionId"])


def resume_body(thread_id: str, cwd: Path, interrupt: dict[str, Any]) -> dict[str, Any]:
    body = run_body(thread_id=thread_id, text=None, cwd=str(cwd))
    body["resume"] = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "allow_once"}}]
    return body


def file_of(tmp_path: Path, key: str) -> Path:
    return FileThreadStore(tmp_path / "state").path_for(key)


async def test_a_bare_id_spelling_a_users_key_is_a_thread_of_the_shared_namespace(
    tmp_path: Path, demo: DemoRuntime, signer: SigningKey, workspace: Path
) -> None:
    """On one store: the token holder neither sees alice's ``z`` nor takes her ``y`` first."""
    alice = bearer(signer.token("alice"))
    first = await start(tmp_path, demo, "jwt")
    try:
        body = run_body(thread_id="z", text="permission notes.txt", cwd=str(workspace))
        interrupt, _ = interrupted(await first.run(body, alice))
    finally:
        await first.close()
    hers = file_of(tmp_path, key_of("alice", "z")).read_bytes()

    shared = await start(tmp_path, demo, "token")
    try:
        probe = await shared.run(run_body(thread_id=key_of("alice", "z"), text="hello", cwd=str(workspace)), TOKEN)
        assert probe.status == 200 and probe.events()[-1]["type"] == "RUN_FINISHED", probe.body[:300]
        squat = await shared.run(run_body(thread_id=key_of("alice", "y"), text="hello", cwd=str(workspace)), TOKEN)
        assert squat.status == 200 and squat.events()[-1]["type"] == "RUN_FINISHED"
        # The shared namespace's own thread of that id is read back as such.
        view = await shared.get(f"threads/{quote(key_of('alice', 'z'), safe='')}", TOKEN)
        assert view.status == 200 and view.json()["state"] == "idle", view.body
    finally:
        await shared.close()
    assert file_of(tmp_path, key_of("alice", "z")).read_bytes() == hers, "alice's thread is as she left it"
    assert not file_of(tmp_path, key_of("alice", "y")).exists()

    second = await start(tmp_path, demo, "jwt")
    try:
        mine = await second.run(run_body(thread_id="y", text="hello", cwd=str(workspace)), alice)
        assert mine.status == 200 and mine.events()[-1]["type"] == "RUN_FINISHED", "nobody took y first"
        done = await second.run(resume_body("z", workspace, interrupt), alice)
        assert done.events()[-1]["outcome"] == {"type": "success"}
        assert sum(demo.state.tool_runs.values()) == 1
    finally:
        await second.close()


async def test_open_threads_made_before_keep_their_place(tmp_path: Path, demo: DemoRuntime, workspace: Path) -> None:
    """An upgrade loses no pending interrupt: a plain id, an ``o/`` id kept under itself and a ``u/`` id
    that is no user's key all resume."""
    # As the previous version kept them: every open thread under its bare id.
    first = await start(tmp_path, demo, "open")
    interrupts = {}
    try:
        for thread_id in ("t-1", "t-2", "u/t-3"):
            reply = await first.run(run_body(thread_id=thread_id, text="permission a.txt", cwd=str(workspace)))
            interrupts[thread_id] = interrupted(reply)[0]
    finally:
        await first.close()
    # An id beginning with "o/" was its own key too: give t-2 such an id, where it would have been kept.
    files = FileThreadStore(tmp_path / "state")
    record = await files.load("t-2")
    assert record is not None
    record.thread_id = "o/t-2"
    await files.save(record)
    files.path_for("t-2").unlink()
    interrupts["o/t-2"] = interrupts.pop("t-2")
    assert files.path_for("o/t-2").exists() and thread_key("o/t-2", None) != "o/t-2"
    assert thread_key("u/t-3", None) == "u/t-3", "an id that is no user's key keeps its key"

    second = await start(tmp_path, demo, "open")
    try:
        for thread_id in ("t-1", "o/t-2", "u/t-3"):
            view = await second.get(f"threads/{quote(thread_id, safe='')}")
            assert view.status == 200 and view.json()["pendingInterrupts"] == [interrupts[thread_id]]
            done = await second.run(resume_body(thread_id, workspace, interrupts[thread_id]))
            assert done.events()[-1]["outcome"] == {"type": "success"}, (thread_id, done.body[-300:])
        assert sum(demo.state.tool_runs.values()) == 3
        loaded = await files.load("o/t-2")
        assert loaded is not None and loaded.thread_id == "o/t-2", "it stays where it was"
    finally:
        await second.close()


class LoadSpy:
    """Every key the adapter's store is asked to read (the store answers as always)."""

    def __init__(self, adapter: RunningAdapter) -> None:
        service = adapter.app.get(SERVICE)
        assert service is not None
        self.store = service.store
        self.real = self.store.load
        self.real_owned = self.store.load_owned
        self.keys: list[str] = []

    async def load(self, key: str) -> ThreadRecord | None:
        self.keys.append(key)
        return await self.real(key)

    async def load_owned(self, key: str, principal: str | None) -> ThreadRecord | None:
        self.keys.append(key)
        return await self.real_owned(key, principal)

    def __enter__(self) -> LoadSpy:
        self.store.load = self.load  # type: ignore[method-assign]
        self.store.load_owned = self.load_owned  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        self.store.load = self.real  # type: ignore[method-assign]
        self.store.load_owned = self.real_owned  # type: ignore[method-assign]


def every_route(thread_id: str, execution_id: str) -> Iterator[tuple[str, str, Any]]:
    """(method, path, body) of each route that names a thread."""
    quoted = quote(thread_id, safe="")
    yield "GET", f"threads/{quoted}", None
    yield "GET", f"threads/{quoted}/messages", None
    yield "GET", f"threads/{quoted}/runs/r1/events", None
    yield "POST", "connect", {"threadId": thread_id}
    yield "POST", CANCEL.format(execution_id), {"threadId": thread_id, "rosInvocationId": "invocation-1"}


async def answers(adapter: RunningAdapter, thread_id: str, execution_id: str,
                  headers: dict[str, str]) -> list[tuple[int, bytes]]:
    replies = []
    for method, path, body in every_route(thread_id, execution_id):
        reply = await (adapter.get(path, headers) if method == "GET" else adapter.post(path, body, headers))
        replies.append((reply.status, reply.body))
    return replies


@pytest.mark.parametrize("caller", ["bob", "shared token"])
async def test_naming_another_users_key_reads_nothing_of_theirs(
    tmp_path: Path, demo: DemoRuntime, signer: SigningKey, workspace: Path, caller: str
) -> None:
    """Every thread route answers as for an unknown id, without loading alice's record."""
    alice = bearer(signer.token("alice"))
    first = await start(tmp_path, demo, "jwt")
    try:
        body = run_body(thread_id="z", text="permission notes.txt", cwd=str(workspace), run_id="r1")
        _, execution_id = interrupted(await first.run(body, alice))
    finally:
        await first.close()
    adapter = await start(tmp_path, demo, "jwt" if caller == "bob" else "token")
    try:
        headers = bearer(signer.token("bob")) if caller == "bob" else TOKEN
        with LoadSpy(adapter) as spy:
            theirs = await answers(adapter, key_of("alice", "z"), execution_id, headers)
            nothing = await answers(adapter, key_of("alice", "never"), execution_id, headers)
            run = await adapter.run(resume_body(key_of("alice", "z"), workspace, {"id": "i-1"}), headers)
            unknown = await adapter.run(resume_body(key_of("alice", "never"), workspace, {"id": "i-1"}), headers)
        assert theirs == nothing
        assert all(status == 404 for status, _ in theirs), theirs
        assert (run.status, run.json()) == (unknown.status, unknown.json())
        assert spy.keys, "the routes did read the caller's own keys"
        assert key_of("alice", "z") not in spy.keys, spy.keys
    finally:
        await adapter.close()


async def test_another_users_record_from_before_per_user_keys_is_never_parsed_for_a_caller(
    tmp_path: Path, demo: DemoRuntime, signer: SigningKey, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A JWT user's record an earlier version kept under its bare id is read
    for its owner only: naming its id costs another user what an unknown id
    costs (no parse), and every route answers alike."""
    alice = bearer(signer.token("alice"))
    first = await start(tmp_path, demo, "jwt")
    try:
        body = run_body(thread_id="t-old", text="permission notes.txt", cwd=str(workspace), run_id="r-old")
        interrupt, execution_id = interrupted(await first.run(body, alice))
    finally:
        await first.close()
    # As the previous version kept it: under the bare id, without the namespaced mark.
    files = FileThreadStore(tmp_path / "state")
    record = await files.load(thread_key("t-old", "alice"))
    assert record is not None
    record.namespaced = False
    await files.save(record)
    files.path_for(thread_key("t-old", "alice")).unlink()

    import aguiadapter.store.contract as contract

    parsed: list[bytes] = []
    real_parse = contract.record_from_json

    def counting(data: bytes) -> ThreadRecord:
        parsed.append(data)
        return real_parse(data)

    monkeypatch.setattr(contract, "record_from_json", counting)
    adapter = await start(tmp_path, demo, "jwt")
    try:
        bob = bearer(signer.token("bob"))
        theirs = await answers(adapter, "t-old", execution_id, bob)
        nothing = await answers(adapter, "t-never", execution_id, bob)
        assert theirs == nothing and all(status == 404 for status, _ in theirs), theirs
        assert not [data for data in parsed if b'"t-old"' in data], "alice's record was parsed for bob"
        # Its owner still has it, pending interrupt included.
        view = await adapter.get("threads/t-old", alice)
        assert view.status == 200 and view.json()["pendingInterrupts"] == [interrupt]
    finally:
        await adapter.close()
