"""Fixtures of the replica tests: a private redis-server, adapter processes.

These tests need the ``redis-server`` program (Debian package
``redis-server``, which ``tox -e replicas`` installs first with
``tests/prerequisites.py``) and the ``redis`` extra; without them they fail
and say what to install, they never skip.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest

from aguiadapter.demo.runtime import DemoRuntime

from .redis_server import RedisServer
from .replicas import Replica

StartReplicas = Callable[..., Awaitable[list[Replica]]]


@pytest.fixture
async def redis_server(tmp_path: Path) -> AsyncIterator[RedisServer]:
    """A redis-server without persistence."""
    server = RedisServer(tmp_path / "redis")
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def redis_aof(tmp_path: Path) -> AsyncIterator[RedisServer]:
    """A redis-server with the append-only file (survives kill -9 and restart)."""
    server = RedisServer(tmp_path / "redis-aof", persistent=True)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    """A client session for the tests' requests."""
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
async def start_replicas(tmp_path: Path, demo: DemoRuntime) -> AsyncIterator[StartReplicas]:
    """``await start_replicas(n, store_url, *options)``: n adapter processes
    in front of the (in-process) demo runtime; all stopped at the end, and
    their logs printed (pytest shows them when a test fails)."""
    started: list[Replica] = []
    counter = iter(range(100))

    async def start(count: int, store_url: str, *extra: str) -> list[Replica]:
        options = ("--allowed-cwd", str(tmp_path / "workspaces"), *extra)
        replicas = [
            Replica(f"replica-{next(counter)}", tmp_path / "replicas", store_url, demo.url, *options)
            for _ in range(count)
        ]
        started.extend(replicas)
        await asyncio.gather(*(replica.start() for replica in replicas))
        return replicas

    try:
        yield start
    finally:
        await asyncio.gather(*(replica.stop() for replica in started))
        for replica in started:
            print(f"----- {replica.name} ({replica.url})\n{replica.log()}")
