"""The adapter as a child process that a test can ``kill -9`` and start again.

``python -m aguiadapter`` runs from the checkout with the test's own Python,
on a loopback port, in front of whatever ``a2a_url`` says (a crash test puts
its proxy there). A restart reuses the port and the state folder, the way a
supervisor would bring a crashed server back; a client that calls meanwhile
gets "connection refused".
"""

from __future__ import annotations

import asyncio
import atexit
import os
import signal
import sys
from pathlib import Path

import aiohttp

from .eventually import eventually
from .iac_runtime import LOOPBACK, free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 5.0


class AdapterProcess:
    """One adapter server process at a time, on the same state folder."""

    def __init__(
        self,
        *,
        a2a_url: str,
        a2a_token: str,
        state_dir: Path,
        allowed_cwd: Path,
        log_path: Path,
        interrupt_ttl_seconds: float = 3600.0,
        runtime_config_dir: Path | None = None,
        durability: str = "fsync",
    ) -> None:
        self.a2a_url = a2a_url
        #: ``--durability`` of every process started.
        self.durability = durability
        #: The runtime's config folder, when the adapter shares it (``--config-dir``).
        self.runtime_config_dir = runtime_config_dir
        self.a2a_token = a2a_token
        self.state_dir = state_dir
        self.allowed_cwd = allowed_cwd
        self.log_path = log_path
        self.interrupt_ttl_seconds = interrupt_ttl_seconds
        self.port = 0
        #: How many times a process was started (1 after the first start).
        self.starts = 0
        self.kills = 0
        self._process: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.returncode is None

    async def __aenter__(self) -> AdapterProcess:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Start a process (same port as before, if there was one) and wait
        until ``/health`` answers."""
        assert not self.running, "the adapter is already running"
        for attempt in range(3):
            if not self.port or attempt:
                self.port = free_port()
            await self._spawn()
            try:
                await self._wait_healthy()
                return
            except BaseException as exc:
                # Never leave a half-started process behind, whatever stopped the wait.
                await self._end()
                port_taken = "address already in use" in self.log_tail().lower()
                if not isinstance(exc, Exception) or not port_taken or attempt == 2:
                    raise

    async def kill(self) -> None:
        """``kill -9``, and wait until the process is gone."""
        process = self._process
        if process is None or process.returncode is not None:
            return
        process.kill()
        await process.wait()
        self.kills += 1
        self._forget()

    async def restart(self) -> None:
        await self.kill()
        await self.start()

    async def stop(self) -> None:
        """A graceful stop (SIGINT, as Ctrl-C), killed if it lingers."""
        process = self._process
        if process is not None and process.returncode is None:
            process.send_signal(signal.SIGINT)
            try:
                await asyncio.wait_for(process.wait(), STOP_TIMEOUT_SECONDS)
            except asyncio.TimeoutError:
                process.kill()
                await process.wait()
        self._forget()

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no output captured)"
        return "\n".join(text.splitlines()[-lines:]) or "(no output captured)"

    # -- internals

    async def _spawn(self) -> None:
        command = [
            sys.executable, "-m", "aguiadapter", "serve",
            "--host", LOOPBACK, "--port", str(self.port),
            "--a2a-url", self.a2a_url, f"--a2a-token={self.a2a_token}",  # a token may begin with "-"
            "--state-dir", str(self.state_dir), "--allowed-cwd", str(self.allowed_cwd),
            "--interrupt-ttl-seconds", f"{self.interrupt_ttl_seconds:g}", "--durability", self.durability,
        ]  # fmt: skip
        if self.runtime_config_dir is not None:
            command += ["--config-dir", str(self.runtime_config_dir)]
        # Nothing of the caller's adapter settings leaks in: options say it all.
        env = {k: v for k, v in os.environ.items() if not k.startswith("IAC_CODE_AGUI_")}
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        with self.log_path.open("ab") as log:
            log.write(f"--- start {self.starts} on port {self.port}\n".encode())
            log.flush()
            self._process = await asyncio.create_subprocess_exec(
                *command, cwd=REPO_ROOT, env=env, stdin=asyncio.subprocess.DEVNULL,
                stdout=log, stderr=asyncio.subprocess.STDOUT,
            )  # fmt: skip
        atexit.register(self._kill_now)

    async def _wait_healthy(self) -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3)) as session:

            async def healthy() -> bool:
                if not self.running:
                    raise RuntimeError(f"the adapter exited during startup\n{self.log_tail()}")
                async with session.get(f"{self.url}health") as response:
                    return response.status == 200

            not_yet = (aiohttp.ClientError, asyncio.TimeoutError)  # not listening yet
            what = f"the adapter on {self.url} answers /health"
            await eventually(healthy, what, timeout=START_TIMEOUT_SECONDS, interval=0.05, ignoring=not_yet)

    async def _end(self) -> None:
        process = self._process
        if process is not None and process.returncode is None:
            process.kill()
            await process.wait()
        self._forget()

    def _forget(self) -> None:
        self._process = None
        atexit.unregister(self._kill_now)

    def _kill_now(self) -> None:
        process = self._process
        if process is not None and process.returncode is None:
            try:
                os.kill(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


async def spawn_adapter(*args: str, env: dict[str, str]) -> asyncio.subprocess.Process:
    """``python -m aguiadapter ARGS`` with ``env``, its output (stdout and
    stderr together) on a pipe the test reads."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aguiadapter", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env,
    )


async def output_until(process: asyncio.subprocess.Process, marker: str, timeout: float) -> str:
    """What ``process`` wrote up to the line holding ``marker`` (each line
    within ``timeout`` seconds; an output that ends first fails the test)."""
    assert process.stdout is not None
    text = ""
    while marker not in text:
        line = (await asyncio.wait_for(process.stdout.readline(), timeout)).decode()
        assert line, text
        text += line
    return text
