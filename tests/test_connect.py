"""``POST /connect`` against the demo runtime: what a reloaded page gets back.

Real sockets on loopback. Every stream is judged run by run
(:func:`tests.support.connect.runs_of`): the hydrate run, then the run in
progress when there is one.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from aguiadapter import Config, create_app
from aguiadapter.demo.runtime import DemoRuntime
from tests.support.adapter import RunningAdapter, run_body, start_adapter, started
from tests.support.connect import applied, connect_body, connect_then_cut, runs_of, snapshot_of
from tests.support.eventually import eventually
from tests.support.reattach import read_then_cut
from tests.support.tokens import AUDIENCE, ISSUER, SigningKey, bearer, write_jwks
from tests.support.serve import on_loopback

PIPELINE = {"runMode": "pipeline", "pipelineName": "selling"}




def interrupt_of(events: list[dict[str, Any]]) -> dict[str, Any]:
    (interrupt,) = events[-1]["outcome"]["interrupts"]
    return dict(interrupt)


async def test_an_interrupted_thread_gets_its_pending_permission_back(
    adapter: RunningAdapter, workspace: Path
) -> None:
    asked = await adapter.run(run_body(thread_id="t-ask", text="permission notes.txt", cwd=str(workspace)))
    announced = interrupt_of(asked.events())
    reply = await adapter.post("/connect", connect_body("t-ask"))
    assert reply.status == 200 and reply.headers["Content-Type"] == "text/event-stream"
    (hydrate,) = runs_of(reply.body)
    assert [event["type"] for event in hydrate] == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    assert hydrate[0]["runId"] == "hydrate-1" and hydrate[0]["threadId"] == "t-ask"
    assert applied(snapshot_of(hydrate), []) == [("user", "permission notes.txt"), *applied([], [asked.events()])]
    assert applied(snapshot_of(hydrate), [])[-1] == ("assistant", "call", announced["toolCallId"]), (
        "the conversation up to the tool call the permission gates, under the live stream's tool call id"
    )
    assert hydrate[-1]["outcome"] == {"type": "interrupt", "interrupts": [announced]}, "the very object announced"
    # The page answers what it got back, and the run goes on.
    resume = run_body(thread_id="t-ask", text=None, cwd=str(workspace))
    resume["resume"] = [{"interruptId": announced["id"], "status": "resolved", "payload": {"decision": "allow_once"}}]
    assert (await adapter.run(resume)).events()[-1]["outcome"] == {"type": "success"}
    (after,) = runs_of((await adapter.post("/connect", connect_body("t-ask"))).body)
    assert after[-1]["outcome"] == {"type": "success"}, "nothing waits any more"


async def test_without_a_readable_history_the_page_is_told_and_keeps_its_approval(
    tmp_path: Path, workspace: Path
) -> None:
    demo = DemoRuntime()
    url = await demo.start()
    port = int(url.rstrip("/").rsplit(":", 1)[1])
    running = await start_adapter(tmp_path / "state", url, allowed_cwds=(str(tmp_path / "workspaces"),))
    try:
        asked = await running.run(run_body(thread_id="t-nohist", text="permission notes.txt", cwd=str(workspace)))
        await demo.close()
        restarted = DemoRuntime()  # a new runtime process: it knows no session (iac-code answers 404)
        await restarted.start(port=port)
        try:
            body = connect_body("t-nohist", forwardedProps={"iacCode": {
                "schemaVersion": 1, "rosInvocationId": "invocation-1", "cwd": str(workspace),
                "preferredLanguage": "zh-CN"}})
            (hydrate,) = runs_of((await running.post("/connect", body)).body)
        finally:
            await restarted.close()
    finally:
        await running.close()
    assert [event["type"] for event in hydrate] == ["RUN_STARTED", "CUSTOM", "RUN_FINISHED"], (
        "no snapshot: an empty one would erase the page's conversation"
    )
    said = hydrate[1]
    assert said["name"] == "iac-code.history.v1" and said["value"]["status"] == "unavailable"
    assert said["value"]["code"] == "HISTORY_UNAVAILABLE" and "完好" in said["value"]["message"]
    # The restarted runtime holds no such conversation: only the next turn helps, no retry is offered.
    assert "retryAfterSeconds" not in said["value"] and "下一轮" in said["value"]["message"], said
    assert hydrate[-1]["outcome"]["interrupts"] == [interrupt_of(asked.events())]


async def test_an_expired_interrupt_is_not_announced(tmp_path: Path, demo: DemoRuntime, workspace: Path) -> None:
    async with started(tmp_path, demo.url, interrupt_ttl_seconds=0.5) as adapter:
        await adapter.run(run_body(thread_id="t-late", text="permission notes.txt", cwd=str(workspace)))
    await asyncio.sleep(0.6)  # its time passes while no adapter runs
    async with started(tmp_path, demo.url, interrupt_ttl_seconds=0.5) as adapter:
        (hydrate,) = runs_of((await adapter.post("/connect", connect_body("t-late"))).body)
        assert hydrate[-1]["outcome"] == {"type": "success"}

        async def expired() -> Any:
            view = (await adapter.get("threads/t-late")).json()
            return view if view["state"] == "terminal" else None

        # Expired by this connect, or by the expiry timer the restart re-armed (whichever claims it first).
        view = await eventually(expired, "the interrupt expires")
        assert view["lastError"] == {"code": "EXECUTION_EXPIRED"} and view["pendingInterrupts"] == []
    assert [task.state for task in demo.state.tasks.values()] == ["TASK_STATE_CANCELED"]


async def test_a_run_in_progress_follows_the_hydrate_run_live_to_its_end(
    adapter: RunningAdapter, workspace: Path
) -> None:
    await adapter.run(run_body(thread_id="t-live", text="tool", cwd=str(workspace)))
    (idle,) = runs_of((await adapter.post("/connect", connect_body("t-live"))).body)
    before = applied(snapshot_of(idle), [])
    assert [item[0] for item in before] == ["user", "assistant", "tool", "assistant"]
    body = run_body(thread_id="t-live", text="slow 2", cwd=str(workspace))
    first = asyncio.ensure_future(adapter.run(body))

    async def running() -> bool:
        reply = await adapter.get("threads/t-live")
        return reply.status == 200 and reply.json()["state"] == "running"

    await eventually(running, "the run streams")
    reply = await adapter.post("/connect", connect_body("t-live"))
    hydrate, live = runs_of(reply.body)
    assert hydrate[-1]["outcome"] == {"type": "success"}, "the hydrate run closes before the live run starts"
    shown = applied(snapshot_of(hydrate), [live])
    assert shown[:-1] == [*before, ("user", "slow 2")], "the snapshot stops where the run starts"
    assert shown[-1] == ("assistant", "".join(f"tick {n}. " for n in range(1, 11)))
    # What the page shows is what a reload after the end shows: no message twice, none missing.
    (later,) = runs_of((await adapter.post("/connect", connect_body("t-live"))).body)
    assert applied(snapshot_of(later), []) == shown
    assert live[0]["runId"] == body["runId"] and live[-1]["type"] == "RUN_FINISHED"
    own = (await first).events()
    assert live == own, "the very events the run's own client got"


async def test_unknown_threads_and_bad_bodies_are_refused_before_any_stream(
    adapter: RunningAdapter, workspace: Path
) -> None:
    unknown = await adapter.post("/connect", connect_body("t-nobody"))
    assert unknown.status == 404 and unknown.json()["error"]["code"] == "THREAD_NOT_FOUND"
    await adapter.run(run_body(thread_id="t-bad", text="hello", cwd=str(workspace)))
    resume = connect_body("t-bad", resume=[{"interruptId": "x", "status": "cancelled"}])
    refused = await adapter.post("/connect", resume, {"Accept-Language": "zh-CN"})
    assert refused.status == 400 and refused.json()["error"] == {
        "code": "INVALID_INPUT", "message": "resume：connect 不答复任何中断；请把答复作为 resume 发送到 POST /。"}
    strict = connect_body("t-bad", forwardedProps={"iacCode": {"schemaVersion": 1, "cwd": str(workspace)}})
    assert (await adapter.post("/connect", strict)).json()["error"]["code"] == "INVALID_INPUT"
    assert (await adapter.post("/connect", {"runId": "r"})).status == 400
    assert (await adapter.post("/connect", b"[")).json()["error"]["code"] == "INVALID_JSON"


async def test_another_userids_thread_is_an_unknown_one_with_the_shared_token(
    tmp_path: Path, demo: DemoRuntime, workspace: Path
) -> None:
    async with started(tmp_path, demo.url, auth_token="t0ken") as adapter:
        token = {"Authorization": "Bearer t0ken"}
        await adapter.run(run_body(thread_id="t-hers", text="hello", cwd=str(workspace), userId="alice"), token)

        def as_user(thread_id: str, user: str) -> dict[str, Any]:
            return connect_body(thread_id, forwardedProps={"iacCode": {
                "schemaVersion": 1, "rosInvocationId": "invocation-1", "cwd": str(workspace), "userId": user}})

        theirs = await adapter.post("/connect", as_user("t-hers", "bob"), token)
        unknown = await adapter.post("/connect", as_user("t-none", "bob"), token)
        assert theirs.status == 404 and (theirs.status, theirs.body) == (unknown.status, unknown.body)
        assert (await adapter.post("/connect", as_user("t-hers", "alice"), token)).status == 200
        assert (await adapter.post("/connect", connect_body("t-hers"))).status == 401


@pytest.fixture
def key() -> SigningKey:
    return SigningKey("ES256", kid="es256-1")


async def test_another_users_thread_is_an_unknown_one_with_jwts(
    tmp_path: Path, demo: DemoRuntime, workspace: Path, key: SigningKey
) -> None:
    from aguiadapter.config import JwtSettings

    jwks = tmp_path / "jwks.json"
    write_jwks(jwks, key)
    settings = JwtSettings(jwks_file=jwks, issuer=ISSUER, audience=AUDIENCE, jwks_check_seconds=0)
    async with started(tmp_path, demo.url, jwt=settings) as adapter:
        alice, bob = bearer(key.token("alice")), bearer(key.token("bob"))
        asked = await adapter.run(run_body(thread_id="t-jwt", text="permission notes.txt", cwd=str(workspace)), alice)
        theirs = await adapter.post("/connect", connect_body("t-jwt"), bob)
        unknown = await adapter.post("/connect", connect_body("t-other"), bob)
        assert theirs.status == 404 and (theirs.body, theirs.headers.get("Content-Type")) == (
            unknown.body, unknown.headers.get("Content-Type"))
        (hydrate,) = runs_of((await adapter.post("/connect", connect_body("t-jwt"), alice)).body)
        assert hydrate[-1]["outcome"]["interrupts"] == [interrupt_of(asked.events())]
        named = connect_body("t-jwt", forwardedProps={"iacCode": {
            "schemaVersion": 1, "rosInvocationId": "invocation-1", "cwd": str(workspace), "userId": "bob"}})
        refused = await adapter.post("/connect", named, alice)
        assert refused.status == 400 and refused.json()["error"]["code"] == "INVALID_INPUT", "a userId is the token's"


async def test_another_users_thread_is_an_unknown_one_with_the_hosts_hook(
    tmp_path: Path, demo: DemoRuntime, workspace: Path
) -> None:
    async def from_header(request: web.Request) -> str | None:
        return request.headers.get("X-User")

    config = Config(state_dir=tmp_path / "state", a2a_url=demo.url, allowed_cwds=(str(tmp_path / "workspaces"),))
    runner = web.AppRunner(create_app(config, principal=from_header), shutdown_timeout=0.5)
    await on_loopback(runner)
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    try:
        async with aiohttp.ClientSession() as session:
            body = run_body(thread_id="t-hook", text="hello", cwd=str(workspace))
            async with session.post(url + "/", json=body, headers={**headers, "X-User": "alice"}) as resp:
                assert resp.status == 200 and b"RUN_FINISHED" in await resp.read()
            answers = []
            for thread_id in ("t-hook", "t-unknown"):
                async with session.post(url + "/connect", json=connect_body(thread_id),
                                        headers={**headers, "X-User": "bob"}) as resp:
                    answers.append((resp.status, await resp.read()))
            assert answers[0] == answers[1] and answers[0][0] == 404
            async with session.post(url + "/connect", json=connect_body("t-hook"),
                                    headers={**headers, "X-User": "alice"}) as resp:
                (hydrate,) = runs_of(await resp.read())
            assert hydrate[-1]["outcome"] == {"type": "success"}
    finally:
        await runner.cleanup()


async def test_a_reloaded_pipeline_shows_where_it_stands(adapter: RunningAdapter, workspace: Path) -> None:
    first = await adapter.run(run_body(thread_id="t-pipe", text="sell me something", cwd=str(workspace), **PIPELINE))
    events = first.events()
    views = [event for event in events if event["type"] == "ACTIVITY_SNAPSHOT"]
    (hydrate,) = runs_of((await adapter.post("/connect", connect_body("t-pipe"))).body)
    (activity,) = [event for event in hydrate if event["type"] == "ACTIVITY_SNAPSHOT"]
    assert activity["activityType"] == "iac-code.pipeline.v1" and activity["replace"] is True
    assert activity["content"]["schemaVersion"] == 1 and activity["content"]["snapshot"]
    if views:
        assert activity["messageId"] == views[-1]["messageId"], "it replaces the view the run showed"
    assert hydrate[-1]["outcome"]["interrupts"] == [interrupt_of(events)]
    # The runtime keeps no conversation of a pipeline: said so, never an empty one, and asking again will not help.
    (said,) = [event for event in hydrate if event["type"] == "CUSTOM"]
    assert said["value"]["status"] == "unavailable" and "retryAfterSeconds" not in said["value"]
    assert "MESSAGES_SNAPSHOT" not in [event["type"] for event in hydrate]


async def test_the_snapshot_holds_the_newest_turns_and_points_to_the_older_ones(
    adapter: RunningAdapter, workspace: Path
) -> None:
    for turn in range(1, 23):
        await adapter.run(run_body(thread_id="t-long", text=f"hello {turn}", cwd=str(workspace)))
    (hydrate,) = runs_of((await adapter.post("/connect", connect_body("t-long"))).body)
    (snapshot,) = [event for event in hydrate if event["type"] == "MESSAGES_SNAPSHOT"]
    users = [item["content"] for item in snapshot["messages"] if item["role"] == "user"]
    assert users == [f"hello {turn}" for turn in range(3, 23)], "the newest 20 turns, oldest first"
    cursor = snapshot["metadata"]["iacCode"]["before"]
    older = (await adapter.get(f"threads/t-long/messages?before={cursor}")).json()
    assert [item["content"] for item in older["messages"] if item["role"] == "user"] == ["hello 1", "hello 2"]
    assert older["before"] is None, "paging back reaches the first turn"
    assert len({item["id"] for item in older["messages"] + snapshot["messages"]}) == len(
        older["messages"]) + len(snapshot["messages"]), "no message on both"


async def test_the_capabilities_name_the_connect_route(adapter: RunningAdapter) -> None:
    document = (await adapter.get("capabilities")).json()
    assert document["custom"]["iacCode"]["connect"] == "/connect"


async def test_a_page_that_leaves_the_followed_run_lets_it_end_as_one_that_left(
    tmp_path: Path, demo: DemoRuntime, workspace: Path
) -> None:
    async with started(tmp_path, demo.url, disconnect_grace_seconds=1.5) as adapter:
        body = run_body(thread_id="t-leave", text="slow 30", cwd=str(workspace))
        await read_then_cut(adapter.url, body, events=4)  # the run's own page goes: the run waits a grace
        # A reloaded page follows it, then goes too: no reader is left behind that would keep it alive.
        raw = await connect_then_cut(adapter.url, connect_body("t-leave"), events=9)
        assert raw.count(b"RUN_STARTED") == 2, "it was following the run"
        await eventually(lambda: [t.state for t in demo.state.tasks.values()] == ["TASK_STATE_CANCELED"],
                         "cancelled a grace after the last page left")
