"""Crash cycles against the real runtime: kill the adapter while it applies a
person's answer, bring it back, and judge what the person got.

The promise under test: an answer to an interrupt is applied exactly once
and never lost, whatever crashes. One cycle is:

1. a turn asks permission for a bash command whose every run appends one
   line to ``marker.txt`` in the thread's workspace (the model stub's
   ``[scenario:bash cmd=...]``);
2. the client answers ``allow_once`` (a resume with a new runId) and the
   adapter is ``kill -9``-ed at an instant chosen through the
   :class:`~tests.support.a2a_proxy.A2AProxy` (or after a random delay); a
   supervisor starts it again at once on the same port and state folder;
3. the next touch of the thread: the client retries the same answer (new
   runId) while the outcome is retryable, or sends a new user turn, or the
   cancel route, or nobody comes until the interrupt's expiry;
4. once the runtime has settled, the lines of ``marker.txt`` say how many
   times the command ran, and :func:`judge` gives the verdict.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from tests.support.a2a_proxy import A2AProxy, Exchange, Instant, Trap, ends_stream
from tests.support.adapter import run_body
from tests.support.adapter_process import AdapterProcess
from tests.support.agui import check_stream, parse_sse
from tests.support.iac_runtime import IacRuntime

MARKER = "marker.txt"
#: A client retries these: the server was down, cut the stream, or says so.
RETRYABLE_CODES = frozenset({"THREAD_BUSY", "A2A_UNAVAILABLE"})
#: Answers from the server (not "connection refused") a client waits for at most.
MAX_ATTEMPTS = 8
#: Pause after a retryable answer, and after a connection that failed or
#: broke (the server is down or restarting: try again soon).
RETRY_PAUSE_SECONDS = 0.4
RECONNECT_PAUSE_SECONDS = 0.1
#: However the adapter behaves, a cycle's retries stop after this long.
RETRY_DEADLINE_SECONDS = 30.0
REQUEST_TIMEOUT_SECONDS = 30.0
#: After the last answer reached the runtime, a command still starting or
#: running there is given the tool's own duration plus this to show up.
SETTLE_MARGIN_SECONDS = 0.7

LOST, DUPLICATED, FALSE_FAILURE, CORRECT = "lost", "duplicated", "false failure", "correct"
VERDICTS = (LOST, DUPLICATED, FALSE_FAILURE, CORRECT)


def slow_command(seconds: float) -> str:
    """A mutating command that takes ``seconds``, then counts one run."""
    return f"sleep {seconds:g}; echo ran >> {MARKER}" if seconds else f"echo ran >> {MARKER}"


# ---------------------------------------------------------------- the client


@dataclass
class Outcome:
    """What one POST got, as a client sees it."""

    #: "refused" (nobody listens), "cut" (no terminal event), "success",
    #: "interrupt" (RUN_FINISHED asking for input) or "error" (see ``code``).
    kind: str
    code: str | None = None
    status: int | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    body: Any = None

    @property
    def retryable(self) -> bool:
        return self.kind in ("refused", "cut") or self.code in RETRYABLE_CODES

    @property
    def label(self) -> str:
        return self.code if self.kind == "error" and self.code else self.kind

    @property
    def detail(self) -> str:
        """What the last event said: the interrupts asked for, or the error's message."""
        last = self.events[-1] if self.events else {}
        if self.kind == "interrupt":
            return "asks for " + ", ".join(str(i.get("id")) for i in last["outcome"]["interrupts"])
        if last.get("type") == "RUN_ERROR":
            return str(last.get("message", ""))[:200]
        return ""

    def __repr__(self) -> str:
        return f"<{self.label}{f' HTTP {self.status}' if self.status not in (None, 200) else ''}>"


async def post(session: aiohttp.ClientSession, url: str, body: dict[str, Any], path: str = "") -> Outcome:
    """POST as a client would and classify the answer. A stream that ends
    with its terminal event is held to the AG-UI rules (:func:`check_stream`)."""
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    raw = b""
    try:
        async with session.post(url + path, data=json.dumps(body), headers=headers) as response:
            if response.status != 200 or not response.content_type.startswith("text/event-stream"):
                reply = json.loads(await response.read() or b"null")
                error = reply.get("error") if isinstance(reply, dict) else None
                code = error.get("code") if isinstance(error, dict) else None
                kind = "error" if response.status >= 400 else "json"
                return Outcome(kind, code, response.status, body=reply)
            try:
                async for chunk in response.content.iter_any():
                    raw += chunk
            except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, asyncio.TimeoutError):
                pass  # cut: judged by what arrived
    except aiohttp.ClientConnectorError:
        return Outcome("refused")
    except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, asyncio.TimeoutError):
        return Outcome("cut", events=_complete_events(raw))
    events = _complete_events(raw)
    if not events or events[-1]["type"] not in ("RUN_FINISHED", "RUN_ERROR"):
        return Outcome("cut", status=200, events=events)
    events = check_stream(raw)
    last = events[-1]
    if last["type"] == "RUN_ERROR":
        return Outcome("error", last.get("code"), 200, events)
    # A stop closes with RUN_FINISHED too (AG-UI 1.0): it is no success.
    outcome = (last.get("outcome") or {}).get("type")
    kind = outcome if outcome in ("interrupt", "cancelled") else "success"
    return Outcome(kind, None, 200, events)


