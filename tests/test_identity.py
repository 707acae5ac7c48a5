"""Verified identity: bearer JWTs, threads that belong to their user (--jwt-jwks-file)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from aguiadapter.config import Config, JwtSettings
from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.store.file.store import FileThreadStore
from aguiadapter.threads.record import thread_key
from tests.support.stops import assert_stopped
from tests.support.adapter import Reply, RunningAdapter, run_body, start_adapter
from tests.support.reattach import joined, read_then_cut, reattach
from tests.support.tokens import (
    AUDIENCE,
    ISSUER,
    SigningKey,
    b64url,
    bearer,
    hand_made_token,
    valid_claims,
    write_jwks,
)

CANCEL = "/extensions/iac-code/v1/executions/{}/cancel"


@pytest.fixture(params=["HS256", "ES256"])
def key(request: pytest.FixtureRequest) -> SigningKey:
    """The issuer's signing key: an oct secret (HS256) or a P-256 key (ES256)."""
    return SigningKey(request.param, kid=f"{request.param.lower()}-1")


@pytest.fixture
def jwks_file(tmp_path: Path, key: SigningKey) -> Path:
    path = tmp_path / "jwks.json"
    write_jwks(path, key)
    return path


def jwt_settings(jwks_file: Path) -> JwtSettings:
    # Checked on every request, so that a rotation test needs no waiting.
    return JwtSettings(jwks_file=jwks_file, issuer=ISSUER, audience=AUDIENCE, jwks_check_seconds=0)


async def start(tmp_path: Path, demo: DemoRuntime, jwks_file: Path | None, **config: Any) -> RunningAdapter:
    return await start_adapter(
        tmp_path / "state", demo.url, allowed_cwds=(str(tmp_path / "workspaces"),),
        jwt=None if jwks_file is None else jwt_settings(jwks_file), **config,
    )


@pytest.fixture
async def jwt_adapter(tmp_path: Path, demo: DemoRuntime, jwks_file: Path) -> AsyncIterator[RunningAdapter]:
    running = await start(tmp_path, demo, jwks_file)
    try:
        yield running
    finally:
        await running.close()


def resume_body(thread_id: str, cwd: Path, interrupt: dict[str, Any]) -> dict[str, Any]:
    body = run_body(thread_id=thread_id, text=None, cwd=str(cwd))
    body["resume"] = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "allow_once"}}]
    return body


def cancel_body(thread_id: str) -> dict[str, str]:
    return {"threadId": thread_id, "rosInvocationId": "invocation-1"}


def interrupted(reply: Reply) -> tuple[dict[str, Any], str]:
    """The run's one interrupt and its execution id."""
    events = reply.events()
    (interrupt,) = events[-1]["outcome"]["interrupts"]
    (session,) = [e["value"] for e in events if e.get("name") == "iac-code.session.v1"]
    return dict(interrupt), str(session["executionId"])


def code_of(reply: Reply) -> str:
    return str(reply.json()["error"]["code"])


async def stored(adapter: RunningAdapter, thread_id: str, principal: str | None = None) -> Any:
    return await FileThreadStore(adapter.config.state_dir).load(thread_key(thread_id, principal))


def state_file_of(adapter: RunningAdapter, thread_id: str, principal: str | None) -> Path:
    return FileThreadStore(adapter.config.state_dir).path_for(thread_key(thread_id, principal))


def state_files(adapter: RunningAdapter) -> bytes:
    return b"".join(path.read_bytes() for path in (adapter.config.state_dir / "threads").glob("*.json"))


