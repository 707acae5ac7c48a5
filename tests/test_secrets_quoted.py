"""A runtime that quotes the request's own credentials back: they reach neither a log line nor the client."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.support.adapter import run_body
from tests.support.agui import check_stream
from tests.support.serve import on_loopback, port_of

KEY = "provider-key-7f3a9c21"  # not shaped like sk-... or api_key=...: only the adapter knows it is secret
CLOUD_SECRET = "cloud-secret-0b8e55d4"


@pytest.fixture
async def quoting_runtime() -> AsyncIterator[str]:
    """An A2A endpoint whose every JSON-RPC call fails, quoting the credentials the request carried."""

    async def rpc(request: web.Request) -> web.Response:
        call = await request.json()
        metadata = json.dumps(call)
        quoted = [value for value in (KEY, CLOUD_SECRET) if value in metadata]
        code = -32602 if "invalid-params" in metadata else -32603
        message = f"provider refused the credentials {' and '.join(quoted)!s}: 401 Unauthorized"
        return web.json_response({"jsonrpc": "2.0", "id": call.get("id"), "error": {"code": code, "message": message}})

    app = web.Application()
    app.router.add_post("/", rpc)
    runner = web.AppRunner(app)
    await on_loopback(runner)
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        await runner.cleanup()


async def start_server(tmp_path: Path, runtime: str, log_format: str) -> tuple[asyncio.subprocess.Process, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aguiadapter", "--port", "0", "--state-dir", str(tmp_path / "state"),
        "--a2a-url", runtime, "--log-format", log_format, "--log-level", "DEBUG",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=dict(os.environ),
    )
    assert process.stdout is not None
    while True:
        line = (await asyncio.wait_for(process.stdout.readline(), 20)).decode()
        assert line, "the server exited during startup"
        if "listening on" in line:
            return process, line.split("listening on ", 1)[1].split()[0].rstrip(",")
        if line.startswith("{") and json.loads(line)["message"] == "listening":  # the banner as JSON
            return process, json.loads(line)["urls"][0]


@pytest.mark.parametrize("log_format", ["text", "json"])
async def test_credentials_quoted_by_the_runtime_reach_no_log_line_and_no_run_error(
    tmp_path: Path, quoting_runtime: str, log_format: str
) -> None:
    process, url = await start_server(tmp_path, quoting_runtime, log_format)
    messages: list[str] = []
    try:
        async with aiohttp.ClientSession() as session:
            for thread, text in (("t-internal", "hello"), ("t-params", "invalid-params please")):
                body: dict[str, Any] = run_body(thread_id=thread, text=text, cwd=str(tmp_path),
                                                llmApiKey=KEY,
                                                alibabaCloud={"accessKeyId": "LTAI-id-123456",
                                                              "accessKeySecret": CLOUD_SECRET})
                async with session.post(url, json=body) as resp:
                    raw = await resp.read()
                if resp.status == 200:
                    events = check_stream(raw)
                    assert events[-1]["type"] == "RUN_ERROR"
                    messages.append(events[-1]["message"])
                else:
                    messages.append(json.loads(raw)["error"]["message"])
                assert KEY.encode() not in raw and CLOUD_SECRET.encode() not in raw
    finally:
        process.send_signal(signal.SIGINT)
        output = (await process.communicate())[0].decode()
    assert any("provider refused the credentials ***" in message for message in messages), messages
    assert "provider refused the credentials" in output, "the runtime's words are logged, masked"
    assert KEY not in output and CLOUD_SECRET not in output
    stored = b"".join(path.read_bytes() for path in (tmp_path / "state").rglob("*") if path.is_file())
    assert KEY.encode() not in stored and CLOUD_SECRET.encode() not in stored


@pytest.fixture
async def remembering_runtime() -> AsyncIterator[str]:
    """An A2A endpoint whose every call fails quoting every credential it was ever sent (a runtime whose
    error text holds a key from an earlier turn, as a provider's cached client would)."""
    seen: list[str] = []

    async def rpc(request: web.Request) -> web.Response:
        call = await request.json()
        metadata = json.dumps(call)
        seen.extend(value for value in (KEY, CLOUD_SECRET) if value in metadata and value not in seen)
        message = f"provider refused the credentials {' and '.join(seen)}: 401 Unauthorized"
        # Invalid params: the run error passes the runtime's words on.
        return web.json_response({"jsonrpc": "2.0", "id": call.get("id"), "error": {"code": -32602,
                                                                                   "message": message}})

    app = web.Application()
    app.router.add_post("/", rpc)
    runner = web.AppRunner(app)
    await on_loopback(runner)
    port = port_of(runner)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("log_format", ["text", "json"])
async def test_a_key_quoted_in_a_later_turn_that_did_not_send_it_is_masked_too(
    tmp_path: Path, remembering_runtime: str, log_format: str
) -> None:
    process, url = await start_server(tmp_path, remembering_runtime, log_format)
    try:
        async with aiohttp.ClientSession() as session:
            first = run_body(thread_id="t-1", text="hello", cwd=str(tmp_path), llmApiKey=KEY,
                             alibabaCloud={"accessKeyId": "LTAI-id-123456", "accessKeySecret": CLOUD_SECRET})
            async with session.post(url, json=first) as resp:
                assert check_stream(await resp.read())[-1]["type"] == "RUN_ERROR"
            # Another request, without credentials: outside the first one's context.
            later = run_body(thread_id="t-2", text="hello again", cwd=str(tmp_path))
            async with session.post(url, json=later) as resp:
                raw = await resp.read()
            events = check_stream(raw)
            assert events[-1]["type"] == "RUN_ERROR" and "provider refused the credentials ***" in events[-1]["message"]
            assert KEY.encode() not in raw and CLOUD_SECRET.encode() not in raw
    finally:
        process.send_signal(signal.SIGINT)
        output = (await process.communicate())[0].decode()
    assert output.count("provider refused the credentials") >= 2, output
    assert KEY not in output and CLOUD_SECRET not in output
