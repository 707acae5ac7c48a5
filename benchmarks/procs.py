"""Child processes of the benchmark and what ``/proc`` tells about them.

Every server under test runs as its own process, started here with its
output sent to a log file, and is stopped by its own pid (SIGINT, then
SIGTERM, then SIGKILL). CPU time and RSS are read from ``/proc`` for the
process and all its descendants, so a server that forks workers is not
undercounted.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import aiohttp

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def free_port() -> int:
    """A loopback TCP port that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def raise_fd_limit(wanted: int = 65536) -> int:
    """Raise this process's open-files limit (children inherit it): the soft
    limit up to the hard one, and the hard one too where that is allowed
    (root). Returns the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, wanted))
            return wanted
        except (ValueError, OSError):
            pass
    target = min(hard, wanted) if hard != resource.RLIM_INFINITY else wanted
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


def fd_limit() -> int:
    """The soft open-files limit of this process (what a child inherits)."""
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        # The command name is in parentheses and may hold spaces.
        fields = stat[stat.rfind(b")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def process_tree(pid: int) -> list[int]:
    """*pid* and all its living descendants."""
    children = _children_map()
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(children.get(current, ()))
    return tree


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process, in seconds (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return 0.0
    fields = stat[stat.rfind(b")") + 2 :].split()
    # After the name: state(0) ppid(1) ... utime(11) stime(12).
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def rss_bytes(pid: int) -> int:
    """Resident set size of one process (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as handle:
            return int(handle.read().split()[1]) * _PAGE_SIZE
    except OSError:
        return 0


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of *pid* and its descendants."""
    return sum(cpu_seconds(member) for member in process_tree(pid))


def tree_rss_bytes(pid: int) -> int:
    """RSS of *pid* and its descendants."""
    return sum(rss_bytes(member) for member in process_tree(pid))


class Server:
    """A server process under test, reachable on a loopback port."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        port: int,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        health_path: str = "/health",
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.port = port
        self.log_path = log_path
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.health_path = health_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.ready_after: float | None = None

    @property
    def url(self) -> str:
        """The base URL (``http://127.0.0.1:PORT/``)."""
        return f"http://127.0.0.1:{self.port}/"

    @property
    def pid(self) -> int:
        """The process id (the server must have been started)."""
        assert self.proc is not None, f"{self.name} is not started"
        return self.proc.pid

    def start(self) -> None:
        """Spawn the process (its output goes to the log file)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.started_at = time.perf_counter()
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.cwd,
            )

    async def wait_ready(self, timeout: float = 60.0, interval: float = 0.005) -> float:
        """Poll ``GET health_path`` until it answers 2xx; returns seconds since spawn."""
        assert self.proc is not None
        deadline = time.perf_counter() + timeout
        url = f"{self.url.rstrip('/')}{self.health_path}"
        probe_timeout = aiohttp.ClientTimeout(total=5)
        async with aiohttp.ClientSession(timeout=probe_timeout) as session:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.name} exited with {self.proc.returncode}; see {self.log_path}")
                try:
                    async with session.get(url) as resp:
                        if 200 <= resp.status < 300:
                            self.ready_after = time.perf_counter() - self.started_at
                            return self.ready_after
                except (aiohttp.ClientError, OSError, asyncio.TimeoutError):
                    pass
                if time.perf_counter() > deadline:
                    raise RuntimeError(f"{self.name} not ready after {timeout:.0f} s; see {self.log_path}")
                await asyncio.sleep(interval)

    def cpu(self) -> float:
        """CPU seconds used so far (process tree)."""
        return tree_cpu_seconds(self.pid)

    def rss(self) -> int:
        """Resident memory now, in bytes (process tree)."""
        return tree_rss_bytes(self.pid)

    def stop(self, grace: float = 5.0) -> int | None:
        """Stop the process by its pid: SIGINT, then SIGTERM, then SIGKILL."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return proc.returncode if proc is not None else None
        for sig, wait in ((signal.SIGINT, grace), (signal.SIGTERM, 2.0), (signal.SIGKILL, 2.0)):
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)
            try:
                return proc.wait(wait)
            except subprocess.TimeoutExpired:
                continue
        return proc.poll()

    def log_tail(self, lines: int = 20) -> str:
        """The end of the server's log, for error messages."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


async def wait_quiet(
    servers: Sequence[Server], *, below: float = 0.05, window: float = 0.3, timeout: float = 10.0
) -> bool:
    """Wait until every server uses less than *below* of a core over *window* s."""
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        before = [server.cpu() for server in servers]
        await asyncio.sleep(window)
        after = [server.cpu() for server in servers]
        if all((b - a) / window < below for a, b in zip(before, after, strict=True)):
            return True
    return False


class RedisServer(Server):
    """A private ``redis-server`` on a loopback port, for the Redis-store target.

    A benchmark needs no durability: ``--save "" --appendonly no`` (nothing
    is written to disk), data and log in the scratch folder. It is ready once
    it answers ``PING``.
    """

    def __init__(self, executable: str, folder: Path, *, port: int, name: str = "redis-server") -> None:
        folder.mkdir(parents=True, exist_ok=True)
        argv = [executable, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder),
                "--save", "", "--appendonly", "no", "--daemonize", "no", "--protected-mode", "yes",
                "--maxmemory-policy", "noeviction", "--logfile", ""]
        super().__init__(name, argv, port=port, log_path=folder / "redis.log", cwd=folder)

    @property
    def redis_url(self) -> str:
        """``redis://127.0.0.1:PORT/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    async def wait_ready(self, timeout: float = 15.0, interval: float = 0.02) -> float:
        """Send ``PING`` until ``+PONG`` comes back; returns seconds since spawn."""
        assert self.proc is not None
        deadline = time.perf_counter() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}: {self.log_tail(5)}")
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", self.port), 1.0)
                try:
                    writer.write(b"PING\r\n")
                    if (await asyncio.wait_for(reader.readline(), 1.0)).startswith(b"+PONG"):
                        self.ready_after = time.perf_counter() - self.started_at
                        return self.ready_after
                finally:
                    writer.close()
            except (OSError, asyncio.TimeoutError):
                pass
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{self.name} not ready after {timeout:.0f} s: {self.log_tail(5)}")
            await asyncio.sleep(interval)


def demo_runtime(tree: Path, work: Path) -> Server:
    """The embedded demo runtime of checkout ``tree`` as its own process on
    a free loopback port, its log in ``work`` (not yet started)."""
    port = free_port()
    return Server("runtime", [sys.executable, "-m", "aguiadapter.demo", "--port", str(port)], port=port,
                  log_path=work / "runtime.log", env={**os.environ, "PYTHONPATH": str(tree)}, cwd=str(tree))
