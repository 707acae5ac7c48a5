"""Run the real A2A runtime (``iac-code a2a``) as a child process for e2e tests.

The child listens on a free loopback port, authenticates with a random bearer
token, talks only to the model stub, and keeps all its state (config, logs,
sessions, workspaces) under one temporary root. Its environment is built from
scratch so that no proxy, cloud credential or telemetry endpoint of the caller
leaks in.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

from .eventually import eventually

if TYPE_CHECKING:  # annotations only: no runtime dependency on typing_extensions
    from typing_extensions import Self

LOOPBACK = "127.0.0.1"
BIN_ENV = "AGUIADAPTER_IAC_CODE_BIN"
A2A_HEADERS = {"A2A-Version": "1.0", "Content-Type": "application/json"}
START_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 5.0
SPAWN_ATTEMPTS = 3  # free_port() can race with another process grabbing the port
TURN_TIMEOUT_SECONDS = 30.0
WORKING = "TASK_STATE_WORKING"
INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"
TERMINAL_STATES = frozenset(
    {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"}
)
# iac-code ships OpenTelemetry export to a public endpoint; these switch it off.
# Without them every turn also stalls for seconds on the failing export.
_NO_TELEMETRY = {
    "DISABLE_TELEMETRY": "1",
    "IAC_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "OTEL_SDK_DISABLED": "true",
}


def find_iac_code() -> str | None:
    """The ``iac-code`` executable: $AGUIADAPTER_IAC_CODE_BIN, next to this
    Python (a tox/venv install), or on PATH; None when there is none."""
    override = os.environ.get(BIN_ENV)
    if override:
        return override if os.access(override, os.X_OK) else None
    # Not resolved: a venv's python is a symlink and the venv's bin dir is what we want.
    beside = Path(sys.executable).parent / "iac-code"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("iac-code")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def user_message(
    text: str,
    context_id: str,
    cwd: Path | str,
    task_id: str | None = None,
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An A2A 1.0 ROLE_USER text message carrying the iac-code options it needs
    (``options`` adds to ``metadata.iac_code``, e.g. ``run_mode``)."""
    message: dict[str, Any] = {
        "messageId": f"msg-{uuid.uuid4().hex}",
        "contextId": context_id,
        "role": "ROLE_USER",
        "parts": [{"text": text}],
        "metadata": {"iac_code": {**(options or {}), "cwd": str(cwd)}},
    }
    if task_id is not None:
        message["taskId"] = task_id
    return message


