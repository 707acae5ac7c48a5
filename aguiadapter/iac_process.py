"""A supervised local ``iac-code a2a`` child (``--spawn-iac-code``).

The child listens on a free loopback port with a random bearer token that
only this process knows; it is restarted if it dies and stopped with us.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import shutil
import socket
import sys
from pathlib import Path

import aiohttp

from .logs import log_fields

log = logging.getLogger(__name__)

_START_TIMEOUT = 60.0
_RESTART_DELAY = 2.0


class IacCodeProcess:
    """Start, watch and stop ``iac-code a2a --host 127.0.0.1 --port N``."""

    def __init__(
        self,
        executable: str | None = None,
        *,
        allowed_cwds: tuple[str, ...] = (),
        config_dir: Path | None = None,
        relay_output: bool = False,
    ) -> None:
        self.executable = executable or _find_iac_code()
        #: Read the child's stdout and stderr and log each line (``--log-format
        #: json``: the process's output stays one JSON object per line);
        #: otherwise the child writes to ours directly.
        self.relay_output = relay_output
        self._relays: list[asyncio.Task[None]] = []
        self.allowed_cwds = allowed_cwds
        #: The runtime's config folder: the adapter reads its permission
        #: checkpoints and session transcripts there, so the child must use it.
        self.config_dir = config_dir
        self.token = secrets.token_urlsafe(32)
        self.port = 0
        self._process: asyncio.subprocess.Process | None = None
        self._watch: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def url(self) -> str:
        """The child's A2A endpoint."""
        return f"http://127.0.0.1:{self.port}/"

    async def start(self) -> tuple[str, str]:
        """Start the child and wait until it answers; returns (url, token)."""
        self.port = _free_port()
        await self._spawn()
        self._watch = asyncio.create_task(self._supervise())
        return self.url, self.token

    async def stop(self) -> None:
        """Terminate the child (kill it if it does not go within 5 s)."""
        self._stopping = True
        if self._watch is not None:
            self._watch.cancel()
        process = self._process
        if process is None or process.returncode is not None:
            return
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 5.0)
        except asyncio.TimeoutError:
            process.kill()
            await process.wait()
        # What it wrote last is relayed (the pipes end with it), then the readers go.
        relays, self._relays = self._relays, []
        if relays:
            await asyncio.wait(relays, timeout=1.0)
        for relay in relays:
            relay.cancel()

    async def _spawn(self) -> None:
        env = dict(os.environ)
        env["IACCODE_A2A_HTTP_TOKEN"] = self.token
        if self.allowed_cwds and not env.get("IACCODE_A2A_ALLOWED_CWDS"):
            # The runtime checks workspaces against its own roots: ours.
            env["IACCODE_A2A_ALLOWED_CWDS"] = os.pathsep.join(self.allowed_cwds)
        if self.config_dir is not None:
            env["IAC_CODE_CONFIG_DIR"] = str(self.config_dir)
        pipe = asyncio.subprocess.PIPE if self.relay_output else None
        self._process = await asyncio.create_subprocess_exec(
            self.executable, "a2a", "--host", "127.0.0.1", "--port", str(self.port),
            "--thinking-exposure", "all",
            env=env, stdout=pipe, stderr=pipe,
        )
        for name, stream in (("stdout", self._process.stdout), ("stderr", self._process.stderr)):
            if stream is not None:
                self._relays.append(asyncio.create_task(_relay(stream, name, self._process.pid)))
        self._relays = [relay for relay in self._relays if not relay.done()]
        await self._wait_healthy()
        log.info("iac-code a2a child %s ready on %s", self._process.pid, self.url)

    async def _wait_healthy(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _START_TIMEOUT
        async with aiohttp.ClientSession() as session:
            while loop.time() < deadline:
                if self._process is not None and self._process.returncode is not None:
                    raise RuntimeError(f"iac-code a2a exited with {self._process.returncode}")
                try:
                    # iac-code guards /health with its bearer token too.
                    headers = {"Authorization": f"Bearer {self.token}"}
                    timeout = aiohttp.ClientTimeout(total=2)
                    async with session.get(f"{self.url}health", headers=headers, timeout=timeout) as resp:
                        if resp.status == 200:
                            return
                except (aiohttp.ClientError, asyncio.TimeoutError):
                    pass
                await asyncio.sleep(0.2)
        raise RuntimeError("iac-code a2a did not become healthy in time")

    async def _supervise(self) -> None:
        while not self._stopping:
            assert self._process is not None
            code = await self._process.wait()
            if self._stopping:
                return
            log.error("iac-code a2a exited with %s; restarting", code)
            await asyncio.sleep(_RESTART_DELAY)
            try:
                await self._spawn()
            except RuntimeError as exc:
                log.error("iac-code a2a restart failed: %s", exc)


#: The longest line of the child's relayed as one record (the rest follows in others).
_RELAY_LINE_BYTES = 16 * 1024


async def _relay(stream: asyncio.StreamReader, name: str, pid: int) -> None:
    """Log each line the child writes on ``name`` (until it closes the pipe)."""
    child = logging.getLogger("aguiadapter.iac_code")
    while True:
        try:
            line = await stream.readuntil(b"\n")
        except asyncio.IncompleteReadError as end:
            line = end.partial
            if not line:
                return
        except asyncio.LimitOverrunError as long:
            line = await stream.read(min(long.consumed, _RELAY_LINE_BYTES) or _RELAY_LINE_BYTES)
        text = line.decode(errors="replace").rstrip("\r\n")
        if text:
            log_fields(child, logging.INFO, text[:_RELAY_LINE_BYTES], {"stream": name, "pid": pid})


def _find_iac_code() -> str:
    beside = Path(sys.executable).with_name("iac-code")
    if beside.exists():
        return str(beside)
    found = shutil.which("iac-code")
    if found is None:
        raise RuntimeError("iac-code is not installed (pip install 'iac-code[a2a]')")
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
