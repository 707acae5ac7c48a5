"""OpenTelemetry traces: one trace per run, from the client's traceparent into the runtime's requests."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import signal
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import attrs
import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from aguiadapter.config import Config
from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.logs import JsonFormatter
from aguiadapter.telemetry import tracing_wanted
from aguiadapter.telemetry.tracing import TraceIdsFilter
from aguiadapter.web.app import create_app
from tests.support.adapter import RunningAdapter, run_body
from tests.support.eventually import eventually
from tests.support.serve import on_loopback
from tests.support.reading import read_until

REPO = Path(__file__).resolve().parents[1]
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
RUNTIME_TOKEN = "runtime-token-" + "9f8e7d6c5b4a"


@attrs.define
class Traced:
    """An adapter whose spans go to memory, in front of a runtime that records headers."""

    adapter: RunningAdapter
    spans: InMemorySpanExporter
    runtime: DemoRuntime

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    async def settled(self, count: int) -> list[ReadableSpan]:
        """The finished spans once the server spans of ``count`` requests ended
        (a server span ends just after its response's last byte)."""
        await eventually(lambda: len([s for s in self.finished() if s.kind is SpanKind.SERVER]) >= count,
                         f"{count} server spans end")
        return self.finished()


@pytest.fixture
async def traced(tmp_path: Path) -> AsyncIterator[Traced]:
    runtime = DemoRuntime(token=RUNTIME_TOKEN, record_headers=True)
    await runtime.start()
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    config = Config(state_dir=tmp_path / "state", a2a_url=runtime.url, a2a_token=RUNTIME_TOKEN, auth_token="client-token-1234")
    app = create_app(config, tracer_provider=provider)
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await on_loopback(runner)
    port = runner.addresses[0][1]
    running = RunningAdapter(f"http://127.0.0.1:{port}/", app, runner, aiohttp.ClientSession(), config)
    try:
        yield Traced(running, spans, runtime)
    finally:
        await running.close()
        await runtime.close()
        provider.shutdown()


AUTH = {"Authorization": "Bearer client-token-1234"}


def named(spans: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


def hex_trace(span: ReadableSpan) -> str:
    assert span.context is not None
    return format(span.context.trace_id, "032x")


def hex_span(span: ReadableSpan) -> str:
    assert span.context is not None
    return format(span.context.span_id, "016x")


def parent_of(span: ReadableSpan) -> str | None:
    return None if span.parent is None else format(span.parent.span_id, "016x")


async def test_a_run_continues_the_clients_trace_into_the_runtime(traced: Traced, workspace: Path) -> None:
    body = run_body(thread_id="tr-1", text="hello", cwd=str(workspace))
    events = (await traced.adapter.run(body, headers={**AUTH, "traceparent": TRACEPARENT})).events()
    assert events[-1]["type"] == "RUN_FINISHED"
    spans = await traced.settled(1)

    assert {hex_trace(span) for span in spans} == {TRACE_ID}, "one trace, the client's"
    (server,) = named(spans, "POST /")
    (run,) = named(spans, "agui.run")
    (send,) = named(spans, "SendStreamingMessage")
    assert server.kind is SpanKind.SERVER and parent_of(server) == PARENT_ID
    assert parent_of(run) == hex_span(server)
    assert send.kind is SpanKind.CLIENT and parent_of(send) == hex_span(run)
    assert server.attributes is not None and server.attributes["http.response.status_code"] == 200
    assert server.attributes["http.route"] == "/"

    (task_id,) = traced.runtime.state.tasks
    assert run.attributes == {
        "agui.thread_id": "tr-1",
        "agui.run_id": body["runId"],
        "agui.execution_id": run.attributes["agui.execution_id"],
        "agui.resume": False,
        "agui.outcome": "success",
        "a2a.task_id": task_id,
        "agui.events": len(events),
    }
    assert str(run.attributes["agui.execution_id"]).startswith("exec-")
    assert [event.name for event in run.events] == ["first runtime event"]
    assert send.attributes is not None and send.attributes["rpc.method"] == "SendStreamingMessage"

    # The runtime got the trace context of the very request that reached it.
    (received,) = [r for r in traced.runtime.requests if r.rpc_method == "SendStreamingMessage"]
    assert received.headers["traceparent"] == f"00-{TRACE_ID}-{hex_span(send)}-01"
    assert "authorization" not in received.headers, "the recorder keeps no credential"


async def test_each_run_without_a_traceparent_is_a_trace_of_its_own(traced: Traced, workspace: Path) -> None:
    for thread in ("tr-a", "tr-b"):
        assert (await traced.adapter.run(run_body(thread_id=thread, text="hello", cwd=str(workspace)), AUTH)).status == 200
    spans = await traced.settled(2)
    runs = named(spans, "agui.run")
    assert len(runs) == 2 and len({hex_trace(run) for run in runs}) == 2
    for run in runs:
        assert run.parent is not None and not run.parent.is_remote  # under its own server span
        same = sorted(s.name for s in spans if hex_trace(s) == hex_trace(run))
        assert same == ["POST /", "SendStreamingMessage", "agui.run"]
    sent = {r.headers["traceparent"].split("-")[1] for r in traced.runtime.requests if r.rpc_method}
    assert sent == {hex_trace(run) for run in runs}


async def test_an_interrupt_a_refusal_and_the_resume_are_traced(traced: Traced, workspace: Path) -> None:
    cwd = str(workspace)
    first = (await traced.adapter.run(run_body(thread_id="tr-int", text="permission", cwd=cwd), AUTH)).events()
    (interrupt,) = first[-1]["outcome"]["interrupts"]
    refused = await traced.adapter.run(run_body(thread_id="tr-int", text="again", cwd=cwd), AUTH)
    assert refused.json()["error"]["code"] == "RESUME_REQUIRED"
    resume = run_body(thread_id="tr-int", text=None, cwd=cwd)
    resume["resume"] = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "allow_once"}}]
    assert (await traced.adapter.run(resume, AUTH)).events()[-1]["outcome"] == {"type": "success"}
    spans = await traced.settled(3)

    interrupted, resumed = sorted(named(spans, "agui.run"), key=lambda s: s.start_time or 0)
    assert interrupted.attributes is not None and interrupted.attributes["agui.outcome"] == "interrupt"
    assert resumed.attributes is not None and resumed.attributes["agui.resume"] is True
    assert resumed.attributes["agui.outcome"] == "success"
    assert resumed.attributes["agui.execution_id"] == interrupted.attributes["agui.execution_id"]
    calls = {s.name for s in spans if s.kind is SpanKind.CLIENT and parent_of(s) == hex_span(resumed)}
    assert "SendStreamingMessage" in calls
    # Whether the input still waits is asked during admission (which can still
    # refuse the resume): under the request's own span, before its run opens.
    (request,) = [s for s in named(spans, "POST /") if hex_span(s) == parent_of(resumed)]
    admission = [s for s in spans if s.kind is SpanKind.CLIENT and parent_of(s) == hex_span(request)]
    assert "GetTask" in {s.name for s in admission}
    assert all((s.end_time or 0) <= (resumed.start_time or 0) for s in admission)
    (refusal,) = [s for s in named(spans, "POST /") if (s.attributes or {}).get("http.response.status_code") == 409]
    assert refusal.attributes is not None and refusal.attributes["agui.error_code"] == "RESUME_REQUIRED"
    assert not [s for s in spans if hex_trace(s) == hex_trace(refusal) and s.name == "agui.run"]


