"""Adapter replicas as real processes sharing one Redis, and how tests talk to them.

Each :class:`Replica` is ``python -m aguiadapter`` started with ``--port 0``
and ``--store redis://...`` (and ``IAC_CODE_AGUI_STORE`` set to the same URL),
its own ``--state-dir``, in front of one A2A runtime. Its port is read from
the startup banner; its output goes to a log file that a failing test shows.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from typing import Any

import aiohttp

from aguiadapter.store.redis import store as rs
from tests.support.adapter import Reply, run_body
from tests.support.agui import check_stream
from tests.support.eventually import eventually

from .redis_server import signal_and_wait

REPO = Path(__file__).resolve().parents[2]
#: The banner's address, in text or as the JSON line of ``--log-format json``.
_BANNER = re.compile(rb'(?:listening on |"urls": \[")http://127\.0\.0\.1:(\d+)/')
HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream"}
#: The environment variable of ``--store`` (``aguiadapter.config.ENV_STORE``).
ENV_STORE = "IAC_CODE_AGUI_STORE"


class Replica:
    """One adapter process."""

    def __init__(self, name: str, folder: Path, store_url: str, a2a_url: str, *extra: str) -> None:
        self.name = name
        self.folder = folder
        self.log_path = folder / f"{name}.log"
        self.args = [
            sys.executable, "-m", "aguiadapter", "--host", "127.0.0.1", "--port", "0",
            "--state-dir", str(folder / name / "state"), "--store", store_url, "--a2a-url", a2a_url, *extra,
        ]
        self.env = {**os.environ, ENV_STORE: store_url, "PYTHONPATH": str(REPO)}
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""

    async def start(self, timeout: float = 30.0) -> Replica:
        """Start the process and wait for its banner."""
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                self.args, cwd=REPO, env=self.env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        process = self.process

        def port() -> int | None:
            if process.poll() is not None:
                raise RuntimeError(f"replica {self.name} exited with {process.returncode}:\n{self.log()}")
            match = _BANNER.search(self.log_path.read_bytes())
            return int(match.group(1)) if match else None

        self.url = f"http://127.0.0.1:{await eventually(port, f'replica {self.name} listens', timeout=timeout)}/"
        return self

    def log(self) -> str:
        """The tail of the replica's output."""
        return self.log_path.read_text(errors="replace")[-4000:]

    async def kill(self) -> None:
        """``kill -9``: the replica dies without cleaning anything up."""
        await self._signal(signal.SIGKILL)

    async def stop(self) -> None:
        """A clean stop (SIGTERM)."""
        await self._signal(signal.SIGTERM)

    async def _signal(self, sig: int) -> None:
        await signal_and_wait(self.process, sig)


async def post(session: aiohttp.ClientSession, url: str, body: Any, path: str = "") -> Reply:
    """POST JSON and read the whole reply."""
    async with session.post(url + path, data=json.dumps(body), headers=HEADERS) as resp:
        return Reply(resp.status, dict(resp.headers), await resp.read())


async def health(session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    """``GET /health``."""
    async with session.get(url + "health") as resp:
        return dict(await resp.json())


async def cancel(session: aiohttp.ClientSession, url: str, execution_id: str, thread_id: str) -> Reply:
    """The cancel extension route."""
    path = f"extensions/iac-code/v1/executions/{execution_id}/cancel"
    return await post(session, url, {"threadId": thread_id, "rosInvocationId": "invocation-1"}, path)


def error_code(reply: Reply) -> str:
    """The ``error.code`` of a refused request."""
    return str(reply.json()["error"]["code"])


def resume_body(thread_id: str, cwd: str, interrupt_id: str, decision: str = "allow_once") -> dict[str, Any]:
    """A resume that allows (or denies) one permission interrupt."""
    body = run_body(thread_id=thread_id, text=None, cwd=cwd)
    body["resume"] = [{"interruptId": interrupt_id, "status": "resolved", "payload": {"decision": decision}}]
    return body


def interrupts_of(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The interrupts a run ended with."""
    outcome = events[-1]["outcome"]
    assert events[-1]["type"] == "RUN_FINISHED" and outcome["type"] == "interrupt", events[-1]
    return list(outcome["interrupts"])


def session_of(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The value of the run's ``iac-code.session.v1`` event."""
    (event,) = [e for e in events if e.get("name") == "iac-code.session.v1"]
    return dict(event["value"])


class OpenStream:
    """A run whose SSE stream is read while it goes on."""

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self.resp = resp
        self.raw = b""

    async def read_until(self, marker: bytes, timeout: float = 10.0) -> None:
        """Read until ``marker`` appeared in the stream."""
        await asyncio.wait_for(self._read_until(marker), timeout)

    async def _read_until(self, marker: bytes) -> None:
        while marker not in self.raw:
            chunk = await self.resp.content.readany()
            assert chunk, f"stream ended before {marker!r}: {self.raw[-500:]!r}"
            self.raw += chunk

    async def finish(self, timeout: float = 15.0) -> list[dict[str, Any]]:
        """Read to the end and judge the whole stream."""
        self.raw += await asyncio.wait_for(self.resp.read(), timeout)
        return check_stream(self.raw)

    def session(self) -> dict[str, Any]:
        """The session event seen so far."""
        block = next(b for b in self.raw.decode().split("\n\n") if "iac-code.session.v1" in b)
        data = next(line for line in block.split("\n") if line.startswith("data: "))
        return dict(json.loads(data.removeprefix("data: "))["value"])


@asynccontextmanager
async def open_stream(session: aiohttp.ClientSession, url: str, body: Any) -> AsyncIterator[OpenStream]:
    """POST a run and keep its stream open for the test to read."""
    async with session.post(url, data=json.dumps(body), headers=HEADERS) as resp:
        assert resp.status == 200, await resp.read()
        yield OpenStream(resp)


async def stored_record(url: str, thread_id: str) -> Any:
    """The thread's record as the replicas see it (read with a store of our own)."""
    store = rs.store_from_url(url)
    try:
        return await store.load(thread_id)
    finally:
        await store.close()