# ------------------------------------------------------------ threads and users
async def test_each_user_has_their_own_thread_ids(
    jwt_adapter: RunningAdapter, demo: DemoRuntime, key: SigningKey, workspace: Path
) -> None:
    """The README's ``thread-1`` is everybody's first thread: taking it first takes nothing from anyone."""
    alice, bob = bearer(key.token("alice")), bearer(key.token("bob"))
    first = run_body(thread_id="thread-1", text="permission notes.txt", cwd=str(workspace), run_id="r1")
    interrupt, _ = interrupted(await jwt_adapter.run(first, alice))
    hers = state_file_of(jwt_adapter, "thread-1", "alice").read_bytes()
    own = await jwt_adapter.run(run_body(thread_id="thread-1", text="hello", cwd=str(workspace)), bob)
    assert own.events()[-1]["type"] == "RUN_FINISHED"
    assert (await stored(jwt_adapter, "thread-1", "bob")).principal == "bob"
    assert state_file_of(jwt_adapter, "thread-1", "alice").read_bytes() == hers, "alice's thread is as she left it"
    assert sum(demo.state.tool_runs.values()) == 0
    # Within her own namespace the protocol's binding holds: another cwd is a conflict.
    elsewhere = workspace.parent / "session-2"
    elsewhere.mkdir()
    moved = await jwt_adapter.run(resume_body("thread-1", elsewhere, interrupt), alice)
    assert moved.status == 409 and code_of(moved) == "THREAD_BINDING_CONFLICT"
    events = (await jwt_adapter.run(resume_body("thread-1", workspace, interrupt), alice)).events()
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"] == {"type": "success"}
    assert sum(demo.state.tool_runs.values()) == 1


def _made_up(interrupt: dict[str, Any]) -> dict[str, Any]:
    return {**interrupt, "id": "interrupt-made-up"}


#: (attack by bob, the request for a given thread id). Each runs on one of alice's
#: threads and on an id nobody used: the answers must be the same.
ATTACKS: list[tuple[str, Any]] = [
    ("new turn", lambda thread, ws, first, interrupt: run_body(thread_id=thread, text="mine now", cwd=ws)),
    ("resume of her interrupt", lambda thread, ws, first, interrupt: resume_body(thread, Path(ws), interrupt)),
    ("resume of a made-up interrupt",
     lambda thread, ws, first, interrupt: resume_body(thread, Path(ws), _made_up(interrupt))),
    ("her very request", lambda thread, ws, first, interrupt: {**first, "threadId": thread}),
    ("new turn in another cwd", lambda thread, ws, first, interrupt: run_body(thread_id=thread, text="x", cwd="/")),
]


def outcome_of(reply: Reply) -> tuple[int, str]:
    """Status and code (or the stream's last event type): what bob could tell apart."""
    if reply.status == 200:
        return 200, str(reply.events()[-1]["type"])
    return reply.status, code_of(reply)


@pytest.mark.parametrize(("attack", "make"), ATTACKS, ids=[row[0] for row in ATTACKS])
async def test_another_users_thread_answers_post_exactly_as_an_unknown_one(
    jwt_adapter: RunningAdapter, demo: DemoRuntime, key: SigningKey, workspace: Path, attack: str, make: Any
) -> None:
    alice, bob = bearer(key.token("alice")), bearer(key.token("bob"))
    first = run_body(thread_id="t-alice", text="permission notes.txt", cwd=str(workspace), run_id="r1")
    interrupt, execution_id = interrupted(await jwt_adapter.run(first, alice))
    hers = state_file_of(jwt_adapter, "t-alice", "alice").read_bytes()
    theirs = await jwt_adapter.run(make("t-alice", str(workspace), first, interrupt), bob)
    nothing = await jwt_adapter.run(make("t-never", str(workspace), first, interrupt), bob)
    assert outcome_of(theirs) == outcome_of(nothing), attack
    if theirs.status != 200:
        assert theirs.json() == nothing.json()
    assert state_file_of(jwt_adapter, "t-alice", "alice").read_bytes() == hers, "nothing of alice's changed on disk"
    assert sum(demo.state.tool_runs.values()) == 0
    cancelled = await jwt_adapter.post(CANCEL.format(execution_id), cancel_body("t-alice"), bob)
    unknown = await jwt_adapter.post(CANCEL.format("exec-unknown"), cancel_body("t-nobody"), bob)
    assert cancelled.status == unknown.status == 404
    assert cancelled.json() == unknown.json() and code_of(cancelled) == "EXECUTION_NOT_FOUND"
    assert state_file_of(jwt_adapter, "t-alice", "alice").read_bytes() == hers