async def test_a_client_that_leaves_gets_a_disconnected_run_and_a_traced_cancel(traced: Traced, workspace: Path) -> None:
    body = run_body(thread_id="tr-gone", text="slow 30", cwd=str(workspace))
    async with aiohttp.ClientSession() as client, client.post(traced.adapter.url, json=body, headers=AUTH) as resp:
        await read_until(resp, b"TEXT_MESSAGE_CONTENT", seconds=30)
    (run,) = await eventually(lambda: named(traced.finished(), "agui.run"), "the run span ends")
    assert run.attributes is not None and run.attributes["agui.outcome"] == "disconnected"
    (cancel,) = named(traced.finished(), "CancelTask")
    assert parent_of(cancel) == hex_span(run)
    (received,) = [r for r in traced.runtime.requests if r.rpc_method == "CancelTask"]
    assert received.headers["traceparent"].split("-")[1:3] == [hex_trace(run), hex_span(cancel)]


async def test_no_secret_and_no_message_text_in_any_span(traced: Traced, workspace: Path) -> None:
    key, words = "sk-" + "live0123456789abcdef", "a sentence nobody should find in a span"
    cloud = {"accessKeyId": "AKID-0123456789", "accessKeySecret": "SECRET-0123456789", "securityToken": "STS-0123456789"}
    body = run_body(thread_id="tr-secret", text=f"hello {words}", cwd=str(workspace), llmApiKey=key, alibabaCloud=cloud)
    assert (await traced.adapter.run(body, {**AUTH, "traceparent": TRACEPARENT})).status == 200
    spans = await traced.settled(1)
    shown = json.dumps([
        [span.name, dict(span.attributes or {}), [(e.name, dict(e.attributes or {})) for e in span.events],
         dict(span.resource.attributes)]
        for span in spans
    ])
    for secret in (key, words, "hello", *cloud.values(), RUNTIME_TOKEN, "client-token-1234"):
        assert secret not in shown


