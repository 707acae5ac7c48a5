"""Interop fixtures: the official AG-UI TypeScript client and a headless browser.

The adapter and the demo runtime come from ``tests/conftest.py`` (``demo``,
``adapter``, ``workspace``). What these tests add is a Node project next to
this file (``npm ci`` installs ``@ag-ui/client`` 1.0.0 into ``node_modules``)
and, for the browser test, Debian's ``chromium``. ``tox -e interop`` installs
both first (``tests/prerequisites.py``); without them a test fails and says
how to get them, it never skips.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any, NoReturn

import pytest

from tests.support.agui import judge

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "drive.mjs"
NODE_MODULES = HERE / "node_modules"
DRIVER_TIMEOUT = 60.0


def missing(what: str, step: str) -> NoReturn:
    """Fail the test: a prerequisite is missing (``step`` of tests/prerequisites.py installs it)."""
    pytest.fail(f"{what} is missing: run python tests/prerequisites.py {step} (tox -e interop does)", pytrace=False)


@pytest.fixture(scope="session")
def node() -> str:
    """The ``node`` binary, once ``tests/interop/node_modules`` is installed."""
    node = shutil.which("node")
    if node is None:
        missing("node (Node.js 20 or newer)", "node-modules")
    for package in ("@ag-ui/client", "playwright-core"):
        if not (NODE_MODULES / package / "package.json").exists():
            missing(f"tests/interop/node_modules/{package}", "node-modules")
    return node


@pytest.fixture(scope="session")
def chromium(node: str) -> str:
    """Debian's chromium (or ``$AGUI_INTEROP_CHROMIUM``), driven through ``playwright-core``."""
    chromium = os.environ.get("AGUI_INTEROP_CHROMIUM") or shutil.which("chromium")
    if chromium is None or not Path(chromium).exists():
        missing(chromium or "chromium", "chromium")
    return chromium


def iac_props(cwd: Path, ros_invocation_id: str | None = None, **extra: Any) -> dict[str, Any]:
    """``forwardedProps`` with the ``iacCode`` extension the adapter requires."""
    return {
        "iacCode": {
            "schemaVersion": 1,
            "rosInvocationId": ros_invocation_id or f"inv-{uuid.uuid4()}",
            "cwd": str(cwd),
            **extra,
        }
    }


async def run_node(node: str, script: Path, payload: dict[str, Any], timeout: float = DRIVER_TIMEOUT) -> dict[str, Any]:
    """Run a Node script with *payload* as JSON on stdin; its stdout is one JSON document.

    The subprocess is awaited, never waited for in a blocking call: the adapter
    under test serves from this same event loop.
    """
    proc = await asyncio.create_subprocess_exec(
        node,
        str(script),
        "-",
        cwd=str(HERE),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(json.dumps(payload).encode()), timeout)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"{script.name} did not finish within {timeout} s") from None
    assert proc.returncode == 0, f"{script.name} exited {proc.returncode}:\n{err.decode()}"
    try:
        result: dict[str, Any] = json.loads(out)
    except ValueError:
        raise AssertionError(f"{script.name} printed no JSON:\n{out.decode()}\n{err.decode()}") from None
    return result


async def drive(
    node: str, url: str, thread_id: str, props: dict[str, Any], steps: list[dict[str, Any]],
    *, advertised: str | None = None, **plan: Any,
) -> dict[str, Any]:
    """Run ``drive.mjs`` (``HttpAgent`` from ``@ag-ui/client``) over *steps*; returns its summary.

    Every stream the client received whole (one exchange, no client error)
    meets the AG-UI 1.0 stream checker, strict in ``advertised`` (the profile
    the adapter at ``url`` serves; ``None``: the default): a step the client
    saw cut, re-attached or failed on is judged by its own test.
    """
    summary = await run_node(
        node, DRIVER, {"url": url, "threadId": thread_id, "forwardedProps": props, "steps": steps, **plan}
    )
    for step in summary.get("steps", []):
        whole = step.get("error") is None and len(step.get("exchanges") or ()) == 1
        if whole and step.get("httpStatus") == 200 and step.get("sse"):
            # A connect's stream may follow a live run after its own (the adapter's
            # extension): like RunningAdapter, judge only a run against its input.
            request = None if step.get("kind") == "connect" else step.get("request")
            judge(step["sse"].encode(), advertised=advertised, request=request)
    return summary


def client_warnings(summary: dict[str, Any]) -> list[str]:
    """What the client logged: enforcement strips, reducer complaints, failed runs."""
    return [f"{line['level']}: {line['text']}" for line in summary["console"]]
