"""A primary, its replica and three sentinels, all ``redis-server`` children on loopback.

:class:`SentinelSet` starts them on ports it picks, waits until the
sentinels know the replica and each other (so that a failover can be
voted), and gives the store URL ``redis+sentinel://.../mymaster``. A test
kills the primary with ``kill -9`` and waits for the promotion.
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from tests.support.eventually import eventually

from .redis_server import REDIS_SERVER, RedisServer, answers_ping, free_port, signal_and_wait

SERVICE = "mymaster"
#: How long the sentinels wait before they call a silent primary down.
DOWN_AFTER_MS = 1000


class ReplicaServer(RedisServer):
    """A ``redis-server`` that replicates ``primary_port`` (and can be told to stop)."""

    def __init__(self, folder: Path, primary_port: int) -> None:
        super().__init__(folder)
        self.primary_port = primary_port

    def command(self) -> list[str]:
        return [*super().command(), "--replicaof", "127.0.0.1", str(self.primary_port)]


class SentinelProcess:
    """``redis-server sentinel.conf --sentinel`` watching one primary."""

    def __init__(self, folder: Path, primary_port: int) -> None:
        self.folder = folder
        self.port = free_port()
        self.primary_port = primary_port
        self.process: subprocess.Popen[bytes] | None = None
        folder.mkdir(parents=True, exist_ok=True)

    async def start(self) -> None:
        config = self.folder / "sentinel.conf"
        config.write_text("\n".join([
            f"port {self.port}", "bind 127.0.0.1", f"dir {self.folder}", f"logfile {self.folder / 'sentinel.log'}",
            f"sentinel monitor {SERVICE} 127.0.0.1 {self.primary_port} 2",
            f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}",
            f"sentinel failover-timeout {SERVICE} 3000",  # a split vote is retried after twice this
            f"sentinel parallel-syncs {SERVICE} 1", "",
        ]))
        assert REDIS_SERVER is not None, "redis-server is missing: run python tests/prerequisites.py redis-server"
        self.process = subprocess.Popen([REDIS_SERVER, str(config), "--sentinel"], stdin=subprocess.DEVNULL)
        await eventually(lambda: answers_ping(self.port), f"sentinel on {self.port} answers", timeout=10, interval=0.05)

    async def stop(self) -> None:
        process, self.process = self.process, None
        await signal_and_wait(process, 15)

    def log(self) -> str:
        path = self.folder / "sentinel.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else "(no log)"


class SentinelSet:
    """One primary, one replica, three sentinels."""

    def __init__(self, folder: Path) -> None:
        self.primary = RedisServer(folder / "primary")
        self.replica = ReplicaServer(folder / "replica", self.primary.port)
        self.sentinels = [SentinelProcess(folder / f"sentinel-{n}", self.primary.port) for n in range(3)]

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{sentinel.port}" for sentinel in self.sentinels)
        return f"redis+sentinel://{hosts}/{SERVICE}"

    def servers(self) -> list[RedisServer]:
        return [self.primary, self.replica]

    async def start(self) -> None:
        await self.primary.start()
        await self.replica.start()
        await asyncio.gather(*(sentinel.start() for sentinel in self.sentinels))
        await eventually(self._ready, "the sentinels know the replica and each other", timeout=30, interval=0.2)

    async def _ready(self) -> bool:
        for sentinel in self.sentinels:
            replicas = await self._ask(sentinel, "SENTINEL", "REPLICAS", SERVICE)
            others = await self._ask(sentinel, "SENTINEL", "SENTINELS", SERVICE)
            if len(replicas) < 1 or len(others) < 2:
                return False
        return await self.synced()

    async def primary_port(self) -> int:
        """The port of the primary the sentinels name now."""
        host_port = await self._ask(self.sentinels[0], "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
        return int(host_port[1])

    async def synced(self) -> bool:
        """Whether the replica holds every write of the primary (offsets equal)."""
        try:
            primary = await self._info(self.primary.port)
            replica = await self._info(self.replica.port)
        except OSError:
            return False
        return bool(primary.get("connected_slaves") == 1 and
                    primary.get("master_repl_offset") == replica.get("slave_repl_offset"))

    async def failed_over(self) -> bool:
        """Whether the replica is the primary now, for every sentinel and for itself."""
        for sentinel in self.sentinels:
            host_port = await self._ask(sentinel, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
            if int(host_port[1]) != self.replica.port:
                return False
        return (await self._info(self.replica.port)).get("role") == "master"

    async def stop(self) -> None:
        await asyncio.gather(*(sentinel.stop() for sentinel in self.sentinels))
        await asyncio.gather(self.primary.stop(), self.replica.stop())

    def logs(self) -> str:
        parts = [f"--- {name}\n{server.log()}" for name, server in (("primary", self.primary), ("replica", self.replica))]
        parts += [f"--- sentinel {n}\n{s.log()}" for n, s in enumerate(self.sentinels)]
        return "\n".join(parts)

    @staticmethod
    async def _ask(sentinel: SentinelProcess, *command: Any) -> Any:
        client = aioredis.Redis(host="127.0.0.1", port=sentinel.port, socket_timeout=2)
        try:
            return await client.execute_command(*command)
        finally:
            await client.aclose()

    @staticmethod
    async def _info(port: int) -> dict[str, Any]:
        client = aioredis.Redis(host="127.0.0.1", port=port, socket_timeout=2, socket_connect_timeout=1)
        try:
            return dict(await client.info("replication"))
        except (aioredis.ConnectionError, aioredis.TimeoutError) as exc:
            raise OSError(str(exc)) from exc
        finally:
            await client.aclose()
