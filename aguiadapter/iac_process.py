"""A supervised local ``iac-code a2a`` child (``--spawn-iac-code``).

The child listens on a free loopback port with a random bearer token that
only this process knows; it is restarted if it dies and stopped with us.

The child runs what a user approves (a shell command included), so it gets
only what it needs (:func:`child_environment`): never the adapter's own
variables (``IAC_CODE_AGUI_*``: the shared token, the store URL with its
password, the A2A token...), only the ones iac-code 0.16 reads (its model
and provider settings, the cloud credentials it uses, its telemetry), the
process basics (``PATH``, ``HOME``, locale, proxies, CA bundles) and the
names the operator adds (``--spawn-env``). And the adapter's secrets on disk
stay out of the child's config folder (:func:`separation_problems`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import shutil
import socket
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

import aiohttp

from .logs import log_fields

log = logging.getLogger(__name__)

_START_TIMEOUT = 60.0
_RESTART_DELAY = 2.0

#: Variables the child gets by name, when set: the process basics, and those
#: iac-code 0.16 and the provider SDKs it drives read (found in its package).
CHILD_VARIABLES: Final = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "TZ", "LANG", "LANGUAGE",
    "TMPDIR", "TEMP", "TMP", "PYTHONUTF8", "PYTHONIOENCODING",
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy", "all_proxy",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
    "BAILIAN_API_KEY", "DASHSCOPE_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL", "DEEPSEEK_API_KEY", "OPENROUTER_API_KEY", "TIKTOKEN_CACHE_DIR",
    "QWENPAW_SECRET_DIR", "COPAW_SECRET_DIR", "IACCODE_A2A_ALLOWED_CWDS",
})
#: Families the child gets whole: locale, iac-code's own settings (provider,
#: model, API key, telemetry...), Alibaba Cloud credentials, OpenTelemetry.
CHILD_PREFIXES: Final = ("LC_", "IAC_CODE_", "ALIBABA_CLOUD_", "OTEL_")
#: Never passed, whatever the lists above or the operator say: the adapter's
#: own settings and secrets.
ADAPTER_PREFIX: Final = "IAC_CODE_AGUI_"


def child_environment(
    parent: Mapping[str, str],
    *,
    token: str,
    allowed_cwds: tuple[str, ...] = (),
    config_dir: Path | None = None,
    extra: Iterable[str] = (),
) -> dict[str, str]:
    """The child's environment: what it needs of ``parent``, its own token and folders."""
    wanted = CHILD_VARIABLES | frozenset(extra)
    env = {
        name: value for name, value in parent.items()
        if (name in wanted or name.startswith(CHILD_PREFIXES)) and not name.startswith(ADAPTER_PREFIX)
    }
    env["IACCODE_A2A_HTTP_TOKEN"] = token
    if allowed_cwds and not env.get("IACCODE_A2A_ALLOWED_CWDS"):
        # The runtime checks workspaces against its own roots: ours.
        env["IACCODE_A2A_ALLOWED_CWDS"] = os.pathsep.join(allowed_cwds)
    if config_dir is not None:
        env["IAC_CODE_CONFIG_DIR"] = str(config_dir)
    return env


def separation_problems(
    config_dir: Path, *, state_dir: Path | None, jwks_file: Path | None
) -> tuple[list[str], list[str]]:
    """What of the adapter's lies in the child's config folder: (refusals, warnings).

    The child reads and writes its config folder, and a command a user
    approves there can print any file in it. A JWKS file there (its ``oct``
    keys sign tokens for any user) stops the start; the state folder there
    (the reference's default, ``<config-dir>/agui``: records hold no secret,
    but a command could rewrite them) is warned about. Outside the folder a
    child running as the same OS user can still read them: run the adapter
    and the runtime as two users (docs/operations.md, "The runtime").
    """
    refusals: list[str] = []
    warnings: list[str] = []
    if jwks_file is not None and _inside(jwks_file, config_dir):
        refusals.append(
            f"the JWKS file {jwks_file} is inside the iac-code child's config folder {config_dir}, where a command "
            "the runtime runs can read its keys: keep it elsewhere (--jwt-jwks-file), readable by the adapter only"
        )
    if state_dir is not None and _inside(state_dir, config_dir):
        warnings.append(
            f"the state folder {state_dir} is inside the iac-code child's config folder {config_dir}: a command the "
            "runtime runs can rewrite thread records; give the adapter a --state-dir of its own"
        )
    return refusals, warnings


def _inside(path: Path, folder: Path) -> bool:
    resolved = path.expanduser().resolve()
    base = folder.expanduser().resolve()
    return resolved == base or base in resolved.parents


class IacCodeProcess:
    """Start, watch and stop ``iac-code a2a --host 127.0.0.1 --port N``."""

    def __init__(
        self,
        executable: str | None = None,
        *,
        allowed_cwds: tuple[str, ...] = (),
        config_dir: Path | None = None,
        extra_env: tuple[str, ...] = (),
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
        #: Names of variables the operator passes on besides :data:`CHILD_VARIABLES`.
        self.extra_env = extra_env
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
        env = child_environment(
            os.environ, token=self.token, allowed_cwds=self.allowed_cwds, config_dir=self.config_dir,
            extra=self.extra_env,
        )
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
