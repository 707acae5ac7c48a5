"""The suites' guards against a hanging test: past its limit the test's
process prints every stack and ends (tests/conftest.py), so a run fails
instead of waiting for CI's budget to run out; and a test reading a stream
until a mark stops at the stream's end or a silence, naming what came
(tests/support/reading.py), instead of spinning until that limit."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from tests.support.reading import read_until
from tests.support.serve import on_loopback, port_of

HERE = Path(__file__).resolve().parents[1]


def test_a_test_that_hangs_ends_its_run_with_its_stack(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(
        "import tests.conftest as guard\n"
        "from tests.conftest import pytest_runtest_protocol  # noqa: F401\n"
        "guard.TEST_HANG_SECONDS = 1\n"
    )
    (tmp_path / "test_hangs.py").write_text("import time\n\ndef test_waits_forever():\n    time.sleep(60)\n")
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
         str(tmp_path / "test_hangs.py")],
        capture_output=True, text=True, cwd=HERE, timeout=50, env={"PYTHONPATH": str(HERE), "PATH": "/usr/bin:/bin"},
    )
    assert time.monotonic() - started < 30
    assert done.returncode != 0
    assert "test_waits_forever still running after 1 s" in done.stderr, done.stderr[-2000:]
    assert "time.sleep" in done.stderr or "test_hangs.py" in done.stderr, "no stack"


async def _stream_server(body: list[bytes], *, linger: float = 0.0) -> tuple[web.AppRunner, str]:
    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for piece in body:
            await response.write(piece)
        await asyncio.sleep(linger)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/", handler)
    runner = await on_loopback(web.AppRunner(app))
    return runner, f"http://127.0.0.1:{port_of(runner)}/"


async def test_a_stream_read_until_a_mark_ends_when_the_stream_ends_first() -> None:
    runner, url = await _stream_server([b"data: one\n\n"])
    try:
        async with aiohttp.ClientSession() as session, session.get(url) as resp:
            started = time.monotonic()
            with pytest.raises(AssertionError, match="ended before b'two'"):
                await read_until(resp, b"two", seconds=30)
            assert time.monotonic() - started < 5
    finally:
        await runner.cleanup()


async def test_a_stream_read_until_a_mark_ends_when_it_stays_silent() -> None:
    runner, url = await _stream_server([b"data: one\n\n"], linger=1.5)
    try:
        async with aiohttp.ClientSession() as session, session.get(url) as resp:
            with pytest.raises(AssertionError, match=r"nothing for 0\.3 s before b'two'"):
                await read_until(resp, b"two", seconds=0.3)
    finally:
        await runner.cleanup()


async def test_a_stream_read_until_a_mark_returns_what_came() -> None:
    runner, url = await _stream_server([b"data: one\n\n", b"data: two\n\n", b"data: two\n\n"])
    try:
        async with aiohttp.ClientSession() as session, session.get(url) as resp:
            seen = await read_until(resp, b"two", 2)
            assert seen.count(b"data: ") == 3
    finally:
        await runner.cleanup()
