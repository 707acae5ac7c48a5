"""Servers of the tests on free loopback ports, written once: an aiohttp app's
runner, and the embedded demo runtime."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any, TypeVar

from aiohttp import web

from aguiadapter.demo.runtime import DemoRuntime

Runner = TypeVar("Runner", bound=web.BaseRunner)


async def on_loopback(runner: Runner, host: str = "127.0.0.1") -> Runner:
    """Set ``runner`` up and listen on a port the OS picks; its port is
    ``runner.addresses[0][1]`` (aiohttp's public view of its sockets)."""
    await runner.setup()
    await web.TCPSite(runner, host, 0).start()
    return runner


def port_of(runner: web.BaseRunner) -> int:
    """The port ``runner`` listens on."""
    port: int = runner.addresses[0][1]
    return port


@contextlib.asynccontextmanager
async def demo_runtime(**options: Any) -> AsyncIterator[DemoRuntime]:
    """The embedded demo runtime as a separate A2A server on loopback
    (``options``: :class:`DemoRuntime`'s, e.g. ``token``), closed on exit."""
    runtime = DemoRuntime(**options)
    await runtime.start()
    try:
        yield runtime
    finally:
        await runtime.close()


@contextlib.asynccontextmanager
async def thread_service(store: Any, a2a_url: str, **options: Any) -> AsyncIterator[Any]:
    """A started :class:`~aguiadapter.service.thread_service.ThreadService` on
    ``store`` in front of the A2A runtime at ``a2a_url``; shut down after."""
    from aguiadapter.a2a.client import A2AClient
    from aguiadapter.service.thread_service import ThreadService

    client = A2AClient(a2a_url)
    running = ThreadService(store, client, **options)
    await running.start()
    try:
        yield running
    finally:
        await running.shutdown()
        await client.close()
