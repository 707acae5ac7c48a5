"""What a host application gets when it embeds the adapter: its own users
(cookie sessions here) own their threads, paths follow the mount point,
GET / points the way, and the example stops like the standalone server."""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import signal
import sys
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from aguiadapter import PRINCIPAL_KEY, Config, create_app, principal_from_request_key
from aguiadapter.demo.runtime import DemoRuntime
from tests.support.stops import assert_stopped
from tests.support.adapter import run_body
from tests.support.agui import check_stream, texts
from tests.support.serve import on_loopback
from tests.support.reading import read_until

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "embed_in_aiohttp.py"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def cookie_host(config: Config, *, by_key: bool) -> web.Application:
    """A host app with its own sign-in and cookie sessions; the adapter under /agui/."""
    sessions: dict[str, str] = {}

    async def sign_in(request: web.Request) -> web.Response:
        sid = secrets.token_urlsafe(16)
        sessions[sid] = request.match_info["user"]
        response = web.Response(text="signed in")
        response.set_cookie("sid", sid, httponly=True)
        return response

    @web.middleware
    async def session_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        user = sessions.get(request.cookies.get("sid", ""))
        if user is not None:
            request[PRINCIPAL_KEY] = user
        return await handler(request)

    async def from_session(request: web.Request) -> str | None:
        return sessions.get(request.cookies.get("sid", ""))

    host = web.Application(middlewares=[session_middleware])
    host.router.add_get("/sign-in/{user}", sign_in)
    hook = principal_from_request_key if by_key else from_session
    host.add_subapp("/agui/", create_app(config, principal=hook))
    return host


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await on_loopback(runner)
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


@pytest.fixture(params=["request key", "coroutine"])
async def host(request: pytest.FixtureRequest, tmp_path: Path, demo: DemoRuntime) -> AsyncIterator[str]:
    config = Config(state_dir=tmp_path / "state", a2a_url=demo.url, allowed_cwds=(str(tmp_path),),
                    max_active_runs_per_user=1, metrics=True)
    runner, base = await serve(cookie_host(config, by_key=request.param == "request key"))
    try:
        yield base
    finally:
        await runner.cleanup()


async def signed_in(base: str, user: str) -> aiohttp.ClientSession:
    session = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
    async with session.get(f"{base}/sign-in/{user}") as resp:
        assert resp.status == 200
    return session


async def test_the_hosts_signed_in_user_owns_the_threads_they_start(host: str, tmp_path: Path) -> None:
    alice, bob, nobody = await signed_in(host, "alice"), await signed_in(host, "bob"), aiohttp.ClientSession()
    try:
        body = run_body(thread_id="alices-thread", text="hello from alice", cwd=str(tmp_path))
        async with alice.post(f"{host}/agui/", json=body) as resp:
            events = check_stream(await resp.read())
        assert "hello from alice" in texts(events)
        async with nobody.post(f"{host}/agui/", json=body) as resp:
            assert resp.status == 401 and (await resp.json())["error"]["code"] == "UNAUTHORIZED"
        async with alice.get(f"{host}/agui/threads/alices-thread") as resp:
            assert resp.status == 200
        # Another user's thread reads as an unknown one.
        async with bob.get(f"{host}/agui/threads/alices-thread") as resp:
            theirs = (resp.status, (await resp.json())["error"]["code"])
        async with bob.get(f"{host}/agui/threads/no-such-thread") as resp:
            unknown = (resp.status, (await resp.json())["error"]["code"])
        assert theirs == unknown == (404, "THREAD_NOT_FOUND")
        # The runtime is told who the user is.
        again = run_body(thread_id="alices-thread", run_id="run-2", text="and again", cwd=str(tmp_path))
        again["forwardedProps"]["iacCode"]["userId"] = "bob"
        async with alice.post(f"{host}/agui/", json=again) as resp:
            assert resp.status == 400 and (await resp.json())["error"]["code"] == "INVALID_INPUT"
    finally:
        for session in (alice, bob, nobody):
            await session.close()


