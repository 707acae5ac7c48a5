"""Fixtures for end-to-end tests against the real A2A runtime (`iac-code a2a`).

``model_stub`` and ``iac_runtime`` live for the whole session: starting the
runtime and its first turn cost seconds. Neither is bound to an event loop
(the stub serves from its own thread, the runtime is a child process reached
over HTTP), so tests may run in any pytest-asyncio loop scope and may use
function-scoped fixtures such as pytest-aiohttp's ``aiohttp_client``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.support.adapter import RunningAdapter, start_adapter
from tests.support.iac_runtime import BIN_ENV, IacRuntime, find_iac_code
from tests.support.model_stub import ModelStub


@pytest.fixture(scope="session")
def model_stub() -> Iterator[ModelStub]:
    """The scripted OpenAI-compatible model; ``.url`` is its base URL."""
    with ModelStub() as stub:
        yield stub


# loop_scope="session": the fixture's setup and teardown share one loop that
# outlives every test; its value holds no loop-bound state.
@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def iac_runtime(
    model_stub: ModelStub, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[IacRuntime]:
    """A started and warmed-up `iac-code a2a`, pointed at ``model_stub``."""
    executable = find_iac_code()
    if executable is None:
        # A missing runtime is a broken test environment, never a reason to skip.
        pytest.fail(_not_found_message(), pytrace=False)
    runtime = IacRuntime(model_stub.url, root=tmp_path_factory.mktemp("iac"), executable=executable)
    problem = await _start(runtime)
    if problem:
        pytest.fail(f"iac-code a2a did not start: {problem}", pytrace=False)
    model_stub.clear()  # tests should not see the warm-up request
    yield runtime
    await runtime.stop()


async def _start(runtime: IacRuntime) -> str | None:
    """Start the runtime; the error text on failure (kept out of an ``except``
    block so pytest shows the message, not a chained traceback)."""
    try:
        await runtime.start()
    except RuntimeError as exc:
        return str(exc)
    return None


def _not_found_message() -> str:
    override = os.environ.get(BIN_ENV)
    if override:
        where = f"${BIN_ENV}={override!r} is not an executable file"
    else:
        where = f"not next to {sys.executable} nor on PATH"
    return (
        f"iac-code executable not found ({where}). Install 'iac-code[a2a]==0.16.0' and "
        f"'a2a-sdk==1.2.0' into this environment or set ${BIN_ENV}; "
        "see tests/e2e/tox-e2e-notes.md"
    )


@pytest.fixture
def iac_workspace(iac_runtime: IacRuntime, request: pytest.FixtureRequest) -> Path:
    """A fresh empty folder under the runtime's root, to use as this test's
    ``cwd``. Not named ``workspace``: tests/conftest.py has one (inside the
    adapter's allowed root) and an e2e test may need both."""
    return iac_runtime.workspace(request.node.name)


@pytest.fixture
async def iac_adapter(tmp_path: Path, iac_runtime: IacRuntime) -> AsyncIterator[RunningAdapter]:
    """The adapter pointed at the real runtime, with its bearer token."""
    running = await start_adapter(
        tmp_path / "state",
        iac_runtime.url,
        a2a_token=iac_runtime.token,
        allowed_cwds=(str(iac_runtime.workspaces_root),),
    )
    try:
        yield running
    finally:
        await running.close()


@pytest.fixture
async def own_runtime(model_stub: ModelStub, tmp_path: Path) -> AsyncIterator[IacRuntime]:
    """A runtime of this test's own (the shared stub model behind it):
    killing or restarting it disturbs no other test."""
    runtime = IacRuntime(model_stub.url, root=tmp_path / "iac")
    await runtime.start()
    try:
        yield runtime
    finally:
        await runtime.stop()