async def test_alices_cancel_works_where_bobs_was_not_found(
    jwt_adapter: RunningAdapter, demo: DemoRuntime, key: SigningKey, workspace: Path
) -> None:
    alice, bob = bearer(key.token("alice")), bearer(key.token("bob"))
    body = run_body(thread_id="t-cancel", text="permission notes.txt", cwd=str(workspace))
    _, execution_id = interrupted(await jwt_adapter.run(body, alice))
    assert (await jwt_adapter.post(CANCEL.format(execution_id), cancel_body("t-cancel"), bob)).status == 404
    assert (await stored(jwt_adapter, "t-cancel", "alice")).state == "interrupted", "bob's cancel changed nothing"
    reply = await jwt_adapter.post(CANCEL.format(execution_id), cancel_body("t-cancel"), alice)
    assert reply.json() == {"executionId": execution_id, "status": "cancelled"}


async def test_alice_resumes_her_interrupt_after_a_restart(
    tmp_path: Path, demo: DemoRuntime, jwks_file: Path, key: SigningKey, workspace: Path
) -> None:
    first = await start(tmp_path, demo, jwks_file)
    try:
        body = run_body(thread_id="t-restart", text="permission notes.txt", cwd=str(workspace))
        interrupt, _ = interrupted(await first.run(body, bearer(key.token("alice"))))
    finally:
        await first.close()
    second = await start(tmp_path, demo, jwks_file)
    try:
        bob = await second.run(resume_body("t-restart", workspace, interrupt), bearer(key.token("bob")))
        unknown = await second.run(resume_body("t-never", workspace, interrupt), bearer(key.token("bob")))
        assert (bob.status, bob.json()) == (unknown.status, unknown.json())
        reply = await second.run(resume_body("t-restart", workspace, interrupt), bearer(key.token("alice")))
        assert reply.events()[-1]["outcome"] == {"type": "success"}
        assert sum(demo.state.tool_runs.values()) == 1
    finally:
        await second.close()


async def get(adapter: RunningAdapter, path: str, headers: dict[str, str]) -> Reply:
    async with adapter.session.get(adapter.url + path, headers=headers) as resp:
        return Reply(resp.status, dict(resp.headers), await resp.read())


async def test_another_users_thread_and_run_read_exactly_like_unknown_ones(
    jwt_adapter: RunningAdapter, key: SigningKey, workspace: Path
) -> None:
    alice, bob = bearer(key.token("alice")), bearer(key.token("bob"))
    body = run_body(thread_id="t-read", text="permission notes.txt", cwd=str(workspace), run_id="r1")
    first = await jwt_adapter.run(body, alice)
    interrupt, _ = interrupted(first)

    mine = await get(jwt_adapter, "threads/t-read", alice)
    assert mine.status == 200 and mine.json()["pendingInterrupts"] == [interrupt]
    replay = await get(jwt_adapter, "threads/t-read/runs/r1/events", alice)
    assert (replay.status, replay.body) == (200, first.body)

    # Bob: the status route and the re-attach route answer as for a thread that never was.
    for path, unknown in [("threads/t-read", "threads/t-never"),
                          ("threads/t-read/runs/r1/events", "threads/t-never/runs/r1/events"),
                          ("threads/t-read/runs/r1/events?after=2", "threads/t-never/runs/r1/events?after=2")]:
        theirs, nothing = await get(jwt_adapter, path, bob), await get(jwt_adapter, unknown, bob)
        assert theirs.status == nothing.status == 404, path
        assert theirs.json() == nothing.json() and code_of(theirs) == "THREAD_NOT_FOUND"
        assert theirs.headers["Content-Type"] == nothing.headers["Content-Type"]
    # Without a token, nothing is read either.
    for path in ("threads/t-read", "threads/t-read/runs/r1/events"):
        anonymous = await get(jwt_adapter, path, {})
        assert anonymous.status == 401 and code_of(anonymous) == "UNAUTHORIZED"
        assert anonymous.headers["WWW-Authenticate"].startswith("Bearer ")


