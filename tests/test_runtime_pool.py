"""A pool of runtimes, against three demo runtimes on loopback (the fast tests;
the fault tests against real ``iac-code a2a`` processes are in tests/e2e).

Where a thread runs is judged from the runtimes themselves (which one received
the thread's message), not from what the adapter reports."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.pool.settings import RuntimeSpec
from aguiadapter.store.file.store import FileThreadStore
from aguiadapter.web.keys import POOL, SERVICE
from tests.support.adapter import RunningAdapter, run_body, started
from tests.support.eventually import eventually
from tests.support.demo_pool import demo_runtimes
from tests.test_resume import allow, interrupt_on, resume_body

NAMES = ("a", "b", "c")


def received_texts(demo: DemoRuntime) -> list[str]:
    """The text of every user message the runtime received."""
    return [part["text"] for message in demo.state.received for part in message.get("parts", ()) if "text" in part]


def holder(demos: dict[str, DemoRuntime], text: str) -> list[str]:
    """The runtimes that received a message ``text``."""
    return [name for name, demo in demos.items() if text in received_texts(demo)]


@pytest.fixture
async def demos() -> AsyncIterator[dict[str, DemoRuntime]]:
    async with demo_runtimes(NAMES) as runtimes:
        yield runtimes


def pool_of(demos: dict[str, DemoRuntime], **settings: Any) -> tuple[RuntimeSpec, ...]:
    return tuple(RuntimeSpec(name, demo.url, **settings.get(name, {})) for name, demo in demos.items())


async def health(adapter: RunningAdapter) -> tuple[int, dict[str, Any]]:
    reply = await adapter.get("/health")
    return reply.status, reply.json()


async def statuses(adapter: RunningAdapter) -> dict[str, str]:
    return {item["name"]: item["status"] for item in (await health(adapter))[1]["runtimes"]}


async def test_new_threads_spread_evenly_and_every_turn_stays_on_its_runtime(
    tmp_path: Path, demos: dict[str, DemoRuntime], workspace: Path
) -> None:
    async with started(tmp_path, None, runtimes=pool_of(demos)) as adapter:
        pinned: dict[str, str] = {}
        for number in range(6):
            events = (await adapter.run(run_body(thread_id=f"t-{number}", text=f"hello {number}",
                                                 cwd=str(workspace)))).events()
            assert events[-1]["type"] == "RUN_FINISHED"
            (pinned[f"t-{number}"],) = holder(demos, f"hello {number}")
        # Idle runtimes tie: the threads go round them.
        assert sorted(pinned.values()) == ["a", "a", "b", "b", "c", "c"]
        for thread_id, name in pinned.items():
            assert (await adapter.get(f"/threads/{thread_id}")).json()["runtime"] == name
            events = (await adapter.run(run_body(thread_id=thread_id, text=f"again {thread_id}",
                                                 cwd=str(workspace)))).events()
            assert events[-1]["type"] == "RUN_FINISHED"
            assert holder(demos, f"again {thread_id}") == [name]
        listed = {item["threadId"]: item["runtime"] for item in (await adapter.get("/threads")).json()["threads"]}
        assert listed == pinned


async def test_the_pin_survives_an_adapter_restart(tmp_path: Path, demos: dict[str, DemoRuntime],
                                                   workspace: Path) -> None:
    async with started(tmp_path, None, runtimes=pool_of(demos)) as adapter:
        await adapter.run(run_body(thread_id="t-kept", text="first", cwd=str(workspace)))
    (name,) = holder(demos, "first")
    # Restarted with the runtimes in another order: the thread's runtime is named, not placed again.
    reordered = tuple(reversed(pool_of(demos)))
    async with started(tmp_path, None, runtimes=reordered) as adapter:
        events = (await adapter.run(run_body(thread_id="t-kept", text="second", cwd=str(workspace)))).events()
        assert events[-1]["type"] == "RUN_FINISHED"
    assert holder(demos, "second") == [name]


async def test_draining_and_full_runtimes_take_no_new_thread_and_none_left_is_a_503_writing_nothing(
    tmp_path: Path, demos: dict[str, DemoRuntime], workspace: Path
) -> None:
    specs = pool_of(demos, a={"drain": True}, b={"capacity": 1}, c={"drain": True})
    async with started(tmp_path, None, runtimes=specs) as adapter:
        # Every new thread goes to b, the only one not draining (each run ends, freeing b's one place).
        for number in range(3):
            await adapter.run(run_body(thread_id=f"t-{number}", text=f"to b {number}", cwd=str(workspace)))
            assert holder(demos, f"to b {number}") == ["b"]
        status, body = await health(adapter)
        assert status == 200 and [item["draining"] for item in body["runtimes"]] == [True, False, True]
        assert [item["activeRuns"] for item in body["runtimes"]] == [0, 0, 0]
    everyone_drains = pool_of(demos, a={"drain": True}, b={"drain": True}, c={"drain": True})
    async with started(tmp_path, None, runtimes=everyone_drains) as adapter:
        reply = await adapter.run(run_body(thread_id="t-nowhere", text="nowhere", cwd=str(workspace)))
        assert reply.status == 503 and reply.json()["error"]["code"] == "A2A_UNAVAILABLE"
        assert int(reply.headers["Retry-After"]) > 0
        assert (await adapter.get("/threads/t-nowhere")).status == 404
        assert await FileThreadStore(adapter.config.state_dir).load("t-nowhere") is None
        assert holder(demos, "nowhere") == []
        # A thread pinned earlier still works on its draining runtime.
        events = (await adapter.run(run_body(thread_id="t-0", text="still b", cwd=str(workspace)))).events()
        assert events[-1]["type"] == "RUN_FINISHED" and holder(demos, "still b") == ["b"]
        status, body = await health(adapter)
        assert status == 503 and body["a2a"]["reachable"] is False


async def test_a_full_runtime_sends_new_threads_elsewhere(tmp_path: Path, demos: dict[str, DemoRuntime],
                                                         workspace: Path) -> None:
    specs = pool_of(demos, a={"capacity": 1}, b={"drain": True}, c={"drain": True})
    async with started(tmp_path, None, runtimes=specs, disconnect_grace_seconds=30.0) as adapter:
        service = adapter.app[SERVICE]
        assert service is not None
        slot = await service.pool.enter("a")  # one active run on a: it is full
        try:
            reply = await adapter.run(run_body(thread_id="t-full", text="no room", cwd=str(workspace)))
            assert reply.status == 503 and reply.json()["error"]["code"] == "A2A_UNAVAILABLE"
            assert holder(demos, "no room") == []
        finally:
            await service.pool.leave(slot)
        events = (await adapter.run(run_body(thread_id="t-full", text="room", cwd=str(workspace)))).events()
        assert events[-1]["type"] == "RUN_FINISHED" and holder(demos, "room") == ["a"]


async def test_a_runtime_down_refuses_its_threads_retryably_keeps_the_answer_pending_and_applies_it_once_back(
    tmp_path: Path, demos: dict[str, DemoRuntime], workspace: Path
) -> None:
    async with started(tmp_path, None, runtimes=pool_of(demos), runtime_probe_seconds=0.2) as adapter:
        interrupt = await interrupt_on(adapter, "t-wait", workspace)
        (name,) = [name for name, demo in demos.items() if demo.state.tasks]
        down = demos[name]
        port = int(down.url.rstrip("/").rsplit(":", 1)[1])
        await down.close()

        async def seen_down() -> bool:
            return (await statuses(adapter))[name] == "unreachable"

        await eventually(seen_down, "the probe sees the runtime down", interval=0.1)
        status, body = await health(adapter)
        assert status == 200 and body["status"] == "degraded"
        for _ in range(2):  # asking again changes nothing while it is down
            reply = await adapter.run(resume_body("t-wait", workspace, allow(interrupt)))
            assert reply.status == 503 and reply.json()["error"]["code"] == "A2A_UNAVAILABLE", reply.body
            assert "Retry-After" in reply.headers
            thread = (await adapter.get("/threads/t-wait")).json()
            assert thread["state"] == "interrupted" and [item["id"] for item in thread["pendingInterrupts"]] == [
                interrupt["id"]]
        # Others are unaffected; new threads go elsewhere.
        for number in range(4):
            events = (await adapter.run(run_body(thread_id=f"t-other-{number}", text=f"other {number}",
                                                 cwd=str(workspace)))).events()
            assert events[-1]["type"] == "RUN_FINISHED"
            assert holder(demos, f"other {number}") not in ([name], [])
        # The same runtime comes back (its state kept, as a real runtime's session store is).
        back = DemoRuntime(state=down.state)
        demos[name] = back
        await back.start(port=port)

        async def seen_up() -> bool:
            return (await statuses(adapter))[name] == "ok"

        await eventually(seen_up, "the probe sees the runtime back", interval=0.1)
        events = (await adapter.run(resume_body("t-wait", workspace, allow(interrupt)))).events()
        assert events[-1]["outcome"] == {"type": "success"}
        assert sum(back.state.tool_runs.values()) == 1
        again = await adapter.run(resume_body("t-wait", workspace, allow(interrupt)))
        assert sum(back.state.tool_runs.values()) == 1, again.body


async def test_health_lists_every_runtime_and_its_url_only_to_who_may_see_it(
    tmp_path: Path, demos: dict[str, DemoRuntime]
) -> None:
    async with started(tmp_path, None, runtimes=pool_of(demos)) as adapter:
        status, body = await health(adapter)
        assert status == 200 and body["status"] == "ok"
        assert [(item["name"], item["url"], item["reachable"]) for item in body["runtimes"]] == [
            (name, demo.url, True) for name, demo in demos.items()]
    async with started(tmp_path, None, runtimes=pool_of(demos), auth_token="s3cret") as adapter:
        status, body = await health(adapter)
        assert [sorted(item) for item in body["runtimes"]] == [
            ["activeRuns", "capacity", "draining", "name", "reachable", "status"]] * 3


async def test_a_thread_whose_runtime_left_the_pool_with_an_answer_pending_is_lost(
    tmp_path: Path, demos: dict[str, DemoRuntime], workspace: Path
) -> None:
    async with started(tmp_path, None, runtimes=pool_of(demos)) as adapter:
        interrupt = await interrupt_on(adapter, "t-gone", workspace)
    (name,) = [name for name, demo in demos.items() if demo.state.tasks]
    rest = tuple(spec for spec in pool_of(demos) if spec.name != name)
    async with started(tmp_path, None, runtimes=rest) as adapter:
        reply = await adapter.run(resume_body("t-gone", workspace, allow(interrupt)))
        assert reply.status == 409 and reply.json()["error"]["code"] == "EXECUTION_LOST", reply.body
        assert sum(sum(demo.state.tool_runs.values()) for demo in demos.values()) == 0
        thread = (await adapter.get("/threads/t-gone")).json()
        assert thread["state"] == "terminal" and thread["pendingInterrupts"] == []
        assert thread["lastError"] == {"code": "EXECUTION_LOST"}


async def test_an_idle_thread_whose_runtime_left_the_pool_is_pinned_again_and_told_so(
    tmp_path: Path, demos: dict[str, DemoRuntime], workspace: Path
) -> None:
    async with started(tmp_path, None, runtimes=pool_of(demos)) as adapter:
        await adapter.run(run_body(thread_id="t-moved", text="before", cwd=str(workspace)))
    (left,) = holder(demos, "before")
    rest = tuple(spec for spec in pool_of(demos) if spec.name != left)
    async with started(tmp_path, None, runtimes=rest) as adapter:
        events = (await adapter.run(run_body(thread_id="t-moved", text="after", cwd=str(workspace)))).events()
        assert events[-1]["type"] == "RUN_FINISHED"
        (now,) = holder(demos, "after")
        assert now != left
        assert events[0]["type"] == "RUN_STARTED"
        (notice,) = [event for event in events if event.get("name") == "iac-code.runtime.changed.v1"]
        assert events.index(notice) == 1  # right after RUN_STARTED, before any text
        assert notice == {"type": "CUSTOM", "name": "iac-code.runtime.changed.v1",
                          "value": {"schemaVersion": 1, "from": left, "to": now, "history": "unavailable"}}
        assert (await adapter.get("/threads/t-moved")).json()["runtime"] == now
        # The next turn stays there, and says nothing more.
        events = (await adapter.run(run_body(thread_id="t-moved", text="later", cwd=str(workspace)))).events()
        assert holder(demos, "later") == [now]
        assert "iac-code.runtime.changed.v1" not in [event.get("name") for event in events]


async def test_metrics_name_the_runtime(tmp_path: Path, demos: dict[str, DemoRuntime], workspace: Path) -> None:
    specs = pool_of(demos, c={"drain": True})
    async with started(tmp_path, None, runtimes=specs, metrics=True) as adapter:
        for number in range(2):
            await adapter.run(run_body(thread_id=f"t-{number}", text=f"m {number}", cwd=str(workspace)))
        text = (await adapter.get("/metrics")).body.decode()
    for name in ("a", "b"):
        assert f'aguiadapter_runtime_placements_total{{runtime="{name}"}} 1.0' in text
        assert f'aguiadapter_runtime_up{{runtime="{name}"}} 1.0' in text
        assert f'aguiadapter_runtime_active_runs{{runtime="{name}"}} 0.0' in text
    assert 'aguiadapter_runtime_placements_total{runtime="c"}' not in text


async def test_the_operator_command_cancels_a_pooled_threads_task_on_its_own_runtime(
    tmp_path: Path, demos: dict[str, DemoRuntime], workspace: Path
) -> None:
    from aguiadapter.admin.operations import ThreadAdmin
    from aguiadapter.config import Config

    async with started(tmp_path, None, runtimes=pool_of(demos)) as adapter:
        for number in range(2):  # the second one goes to another runtime than the first
            await interrupt_on(adapter, f"t-wait-{number}", workspace)
    admin = ThreadAdmin.for_config(Config(state_dir=tmp_path / "state", runtimes=pool_of(demos),
                                          allowed_cwds=(str(tmp_path / "workspaces"),)))
    await admin.open()
    try:
        record = await admin.find("t-wait-1", None)
        assert record.runtime is not None
        done = await admin.cancel(record)
    finally:
        await admin.close()
    assert done.task_note is None and done.task_state == "TASK_STATE_CANCELED", done
    assert {name: demo.state.total_cancel_calls > 0 for name, demo in demos.items()} == {
        name: name == record.runtime for name in NAMES}


async def test_a_runtime_that_moves_to_a_new_url_keeps_its_threads(
    tmp_path: Path, demos: dict[str, DemoRuntime], workspace: Path
) -> None:
    async with started(tmp_path, None, runtimes=pool_of(demos)) as adapter:
        interrupt = await interrupt_on(adapter, "t-moving", workspace)
        (name,) = [name for name, demo in demos.items() if demo.state.tasks]
        old = demos[name]
        moved = DemoRuntime(state=old.state)  # the same runtime, its state kept, listening elsewhere
        await moved.start()
        await old.close()
        demos[name] = moved
        pool = adapter.app[POOL]
        assert pool is not None
        assert pool.reload(pool_of(demos)) == [f"{name} moved at {moved.url}"]
        await pool.probe()
        events = (await adapter.run(resume_body("t-moving", workspace, allow(interrupt)))).events()
        assert events[-1]["outcome"] == {"type": "success"}
        assert sum(moved.state.tool_runs.values()) == 1
        assert (await adapter.get("/threads/t-moving")).json()["runtime"] == name


async def test_history_of_a_thread_pinned_again_says_its_earlier_conversation_is_unavailable(
    tmp_path: Path, demos: dict[str, DemoRuntime], workspace: Path
) -> None:
    from tests.test_openapi import component_validator

    validator = component_validator("ThreadMessages")
    async with started(tmp_path, None, runtimes=pool_of(demos)) as adapter:
        await adapter.run(run_body(thread_id="t-moved", text="before", cwd=str(workspace)))
        page = (await adapter.get("/threads/t-moved/messages")).json()
        assert "earlier" not in page  # never pinned again: nothing to say
    (left,) = holder(demos, "before")
    rest = tuple(spec for spec in pool_of(demos) if spec.name != left)
    async with started(tmp_path, None, runtimes=rest) as adapter:
        await adapter.run(run_body(thread_id="t-moved", text="after", cwd=str(workspace)))
        reply = await adapter.get("/threads/t-moved/messages")
        assert reply.status == 200
        page = reply.json()
        validator.validate(page)
        # The new conversation only, and a word on the one that stayed behind.
        assert "before" not in str(page["messages"]) and "after" in str(page["messages"])
        assert page["earlier"] == [{"runtime": left, "history": "unavailable", "reason": "removed"}]
    # The old runtime is back in the pool, but down: still unavailable, and why.
    await demos[left].close()
    async with started(tmp_path, None, runtimes=pool_of(demos)) as adapter:
        page = (await adapter.get("/threads/t-moved/messages")).json()
        validator.validate(page)
        assert page["earlier"] == [{"runtime": left, "history": "unavailable", "reason": "down"}]
        assert "after" in str(page["messages"])


async def test_run_errors_name_the_runtime_in_a_pool_of_several_and_a_pool_of_one_keeps_its_series(
    tmp_path: Path, demos: dict[str, DemoRuntime], workspace: Path
) -> None:
    specs = pool_of(demos, b={"drain": True}, c={"drain": True})  # every new thread goes to a
    async with started(tmp_path, None, runtimes=specs, metrics=True) as adapter:
        events = (await adapter.run(run_body(thread_id="t-fail", text="fail now", cwd=str(workspace)))).events()
        assert events[-1]["type"] == "RUN_ERROR"
        code = events[-1]["code"]
        text = (await adapter.get("/metrics")).body.decode()
    assert f'aguiadapter_runtime_run_errors_total{{code="{code}",runtime="a"}} 1.0' in text
    assert f'aguiadapter_run_errors_total{{code="{code}"}} 1.0' in text
    async with started(tmp_path, demos["a"].url, metrics=True) as adapter:  # --a2a-url: a pool of one
        events = (await adapter.run(run_body(thread_id="t-one", text="fail again", cwd=str(workspace)))).events()
        assert events[-1]["type"] == "RUN_ERROR"
        text = (await adapter.get("/metrics")).body.decode()
    assert f'aguiadapter_run_errors_total{{code="{code}"}} 1.0' in text
    assert "aguiadapter_runtime_run_errors_total{" not in text


async def test_the_calls_to_a_pooled_runtime_carry_its_name_in_their_spans(
    tmp_path: Path, demos: dict[str, DemoRuntime], workspace: Path
) -> None:
    import aiohttp
    from aiohttp import web
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind

    from aguiadapter.config import Config
    from aguiadapter.web.app import create_app
    from tests.support.serve import on_loopback

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    config = Config(state_dir=tmp_path / "state", runtimes=pool_of(demos), allowed_cwds=(str(workspace.parent),))
    runner = web.AppRunner(create_app(config, tracer_provider=provider), shutdown_timeout=1.0)
    await on_loopback(runner)
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/"
    adapter = RunningAdapter(url, runner.app, runner, aiohttp.ClientSession(), config)
    try:
        for number in range(3):
            events = (await adapter.run(run_body(thread_id=f"t-{number}", text=f"traced {number}",
                                                 cwd=str(workspace)))).events()
            assert events[-1]["type"] == "RUN_FINISHED"
    finally:
        await adapter.close()
        provider.shutdown()
    calls = [span for span in spans.get_finished_spans()
             if span.kind is SpanKind.CLIENT and span.name == "SendStreamingMessage"]
    named = {}
    for span in calls:
        assert span.attributes is not None
        named[span.attributes["agui.runtime"]] = span.attributes["server.port"]
    # Each call names the runtime it went to (its port says which one it reached).
    assert named == {name: int(demo.url.rstrip("/").rsplit(":", 1)[1]) for name, demo in demos.items()}
