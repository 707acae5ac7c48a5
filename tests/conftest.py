"""Shared fixtures: the demo runtime and the adapter on real loopback sockets.

The harness is imported by the fixtures that use it, so that the pure tests
(``tests/pure``: no socket, no server, no harness) import none of it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from aguiadapter.demo.runtime import DemoRuntime
    from tests.support.adapter import RunningAdapter


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