async def test_each_of_the_hosts_users_has_their_own_thread_ids_and_the_guards_hold(
    tmp_path: Path, demo: DemoRuntime
) -> None:
    """A hook's user gets what a JWT user gets: their own namespace, the new-thread cap, Origin checks."""
    config = Config(state_dir=tmp_path / "state", a2a_url=demo.url, allowed_cwds=(str(tmp_path),),
                    max_new_threads_per_user=2, allowed_origins=("http://app.example",))
    runner, base = await serve(cookie_host(config, by_key=False))
    alice, bob, nobody = await signed_in(base, "alice"), await signed_in(base, "bob"), aiohttp.ClientSession()
    try:
        # Alice leaves thread-1 waiting for an approval; Bob's thread-1 is another thread.
        async with alice.post(f"{base}/agui/", json=run_body(thread_id="thread-1", text="permission notes.txt",
                                                             cwd=str(tmp_path))) as resp:
            assert resp.status == 200 and "RUN_FINISHED" in {e["type"] for e in check_stream(await resp.read())}
        async with bob.post(f"{base}/agui/", json=run_body(thread_id="thread-1", text="hello from bob",
                                                           cwd=str(tmp_path))) as resp:
            assert resp.status == 200, await resp.text()
            assert "hello from bob" in texts(check_stream(await resp.read()))
        async with alice.get(f"{base}/agui/threads/thread-1") as resp:
            hers = await resp.json()
        async with bob.get(f"{base}/agui/threads/thread-1") as resp:
            his = await resp.json()
        assert (hers["state"], his["state"]) == ("interrupted", "idle")
        assert hers["pendingInterrupts"] and not his["pendingInterrupts"]
        # The new-thread cap counts the host's user, and only that user.
        for thread, status in [("thread-2", 200), ("thread-3", 429)]:
            async with alice.post(f"{base}/agui/", json=run_body(thread_id=thread, text="hi",
                                                                 cwd=str(tmp_path))) as resp:
                assert resp.status == status, (thread, await resp.text())
                if status == 429:
                    assert (await resp.json())["error"]["code"] == "TOO_MANY_THREADS"
                    assert int(resp.headers["Retry-After"]) >= 1
                else:
                    await resp.read()
        async with bob.post(f"{base}/agui/", json=run_body(thread_id="thread-2", text="hi",
                                                           cwd=str(tmp_path))) as resp:
            assert resp.status == 200
            await resp.read()
        # A page of another origin cannot ride on the session cookie; a listed one may, with CORS.
        for path in ("", "threads/thread-1"):
            async with bob.get(f"{base}/agui/{path}", headers={"Origin": "http://evil.example"}) as resp:
                assert resp.status == 403 and (await resp.json())["error"]["code"] == "FORBIDDEN"
        async with bob.get(f"{base}/agui/threads/thread-1", headers={"Origin": "http://app.example"}) as resp:
            assert resp.status == 200 and resp.headers["Access-Control-Allow-Origin"] == "http://app.example"
        # The signed-in user sees the runtime's URL in /health; an anonymous caller does not.
        for session, shown in [(alice, True), (nobody, False)]:
            async with session.get(f"{base}/agui/health") as resp:
                assert ("url" in (await resp.json())["a2a"]) == shown
    finally:
        for session in (alice, bob, nobody):
            await session.close()
        await runner.cleanup()


async def test_the_per_user_limit_counts_the_hosts_users(host: str, tmp_path: Path) -> None:
    alice, bob = await signed_in(host, "alice"), await signed_in(host, "bob")
    try:
        slow = run_body(thread_id="alice-slow", text="slow 10", cwd=str(tmp_path))
        async with alice.post(f"{host}/agui/", json=slow) as streaming:
            assert streaming.status == 200
            second = run_body(thread_id="alice-other", text="hi", cwd=str(tmp_path))
            async with alice.post(f"{host}/agui/", json=second) as resp:
                assert resp.status == 429 and (await resp.json())["error"]["code"] == "TOO_MANY_RUNS"
            bobs = run_body(thread_id="bob-thread", text="hi", cwd=str(tmp_path))
            async with bob.post(f"{host}/agui/", json=bobs) as resp:
                assert resp.status == 200 and "hi" in texts(check_stream(await resp.read()))
        # The refusal is counted as with JWT users.
        async with bob.get(f"{host}/agui/metrics") as resp:
            metrics = await resp.text()
        assert any(line.startswith("aguiadapter_refusals_total") and 'code="TOO_MANY_RUNS"' in line
                   and not line.rstrip().endswith(" 0.0") for line in metrics.splitlines()), metrics
    finally:
        await alice.close()
        await bob.close()


async def test_a_principal_hook_excludes_the_other_ways_to_authenticate(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="principal hook"):
        create_app(Config(state_dir=tmp_path, demo=True, auth_token="t"), principal=principal_from_request_key)
    with pytest.raises(ValueError, match="--demo"):
        create_app(Config(state_dir=tmp_path))


