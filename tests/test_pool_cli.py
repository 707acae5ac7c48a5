"""The pool on the command line: the options that exclude each other, and
SIGHUP reading the runtimes file again (a bad file keeps the pool)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp

from aguiadapter.demo.runtime import DemoRuntime
from tests.support.eventually import eventually


def run_cli_now(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("IAC_CODE_AGUI_")}
    return subprocess.run([sys.executable, "-m", "aguiadapter", "--port", "0", *args], env={**clean, **(env or {})},
                          capture_output=True, text=True, timeout=60, check=False)


def test_an_a2a_url_beside_a_pool_exits_2_with_one_line(tmp_path: Path) -> None:
    for args, env in [
        (("--a2a-url", "http://127.0.0.1:9/", "--runtime", "a=http://127.0.0.1:8/"), None),
        (("--a2a-url", "http://127.0.0.1:9/", "--runtimes-file", str(tmp_path / "r.toml")), None),
        (("--a2a-url", "http://127.0.0.1:9/"), {"IAC_CODE_AGUI_RUNTIMES": "a=http://127.0.0.1:8/"}),
        (("--runtime", "a=http://127.0.0.1:8/", "--demo"), None),
    ]:
        done = run_cli_now(*args, env=env)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, (args, done.stderr)
        assert "exclude each other" in done.stderr and done.stdout == ""


def test_a_bad_pool_is_one_line_before_anything_starts(tmp_path: Path) -> None:
    done = run_cli_now("--runtime", "Bad Name=http://127.0.0.1:8/")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "runtime name" in done.stderr
    twice = run_cli_now("--runtime", "a=http://127.0.0.1:8/", "--runtime", "a=http://127.0.0.1:9/")
    assert twice.returncode == 2 and "named twice" in twice.stderr
    (tmp_path / "r.toml").write_text('[[runtime]]\nname = "a"\n', encoding="utf-8")
    missing = run_cli_now("--runtimes-file", str(tmp_path / "r.toml"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "needs a name and a url" in missing.stderr


def pool_file(path: Path, runtimes: dict[str, DemoRuntime], **drain: bool) -> None:
    path.write_text("".join(
        f'[[runtime]]\nname = "{name}"\nurl = "{demo.url}"\ndrain = {str(drain.get(name, False)).lower()}\n\n'
        for name, demo in runtimes.items()), encoding="utf-8")


async def test_sighup_reads_the_runtimes_file_again_and_a_bad_one_keeps_the_pool(tmp_path: Path) -> None:
    demos = {name: DemoRuntime() for name in ("a", "b", "c")}
    for demo in demos.values():
        await demo.start()
    path = tmp_path / "runtimes.toml"
    pool_file(path, {"a": demos["a"], "b": demos["b"]})
    clean = {k: v for k, v in os.environ.items() if not k.startswith("IAC_CODE_AGUI_")}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aguiadapter", "--port", "0", "--state-dir", str(tmp_path / "state"),
        "--runtimes-file", str(path), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=clean,
    )
    assert process.stdout is not None
    output: list[str] = []

    async def read_output() -> None:
        assert process.stdout is not None
        async for line in process.stdout:
            output.append(line.decode())

    reader = asyncio.create_task(read_output())
    try:
        match = await eventually(lambda: re.search(r"listening on (http://\S+/)", "".join(output)),
                                 "the server listens", timeout=30)
        url = match.group(1)
        async with aiohttp.ClientSession() as session:

            async def runtimes() -> list[dict[str, Any]]:
                async with session.get(url + "health") as resp:
                    listed: list[dict[str, Any]] = (await resp.json())["runtimes"]
                    return listed

            assert [(item["name"], item["draining"]) for item in await runtimes()] == [("a", False), ("b", False)]
            pool_file(path, demos, b=True)
            process.send_signal(signal.SIGHUP)

            async def reloaded() -> bool:
                return [(item["name"], item["draining"], item["reachable"]) for item in await runtimes()] == [
                    ("a", False, True), ("b", True, True), ("c", False, True)]

            await eventually(reloaded, "the new pool is served")
            path.write_text("[[runtime]\n", encoding="utf-8")
            process.send_signal(signal.SIGHUP)
            await eventually(lambda: "runtimes file not taken" in "".join(output), "the bad file is logged")
            assert [item["name"] for item in await runtimes()] == ["a", "b", "c"]
            said = [line for line in output if "runtimes file not taken" in line]
            assert len(said) == 1 and "not TOML" in said[0]
    finally:
        process.send_signal(signal.SIGINT)
        await asyncio.wait_for(process.wait(), 20)
        reader.cancel()
        for demo in demos.values():
            await demo.close()
