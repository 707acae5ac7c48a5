"""A real Redis Cluster on loopback: three primaries, three replicas.

:class:`Cluster` starts six ``redis-server --cluster-enabled yes`` on ports
it picks, joins them with ``redis-cli --cluster create --cluster-replicas 1``
and waits until every node says ``cluster_state:ok``. The store reaches it
with ``redis+cluster://`` naming two of the nodes.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from redis.crc import key_slot

from tests.support.eventually import eventually

from .redis_server import ClusterMember

REDIS_CLI = shutil.which("redis-cli")


class Cluster:
    """Six cluster members made into three shards."""

    def __init__(self, folder: Path) -> None:
        self.nodes = [ClusterMember(folder / f"node-{n}") for n in range(6)]

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port},127.0.0.1:{self.nodes[1].port}/"

    async def start(self) -> None:
        await asyncio.gather(*(node.start() for node in self.nodes))
        assert REDIS_CLI is not None, "redis-cli is missing: run python tests/prerequisites.py redis-server"
        addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
        created = await asyncio.to_thread(
            subprocess.run, [REDIS_CLI, "--cluster", "create", *addresses, "--cluster-replicas", "1", "--cluster-yes"],
            capture_output=True, timeout=60,
        )
        assert created.returncode == 0, created.stdout.decode()[-2000:] + created.stderr.decode()[-2000:]
        await eventually(self._ready, "every node of the cluster is ok", timeout=30, interval=0.2)

    async def _ready(self) -> bool:
        """Every node ok, and each of the three replicas linked to its primary."""
        linked = 0
        for node in self.nodes:
            info = await self._ask(node.port, "CLUSTER", "INFO")
            if b"cluster_state:ok" not in info:
                return False
            replication = dict(await self._ask(node.port, "INFO", "replication"))
            linked += replication.get("role") == "slave" and replication.get("master_link_status") == "up"
        text = await self._ask(self.nodes[0].port, "CLUSTER", "NODES")
        return linked == 3 and text.count(b"slave") == 3

    async def replica_of_slot_of(self, key: str) -> ClusterMember:
        """The replica of the shard that serves ``key``'s slot now (from ``CLUSTER NODES``)."""
        slot = key_slot(key.encode())
        text = await self._ask(self.nodes[0].port, "CLUSTER", "NODES")
        rows = [line.split() for line in (text.decode() if isinstance(text, bytes) else str(text)).splitlines()]
        owner = next(row[0] for row in rows if "master" in row[2] and any(
            _holds(part, slot) for part in row[8:]))
        port = next(int(row[1].split("@")[0].rsplit(":", 1)[1]) for row in rows if row[3] == owner)
        return next(node for node in self.nodes if node.port == port)

    async def fail_over(self, replica: ClusterMember) -> None:
        """A planned ``CLUSTER FAILOVER`` on ``replica``; waits until it is a primary."""
        await self._ask(replica.port, "CLUSTER", "FAILOVER")

        async def promoted() -> bool:
            return dict(await self._ask(replica.port, "INFO", "replication")).get("role") == "master"

        await eventually(promoted, "the replica took its shard over", timeout=20, interval=0.1)

    async def stop(self) -> None:
        await asyncio.gather(*(node.stop() for node in self.nodes))

    @staticmethod
    async def _ask(port: int, *command: Any) -> Any:
        client = aioredis.Redis(host="127.0.0.1", port=port, socket_timeout=5)
        try:
            answer = await client.execute_command(*command)
            return answer.encode() if isinstance(answer, str) else answer
        finally:
            await client.aclose()


def _holds(part: str, slot: int) -> bool:
    """Whether a slot range of ``CLUSTER NODES`` (``a-b`` or ``a``) holds ``slot``."""
    if part.startswith("["):
        return False  # a slot being moved
    low, _, high = part.partition("-")
    return int(low) <= slot <= int(high or low)