def permission_answer(
    envelope: dict[str, Any], decision: str, cwd: Path | str, options: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The ROLE_USER message answering a permission ``input`` envelope (or a
    ``pendingPermissions[]`` entry, which has the same keys)."""
    task_id = envelope["requestTaskId"]
    answer = {
        "schemaVersion": 1,
        "kind": "permission",
        "requestTaskId": task_id,
        "inputId": envelope["inputId"],
        "toolUseId": envelope["toolUseId"],
        "decision": decision,
    }
    message = user_message("", envelope["contextId"], cwd, task_id=task_id, options=options)
    message["parts"] = [{"data": answer, "mediaType": "application/json"}]
    return message


class IacRuntime:
    """One ``iac-code a2a`` child process.

    ``async with IacRuntime(model_url) as runtime:`` starts it (health wait and
    warm-up turn included) and stops it on exit. ``url`` is the A2A JSON-RPC
    endpoint, ``token`` the bearer token, ``headers`` the request headers.
    """

    def __init__(
        self,
        model_url: str,
        root: Path | None = None,
        executable: str | None = None,
        model: str = "stub-model",
        warm_up: bool = True,
        start_timeout: float = START_TIMEOUT_SECONDS,
    ) -> None:
        self.model_url = model_url
        # A root we made ourselves is ours to delete; a caller's root (pytest's
        # tmp_path) is kept so its logs can be read after a failure.
        self._owns_root = root is None
        self.root = Path(root or tempfile.mkdtemp(prefix="iac-runtime-"))
        self.executable = executable or find_iac_code()
        self.model = model
        self.warm_up_enabled = warm_up
        self.start_timeout = start_timeout
        self.token = secrets.token_urlsafe(24)
        self.port = 0
        self.log_path = self.root / "iac-code.log"
        self.timings: dict[str, float] = {}
        self._process: subprocess.Popen[bytes] | None = None

    # -- addresses and files

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/"

    @property
    def headers(self) -> dict[str, str]:
        return {**A2A_HEADERS, "Authorization": f"Bearer {self.token}"}

    @property
    def config_dir(self) -> Path:
        return self.root / "config"

    @property
    def workspaces_root(self) -> Path:
        """Parent of every ``workspace()``: the root an adapter must allow as cwd."""
        return self.root / "workspaces"

    def workspace(self, name: str) -> Path:
        """A fresh, empty folder to use as a turn's ``cwd`` (unique per call)."""
        self.workspaces_root.mkdir(parents=True, exist_ok=True)
        prefix = f"{_safe(name)}-"
        return Path(tempfile.mkdtemp(prefix=prefix, dir=self.workspaces_root))

    def log_tail(self, lines: int = 40) -> str:
        """The end of the child's stdout/stderr, for failure messages."""
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no output captured)"
        return "\n".join(text.splitlines()[-lines:]) or "(no output captured)"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    # -- lifecycle

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        if self.executable is None:
            raise RuntimeError(f"iac-code executable not found (set ${BIN_ENV})")
        started = time.monotonic()
        try:
            await self._spawn_until_healthy()
            self.timings["startup"] = time.monotonic() - started
            if self.warm_up_enabled:
                await self.warm_up()
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Terminate the child (its process group), kill it if it lingers."""
        await self._end_child()
        if self._owns_root:
            shutil.rmtree(self.root, ignore_errors=True)

    async def kill(self) -> None:
        """``kill -9`` the runtime's whole process group, as a crash would."""
        process = self._process
        if process is not None and process.poll() is None:
            _signal_group(process, signal.SIGKILL)
            await asyncio.to_thread(process.wait, STOP_TIMEOUT_SECONDS)

    async def restart(self) -> None:
        """Start the runtime again after :meth:`kill`, on the same port, HOME
        and config folder (a supervisor bringing a crashed runtime back)."""
        await self.kill()
        self._spawn(port=self.port)
        await self._wait_healthy()

    async def warm_up(self) -> None:
        """One throwaway turn: the first run after start takes seconds (imports,
        session setup), and tests should not pay that inside their timeouts."""
        started = time.monotonic()
        cwd = self.workspace("warm-up")
        message = user_message("[scenario:normal] warm-up", f"warm-up-{uuid.uuid4().hex}", cwd)
        responses = await self.send_streaming(message)
        states = [r["result"]["statusUpdate"]["status"]["state"] for r in _updates(responses)]
        if not states or states[-1] != "TASK_STATE_INPUT_REQUIRED":
            raise RuntimeError(f"warm-up turn did not finish: {responses}\n{self.log_tail()}")
        self.timings["warm_up"] = time.monotonic() - started

    async def _end_child(self) -> None:
        process, self._process = self._process, None
        atexit.unregister(self._kill_now)
        if process is not None and process.poll() is None:
            await _end_process(process)

    async def _spawn_until_healthy(self) -> None:
        for attempt in range(1, SPAWN_ATTEMPTS + 1):
            self._spawn()
            try:
                await self._wait_healthy()
                return
            except RuntimeError:
                port_taken = "address already in use" in self.log_tail().lower()
                if not port_taken or attempt == SPAWN_ATTEMPTS:
                    raise
                await self._end_child()

    def _spawn(self, port: int | None = None) -> None:
        assert self.executable is not None
        self.port = port or free_port()
        self.config_dir.mkdir(parents=True, exist_ok=True)
        command = [
            self.executable, "a2a", "--host", LOOPBACK, "--port", str(self.port),
            "--thinking-exposure", "all",
        ]  # fmt: skip
        # A restart keeps the log of the process before it.
        with self.log_path.open("ab" if port else "wb") as log:
            # Own process group, so stop() also ends shells the runtime spawned.
            self._process = subprocess.Popen(
                command, cwd=self.root, env=self._environment(), stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        # Last resort if the test process ends without running stop().
        atexit.register(self._kill_now)

    def _kill_now(self) -> None:
        if self._process is not None and self._process.poll() is None:
            _signal_group(self._process, signal.SIGKILL)

    def spawning_environment(self) -> dict[str, str]:
        """The environment of an adapter that starts its own ``iac-code a2a``
        child (``--spawn-iac-code``): this runtime's model settings and the
        test's PATH, without the runtime's token and config folder (the
        adapter gives its child its own)."""
        env = {**self._environment(), "PATH": os.environ["PATH"]}
        env.pop("IACCODE_A2A_HTTP_TOKEN")
        env.pop("IAC_CODE_CONFIG_DIR")
        return env

    def _environment(self) -> dict[str, str]:
        home = self.root / "home"
        tmp = self.root / "tmp"
        home.mkdir(exist_ok=True)
        tmp.mkdir(exist_ok=True)
        bin_dir = str(Path(self.executable or "").parent)
        return {
            # PATH is kept (the bash tool needs coreutils); nothing else is inherited.
            "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", os.defpath)]),
            "HOME": str(home),
            "TMPDIR": str(tmp),
            "LANG": "C.UTF-8",
            "NO_PROXY": "*",  # belt and braces: no proxy variable is passed anyway
            "IAC_CODE_CONFIG_DIR": str(self.config_dir),
            "IAC_CODE_PROVIDER": "openai_compatible",
            "IAC_CODE_MODEL": self.model,
            "IAC_CODE_BASE_URL": self.model_url,
            "IAC_CODE_API_KEY": "dummy-key",
            "IACCODE_A2A_HTTP_TOKEN": self.token,
            **_NO_TELEMETRY,
        }

    async def _wait_healthy(self) -> None:
        # /health needs the bearer token in 0.16.0 (401 without it).
        health = f"http://{LOOPBACK}:{self.port}/health"
        auth = {"Authorization": f"Bearer {self.token}"}
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:

            async def healthy() -> bool:
                self._raise_if_dead()
                async with session.get(health, headers=auth) as response:
                    return response.status == 200

            try:
                await eventually(
                    healthy, f"iac-code a2a answers {health}", timeout=self.start_timeout, interval=0.1,
                    ignoring=(aiohttp.ClientError, asyncio.TimeoutError),  # not listening yet
                )
            except AssertionError as exc:
                raise RuntimeError(
                    f"{exc}\n--- {self.log_path} (tail)\n{self.log_tail()}\n(more in {self.config_dir / 'logs'})"
                ) from None

    def _raise_if_dead(self) -> None:
        if self._process is not None and self._process.poll() is not None:
            raise RuntimeError(
                f"iac-code a2a exited with code {self._process.returncode} during startup\n"
                f"--- {self.log_path} (tail)\n{self.log_tail()}\n"
                f"(more in {self.config_dir / 'logs'})"
            )

    # -- a minimal A2A 1.0 JSON-RPC client (enough for harness checks)

    async def task_state(self, task_id: str) -> str:
        """The task's state as ``GetTask`` reports it."""
        return str((await self.rpc("GetTask", {"id": task_id}))["result"]["status"]["state"])

    async def rpc(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """A non-streaming call (``GetTask``, ``CancelTask``, ``SendMessage``...);
        returns the JSON-RPC response object."""
        body = _request(method, params)
        async with (
            aiohttp.ClientSession(timeout=_timeout(TURN_TIMEOUT_SECONDS)) as session,
            session.post(self.url, json=body, headers=self.headers) as response,
        ):
            return dict(await response.json(content_type=None))

    async def send_streaming(
        self, message: dict[str, Any], timeout: float = TURN_TIMEOUT_SECONDS
    ) -> list[dict[str, Any]]:
        """``SendStreamingMessage``: every JSON-RPC response object received, in
        order, until the server closes the stream."""
        return [response async for response in self.stream(message, timeout)]

    async def stream(
        self, message: dict[str, Any], timeout: float = TURN_TIMEOUT_SECONDS
    ) -> AsyncGenerator[dict[str, Any], None]:
        """``SendStreamingMessage`` as it arrives. A refused request comes back as
        one ``application/json`` error object, which is yielded as is. Closing
        the generator early (``aclose()``) drops the connection, like a client
        that goes away."""
        async for event in self._sse("SendStreamingMessage", {"message": message}, timeout):
            yield event

    async def _sse(
        self, method: str, params: dict[str, Any], timeout: float
    ) -> AsyncGenerator[dict[str, Any], None]:
        body = _request(method, params)
        async with (
            aiohttp.ClientSession(timeout=_timeout(timeout)) as session,
            session.post(self.url, json=body, headers=self.headers) as response,
        ):
            if not response.content_type.startswith("text/event-stream"):
                yield dict(await response.json(content_type=None))
                return
            async for event in _sse_json(response.content):
                yield event

    async def send_message(self, message: dict[str, Any]) -> dict[str, Any]:
        """Non-streaming ``SendMessage``: the JSON-RPC ``result`` (a ``task`` or a
        ``message``); a JSON-RPC error raises ``A2AError``."""
        return _result(await self.rpc("SendMessage", {"message": message}))

    async def get_task(self, task_id: str, history_length: int | None = None) -> dict[str, Any]:
        """``GetTask``: the task object; a JSON-RPC error raises ``A2AError``."""
        params: dict[str, Any] = {"id": task_id}
        if history_length is not None:
            params["historyLength"] = history_length
        result = _result(await self.rpc("GetTask", params))
        return dict(result.get("task", result))

    def subscribe(
        self, task_id: str, timeout: float = TURN_TIMEOUT_SECONDS
    ) -> AsyncGenerator[dict[str, Any], None]:
        """``SubscribeToTask`` as it arrives (the first result is the task snapshot).
        On a task that already waits for input the server sends the snapshot and
        then stays silent: prefer ``follow_task``."""
        return self._sse("SubscribeToTask", {"id": task_id}, timeout)

    async def follow_task(self, task_id: str, timeout: float = TURN_TIMEOUT_SECONDS) -> list[dict[str, Any]]:
        """Follow a task that works without a stream of ours (e.g. after answering
        sub-pipeline permissions with ``SendMessage``) until it stops: every
        ``SubscribeToTask`` response, in order, until the server closes the stream;
        just the snapshot when the task has already stopped (INPUT_REQUIRED or
        terminal), since the server would say nothing more."""
        task = await self.get_task(task_id)
        if task_state(task) != WORKING:
            return [{"result": {"task": task}}]
        responses: list[dict[str, Any]] = []
        stream = self.subscribe(task_id, timeout)
        try:
            async for response in stream:
                responses.append(response)
                snapshot = response.get("result", {}).get("task")
                if len(responses) == 1 and snapshot is not None and task_state(snapshot) != WORKING:
                    break
        finally:
            await stream.aclose()
        return responses

    async def pipeline_state(self, task_id: str, after_sequence: int | None = None) -> dict[str, Any]:
        """``GET /iac-code/pipeline/state``: ``{snapshot, events}`` (events after the cursor)."""
        query: dict[str, str] = {"taskId": task_id}
        if after_sequence is not None:
            query["afterSequence"] = str(after_sequence)
        return await self._rest("GET", "iac-code/pipeline/state", params=query)

    async def ensure_restored(self, cwd: Path | str, session_id: str, task_id: str) -> dict[str, Any]:
        """``POST /iac-code/session/ensure-restored`` (e.g. ``{"status": "current"}``)."""
        body = {"cwd": str(cwd), "sessionId": session_id, "taskId": task_id}
        return await self._rest("POST", "iac-code/session/ensure-restored", json=body)

    async def _rest(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        auth = {"Authorization": f"Bearer {self.token}"}
        async with (
            aiohttp.ClientSession(timeout=_timeout(TURN_TIMEOUT_SECONDS)) as session,
            session.request(method, self.url + path, headers=auth, **kwargs) as response,
        ):
            if response.status != 200:
                raise A2AError({"status": response.status, "body": await response.text()})
            return dict(await response.json(content_type=None))


class A2AError(RuntimeError):
    """A JSON-RPC error (or a non-200 iac-code route) where the helper expected a result."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(json.dumps(error, ensure_ascii=False))
        self.error = error


def task_state(task_or_update: dict[str, Any]) -> str:
    """``status.state`` of a task or a status update."""
    return str(task_or_update["status"]["state"])


# ---------------------------------------------------------------- reading responses


def status_updates(responses: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``statusUpdate`` objects of a stream, after checking none was an error."""
    errors = [r["error"] for r in responses if "error" in r]
    if errors:
        raise A2AError(errors[0])
    return [r["result"]["statusUpdate"] for r in responses if "statusUpdate" in r["result"]]


def iac_code(task_or_update: dict[str, Any]) -> dict[str, Any]:
    """``metadata.iac_code`` of a task or a status update (empty when absent)."""
    return dict((task_or_update.get("metadata") or {}).get("iac_code") or {})


def required_input(task_or_update: dict[str, Any]) -> dict[str, Any] | None:
    """The interrupt envelope, if this task or update carries one with ``required: true``."""
    envelope = iac_code(task_or_update).get("input")
    return dict(envelope) if envelope and envelope.get("required") else None


def pipeline_event(update: dict[str, Any]) -> dict[str, Any] | None:
    """The pipeline event an update carries, if any."""
    event = iac_code(update).get("pipeline")
    return dict(event) if event else None


def _result(response: dict[str, Any]) -> dict[str, Any]:
    if "error" in response:
        raise A2AError(response["error"])
    return dict(response["result"])


async def _sse_json(stream: aiohttp.StreamReader) -> AsyncIterator[dict[str, Any]]:
    """Yield each SSE event's ``data`` as parsed JSON (multi-line data joined)."""
    data: list[str] = []
    async for raw in stream:
        line = raw.decode().rstrip("\r\n")
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif not line and data:
            yield json.loads("\n".join(data))
            data = []
    if data:
        yield json.loads("\n".join(data))


def _request(method: str, params: dict[str, Any]) -> dict[str, Any]:
    request_id = f"req-{uuid.uuid4().hex[:12]}"
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def _timeout(seconds: float) -> aiohttp.ClientTimeout:
    # Bounded, so a runtime that hangs fails the test instead of stalling the run.
    return aiohttp.ClientTimeout(total=seconds)


def _updates(responses: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in responses if "statusUpdate" in r.get("result", {})]


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in name)[:60] or "ws"


async def _end_process(process: subprocess.Popen[bytes]) -> None:
    _signal_group(process, signal.SIGTERM)
    try:
        await asyncio.to_thread(process.wait, STOP_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        _signal_group(process, signal.SIGKILL)
        await asyncio.to_thread(process.wait, STOP_TIMEOUT_SECONDS)


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    try:
        os.killpg(process.pid, sig)  # the group we created with start_new_session
    except ProcessLookupError:
        pass