def _complete_events(raw: bytes) -> list[dict[str, Any]]:
    text = raw.decode(errors="replace")
    whole = text[: text.rfind("\n\n") + 2] if "\n\n" in text else ""
    return parse_sse(whole.encode())[0]


def resume_body(thread_id: str, cwd: Path, interrupt_id: str, decision: str = "allow_once") -> dict[str, Any]:
    """A resume answering one permission interrupt (a new runId each call)."""
    body = run_body(thread_id=thread_id, text=None, cwd=str(cwd))
    body["resume"] = [{"interruptId": interrupt_id, "status": "resolved", "payload": {"decision": decision}}]
    return body


# ---------------------------------------------------------------- the rig


@dataclass
class Asked:
    """A thread whose turn ended asking permission for the counted command."""

    thread_id: str
    cwd: Path
    interrupt: dict[str, Any]
    session: dict[str, Any]
    tool_seconds: float

    @property
    def task_id(self) -> str:
        return str(self.session["taskId"])

    @property
    def execution_id(self) -> str:
        return str(self.session["executionId"])

    def runs(self) -> int:
        """How many times the command ran."""
        path = self.cwd / MARKER
        return len(path.read_text().splitlines()) if path.exists() else 0


@dataclass
class TaskView:
    """What the runtime says about the thread's task: ``GetTask``'s state and
    the input it still shows as required, and the live ``executionStatus``
    of iac-code's ``/iac-code/execution/state`` for the context."""

    state: str | None
    waits_for: str | None
    execution_status: str | None = None
    error: Any = None

    @classmethod
    def of(cls, reply: dict[str, Any], execution: Any) -> TaskView:
        task = reply.get("result") or {}
        iac = (task.get("metadata") or {}).get("iac_code") or {}
        envelope = iac.get("input") if isinstance(iac.get("input"), dict) else {}
        waits = str(envelope["inputId"]) if envelope.get("required") and envelope.get("inputId") else None
        status = execution.get("executionStatus") if isinstance(execution, dict) else None
        return cls((task.get("status") or {}).get("state"), waits, status, reply.get("error"))

    def __str__(self) -> str:
        if self.error is not None:
            return f"GetTask error {self.error}"
        waits = " (input still required)" if self.waits_for else ""
        return f"GetTask {self.state}{waits}, execution {self.execution_status}"


