"""Shared fixtures: the demo runtime and the adapter on real loopback sockets.

The harness is imported by the fixtures that use it, so that the pure tests
(``tests/pure``: no socket, no server, no harness) import none of it.
"""

from __future__ import annotations

import faulthandler
import os
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from aguiadapter.demo.runtime import DemoRuntime
    from tests.support.adapter import RunningAdapter


#: Far above any test's time (the slowest, the e2e crash sweeps, take about a
#: minute), far below CI's budget: a test that hangs (a read loop at the end
#: of a stream that never comes) fails its run instead of holding it.
TEST_HANG_SECONDS = 900


def _hung(item: pytest.Item) -> None:
    """Give the output back to the terminal, say which test hung and where
    every thread stands, and end the process (under xdist, the worker: the
    test is reported as crashed)."""
    capture = item.config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        capture.suspend_global_capture(in_=False)
    sys.stderr.write(f"\n{item.nodeid} still running after {TEST_HANG_SECONDS} s: stopped\n")
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    sys.stderr.flush()
    os._exit(3)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """Past :data:`TEST_HANG_SECONDS`, stop the run (:func:`_hung`)."""
    watchdog = threading.Timer(TEST_HANG_SECONDS, _hung, (item,))
    watchdog.daemon = True
    watchdog.start()
    try:
        yield
    finally:
        watchdog.cancel()


@pytest.fixture
async def demo() -> AsyncIterator[DemoRuntime]:
    """The embedded demo runtime, as a separate A2A server on loopback."""
    from tests.support.serve import demo_runtime

    async with demo_runtime() as runtime:
        yield runtime


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A workspace folder inside the allowed root."""
    path = tmp_path / "workspaces" / "session-1"
    path.mkdir(parents=True)
    return path


@pytest.fixture
async def adapter(tmp_path: Path, demo: DemoRuntime) -> AsyncIterator[RunningAdapter]:
    """The adapter in front of the demo runtime, state under ``tmp_path``."""
    from tests.support.adapter import start_adapter

    running = await start_adapter(
        tmp_path / "state",
        demo.url,
        allowed_cwds=(str(tmp_path / "workspaces"),),
    )
    try:
        yield running
    finally:
        await running.close()