async def test_capabilities_openapi_and_the_index_follow_the_mount_point(tmp_path: Path, demo: DemoRuntime) -> None:
    host = web.Application()
    host.add_subapp("/agui/", create_app(Config(state_dir=tmp_path / "s", a2a_url=demo.url)))
    runner, base = await serve(host)
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{base}/agui/capabilities") as resp:
                custom = (await resp.json())["custom"]["iacCode"]
            assert custom["threadStatus"] == "/agui/threads/{threadId}"
            assert custom["cancel"].startswith("/agui/extensions/")
            async with session.get(f"{base}/agui/openapi.json") as resp:
                document = await resp.json()
            assert [server["url"] for server in document["servers"]] == ["/agui"]
            assert "/threads/{threadId}" in document["paths"]
            async with session.get(f"{base}/agui/", headers={"Accept": "application/json"}) as resp:
                index = await resp.json()
            assert index["links"]["health"] == "/agui/health" and index["run"] == {"method": "POST", "path": "/agui/"}
            browser = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
            async with session.get(f"{base}/agui/", headers={"Accept": browser}) as resp:
                assert resp.content_type == "text/html" and 'href="/agui/capabilities"' in await resp.text()
    finally:
        await runner.cleanup()


async def test_the_embedding_example_ends_open_streams_as_stopped_on_sigterm(tmp_path: Path) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(EXAMPLE), "--port", "0", cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    assert process.stdout is not None
    try:
        line = (await asyncio.wait_for(process.stdout.readline(), 30)).decode()
        match = re.search(r"serving on (http://\S+/)", line)
        assert match, line
        headers = {"Authorization": "Bearer demo-token"}
        body = run_body(thread_id="sigterm", text="slow 30", cwd=str(tmp_path))
        async with aiohttp.ClientSession() as session:
            async with session.post(match.group(1) + "agui/", json=body, headers=headers) as resp:
                seen = await read_until(resp, b"TEXT_MESSAGE_CONTENT", seconds=30)
                process.send_signal(signal.SIGTERM)
                rest = await asyncio.wait_for(resp.read(), 10)
        assert await asyncio.wait_for(process.wait(), 10) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    events = check_stream(seen + rest)
    assert_stopped(events)


def test_the_embedding_page_lists_every_config_field() -> None:
    import attrs

    page = (REPO / "docs" / "embedding.md").read_text(encoding="utf-8")
    rows = {line.split("|")[1].strip().strip("`") for line in page.splitlines() if line.startswith("| `")}
    assert {field.name for field in attrs.fields(Config)} <= rows


async def test_a_host_middleware_names_the_user_without_an_aiohttp_warning() -> None:
    # docs/embedding.md tells hosts to write request[PRINCIPAL_KEY] = user_id; with a
    # plain string key aiohttp 3.14 warns on every request (NotAppKeyWarning).
    from aiohttp.test_utils import make_mocked_request

    request = make_mocked_request("POST", "/agui/")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        request[PRINCIPAL_KEY] = "alice"
        assert await principal_from_request_key(request) == "alice"


async def test_a_mounted_adapter_lives_its_whole_life_without_an_aiohttp_warning(
    tmp_path: Path, demo: DemoRuntime
) -> None:
    # The adapter keeps what it starts in its own app keys, set while its startup runs
    # (before aiohttp freezes the app, a mounted one included), and the host's middleware
    # names the user with the typed request key: start, a run, a metrics scrape and the
    # stop draw neither NotAppKeyWarning nor "Changing state of started or joined application".
    config = Config(state_dir=tmp_path / "state", a2a_url=demo.url, allowed_cwds=(str(tmp_path),), metrics=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        runner, base = await serve(cookie_host(config, by_key=True))
        try:
            alice = await signed_in(base, "alice")
            try:
                body = run_body(thread_id="quiet", text="hello", cwd=str(tmp_path))
                async with alice.post(f"{base}/agui/", json=body) as resp:
                    assert "hello" in texts(check_stream(await resp.read()))
                async with alice.get(f"{base}/agui/metrics") as resp:
                    assert resp.status == 200
            finally:
                await alice.close()
        finally:
            await runner.cleanup()


async def test_a_host_hands_the_app_the_store_it_opened(tmp_path: Path, demo: DemoRuntime) -> None:
    # create_app(store=...) takes a type the package root exports, and the app keeps its threads there,
    # not in the folder its Config names.
    from aguiadapter import ThreadStore, open_store

    store: ThreadStore = open_store(None, state_dir=tmp_path / "chosen")
    config = Config(state_dir=tmp_path / "named", a2a_url=demo.url, allowed_cwds=(str(tmp_path),))
    runner, base = await serve(create_app(config, store=store))
    try:
        async with aiohttp.ClientSession() as session:
            body = run_body(thread_id="t-store", text="hello", cwd=str(tmp_path))
            async with session.post(base + "/", json=body) as resp:
                assert resp.status == 200
                assert texts(check_stream(await resp.read()))
        assert (await store.load("t-store")) is not None
        assert not (tmp_path / "named" / "threads").exists() or not any((tmp_path / "named" / "threads").iterdir())
    finally:
        await runner.cleanup()