class CrashRig:
    """The runtime, a proxy in front of it, and the adapter as a killable
    process in front of the proxy; a client session to talk to the adapter."""

    def __init__(
        self, runtime: IacRuntime, root: Path, *, interrupt_ttl_seconds: float = 3600.0, beside: bool = False,
        durability: str = "fsync",
    ) -> None:
        self.runtime = runtime
        #: The adapter shares the runtime's config folder (as on one machine).
        self.beside = beside
        self.proxy = A2AProxy(runtime.url)
        self.root = root
        self.interrupt_ttl_seconds = interrupt_ttl_seconds
        #: The adapter's ``--durability``: kill -9 loses nothing in either mode.
        self.durability = durability
        self.adapter: AdapterProcess | None = None
        self.session: aiohttp.ClientSession | None = None
        #: What the runtime said about the task right after each kill (for reports).
        self.task_at_kill: list[TaskView] = []
        self.killed_at: float | None = None
        self._restart: asyncio.Task[None] | None = None
        self._watched: Asked | None = None

    async def __aenter__(self) -> CrashRig:
        await self.proxy.start()
        self.adapter = AdapterProcess(
            a2a_url=self.proxy.url, a2a_token=self.runtime.token, state_dir=self.root / "state",
            allowed_cwd=self.runtime.workspaces_root, log_path=self.root / "adapter.log",
            interrupt_ttl_seconds=self.interrupt_ttl_seconds,
            runtime_config_dir=self.runtime.config_dir if self.beside else None, durability=self.durability,
        )  # fmt: skip
        # A connection per request: none outlives the process it was made to.
        self.session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_SECONDS),
            connector=aiohttp.TCPConnector(force_close=True),
        )
        await self.adapter.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._restart is not None:
            await asyncio.gather(self._restart, return_exceptions=True)
        if self.adapter is not None:
            await self.adapter.stop()
        if self.session is not None:
            await self.session.close()
        await self.proxy.close()

    @property
    def url(self) -> str:
        assert self.adapter is not None
        return self.adapter.url

    async def post(self, body: dict[str, Any], path: str = "") -> Outcome:
        assert self.session is not None
        return await post(self.session, self.url, body, path)

    # -- the crash

    async def crash(self) -> None:
        """``kill -9`` the adapter, note what the runtime says about the task,
        and start the adapter again (in the background, as a supervisor would)."""
        assert self.adapter is not None
        self.killed_at = time.monotonic()
        await self.adapter.kill()
        self._restart = asyncio.ensure_future(self.adapter.start())
        if self._watched is not None:
            # The new process needs a moment before it can call the runtime.
            self.task_at_kill.append(await self.task_view(self._watched))

    def new_cycle(self) -> None:
        """Forget the previous cycle's kill."""
        self.task_at_kill.clear()
        self.killed_at = None

    def arm(self, instant: Instant, asked: Asked) -> Trap:
        """Kill the adapter at ``instant`` of the next answer exchange."""
        self._watched = asked
        return self.proxy.arm(instant, self.crash)

    async def crash_after(self, seconds: float, asked: Asked | None) -> None:
        self._watched = asked
        await asyncio.sleep(seconds)
        await self.crash()

    async def restarted(self) -> None:
        """Wait until the adapter killed last is serving again."""
        if self._restart is not None:
            await self._restart

    # -- the scenario

    async def ask(self, name: str, tool_seconds: float) -> Asked:
        """A new thread whose first turn asks to run the counted command."""
        thread_id = f"crash-{name}-{uuid.uuid4().hex[:8]}"
        cwd = self.runtime.workspace(name)
        text = f"[scenario:bash cmd={slow_command(tool_seconds)}] count one run"
        outcome = await self.post(run_body(thread_id=thread_id, text=text, cwd=str(cwd)))
        assert outcome.kind == "interrupt", (
            f"the turn should ask permission, got {outcome} {outcome.body or outcome.events[-1:]}"
        )
        (interrupt,) = outcome.events[-1]["outcome"]["interrupts"]
        assert interrupt["metadata"]["toolName"] == "bash", interrupt
        (session,) = [e["value"] for e in outcome.events if e.get("name") == "iac-code.session.v1"]
        return Asked(thread_id, cwd, interrupt, session, tool_seconds)

    async def task_view(self, asked: Asked) -> TaskView:
        reply = await self.runtime.rpc("GetTask", {"id": asked.task_id})
        url = f"{self.runtime.url}iac-code/execution/state"
        params = {"contextId": str(asked.session["contextId"])}
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_SECONDS)) as session,
            session.get(url, params=params, headers=self.runtime.headers) as response,
        ):
            execution = await response.json(content_type=None)
        return TaskView.of(reply, execution)

    async def touch_until_settled(self, body: Any, path: str = "") -> list[Outcome]:
        """Send a request until its outcome is not retryable (each time with
        a new runId, when it is a run): at most ``MAX_ATTEMPTS`` answers from
        the server, "connection refused" not counted, within the deadline."""
        attempts: list[Outcome] = []
        deadline = time.monotonic() + RETRY_DEADLINE_SECONDS
        answered = 0
        while True:
            request = body() if callable(body) else body
            outcome = await self.post(request, path)
            attempts.append(outcome)
            answered += outcome.kind != "refused"
            if not outcome.retryable or answered >= MAX_ATTEMPTS or time.monotonic() > deadline:
                return attempts
            await asyncio.sleep(RECONNECT_PAUSE_SECONDS if outcome.kind in ("refused", "cut") else RETRY_PAUSE_SECONDS)

    async def settle(self, asked: Asked, since: float) -> int:
        """Wait until the runtime cannot still start or finish the command,
        then count its runs: every answer that reached the runtime since
        ``since`` is given the tool's duration and a margin, and the count
        must then stay the same for the margin."""
        sent = [exchange.sent_at for exchange in self.proxy.answers(since) if exchange.sent_at is not None]
        quiet_until = max([*sent, since]) + asked.tool_seconds + SETTLE_MARGIN_SECONDS
        await asyncio.sleep(max(0.0, quiet_until - time.monotonic()))
        before = asked.runs()
        for _ in range(20):
            await asyncio.sleep(SETTLE_MARGIN_SECONDS / 2)
            now = asked.runs()
            if now == before:
                break
            before = now
        return before

    def answers_since(self, since: float) -> list[Exchange]:
        return self.proxy.answers(since)


# ---------------------------------------------------------------- verdicts


