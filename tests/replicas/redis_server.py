"""A private ``redis-server`` for one test: free loopback port, temp folder.

Tests never use a system Redis: each starts its own server with
:class:`RedisServer` and stops it at the end. ``persistent=True`` turns on
the append-only file (fsync on every write) so that a restart, even after
``kill -9``, finds every key again.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import redis.asyncio as aioredis

from tests.support.eventually import eventually

REDIS_SERVER = shutil.which("redis-server")


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def answers_ping(port: int) -> bool:
    """Whether a Redis server on the port answers ``PING`` (plain socket)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """One ``redis-server`` child process on 127.0.0.1."""

    def __init__(self, folder: Path, *, persistent: bool = False) -> None:
        self.folder = folder
        self.persistent = persistent
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        folder.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    def command(self) -> list[str]:
        """The server's command line."""
        if REDIS_SERVER is None:
            raise RuntimeError("redis-server is missing: run python tests/prerequisites.py redis-server (tox -e replicas does)")
        persistence = ["--appendonly", "yes", "--appendfsync", "always"] if self.persistent else ["--appendonly", "no"]
        return [
            REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.folder),
            "--save", "", *persistence, "--daemonize", "no", "--protected-mode", "yes",
            "--maxmemory-policy", "noeviction", "--logfile", str(self.folder / "redis.log"),
        ]

    async def start(self, timeout: float = 10.0) -> None:
        """Start the server and wait until it answers."""
        process = self.process = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL)

        def answers() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"redis-server exited with {process.returncode}:\n{self.log()}")
            return answers_ping(self.port)

        await eventually(answers, f"redis-server answers PING on port {self.port}", timeout=timeout, interval=0.05)

    def log(self) -> str:
        """The tail of the server's log file."""
        path = self.folder / "redis.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else "(no log)"

    async def kill(self) -> None:
        """``kill -9`` the server (what a crash looks like)."""
        await self._signal(signal.SIGKILL)

    async def stop(self) -> None:
        """A clean shutdown (SIGTERM)."""
        await self._signal(signal.SIGTERM)

    async def restart(self) -> None:
        """Kill the server and start it again on the same port and folder."""
        await self.kill()
        await self.start()

    async def _signal(self, sig: int) -> None:
        process, self.process = self.process, None
        await signal_and_wait(process, sig)


class ClusterMember(RedisServer):
    """A ``redis-server`` in cluster mode (its slots are given by the test)."""

    def __init__(self, folder: Path) -> None:
        super().__init__(folder)
        self.bus_port = free_port()

    def command(self) -> list[str]:
        # An explicit bus port: the default (port + 10000) may be taken or out of range.
        return [*super().command(), "--cluster-enabled", "yes", "--cluster-port", str(self.bus_port),
                "--cluster-config-file", str(self.folder / "nodes.conf"), "--cluster-node-timeout", "2000"]


class ClusterNode(ClusterMember):
    """A ``redis-server`` in cluster mode that serves every slot by itself."""

    async def start(self, timeout: float = 10.0) -> None:
        await super().start(timeout)
        client = aioredis.Redis(host="127.0.0.1", port=self.port)
        try:
            await client.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)

            async def ready() -> bool:
                info = await client.execute_command("CLUSTER", "INFO")
                text = info.decode() if isinstance(info, bytes) else str(info)
                return "cluster_state:ok" in text

            await eventually(ready, "the one-node cluster serves every slot", timeout=timeout, interval=0.05)
        finally:
            await client.aclose()


async def signal_and_wait(process: subprocess.Popen[bytes] | None, sig: int) -> None:
    """Send ``sig`` and wait up to 10 s for the process to end, then kill it."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(sig)
    try:
        await asyncio.to_thread(process.wait, 10)
    except subprocess.TimeoutExpired:
        process.kill()
        await asyncio.to_thread(process.wait)