async def test_another_user_cannot_keep_a_run_alive_by_re_attaching(
    tmp_path: Path, demo: DemoRuntime, jwks_file: Path, key: SigningKey, workspace: Path
) -> None:
    adapter = await start(tmp_path, demo, jwks_file, disconnect_grace_seconds=30.0)
    try:
        alice, bob = bearer(key.token("alice")), bearer(key.token("bob"))
        body = run_body(thread_id="t-live", text="slow 20", cwd=str(workspace))
        half = await read_then_cut(adapter.url, body, events=4, headers=alice)
        status, refused = await reattach(adapter.url, "t-live", body["runId"], half.last_id, headers=bob)
        assert status == 404 and json.loads(refused)["error"]["code"] == "THREAD_NOT_FOUND"
        assert (await get(adapter, "threads/t-live", bob)).status == 404
        # Alice picks her run up where her connection broke, and it is still hers to cancel.
        view = (await get(adapter, "threads/t-live", alice)).json()
        assert view["state"] == "running" and view["activeRunId"] == body["runId"]
        cancel = await adapter.post(CANCEL.format(view["executionId"]), cancel_body("t-live"), alice)
        assert cancel.json()["status"] == "cancelled"
        status, rest = await reattach(adapter.url, "t-live", body["runId"], half.last_id, headers=alice)
        events = joined(half, rest)
        assert status == 200
        assert_stopped(events)
    finally:
        await adapter.close()


async def test_a_body_user_id_must_be_the_verified_user(jwt_adapter: RunningAdapter, key: SigningKey, workspace: Path) -> None:
    alice = bearer(key.token("alice"))
    other = await jwt_adapter.run(run_body(thread_id="t-uid", text="hi", cwd=str(workspace), userId="bob"), alice)
    assert other.status == 400 and code_of(other) == "INVALID_INPUT"
    assert "forwardedProps.iacCode.userId" in other.json()["error"]["message"]
    assert await stored(jwt_adapter, "t-uid", "alice") is None
    same = await jwt_adapter.run(run_body(thread_id="t-uid", text="hi", cwd=str(workspace), userId="alice"), alice)
    assert same.status == 200
    absent = await jwt_adapter.run(run_body(thread_id="t-uid", text="again", cwd=str(workspace)), alice)
    assert absent.status == 200, "an absent userId is the principal, the thread's user"


async def test_a_thread_started_without_identity_is_not_taken_over_by_a_user(
    tmp_path: Path, demo: DemoRuntime, jwks_file: Path, key: SigningKey, workspace: Path
) -> None:
    shared = await start(tmp_path, demo, None, auth_token="shared-secret")
    try:
        body = run_body(thread_id="t-before", text="permission notes.txt", cwd=str(workspace), userId="alice")
        _, execution_id = interrupted(await shared.run(body, bearer("shared-secret")))
        before = state_file_of(shared, "t-before", None).read_bytes()
    finally:
        await shared.close()
    jwt_adapter = await start(tmp_path, demo, jwks_file)
    try:
        alice = bearer(key.token("alice"))
        reply = await jwt_adapter.run(run_body(thread_id="t-before", text="mine", cwd=str(workspace)), alice)
        assert reply.events()[-1]["type"] == "RUN_FINISHED", "alice's own t-before, a new thread"
        assert (await jwt_adapter.post(CANCEL.format(execution_id), cancel_body("t-before"), alice)).status == 404
        assert state_file_of(jwt_adapter, "t-before", None).read_bytes() == before
    finally:
        await jwt_adapter.close()