@dataclass
class Cycle:
    """One crash cycle and its verdict."""

    name: str
    runs: int
    attempts: list[Outcome]
    #: The same answer once more, after the client saw success (``None`` if it never did).
    confirm: Outcome | None = None
    #: Where the kill landed, for the report.
    phase: str = ""
    task_at_kill: str = ""
    #: The interrupt the client answered.
    answered: str = ""
    verdict: str = ""
    reason: str = ""

    def __post_init__(self) -> None:
        if not self.verdict:
            self.verdict, self.reason = judge(self.runs, self.attempts, self.confirm)

    @property
    def final(self) -> str:
        return self.attempts[-1].label if self.attempts else "-"

    def describe(self) -> str:
        trail = " -> ".join(a.label for a in self.attempts)
        if self.attempts and self.attempts[-1].detail:
            trail += f" ({self.attempts[-1].detail})"
        confirm = f"; again: {self.confirm.label}" if self.confirm is not None else ""
        at_kill = f"; runtime at the kill: {self.task_at_kill}" if self.task_at_kill else ""
        answered = f" to {self.answered}" if self.answered else ""
        return f"{self.name}: {self.verdict} ({self.reason}); ran {self.runs}x; client{answered}: {trail}{confirm}{at_kill}"


def judge(runs: int, attempts: list[Outcome], confirm: Outcome | None) -> tuple[str, str]:
    """Issue 10's verdict. Lost: the command never ran and the client is
    left without a way to get the answer applied. Duplicated: it ran more
    than once. False failure: it ran once but the client was never told
    success (or a second, identical answer afterwards was not
    ``RESUME_ALREADY_APPLIED``). Correct: once, success seen, and the same
    answer again is ``RESUME_ALREADY_APPLIED``."""
    final = attempts[-1].label if attempts else "no attempt"
    if runs >= 2:
        return DUPLICATED, f"ran {runs} times"
    if runs == 0:
        return LOST, f"never ran; the client's last answer: {final}"
    if not any(attempt.kind == "success" for attempt in attempts):
        return FALSE_FAILURE, f"ran once; the client's last answer: {final}"
    if confirm is not None and confirm.code != "RESUME_ALREADY_APPLIED":
        return FALSE_FAILURE, f"ran once; the same answer again got {confirm.label}"
    return CORRECT, "ran once; success"


async def retry_cycle(rig: CrashRig, asked: Asked, first: Outcome, name: str, since: float) -> Cycle:
    """After the crashed resume: retry the same answer while retryable, then
    once more after success, settle, count, judge."""
    attempts = [first]
    if first.retryable:
        attempts += await rig.touch_until_settled(
            lambda: resume_body(asked.thread_id, asked.cwd, asked.interrupt["id"])
        )
    confirm = None
    await rig.restarted()
    if any(attempt.kind == "success" for attempt in attempts):
        confirm = await rig.post(resume_body(asked.thread_id, asked.cwd, asked.interrupt["id"]))
    runs = await rig.settle(asked, since)
    at_kill = "; ".join(map(str, rig.task_at_kill))
    return Cycle(name, runs, attempts, confirm, task_at_kill=at_kill, answered=str(asked.interrupt["id"]))


def kill_phase(rig: CrashRig, since: float, client_done_at: float | None) -> str:
    """Where a kill landed in the first answer exchange after ``since``."""
    killed = rig.killed_at
    if killed is None:
        return "no kill"
    if client_done_at is not None and client_done_at <= killed:
        return "after the client saw the end"
    first = next(iter(rig.answers_since(since)), None)
    if first is None or first.sent_at is None or first.sent_at > killed:
        return "before the answer was sent"
    relayed = first.relayed_before(killed)
    if not relayed:
        return "answer sent, nothing relayed"
    if any(ends_stream(seen.event) for seen in relayed):
        return "after the terminal event"
    return "while the runtime works"


def tally_table(cycles: list[Cycle]) -> str:
    """The counts, then how they split by where the kill landed."""
    counts = Counter(cycle.verdict for cycle in cycles)
    lines = [
        " | ".join(f"{verdict}: {counts[verdict]}" for verdict in VERDICTS) + f" | cycles: {len(cycles)}",
        "",
        f"{'where the kill landed':<34} {'cycles':>6}  " + "  ".join(f"{v:>13}" for v in VERDICTS) + "  final answers",
    ]
    phases = sorted({cycle.phase for cycle in cycles})
    for phase in phases:
        here = [cycle for cycle in cycles if cycle.phase == phase]
        split = Counter(cycle.verdict for cycle in here)
        finals = Counter(cycle.final for cycle in here)
        lines.append(
            f"{phase:<34} {len(here):>6}  " + "  ".join(f"{split[v]:>13}" for v in VERDICTS)
            + "  " + ", ".join(f"{name} x{n}" for name, n in finals.most_common())
        )  # fmt: skip
    wrong = [cycle.describe() for cycle in cycles if cycle.verdict != CORRECT]
    if wrong:
        lines += ["", "cycles that went wrong:", *wrong]
    return "\n".join(lines)