async def test_log_lines_carry_the_trace_and_span_ids(traced: Traced, workspace: Path) -> None:
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(self.format(record))

    handler = Keep()
    handler.setFormatter(JsonFormatter())
    handler.addFilter(TraceIdsFilter())
    logger = logging.getLogger("aguiadapter")
    logger.addHandler(handler)
    previous = logger.level
    logger.setLevel(logging.INFO)
    try:
        body = run_body(thread_id="tr-log", text="hello", cwd=str(workspace))
        assert (await traced.adapter.run(body, {**AUTH, "traceparent": TRACEPARENT})).status == 200
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)
    (run,) = named(await traced.settled(1), "agui.run")
    (line,) = [json.loads(r) for r in records if json.loads(r)["message"] == "run ended"]
    assert (line["trace_id"], line["span_id"]) == (TRACE_ID, hex_span(run))


# ----------------------------------------------------- the OTEL_* variables
@pytest.mark.parametrize(
    ("env", "wanted"),
    [
        ({}, None),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
        ({"OTEL_TRACES_EXPORTER": "console"}, "OTEL_TRACES_EXPORTER"),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, None),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, None),
        ({"OTEL_SDK_DISABLED": "false", "OTEL_TRACES_EXPORTER": "otlp"}, "OTEL_TRACES_EXPORTER"),
        ({"OTEL_SERVICE_NAME": "agui", "OTEL_RESOURCE_ATTRIBUTES": "a=b"}, None),
    ],
)
def test_which_otel_variables_turn_tracing_on(env: dict[str, str], wanted: str | None) -> None:
    assert tracing_wanted(env) == wanted


def _python(script: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], cwd=REPO, env={**clean, **env},
        capture_output=True, text=True, timeout=timeout,
    )


def test_without_otel_settings_opentelemetry_is_never_imported(tmp_path: Path) -> None:
    done = _python(
        f"""
        import asyncio, os, sys, aiohttp
        from aiohttp import web
        from aguiadapter import Config, create_app
        from aguiadapter.telemetry import tracer_provider_from_env

        async def main():
            provider = tracer_provider_from_env(os.environ)
            app = create_app(Config(state_dir={str(tmp_path)!r}, demo=True, metrics=True), tracer_provider=provider)
            runner = web.AppRunner(app)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            url = "http://127.0.0.1:%d/" % runner.addresses[0][1]
            body = {{"threadId": "t", "runId": "r", "state": {{}}, "tools": [], "context": [],
                     "messages": [{{"id": "m", "role": "user", "content": "hello"}}],
                     "forwardedProps": {{"iacCode": {{"schemaVersion": 1, "rosInvocationId": "i", "cwd": {str(tmp_path)!r}}}}}}}
            async with aiohttp.ClientSession() as session:
                async with session.post(url, json=body) as resp:
                    assert b"RUN_FINISHED" in await resp.read()
                async with session.get(url + "metrics") as resp:
                    assert resp.status == 200
            await runner.cleanup()
            print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))

        asyncio.run(main())
        """,
        {"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9/"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_otel_settings_without_the_extra_stop_the_start_with_one_line(tmp_path: Path) -> None:
    # A folder that shadows the opentelemetry package as if it were not installed.
    shadow = tmp_path / "shadow"
    (shadow / "opentelemetry").mkdir(parents=True)
    (shadow / "opentelemetry" / "__init__.py").write_text("raise ImportError('No module named opentelemetry')\n")
    done = subprocess.run(
        [sys.executable, "-m", "aguiadapter", "--demo", "--port", "0", "--state-dir", str(tmp_path / "state")],
        cwd=REPO, capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": f"{shadow}{os.pathsep}{REPO}", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"},
    )
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("aguiadapter: cannot start: OTEL_EXPORTER_OTLP_ENDPOINT is set, but tracing needs the otel extra")
    assert "pip install 'aguiadapter[otel]'" in line


async def test_the_command_line_exports_spans_over_otlp_as_the_variables_say(tmp_path: Path) -> None:
    """The documented minimal setup: OTEL_EXPORTER_OTLP_ENDPOINT, spans arriving at a collector."""
    received: list[ExportTraceServiceRequest] = []

    async def collect(request: web.Request) -> web.Response:
        received.append(ExportTraceServiceRequest.FromString(await request.read()))
        return web.Response(body=b"", content_type="application/x-protobuf")

    collector = web.Application()
    collector.router.add_post("/v1/traces", collect)
    runner = web.AppRunner(collector)
    await on_loopback(runner)
    port = runner.addresses[0][1]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env = {**clean, "PYTHONPATH": str(REPO), "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
           "OTEL_SERVICE_NAME": "agui-edge", "OTEL_BSP_SCHEDULE_DELAY": "50"}
    log = tmp_path / "adapter.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "aguiadapter", "--demo", "--port", "0", "--state-dir", str(tmp_path / "state"),
             "--log-format", "json"],
            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
    try:
        url = await _banner_url(log, process)
        body = run_body(thread_id="otlp-1", text="hello", cwd=str(tmp_path))
        async with aiohttp.ClientSession() as session, session.post(url, json=body, headers={"traceparent": TRACEPARENT}) as resp:
            assert b"RUN_FINISHED" in await resp.read()
    finally:
        process.terminate()
        # The collector answers the last export while the adapter stops: wait off the loop.
        await asyncio.to_thread(process.wait, 20)
        await runner.cleanup()
    spans = [
        (span.name, resource.resource)
        for request in received for resource in request.resource_spans
        for scope in resource.scope_spans for span in scope.spans
        if span.trace_id.hex() == TRACE_ID
    ]
    assert {name for name, _ in spans} >= {"POST /", "agui.run", "SendStreamingMessage"}
    services = {a.value.string_value for _, r in spans for a in r.attributes if a.key == "service.name"}
    assert services == {"agui-edge"}
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    (ended,) = [line for line in lines if line["message"] == "run ended"]
    assert ended["trace_id"] == TRACE_ID and len(ended["span_id"]) == 16