async def test_a_users_thread_made_before_per_user_ids_keeps_working(
    tmp_path: Path, demo: DemoRuntime, jwks_file: Path, key: SigningKey, workspace: Path
) -> None:
    """A record kept under its bare thread id (as before) stays its owner's, and nobody else's."""
    first = await start(tmp_path, demo, jwks_file)
    try:
        body = run_body(thread_id="t-old", text="permission notes.txt", cwd=str(workspace), run_id="r-old")
        interrupt, execution_id = interrupted(await first.run(body, bearer(key.token("alice"))))
    finally:
        await first.close()
    # Rewrite it as the previous version kept it: under the bare id, without the namespaced mark.
    files = FileThreadStore(tmp_path / "state")
    record = await files.load(thread_key("t-old", "alice"))
    record.namespaced = False
    await files.save(record)
    files.path_for(thread_key("t-old", "alice")).unlink()
    legacy = files.path_for("t-old")
    before = legacy.read_bytes()
    second = await start(tmp_path, demo, jwks_file)
    try:
        alice, bob = bearer(key.token("alice")), bearer(key.token("bob"))
        assert (await get(second, "threads/t-old", bob)).status == 404
        assert (await second.post(CANCEL.format(execution_id), cancel_body("t-old"), bob)).status == 404
        own = await second.run(run_body(thread_id="t-old", text="hello", cwd=str(workspace)), bob)
        assert own.events()[-1]["type"] == "RUN_FINISHED", "bob's own t-old"
        assert legacy.read_bytes() == before
        view = await get(second, "threads/t-old", alice)
        assert view.status == 200 and view.json()["pendingInterrupts"] == [interrupt]
        reply = await second.run(resume_body("t-old", workspace, interrupt), alice)
        assert reply.events()[-1]["outcome"] == {"type": "success"}
        assert (await files.load("t-old")).principal == "alice", "it stays where it was"
        assert not files.path_for(thread_key("t-old", "alice")).exists()
    finally:
        await second.close()


# ------------------------------------------------------------ refused tokens
def refused_tokens(key: SigningKey) -> dict[str, str | None]:
    """Every kind of token that must get 401 (``None``: no Authorization header at all)."""
    now = int(time.time())
    good = key.token("alice")
    head, body, signature = good.split(".")
    other = SigningKey(key.algorithm, kid=key.kid)  # same kid, a key the server does not know
    # Alg confusion: the server's public JWK (or its secret's JWK text) used as an HMAC secret.
    public_as_secret = json.dumps(key.jwk).encode()
    flipped = ("A" if signature[0] != "A" else "B") + signature[1:]
    return {
        "no header": None,
        "expired": key.token("alice", exp=now - 120, iat=now - 900),
        "not yet valid": key.token("alice", nbf=now + 600),
        "issued in the future": key.token("alice", iat=now + 600),
        "wrong audience": key.token("alice", aud="someone-else"),
        "no audience": key.token("alice", aud=None),
        "wrong issuer": key.token("alice", iss="https://evil.example/"),
        "no expiry": key.token("alice", exp=None),
        "no subject": key.token(None),
        "unknown key id": key.token("alice", headers={"kid": "nobody"}),
        "signed by another key": other.token("alice"),
        "tampered claims": f"{head}.{b64url(json.dumps(valid_claims('bob')).encode())}.{signature}",
        "tampered signature": f"{head}.{body}.{flipped}",
        "alg none": hand_made_token({"alg": "none", "typ": "JWT", "kid": key.kid}, valid_claims(), None),
        "alg none without kid": hand_made_token({"alg": "none", "typ": "JWT"}, valid_claims(), None),
        "public key as HMAC secret": hand_made_token(
            {"alg": "HS256", "typ": "JWT", "kid": key.kid}, valid_claims(), public_as_secret
        ),
        "not a JWT": "not-a-jwt",
    }


