"""DNS rebinding and foreign web pages: which Host and Origin a request may carry.

A page the user visits can reach a server on loopback through a name it
controls (rebinding) or from its own origin. Each row is one such attempt,
with no auth on loopback: what it gets back, and that nothing changed on disk.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from aguiadapter.cli import build_parser, config_from_args
from aguiadapter.config import Config
from aguiadapter.web.app import create_app
from aguiadapter.web.server import AdapterRunner
from aguiadapter.demo.runtime import DemoRuntime
from tests.support.adapter import RunningAdapter, run_body, start_adapter

LISTED = "http://127.0.0.1:5173"


@pytest.fixture
async def open_server(tmp_path: Path, demo: DemoRuntime) -> AsyncIterator[RunningAdapter]:
    running = await start_adapter(
        tmp_path / "state", demo.url, allowed_cwds=(str(tmp_path / "workspaces"),),
        allowed_hosts=("agent.internal",), allowed_origins=(LISTED,),
    )
    try:
        yield running
    finally:
        await running.close()


def snapshot(state: Path) -> dict[str, bytes]:
    return {str(path.relative_to(state)): path.read_bytes() for path in state.rglob("*") if path.is_file()}


async def request(adapter: RunningAdapter, method: str, path: str, headers: dict[str, str],
                  body: Any = None) -> tuple[int, dict[str, str], bytes]:
    async with adapter.session.request(method, adapter.url + path, json=body, headers=headers) as resp:
        return resp.status, dict(resp.headers), await resp.read()


def port_of(adapter: RunningAdapter) -> str:
    return adapter.url.rstrip("/").rsplit(":", 1)[1]


ATTACKS = [
    # (attack, headers, route)
    ("rebound name", {"Host": "evil.example"}, "POST /"),
    ("rebound name with port", {"Host": "evil.example:{port}"}, "POST /"),
    ("rebound name reads health", {"Host": "evil.example:{port}"}, "GET /health"),
    ("rebound name reads a thread", {"Host": "evil.example"}, "GET /threads/t-1"),
    ("rebound name reads the index", {"Host": "evil.example"}, "GET /"),
    ("foreign origin reads the index", {"Origin": "http://evil.example"}, "GET /"),
    ("name ending in localhost text", {"Host": "evil-localhost.example"}, "POST /"),
    ("a name after an IPv6 loopback literal", {"Host": "[::1]evil.example"}, "POST /"),
    ("a name after an IPv6 literal and port", {"Host": "[::1]:{port}evil.example"}, "POST /"),
    ("localhost with a trailing dot", {"Host": "localhost."}, "POST /"),
    ("localhost with a trailing dot and port", {"Host": "localhost.:{port}"}, "POST /"),
    ("a name under localhost with a trailing dot", {"Host": "app.localhost.:{port}"}, "POST /"),
    ("loopback name with a port that is not one", {"Host": "localhost:80@evil.example"}, "POST /"),
    ("a path that ends in localhost", {"Host": "evil.example/.localhost"}, "POST /"),
    ("foreign origin", {"Origin": "http://evil.example"}, "POST /"),
    ("foreign origin on a loopback port", {"Origin": "http://127.0.0.1:1"}, "POST /"),
    ("null origin", {"Origin": "null"}, "POST /"),
    ("foreign origin preflight", {"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"},
     "OPTIONS /"),
    ("listed origin over another scheme", {"Origin": "https://127.0.0.1:5173"}, "POST /"),
]


@pytest.mark.parametrize(("attack", "headers", "route"), ATTACKS, ids=[row[0] for row in ATTACKS])
async def test_a_foreign_host_or_origin_is_refused_and_changes_nothing(
    open_server: RunningAdapter, workspace: Path, attack: str, headers: dict[str, str], route: str
) -> None:
    state = open_server.config.state_dir
    before = snapshot(state)
    method, path = route.split(" ")
    headers = {name: value.format(port=port_of(open_server)) for name, value in headers.items()}
    body = run_body(thread_id="t-1", text="hello", cwd=str(workspace)) if method == "POST" else None
    status, answer_headers, answer = await request(open_server, method, path.lstrip("/"), headers, body)
    assert status == 403, (attack, answer)
    assert answer_headers["Content-Type"].startswith("application/json")
    assert b'"FORBIDDEN"' in answer
    assert "Access-Control-Allow-Origin" not in answer_headers
    assert snapshot(state) == before, "a refused request leaves nothing on disk"


ACCEPTED = [
    ("loopback address", {}),
    ("localhost", {"Host": "localhost:{port}"}),
    ("a name under localhost", {"Host": "app.localhost:{port}"}),
    ("IPv6 loopback", {"Host": "[::1]:{port}"}),
    ("listed host", {"Host": "Agent.Internal:{port}"}),
    ("same origin", {"Origin": "http://127.0.0.1:{port}"}),
    ("listed origin", {"Origin": LISTED}),
]


@pytest.mark.parametrize(("case", "headers"), ACCEPTED, ids=[row[0] for row in ACCEPTED])
async def test_loopback_names_listed_hosts_and_allowed_origins_run(
    open_server: RunningAdapter, workspace: Path, case: str, headers: dict[str, str]
) -> None:
    headers = {name: value.format(port=port_of(open_server)) for name, value in headers.items()}
    body = run_body(thread_id=f"t-{case.replace(' ', '-')}", text="hello", cwd=str(workspace))
    status, answer_headers, answer = await request(open_server, "POST", "", headers, body)
    assert status == 200, (case, answer)
    assert b"RUN_FINISHED" in answer
    cors = answer_headers.get("Access-Control-Allow-Origin")
    assert cors == (LISTED if case == "listed origin" else None)


async def test_a_listed_origin_gets_its_cors_preflight_answered(open_server: RunningAdapter) -> None:
    status, headers, _ = await request(open_server, "OPTIONS", "", {
        "Origin": LISTED, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type, authorization",
    })
    assert status == 204
    assert headers["Access-Control-Allow-Origin"] == LISTED
    assert "POST" in headers["Access-Control-Allow-Methods"]
    allowed = headers["Access-Control-Allow-Headers"].lower()
    assert "content-type" in allowed and "authorization" in allowed and "last-event-id" in allowed
    status, headers, _ = await request(open_server, "GET", "health", {"Origin": LISTED})
    assert status == 200 and headers["Access-Control-Allow-Origin"] == LISTED


async def test_a_rebound_name_is_refused_on_a_listener_that_is_not_loopback(
    tmp_path: Path, demo: DemoRuntime, workspace: Path
) -> None:
    """Open mode checks ``Host`` wherever the connection arrived, not only on a loopback address.

    A Unix socket stands for any listener that is not loopback TCP (a
    container's address, ``0.0.0.0`` reached from outside): the same app,
    the same rule.
    """
    config = Config(state_dir=tmp_path / "state", a2a_url=demo.url, allowed_cwds=(str(workspace.parent),))
    runner = AdapterRunner(create_app(config), shutdown_timeout=1.0)
    await runner.setup()
    path = str(tmp_path / "adapter.sock")
    await aiohttp.web.UnixSite(runner, path).start()
    try:
        async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=path)) as session:
            body = run_body(thread_id="t-unix", text="hello", cwd=str(workspace))
            async with session.post("http://evil.example/", json=body) as resp:
                assert resp.status == 403 and (await resp.json())["error"]["code"] == "FORBIDDEN"
            async with session.get("http://evil.example/health") as resp:
                assert resp.status == 403
            async with session.post("http://localhost/", json=body) as resp:
                assert resp.status == 200 and b"RUN_FINISHED" in await resp.read()
    finally:
        await runner.cleanup()


async def test_open_mode_beyond_loopback_warns_once_at_start(tmp_path: Path) -> None:
    """``--host 0.0.0.0`` without a token says so once; a loopback listener says nothing."""
    said = {}
    for host in ("0.0.0.0", "127.0.0.1"):
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "aguiadapter", "--demo", "--host", host, "--port", "0",
            "--state-dir", str(tmp_path / host), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            env={key: value for key, value in os.environ.items() if not key.startswith("IAC_CODE_AGUI")},
        )
        assert process.stdout is not None
        output = b""
        while b"state:" not in output:
            line = await asyncio.wait_for(process.stdout.readline(), 20)
            assert line, output
            output += line
        await asyncio.sleep(0.3)
        process.send_signal(2)
        rest, _ = await process.communicate()
        said[host] = (output + rest).decode()
    assert said["0.0.0.0"].count("beyond loopback") == 1, said["0.0.0.0"]
    assert "0.0.0.0" in said["0.0.0.0"] and "--allowed-host" in said["0.0.0.0"]
    assert "beyond loopback" not in said["127.0.0.1"]


async def test_with_a_token_a_rebound_name_brings_nothing_and_is_not_limited(
    tmp_path: Path, demo: DemoRuntime, workspace: Path
) -> None:
    """Names other than loopback ones are refused only where nobody is authenticated."""
    shared = await start_adapter(tmp_path / "state", demo.url, auth_token="s3cret")
    try:
        body = run_body(thread_id="t-proxy", text="hello", cwd=str(workspace))
        token = {"Authorization": "Bearer s3cret"}
        status, _, _ = await request(shared, "POST", "", {"Host": "agents.example.com", **token}, body)
        assert status == 200
        status, _, _ = await request(shared, "POST", "", {"Host": "evil.example"}, body)
        assert status == 401
        status, _, answer = await request(shared, "POST", "", {"Origin": "http://evil.example", **token}, body)
        assert status == 403 and b"FORBIDDEN" in answer
    finally:
        await shared.close()


def test_the_lists_come_from_options_or_the_environment(tmp_path: Path) -> None:
    env = {"IAC_CODE_AGUI_ALLOWED_HOSTS": "a.example, B.example",
           "IAC_CODE_AGUI_ALLOWED_ORIGINS": "http://localhost:5173/,https://app.example"}
    config = config_from_args(build_parser(env).parse_args(["--state-dir", str(tmp_path)]), env)
    assert config.allowed_hosts == ("a.example", "b.example")
    assert config.allowed_origins == ("http://localhost:5173", "https://app.example")
    args = build_parser(env).parse_args(["--state-dir", str(tmp_path), "--allowed-origin", "http://x.example:8080"])
    assert config_from_args(args, env).allowed_origins == ("http://x.example:8080",)
    with pytest.raises(SystemExit) as refused:  # a usage error naming the option (exit 2)
        build_parser(env).parse_args(["--allowed-origin", "http://x.example/path"])
    assert refused.value.code == 2
    bad = {**env, "IAC_CODE_AGUI_ALLOWED_ORIGINS": "http://x.example/path"}
    with pytest.raises(ValueError, match="IAC_CODE_AGUI_ALLOWED_ORIGINS: not an origin"):
        config_from_args(build_parser(bad).parse_args(["--demo"]), bad)


async def test_refusals_are_in_the_callers_language(open_server: RunningAdapter) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(open_server.url + "health",
                               headers={"Host": "evil.example", "Accept-Language": "zh-CN"}) as resp:
            assert resp.status == 403
            assert "--allowed-host" in (await resp.json())["error"]["message"]


async def half_sent(port: int, data: bytes) -> asyncio.StreamReader:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    return reader


async def test_connections_that_never_finish_their_headers_are_closed(
    tmp_path: Path, demo: DemoRuntime, workspace: Path
) -> None:
    running = await start_adapter(tmp_path / "state", demo.url, header_timeout_seconds=1.0)
    try:
        port = int(port_of(running))
        before = snapshot(tmp_path / "state")
        readers = [await half_sent(port, b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty") for _ in range(20)]
        readers += [await half_sent(port, b"") for _ in range(5)]
        for reader in readers:
            assert await asyncio.wait_for(reader.read(), 10) == b"", "closed without an answer"
        assert snapshot(tmp_path / "state") == before
        # A request whose headers come in time is served, also as the second one on its connection.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(2):
            writer.write(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            await asyncio.sleep(0.3)
            writer.write(b"\r\n")
            status = await asyncio.wait_for(reader.readline(), 10)
            assert status.startswith(b"HTTP/1.1 200"), status
            length = 0
            while (line := await reader.readline()) != b"\r\n":
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            await reader.readexactly(length)
        writer.close()
    finally:
        await running.close()