async def _banner_url(log: Path, process: subprocess.Popen[bytes]) -> str:
    def listening() -> str | None:
        if process.poll() is not None:
            raise AssertionError(f"the adapter stopped:\n{log.read_text()}")
        for line in log.read_text(errors="replace").splitlines():
            if " listening on http://" in line:
                return line.split(" listening on ", 1)[1].split(",")[0].strip()
            if line.startswith("{") and json.loads(line)["message"] == "listening":  # --log-format json
                return str(json.loads(line)["urls"][0])
        return None

    return await eventually(listening, "the adapter prints its banner", timeout=30)


async def test_health_probes_make_no_span(traced: Traced, workspace: Path) -> None:
    for _ in range(5):
        async with traced.adapter.session.get(traced.adapter.url + "health") as resp:
            assert resp.status == 200
    assert (await traced.adapter.run(run_body(thread_id="t-after", text="hi", cwd=str(workspace)),
                                     headers=AUTH)).status == 200
    spans = await traced.settled(1)
    assert not [span for span in spans if "health" in span.name], [span.name for span in spans]
    assert named(spans, "POST /")


async def test_a_hanging_collector_does_not_stretch_shutdown(tmp_path: Path) -> None:
    """A collector that takes connections and never answers: SIGTERM still
    ends the process within the documented bound (no drain here: 2 s)."""
    hung: list[asyncio.StreamWriter] = []

    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hung.append(writer)
        await reader.read(1 << 20)

    collector = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    port = collector.sockets[0].getsockname()[1]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_") and not k.startswith("IAC_CODE_AGUI")}
    env = {**clean, "PYTHONPATH": str(REPO), "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
           "OTEL_BSP_SCHEDULE_DELAY": "50"}
    log = tmp_path / "adapter.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "aguiadapter", "--demo", "--port", "0", "--state-dir", str(tmp_path / "state"),
             "--log-format", "json", "--quiet-health"],
            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
    try:
        url = await _banner_url(log, process)
        async with aiohttp.ClientSession() as session:
            for n in range(3):
                body = run_body(thread_id=f"hung-{n}", text="hello", cwd=str(tmp_path))
                async with session.post(url, json=body) as resp:
                    assert b"RUN_FINISHED" in await resp.read()
                async with session.get(url + "health") as resp:
                    assert resp.status == 200
        await eventually(lambda: bool(hung), "the exporter is stuck on the collector")
        process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        code = await asyncio.to_thread(process.wait, 30)
        took = time.monotonic() - signalled
    finally:
        if process.poll() is None:
            process.kill()
        collector.close()
        for writer in hung:
            writer.close()
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    assert code == 0 and took < 2.0, (took, lines[-3:])
    assert any(line["message"].startswith("trace exporter did not finish") for line in lines)
    access = [line["message"] for line in lines if line["logger"] == "aiohttp.access"]
    assert any('"POST / ' in line for line in access) and not any("/health" in line for line in access), access
