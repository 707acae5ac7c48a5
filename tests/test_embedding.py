"""The adapter mounted as a sub-app of someone else's aiohttp application."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import aiohttp
from aiohttp import web

from aguiadapter.demo.runtime import DemoRuntime
from tests.support.adapter import run_body
from tests.support.agui import check_stream, texts
from tests.support.serve import on_loopback

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "embed_in_aiohttp.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("embed_in_aiohttp", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_the_embedding_example_serves_runs_under_its_prefix(tmp_path: Path, demo: DemoRuntime) -> None:
    parent = load_example().build_parent(tmp_path / "state", a2a_url=demo.url, token="t0ken")
    runner = web.AppRunner(parent, shutdown_timeout=0.5)
    await on_loopback(runner)
    base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    auth = {"Authorization": "Bearer t0ken"}
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(base + "/") as resp:
                assert await resp.text() == "the host application\n"
            async with session.get(base + "/agui/health") as resp:
                assert (await resp.json())["protocol"] == "ag-ui"
            body = run_body(thread_id="embedded", text="hi from the host", cwd=str(tmp_path))
            async with session.post(base + "/agui/", json=body, headers=auth) as resp:
                events = check_stream(await resp.read())
            assert "hi from the host" in texts(events)
            async with session.post(base + "/agui/", json=body) as resp:
                assert resp.status == 401
            # The parent accepts 256 MiB uploads; the adapter still stops at 12 MiB.
            big = json.dumps(run_body(thread_id="big", text="x" * (13 * 1024 * 1024), cwd=str(tmp_path)))
            async with session.post(base + "/agui/", data=big, headers={**auth, "Content-Type": "application/json"}) as resp:
                assert resp.status == 413
    finally:
        await runner.cleanup()


async def test_errors_under_the_prefix_are_the_adapters_and_the_parents_stay_its_own(
    tmp_path: Path, demo: DemoRuntime
) -> None:
    from aguiadapter import AdapterRunner

    parent = load_example().build_parent(tmp_path / "state", a2a_url=demo.url, token=None)
    runner = AdapterRunner(parent, shutdown_timeout=0.5)
    await on_loopback(runner)
    base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(base + "/agui/nowhere", headers={"Accept-Language": "zh-CN"}) as resp:
                assert resp.status == 404 and (await resp.json())["error"]["code"] == "NOT_FOUND"
            async with session.delete(base + "/agui/") as resp:
                assert resp.status == 405 and set(resp.headers["Allow"].split(",")) == {"GET", "HEAD", "POST"}
                assert (await resp.json())["error"]["code"] == "METHOD_NOT_ALLOWED"
            async with session.get(base + "/elsewhere") as resp:
                assert resp.status == 404 and resp.content_type == "text/plain", "the parent's own answer"
            # Served through AdapterRunner, even the parser's refusals are JSON, on any path.
            for path in ("/agui/health", "/"):
                async with session.get(base + path, headers={"X-Big": "v" * 9000}) as resp:
                    assert resp.status == 431 and (await resp.json())["error"]["code"] == "HEADERS_TOO_LARGE"
    finally:
        await runner.cleanup()


async def test_two_adapters_in_one_process_share_nothing(tmp_path: Path, demo: DemoRuntime) -> None:
    from aguiadapter import Config, create_app

    parent = web.Application()
    parent.add_subapp("/a/", create_app(Config(state_dir=tmp_path / "a", a2a_url=demo.url)))
    parent.add_subapp("/b/", create_app(Config(state_dir=tmp_path / "b", a2a_url=demo.url, auth_token="only-b")))
    runner = web.AppRunner(parent, shutdown_timeout=0.5)
    await on_loopback(runner)
    base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    body = run_body(thread_id="same-thread", text="hello", cwd=str(tmp_path))
    try:
        async with aiohttp.ClientSession() as session:
            async with session.post(base + "/a/", json=body) as resp:
                assert resp.status == 200
                await resp.read()
            async with session.post(base + "/b/", json=body) as resp:
                assert resp.status == 401
    finally:
        await runner.cleanup()
    assert list((tmp_path / "a" / "threads").iterdir()) and not list((tmp_path / "b" / "threads").iterdir())