async def test_every_bad_token_is_401_with_a_challenge(
    jwt_adapter: RunningAdapter, key: SigningKey, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    tokens = refused_tokens(key)
    for name, token in tokens.items():
        headers = {} if token is None else bearer(token)
        body = run_body(thread_id=f"t-401-{len(name)}", text="hi", cwd=str(workspace))
        for reply in (
            await jwt_adapter.run(body, headers),
            await jwt_adapter.post(CANCEL.format("exec-1"), cancel_body("t-401"), headers),
        ):
            assert reply.status == 401, name
            assert code_of(reply) == "UNAUTHORIZED", name
            challenge = reply.headers["WWW-Authenticate"]
            assert challenge.startswith('Bearer realm="aguiadapter"'), name
            assert ('error="invalid_token"' in challenge) == (token is not None), name
    assert list((jwt_adapter.config.state_dir / "threads").glob("*.json")) == [], "no refused run left a record"
    reasons = {getattr(record, "fields", {}).get("reason") for record in caplog.records}
    assert {"expired", "not_yet_valid", "audience", "issuer", "unknown_key", "bad_signature"} <= reasons
    logged = caplog.text
    for token in filter(None, tokens.values()):
        signature = token.rsplit(".", 1)[-1]
        assert token not in logged and (not signature or signature not in logged)


async def test_an_expired_token_is_told_so_in_the_callers_language(
    jwt_adapter: RunningAdapter, key: SigningKey, workspace: Path
) -> None:
    token = key.token("alice", exp=int(time.time()) - 120)
    reply = await jwt_adapter.run(
        run_body(thread_id="t-exp", text="hi", cwd=str(workspace)), {**bearer(token), "Accept-Language": "zh-CN"}
    )
    assert reply.status == 401 and "过期" in reply.json()["error"]["message"]


async def test_small_clock_skew_is_tolerated(jwt_adapter: RunningAdapter, key: SigningKey, workspace: Path) -> None:
    now = int(time.time())
    token = key.token("alice", exp=now - 5, nbf=now + 5, iat=now + 5)
    reply = await jwt_adapter.run(run_body(thread_id="t-skew", text="hi", cwd=str(workspace)), bearer(token))
    assert reply.status == 200


async def test_the_token_is_kept_nowhere(
    jwt_adapter: RunningAdapter, key: SigningKey, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    token = key.token("alice")
    body = run_body(thread_id="t-secret", text="permission notes.txt", cwd=str(workspace))
    interrupted(await jwt_adapter.run(body, bearer(token)))
    signature = token.split(".")[-1]
    assert signature.encode() not in state_files(jwt_adapter)
    assert token not in caplog.text and signature not in caplog.text


# ------------------------------------------------------------ the JWKS file
async def test_a_rotated_jwks_file_is_picked_up_without_a_restart(
    jwt_adapter: RunningAdapter, key: SigningKey, jwks_file: Path, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def body() -> dict[str, Any]:
        return run_body(thread_id="t-rotate", text="hi", cwd=str(workspace))

    assert (await jwt_adapter.run(body(), bearer(key.token("alice")))).status == 200
    new = SigningKey("ES256", kid="es256-2")
    write_jwks(jwks_file, key, new)  # the new key is published first...
    assert (await jwt_adapter.run(body(), bearer(new.token("alice")))).status == 200
    assert (await jwt_adapter.run(body(), bearer(key.token("alice")))).status == 200
    write_jwks(jwks_file, new)  # ...then the old one is withdrawn
    assert (await jwt_adapter.run(body(), bearer(key.token("alice")))).status == 401
    assert (await jwt_adapter.run(body(), bearer(new.token("alice")))).status == 200

    caplog.set_level(logging.WARNING, logger="aguiadapter.web.jwks")
    jwks_file.write_text('{"keys": [')
    for _ in range(3):
        assert (await jwt_adapter.run(body(), bearer(new.token("alice")))).status == 200, "the last good keys stay"
    refusals = [r for r in caplog.records if "not used" in r.getMessage()]
    assert len(refusals) == 1, "a broken file is reported once"
    jwks_file.unlink()
    assert (await jwt_adapter.run(body(), bearer(new.token("alice")))).status == 200
    write_jwks(jwks_file, key)
    assert (await jwt_adapter.run(body(), bearer(key.token("alice")))).status == 200


async def test_unusable_keys_are_skipped_and_named(tmp_path: Path, demo: DemoRuntime, key: SigningKey,
                                                    workspace: Path, caplog: pytest.LogCaptureFixture) -> None:
    private = SigningKey("ES256", kid="leaked")
    private_jwk = {**private.jwk, "d": b64url(private.private.private_numbers().private_value.to_bytes(32, "big"))}
    path = tmp_path / "jwks.json"
    write_jwks(path, key, extra=[
        private_jwk,
        {"kty": "oct", "kid": "short", "k": b64url(b"too short")},
        {**SigningKey("ES256", kid="enc").jwk, "use": "enc"},
        {"kty": "unknown", "kid": "odd"},
        {"kty": "oct", "kid": "nothing", "alg": "none", "k": b64url(bytes(32))},
        {"kty": "EC", "kid": "garbled", "crv": "P-256", "x": "!!", "y": 7},
        {"kty": "RSA", "kid": "mislabelled", "alg": "HS256", "n": "AQAB", "e": "AQAB"},
    ])
    caplog.set_level(logging.WARNING, logger="aguiadapter.web.jwks")
    running = await start(tmp_path, demo, path)
    try:
        skipped = caplog.text
        for kid in ("leaked", "short", "enc", "odd", "nothing", "garbled", "mislabelled"):
            assert f"'{kid}'" in skipped
        assert private_jwk["d"] not in skipped
        assert (await running.run(run_body(thread_id="t-k", text="hi", cwd=str(workspace)),
                                  bearer(key.token("alice")))).status == 200
        assert (await running.run(run_body(thread_id="t-k2", text="hi", cwd=str(workspace)),
                                  bearer(private.token("alice")))).status == 401
    finally:
        await running.close()


async def test_weak_keys_are_refused_at_load_with_one_line_in_the_log_format(tmp_path: Path, key: SigningKey) -> None:
    from tests.test_cli import start_cli

    weak = {"rsa-1024": SigningKey("RS256", kid="rsa-1024", rsa_bits=1024),
            "secp256k1": SigningKey("ES256K", kid="secp256k1")}
    strong = SigningKey("RS256", kid="rsa-2048")
    path = tmp_path / "jwks.json"
    write_jwks(path, key, strong, *weak.values())
    process, url, banner = await start_cli(
        tmp_path, "--jwt-jwks-file", str(path), "--jwt-audience", AUDIENCE, "--log-format", "json",
        "--allowed-cwd", str(tmp_path),
    )
    try:
        async with aiohttp.ClientSession() as session:
            for signer, status in [(key, 200), (strong, 200), *((weak_key, 401) for weak_key in weak.values())]:
                body = run_body(thread_id=f"t-{signer.kid}", text="hi", cwd=str(tmp_path))
                async with session.post(url, json=body, headers=bearer(signer.token("alice"))) as resp:
                    assert resp.status == status, signer.kid
                    await resp.read()
    finally:
        process.send_signal(signal.SIGINT)
        output = "".join(banner) + (await process.communicate())[0].decode()
    logged = [line for line in output.splitlines() if line.startswith("{")]
    for kid in weak:
        (line,) = [line for line in logged if f"'{kid}'" in line]
        assert json.loads(line)["level"] == "WARNING" and "skipped" in line
    assert "Warning" not in output, "no raw PyJWT warning outside the log format"


# ------------------------------------------------------------ starting the server
def run_cli(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aguiadapter", "--demo", "--port", "0", "--state-dir", str(tmp_path / "state"), *args],
        env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=60, check=False,
    )


async def test_a_shared_token_and_a_jwks_file_together_stop_the_start(tmp_path: Path, jwks_file: Path) -> None:
    done = await asyncio.to_thread(
        run_cli, tmp_path, "--jwt-jwks-file", str(jwks_file), env={"IAC_CODE_AGUI_AUTH_TOKEN": "t0ken"}
    )
    assert done.returncode == 2
    assert "IAC_CODE_AGUI_AUTH_TOKEN" in done.stderr and "exclude each other" in done.stderr
    assert "t0ken" not in done.stderr + done.stdout


async def test_an_unusable_jwks_file_stops_the_start(tmp_path: Path) -> None:
    missing = await asyncio.to_thread(
        run_cli, tmp_path, "--jwt-jwks-file", str(tmp_path / "nope.json"), "--jwt-audience", AUDIENCE
    )
    assert missing.returncode == 2 and "cannot start: JWKS file" in missing.stderr
    empty = tmp_path / "empty.json"
    empty.write_text('{"keys": []}')
    env = {"IAC_CODE_AGUI_JWT_JWKS_FILE": str(empty), "IAC_CODE_AGUI_JWT_AUDIENCE": AUDIENCE}
    refused = await asyncio.to_thread(run_cli, tmp_path, env=env)
    assert refused.returncode == 2 and "no usable key" in refused.stderr


async def test_jwt_mode_without_an_audience_stops_the_start(tmp_path: Path, jwks_file: Path) -> None:
    """A token minted for another service must never open this one: no audience, no start."""
    for audience in ([], ["--jwt-audience", ""], ["--jwt-audience", "  "]):
        done = await asyncio.to_thread(run_cli, tmp_path, "--jwt-jwks-file", str(jwks_file), *audience)
        assert done.returncode == 2, audience
        assert "--jwt-audience" in done.stderr and "IAC_CODE_AGUI_JWT_AUDIENCE" in done.stderr
    with pytest.raises(ValueError, match="audience"):
        Config(state_dir=tmp_path, jwt=JwtSettings(jwks_file=jwks_file, issuer=ISSUER))


async def test_a_token_for_another_audience_is_refused_and_the_configured_one_accepted(
    jwt_adapter: RunningAdapter, key: SigningKey, workspace: Path
) -> None:
    state = state_files(jwt_adapter)
    for aud, status in [
        ("some-other-service", 401), (["some-other-service", "another"], 401), (None, 401),
        ("", 401), (AUDIENCE, 200), (["some-other-service", AUDIENCE], 200),
    ]:
        thread = f"t-aud-{status}-{aud!r}".replace(" ", "")
        token = key.token("alice", aud=aud)  # None: no aud claim at all
        reply = await jwt_adapter.run(run_body(thread_id=thread, text="hi", cwd=str(workspace)), bearer(token))
        assert reply.status == status, aud
        if status == 401:
            assert code_of(reply) == "UNAUTHORIZED"
            assert state_files(jwt_adapter) == state, "a refused token leaves nothing on disk"
        state = state_files(jwt_adapter)


async def test_the_shared_token_mode_answers_401_with_the_same_challenge(
    tmp_path: Path, demo: DemoRuntime, workspace: Path
) -> None:
    shared = await start(tmp_path, demo, None, auth_token="shared-secret")
    try:
        body = run_body(thread_id="t-shared", text="hi", cwd=str(workspace))
        missing, wrong = await shared.run(body), await shared.run(body, bearer("guess"))
        assert missing.status == wrong.status == 401
        assert missing.headers["WWW-Authenticate"] == 'Bearer realm="aguiadapter"'
        assert wrong.headers["WWW-Authenticate"] == 'Bearer realm="aguiadapter", error="invalid_token"'
        assert (await shared.run(body, bearer("shared-secret"))).status == 200
    finally:
        await shared.close()


async def test_an_unreadable_thread_file_is_unknown_to_other_users(
    jwt_adapter: RunningAdapter, key: SigningKey, workspace: Path
) -> None:
    alice, bob = bearer(key.token("alice")), bearer(key.token("bob"))
    body = run_body(thread_id="t-broken", text="permission notes.txt", cwd=str(workspace))
    interrupt, _ = interrupted(await jwt_adapter.run(body, alice))
    state_file_of(jwt_adapter, "t-broken", "alice").write_text("{ not json")
    # The same damage under a bare id (a record of an earlier version, or of the shared token).
    state_file_of(jwt_adapter, "t-bare", None).write_text("{ not json")
    for thread in ("t-broken", "t-bare"):
        for path in (f"threads/{thread}", f"threads/{thread}/runs/r1/events"):
            theirs, nothing = await get(jwt_adapter, path, bob), await get(jwt_adapter, path.replace(thread, "t-never"), bob)
            assert (theirs.status, theirs.json()) == (nothing.status, nothing.json()), path
        theirs = await jwt_adapter.run(resume_body(thread, workspace, interrupt), bob)
        nothing = await jwt_adapter.run(resume_body("t-never", workspace, interrupt), bob)
        assert (theirs.status, theirs.json()) == (nothing.status, nothing.json())
    mine = await get(jwt_adapter, "threads/t-broken", alice)
    assert mine.status == 409 and code_of(mine) == "EXECUTION_LOST", "its owner is told what happened"
