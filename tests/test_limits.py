"""Admission limits on one server: --max-active-runs and --max-active-runs-per-user."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from aguiadapter.config import JwtSettings
from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.store.file.store import FileThreadStore
from aguiadapter.threads.record import thread_key
from tests.support.adapter import Reply, RunningAdapter, run_body, start_adapter
from tests.support.agui import check_stream, parse_sse
from tests.support.eventually import eventually
from tests.support.tokens import AUDIENCE, ISSUER, SigningKey, bearer, write_jwks

SESSION_EVENT = b"iac-code.session.v1"


class OpenRun:
    """A run whose stream stays open until the test leaves its context."""

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self.resp = resp
        self.raw = b""

    async def until_admitted(self) -> OpenRun:
        """Read until the session event: the run holds its slot and its runtime task."""
        async def read() -> None:
            while SESSION_EVENT not in self.raw:
                chunk = await self.resp.content.readany()
                assert chunk, self.raw
                self.raw += chunk
        await asyncio.wait_for(read(), 10)
        return self

    def execution_id(self) -> str:
        events, _ = parse_sse(self.raw.rsplit(b"\n\n", 1)[0] + b"\n\n")
        return str(next(e for e in events if e.get("name") == SESSION_EVENT.decode())["value"]["executionId"])

    async def finish(self) -> list[dict[str, Any]]:
        self.raw += await asyncio.wait_for(self.resp.read(), 10)
        return check_stream(self.raw)


@contextlib.asynccontextmanager
async def streaming(adapter: RunningAdapter) -> AsyncIterator[Any]:
    """``await open_run(body, headers)`` starts a slow run and keeps it streaming; all are closed at the end."""
    async with contextlib.AsyncExitStack() as stack:
        async def open_run(body: dict[str, Any], headers: dict[str, str] | None = None) -> OpenRun:
            resp = await stack.enter_async_context(
                adapter.session.post(adapter.url, json=body, headers=headers or {})
            )
            assert resp.status == 200, await resp.read()
            return await OpenRun(resp).until_admitted()
        yield open_run


def slow(thread_id: str, cwd: Path, **iac: Any) -> dict[str, Any]:
    return run_body(thread_id=thread_id, text="slow 30", cwd=str(cwd), **iac)


def refused_with(reply: Reply, status: int, code: str) -> None:
    assert reply.status == status, reply.body
    assert reply.json()["error"]["code"] == code
    assert reply.headers["Retry-After"] == "5"


async def no_record(adapter: RunningAdapter, thread_id: str, principal: str | None = None) -> bool:
    return await FileThreadStore(adapter.config.state_dir).load(thread_key(thread_id, principal)) is None


async def eventually_admitted(adapter: RunningAdapter, body: dict[str, Any], headers: dict[str, str]) -> Reply:
    """A run that a slot freed by a run just ended lets in (its handler returns right after the stream)."""
    attempts = itertools.count()

    async def admitted() -> Reply | None:
        reply = await adapter.run({**body, "runId": f"{body['runId']}-{next(attempts)}"}, headers)
        return None if reply.status == 429 else reply

    return await eventually(admitted, "the freed slot admits the run", interval=0.05)


async def metrics_text(adapter: RunningAdapter) -> str:
    async with adapter.session.get(adapter.url + "metrics") as resp:
        return await resp.text()


@pytest.fixture
def key() -> SigningKey:
    return SigningKey("HS256", kid="limits")


@pytest.fixture
async def per_user(tmp_path: Path, demo: DemoRuntime, key: SigningKey) -> AsyncIterator[RunningAdapter]:
    """Verified users, at most two active runs each, metrics on."""
    jwks = tmp_path / "jwks.json"
    write_jwks(jwks, key)
    running = await start_adapter(
        tmp_path / "state", demo.url, allowed_cwds=(str(tmp_path / "workspaces"),), metrics=True,
        jwt=JwtSettings(jwks_file=jwks, issuer=ISSUER, audience=AUDIENCE), max_active_runs_per_user=2,
    )
    try:
        yield running
    finally:
        await running.close()


async def test_a_users_third_concurrent_run_gets_429_while_other_users_run(
    per_user: RunningAdapter, demo: DemoRuntime, key: SigningKey, workspace: Path
) -> None:
    alice, bob = bearer(key.token("alice")), bearer(key.token("bob"))
    async with streaming(per_user) as open_run:
        first = await open_run(slow("a-1", workspace), alice)
        await open_run(slow("a-2", workspace), alice)
        third = await per_user.run(slow("a-3", workspace), alice)
        refused_with(third, 429, "TOO_MANY_RUNS")
        chinese = await per_user.run(slow("a-3", workspace), {**alice, "Accept-Language": "zh-CN"})
        assert "上限" in chinese.json()["error"]["message"]
        await open_run(slow("b-1", workspace), bob)
        await open_run(slow("b-2", workspace), bob)
        refused_with(await per_user.run(slow("b-3", workspace), bob), 429, "TOO_MANY_RUNS")

        # Nothing of the refused runs exists: no record, no runtime task.
        assert await no_record(per_user, "a-3", "alice") and await no_record(per_user, "b-3", "bob")
        assert len(demo.state.tasks) == 4
        assert 'aguiadapter_refusals_total{code="TOO_MANY_RUNS"} 3.0' in await metrics_text(per_user)

        # One of alice's runs ends: she may start another.
        cancel = f"/extensions/iac-code/v1/executions/{first.execution_id()}/cancel"
        assert (await per_user.post(cancel, {"threadId": "a-1", "rosInvocationId": "invocation-1"}, alice)).status == 200
        assert (await first.finish())[-1]["outcome"] == {"type": "cancelled"}
        again = await eventually_admitted(per_user, run_body(thread_id="a-3", text="hi", cwd=str(workspace)), alice)
        assert again.events()[-1]["type"] == "RUN_FINISHED"


async def test_a_run_refused_at_admission_gives_its_slot_back(
    per_user: RunningAdapter, key: SigningKey, workspace: Path
) -> None:
    alice = bearer(key.token("alice"))
    async with streaming(per_user) as open_run:
        await open_run(slow("busy", workspace), alice)
        busy = await per_user.run(slow("busy", workspace), alice)
        assert busy.json()["error"]["code"] == "THREAD_BUSY"
        bad_input = await per_user.run(run_body(thread_id="other", text=None, cwd=str(workspace)), alice)
        assert bad_input.status == 400
        # Two refusals later alice still holds one slot of two, not three.
        await open_run(slow("other", workspace), alice)


async def test_the_whole_server_limit_answers_503(tmp_path: Path, demo: DemoRuntime, workspace: Path) -> None:
    running = await start_adapter(
        tmp_path / "state", demo.url, allowed_cwds=(str(tmp_path / "workspaces"),), metrics=True, max_active_runs=2
    )
    try:
        async with streaming(running) as open_run:
            await open_run(slow("s-1", workspace, userId="u1"))
            await open_run(slow("s-2", workspace, userId="u2"))
            refused_with(await running.run(slow("s-3", workspace, userId="u3")), 503, "SERVER_BUSY")
            zh = await running.run(slow("s-3", workspace, preferredLanguage="zh-CN"))
            assert "服务器" in zh.json()["error"]["message"]
            assert await no_record(running, "s-3") and len(demo.state.tasks) == 2
            assert 'aguiadapter_refusals_total{code="SERVER_BUSY"} 2.0' in await metrics_text(running)
    finally:
        await running.close()


async def test_without_verified_users_the_per_user_limit_counts_user_ids(
    tmp_path: Path, demo: DemoRuntime, workspace: Path
) -> None:
    running = await start_adapter(
        tmp_path / "state", demo.url, allowed_cwds=(str(tmp_path / "workspaces"),),
        auth_token="shared", max_active_runs_per_user=1,
    )
    token = bearer("shared")
    try:
        async with streaming(running) as open_run:
            await open_run(slow("u-1", workspace, userId="u1"), token)
            refused_with(await running.run(slow("u-2", workspace, userId="u1"), token), 429, "TOO_MANY_RUNS")
            await open_run(slow("u-3", workspace, userId="u2"), token)
            # Runs without a userId share one count.
            await open_run(slow("u-4", workspace), token)
            refused_with(await running.run(slow("u-5", workspace), token), 429, "TOO_MANY_RUNS")
    finally:
        await running.close()


async def test_without_limits_nothing_is_refused(adapter: RunningAdapter, workspace: Path) -> None:
    async with streaming(adapter) as open_run:
        for index in range(4):
            await open_run(slow(f"n-{index}", workspace, userId="same"))


def test_a_limit_below_one_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    from aguiadapter.cli import build_parser

    for option in ("--max-active-runs", "--max-active-runs-per-user"):
        with pytest.raises(SystemExit) as stopped:
            build_parser({}).parse_args([option, "0"])
        assert stopped.value.code == 2 and "must be at least 1" in capsys.readouterr().err


async def test_a_user_minting_thread_ids_is_refused_with_429_and_retry_after(
    tmp_path: Path, demo: DemoRuntime, key: SigningKey, workspace: Path
) -> None:
    jwks = tmp_path / "jwks.json"
    write_jwks(jwks, key)
    running = await start_adapter(
        tmp_path / "state", demo.url, allowed_cwds=(str(tmp_path / "workspaces"),),
        jwt=JwtSettings(jwks_file=jwks, issuer=ISSUER, audience=AUDIENCE), max_new_threads_per_user=3,
    )
    try:
        alice, bob = bearer(key.token("alice")), bearer(key.token("bob"))
        for index in range(3):
            body = run_body(thread_id=f"n-{index}", text="hi", cwd=str(workspace))
            assert (await running.run(body, alice)).status == 200
        files = sorted((tmp_path / "state" / "threads").iterdir())
        refused = await running.run(run_body(thread_id="n-3", text="hi", cwd=str(workspace)), alice)
        assert refused.status == 429 and refused.json()["error"]["code"] == "TOO_MANY_THREADS"
        assert 1 <= int(refused.headers["Retry-After"]) <= 60
        assert sorted((tmp_path / "state" / "threads").iterdir()) == files, "the refused thread left nothing"
        assert await no_record(running, "n-3", "alice") and len(demo.state.tasks) == 3
        # Her existing threads go on; bob has his own allowance.
        again = await running.run(run_body(thread_id="n-0", text="more", cwd=str(workspace)), alice)
        assert again.events()[-1]["type"] == "RUN_FINISHED"
        assert (await running.run(run_body(thread_id="n-3", text="hi", cwd=str(workspace)), bob)).status == 200
    finally:
        await running.close()


@pytest.mark.parametrize("mode", ["open", "shared token"])
async def test_unverified_callers_new_threads_are_counted_by_the_list_they_grow(
    tmp_path: Path, demo: DemoRuntime, workspace: Path, mode: str
) -> None:
    token = "shared-token-for-limits"
    running = await start_adapter(
        tmp_path / "state", demo.url, allowed_cwds=(str(tmp_path / "workspaces"),), max_new_threads_per_user=2,
        auth_token=token if mode == "shared token" else None,
    )
    headers = {"Authorization": f"Bearer {token}"} if mode == "shared token" else None
    try:
        for index in range(2):
            body = run_body(thread_id=f"a-{index}", text="hi", cwd=str(workspace), userId="alice")
            assert (await running.run(body, headers)).status == 200
        refused = await running.run(run_body(thread_id="a-2", text="hi", cwd=str(workspace), userId="alice"), headers)
        assert refused.status == 429 and refused.json()["error"]["code"] == "TOO_MANY_THREADS"
        assert 1 <= int(refused.headers["Retry-After"]) <= 60
        assert await no_record(running, "a-2")
        # Another list has its own allowance; threads without a userId share one.
        assert (await running.run(run_body(thread_id="b-0", text="hi", cwd=str(workspace), userId="bob"),
                                  headers)).status == 200
        for index in range(2):
            assert (await running.run(run_body(thread_id=f"n-{index}", text="hi", cwd=str(workspace)),
                                      headers)).status == 200
        refused = await running.run(run_body(thread_id="n-2", text="hi", cwd=str(workspace)), headers)
        assert refused.status == 429 and refused.json()["error"]["code"] == "TOO_MANY_THREADS"
        again = await running.run(run_body(thread_id="a-0", text="more", cwd=str(workspace), userId="alice"), headers)
        assert again.events()[-1]["type"] == "RUN_FINISHED", "existing threads go on"
    finally:
        await running.close()


async def test_re_attached_streams_are_bounded_per_user(tmp_path: Path, demo: DemoRuntime, workspace: Path) -> None:
    """One user cannot hold more re-attached streams open than --max-active-runs-per-user;
    their own run's re-attach still gets in while that run counts."""
    from tests.support.reattach import read_then_cut

    running = await start_adapter(
        tmp_path / "state", demo.url, allowed_cwds=(str(tmp_path / "workspaces"),),
        max_active_runs_per_user=2, disconnect_grace_seconds=30.0,
    )
    try:
        body = run_body(thread_id="r-1", text="slow 20", cwd=str(workspace), userId="alice")
        half = await read_then_cut(running.url, body, events=4)
        path = running.url + f"threads/r-1/runs/{body['runId']}/events"
        async with contextlib.AsyncExitStack() as stack:
            for _ in range(2):
                resp = await stack.enter_async_context(running.session.get(path, headers={"Last-Event-ID": half.last_id}))
                assert resp.status == 200
            async with running.session.get(path, headers={"Last-Event-ID": half.last_id}) as third:
                refused_with(Reply(third.status, dict(third.headers), await third.read()), 429, "TOO_MANY_RUNS")
            async with running.session.get(running.url + "threads/r-none/runs/x/events") as unknown:
                assert unknown.status == 404, "an unknown thread is told so, not counted"
            # Runs are counted apart: alice's second run and bob's run go on.
            mine = await running.run(run_body(thread_id="r-2", text="hi", cwd=str(workspace), userId="alice"))
            assert mine.status == 200
            other = await running.run(run_body(thread_id="r-3", text="hi", cwd=str(workspace), userId="bob"))
            assert other.status == 200
        # The re-attaches closed: their slots are free again.
        async def reattached() -> bool | None:
            async with running.session.get(path, headers={"Last-Event-ID": half.last_id}) as resp:
                if resp.status != 200:
                    return None
                resp.release()
                return True
        assert await eventually(reattached, "the closed re-attaches are counted out", interval=0.05)
        async with running.session.get(running.url + "threads/r-1") as view:
            execution_id = (await view.json())["executionId"]
        cancel = f"/extensions/iac-code/v1/executions/{execution_id}/cancel"
        await running.post(cancel, {"threadId": "r-1", "rosInvocationId": "invocation-1"})
    finally:
        await running.close()
