"""Serving an aiohttp app of a test on a free loopback port, written once."""

from __future__ import annotations

from typing import TypeVar

from aiohttp import web

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
