"""``GET /metrics``: prometheus-client's families, read with its own parser, moving as runs happen."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from aguiadapter import Config, create_app
from aguiadapter.a2a.client import A2AClient
from aguiadapter.a2a.messages import permission_part
from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.protocol.inputs import ResumeEntry
from aguiadapter.protocol.resume import check_resume
from aguiadapter.threads import machine as tm
from aguiadapter.store.file.store import FileThreadStore
from aguiadapter.web.app import create_metrics_app
from aguiadapter.web.keys import METRICS_URLS
from tests.support.adapter import run_body, start_adapter
from tests.support.eventually import eventually
from tests.support.serve import on_loopback
from tests.support.reading import read_until

Families = dict[str, Any]

#: Every family an operator can count on, with its Prometheus type.
FAMILIES = {
    "process_resident_memory_bytes": "gauge",
    "process_cpu_seconds": "counter",
    "process_open_fds": "gauge",
    "python_gc_objects_collected": "counter",
    "python_info": "gauge",
    "aguiadapter_build_info": "gauge",
    "aguiadapter_runs_started": "counter",
    "aguiadapter_runs": "counter",
    "aguiadapter_run_errors": "counter",
    "aguiadapter_refusals": "counter",
    "aguiadapter_events_relayed": "counter",
    "aguiadapter_first_event_seconds": "histogram",
    "aguiadapter_run_duration_seconds": "histogram",
    "aguiadapter_run_events": "histogram",
    "aguiadapter_a2a_request_seconds": "histogram",
    "aguiadapter_active_runs": "gauge",
    "aguiadapter_pending_interrupt_threads": "gauge",
    "aguiadapter_store_pending_interrupt_threads": "gauge",
}


async def scrape(session: aiohttp.ClientSession, url: str) -> Families:
    """``GET <url>metrics``, parsed by prometheus-client."""
    async with session.get(url + "metrics") as resp:
        assert resp.status == 200, await resp.text()
        assert resp.headers["Content-Type"].startswith("text/plain; version=")
        text = await resp.text()
    return {family.name: family for family in text_string_to_metric_families(text)}


def sample(families: Families, name: str, suffix: str = "", **labels: str) -> float:
    """The value of one sample (``suffix``: ``_total``, ``_count``...), 0 when absent."""
    wanted = name + suffix
    found: list[Sample] = [s for s in families[name].samples if s.name == wanted and s.labels == labels]
    return found[0].value if found else 0.0


def interrupt_of(events: list[dict[str, Any]]) -> dict[str, Any]:
    outcome = events[-1]["outcome"]
    assert outcome["type"] == "interrupt", events[-1]
    (interrupt,) = outcome["interrupts"]
    return dict(interrupt)


async def test_the_families_exist_with_their_types(tmp_path: Path, demo: DemoRuntime) -> None:
    running = await start_adapter(tmp_path / "s", demo.url, metrics=True)
    try:
        families = await scrape(running.session, running.url)
    finally:
        await running.close()
    assert {name: families[name].type for name in FAMILIES if name in families} == FAMILIES
    assert sample(families, "process_resident_memory_bytes") > 1_000_000
    assert sample(families, "process_open_fds") > 3
    # Known outcomes and methods are there from the start, at zero.
    assert sample(families, "aguiadapter_runs", "_total", outcome="disconnected") == 0
    assert sample(families, "aguiadapter_a2a_request_seconds", "_count", method="CancelTask") == 0
    build = families["aguiadapter_build_info"].samples[0]
    assert build.labels["version"] and build.value == 1


async def test_the_families_move_as_runs_succeed_interrupt_are_refused_and_lose_their_client(
    tmp_path: Path, demo: DemoRuntime, workspace: Path
) -> None:
    running = await start_adapter(tmp_path / "s", demo.url, metrics=True)
    cwd = str(workspace)
    try:
        session, url = running.session, running.url
        assert (await running.run(run_body(thread_id="m-ok", text="hello", cwd=cwd))).events()[-1]["type"] == "RUN_FINISHED"
        interrupt = interrupt_of((await running.run(run_body(thread_id="m-int", text="permission", cwd=cwd))).events())
        refused = await running.run(run_body(thread_id="m-int", text="again", cwd=cwd))
        assert refused.json()["error"]["code"] == "RESUME_REQUIRED"
        failed = await running.run(run_body(thread_id="m-fail", text="fail", cwd=cwd))
        assert failed.events()[-1]["code"] == "A2A_EXECUTION_FAILED"
        after = await scrape(session, url)

        resume = run_body(thread_id="m-int", text=None, cwd=cwd)
        resume["resume"] = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "allow_once"}}]
        assert (await running.run(resume)).events()[-1]["outcome"] == {"type": "success"}
        resumed = await scrape(session, url)

        body = run_body(thread_id="m-gone", text="slow 30", cwd=cwd)
        async with aiohttp.ClientSession() as client, client.post(url, json=body) as resp:
            await read_until(resp, b"TEXT_MESSAGE_CONTENT")
            streaming = await scrape(session, url)
        # The client left mid-run: the adapter cancels the runtime's task and counts it.

        async def counted() -> bool:
            return sample(await scrape(session, url), "aguiadapter_runs", "_total", outcome="disconnected") == 1

        await eventually(counted, "the disconnected run is counted")
        gone = await scrape(session, url)
    finally:
        await running.close()

    runs = lambda families, outcome: sample(families, "aguiadapter_runs", "_total", outcome=outcome)  # noqa: E731
    assert [runs(after, o) for o in ("success", "interrupt", "error", "disconnected")] == [1, 1, 1, 0]
    assert sample(after, "aguiadapter_runs_started", "_total") == 3
    assert sample(after, "aguiadapter_run_errors", "_total", code="A2A_EXECUTION_FAILED") == 1
    assert sample(after, "aguiadapter_refusals", "_total", code="RESUME_REQUIRED") == 1
    assert sample(after, "aguiadapter_pending_interrupt_threads") == 1
    assert sample(after, "aguiadapter_store_pending_interrupt_threads") == 1
    assert sample(after, "aguiadapter_first_event_seconds", "_count") == 3
    assert sample(after, "aguiadapter_run_duration_seconds", "_count", outcome="interrupt") == 1
    assert sample(after, "aguiadapter_run_events", "_count") == 3
    assert sample(after, "aguiadapter_events_relayed", "_total") >= 3 * 4
    assert sample(after, "aguiadapter_a2a_request_seconds", "_count", method="SendStreamingMessage") == 3
    assert sample(after, "aguiadapter_active_runs") == 0

    assert runs(resumed, "success") == 2
    assert sample(resumed, "aguiadapter_pending_interrupt_threads") == 0
    assert sample(resumed, "aguiadapter_store_pending_interrupt_threads") == 0
    assert sample(resumed, "aguiadapter_a2a_request_seconds", "_count", method="GetTask") >= 1

    assert sample(streaming, "aguiadapter_active_runs") == 1
    assert sample(gone, "aguiadapter_active_runs") == 0
    assert sample(gone, "aguiadapter_a2a_request_seconds", "_count", method="CancelTask") == 1
    assert sample(gone, "aguiadapter_run_duration_seconds", "_count", outcome="disconnected") == 1


async def answer_behind_the_adapters_back(demo: DemoRuntime, state_dir: Path, thread_id: str) -> None:
    """The runtime takes the pending permission's answer, as if a run of ours
    had sent it and died before it could say so."""
    record = await FileThreadStore(state_dir).load(thread_id)
    assert record is not None and record.task_id is not None
    envelope = record.pending_interrupts[0].envelope.fields
    message = {"messageId": f"direct-{thread_id}", "contextId": record.context_id, "taskId": record.task_id,
               "role": "ROLE_USER", "parts": [permission_part(envelope, "allow_once")]}
    client = A2AClient(demo.url)
    try:
        async for _ in client.stream_message(message):
            pass
    finally:
        await client.close()


async def test_a_retried_answer_counts_by_how_it_ends_or_as_reported(
    tmp_path: Path, demo: DemoRuntime, workspace: Path
) -> None:
    running = await start_adapter(tmp_path / "s", demo.url, metrics=True)
    store = FileThreadStore(running.config.state_dir)
    cwd = str(workspace)
    try:
        # Follow: the runtime took the answer already, the client's resume follows its task to the end.
        follow = interrupt_of((await running.run(run_body(thread_id="m-follow", text="permission", cwd=cwd))).events())
        await answer_behind_the_adapters_back(demo, running.config.state_dir, "m-follow")
        before = await scrape(running.session, running.url)
        resume = run_body(thread_id="m-follow", text=None, cwd=cwd)
        resume["resume"] = [{"interruptId": follow["id"], "status": "resolved", "payload": {"decision": "allow_once"}}]
        assert (await running.run(resume)).events()[-1]["outcome"] == {"type": "success"}
        assert sum(demo.state.tool_runs.values()) == 1, "followed, not sent again"
        followed = await scrape(running.session, running.url)

        # Report: the resume that carried the answer died after the runtime took
        # it; its retry is only told how that run ended.
        dead = interrupt_of((await running.run(run_body(thread_id="m-report", text="permission", cwd=cwd))).events())
        answer = {"interruptId": dead["id"], "status": "resolved", "payload": {"decision": "allow_once"}}
        record = await store.load("m-report")
        assert record is not None
        entry = ResumeEntry(interrupt_id=dead["id"], status="resolved", payload=answer["payload"])
        answers = check_resume([entry], [item.interrupt for item in record.pending_interrupts], {})
        tm.apply(record, tm.Resume(tm.RunBinding("run-dead", "digest", "exec-x", "invocation-1"), answers))
        await store.save(record)  # as the resume's process left it when it died
        await answer_behind_the_adapters_back(demo, running.config.state_dir, "m-report")
        retry = run_body(thread_id="m-report", text=None, cwd=cwd)
        retry["resume"] = [answer]
        assert (await running.run(retry)).events()[-1]["outcome"] == {"type": "success"}
        assert sum(demo.state.tool_runs.values()) == 2, "reported, not sent again"
        reported = await scrape(running.session, running.url)
    finally:
        await running.close()

    runs = lambda families, outcome: sample(families, "aguiadapter_runs", "_total", outcome=outcome)  # noqa: E731
    started = lambda families: sample(families, "aguiadapter_runs_started", "_total")  # noqa: E731
    assert runs(followed, "success") - runs(before, "success") == 1
    assert started(followed) - started(before) == 1
    assert runs(before, "reported") == runs(followed, "reported") == 0
    assert runs(reported, "reported") == 1, "a report is counted apart from the runs that did work"
    assert runs(reported, "success") == runs(followed, "success")
    assert started(reported) - started(followed) == 2  # the interrupted turn and the report
    assert sample(reported, "aguiadapter_run_duration_seconds", "_count", outcome="reported") == 1
    assert sample(reported, "aguiadapter_active_runs") == 0
    assert not [s for s in reported["aguiadapter_run_errors"].samples if s.value]


async def test_metrics_are_off_by_default(tmp_path: Path, demo: DemoRuntime) -> None:
    plain = await start_adapter(tmp_path / "a", demo.url)
    try:
        async with plain.session.get(plain.url + "metrics") as resp:
            assert resp.status == 404
    finally:
        await plain.close()


async def test_a_metrics_port_serves_them_off_the_main_listener(tmp_path: Path, demo: DemoRuntime, workspace: Path) -> None:
    running = await start_adapter(tmp_path / "s", demo.url, metrics_port=0)
    try:
        (metrics_url,) = running.app[METRICS_URLS]
        async with running.session.get(running.url + "metrics") as resp:
            assert resp.status == 404  # not on the public listener
        await running.run(run_body(thread_id="mp-1", text="hello", cwd=str(workspace)))
        families = await scrape(running.session, metrics_url.removesuffix("metrics"))
    finally:
        await running.close()
    assert sample(families, "aguiadapter_runs", "_total", outcome="success") == 1
    # The listener stops with the app.
    async with aiohttp.ClientSession() as session:
        try:
            async with session.get(metrics_url) as resp:
                raise AssertionError(f"still answering: {resp.status}")
        except aiohttp.ClientConnectionError:
            pass


async def test_two_adapters_in_one_process_count_apart(tmp_path: Path, demo: DemoRuntime, workspace: Path) -> None:
    # An embedder mounts each adapter's metrics app where it wants them.
    parent = web.Application()
    first = create_app(Config(state_dir=tmp_path / "a", a2a_url=demo.url, metrics=True))
    second = create_app(Config(state_dir=tmp_path / "b", a2a_url=demo.url, metrics=True))
    parent.add_subapp("/a/", first)
    parent.add_subapp("/b/", second)
    parent.add_subapp("/internal/b/", create_metrics_app(second))
    runner = web.AppRunner(parent, shutdown_timeout=0.5)
    await on_loopback(runner)
    base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        async with aiohttp.ClientSession() as session:
            for number in range(2):
                body = run_body(thread_id=f"t-{number}", text="hi", cwd=str(workspace))
                async with session.post(base + "/a/", json=body) as resp:
                    assert resp.status == 200
                    await resp.read()
            a = await scrape(session, base + "/a/")
            b = await scrape(session, base + "/b/")
            internal = await scrape(session, base + "/internal/b/")
    finally:
        await runner.cleanup()
    assert sample(a, "aguiadapter_runs", "_total", outcome="success") == 2
    assert sample(b, "aguiadapter_runs", "_total", outcome="success") == 0
    assert sample(internal, "aguiadapter_runs_started", "_total") == 0
