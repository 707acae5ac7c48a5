"""The demo agent's task engine: tasks, contexts, turns, cancel (no HTTP here).

:class:`DemoAgent` admits user messages the way ``iac-code a2a`` does, runs
each turn's script (:mod:`aguiadapter.demo.scripts`) in its own asyncio task
and fans the encoded results out to :class:`Listener` s. A listener that goes
away never stops a turn; only :meth:`DemoAgent.cancel` does.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import contextlib
import json
import logging
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import partial
from itertools import chain
from typing import Any, Final

import attrs

from aguiadapter.a2a import wire
from aguiadapter.demo import pipeline, scripts
from aguiadapter.demo.pipeline import AwaitAnswer, AwaitFollower, PipelineRun, PipelineStep, SideInterrupt
from aguiadapter.demo.scripts import Burst, Emit, Interrupt, Json, PendingInput, RpcFailure, Sleep

log = logging.getLogger(__name__)

dumps: Final = partial(json.dumps, separators=(",", ":"), ensure_ascii=False)
# A listener item: encoded ``result`` texts, or an error that ends the stream.
Item = tuple[str, ...] | RpcFailure
_EXECUTION_STATUS: Final = {
    wire.INPUT_REQUIRED: "input-required",
    wire.CANCELED: "canceled",
    wire.FAILED: "failed",
}
PERMISSION_KEYS: Final = frozenset({"schemaVersion", "kind", "requestTaskId", "inputId", "toolUseId", "decision"})


class RpcError(Exception):
    """A JSON-RPC error to answer instead of a result."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Listener:
    """One consumer of a task's events: a streaming response or a SendMessage waiter.

    Pushing never blocks (so cancel and publish stay synchronous); a producer
    that wants backpressure awaits :meth:`wait_room`.
    """

    high_water: Final = 64

    def __init__(self) -> None:
        self._items: collections.deque[Item] = collections.deque()
        self._ready = asyncio.Event()
        self._room = asyncio.Event()
        self.closed = False
        # The one result of a call that starts no turn (an acknowledgement).
        self.reply: Json | None = None

    def push(self, item: Item) -> None:
        """Queue *item* unless the listener is closed."""
        if not self.closed:
            self._items.append(item)
            self._ready.set()

    def close(self) -> None:
        """No more items; what is queued is still delivered."""
        self.closed = True
        self._ready.set()
        self._room.set()

    async def next_batch(self) -> list[Item] | None:
        """Everything queued so far, or None once closed and drained."""
        while not self._items:
            if self.closed:
                return None
            self._ready.clear()
            await self._ready.wait()
        batch = list(self._items)
        self._items.clear()
        self._room.set()
        return batch

    async def wait_room(self) -> None:
        """Wait while this listener lags more than ``high_water`` items behind."""
        while len(self._items) > self.high_water and not self.closed:
            self._room.clear()
            await self._room.wait()


def _new_uuid() -> str:
    return str(uuid.uuid4())


@attrs.define(eq=False)
class TaskRecord:
    """One A2A task as the demo runtime keeps it (introspected by tests)."""

    id: str
    context_id: str
    session_id: str
    cwd: str = "/workspace"
    language: str = "en"
    state: str = wire.SUBMITTED
    status: Json = attrs.field(factory=lambda: {"state": wire.SUBMITTED})
    # A str entry is a text delta of this task (kept compact for the firehose).
    history: list[Json | str] = attrs.field(factory=list)
    artifacts: list[Json] = attrs.field(factory=list)
    pending: PendingInput | None = None
    permission: Json | None = None
    input_received: Json | None = None
    #: Every input of the task the runtime took an answer to, with that answer's
    #: receipt: a repeated answer is acknowledged as a duplicate, not run again.
    answered: dict[str, Json] = attrs.field(factory=dict)
    #: What GetTask shows of an ordinary task from its first interrupt on: iac-code
    #: keeps that snapshot (the first input, still "pending") for the rest of the
    #: task, through later inputs and the end of the turn; only a cancel ends it.
    frozen: Json | None = None
    execution_id: str = attrs.field(factory=lambda: f"exec-{uuid.uuid4().hex}")
    runner: asyncio.Task[None] | None = None
    listeners: set[Listener] = attrs.field(factory=set)
    pipeline: PipelineRun | None = None
    # The ``input`` of the latest status update and the latest pipeline envelope sent:
    # what GetTask shows of a pipeline task (iac-code drops the input once another
    # update follows it, even while the input still waits).
    shown_input: Json | None = None
    last_pipeline: Json | None = None
    # Side-band inputs: asked while the turn goes on (WORKING), answered with SendMessage.
    side_pending: dict[str, PendingInput] = attrs.field(factory=dict)
    side_answers: dict[str, asyncio.Future[str]] = attrs.field(factory=dict)
    # Set whenever a listener joins; cleared when a side-band answer arrives.
    followed: asyncio.Event = attrs.field(factory=asyncio.Event)
    clock: Callable[[], str] = scripts.utc_timestamp

    @property
    def cancelable(self) -> bool:
        """A turn is running or an interrupt waits for its answer."""
        return self.runner is not None or self.pending is not None

    def turn_context(self) -> scripts.TurnContext:
        """The ids and options a script needs for this task."""
        return scripts.TurnContext(self.id, self.context_id, self.session_id, self.cwd, self.language, self.clock)


@attrs.define
class ContextRecord:
    """A client-chosen contextId with its stable iac-code session id."""

    id: str
    session_id: str
    task_ids: list[str] = attrs.field(factory=list)
    #: The session's messages as iac-code's recovery route returns them: user
    #: text (and images), assistant ``thinking``, ``text`` and ``tool_use``
    #: blocks (one row per model reply), ``tool_result`` blocks.
    transcript: list[Json] = attrs.field(factory=list)
    #: Text the model streamed that no block holds yet (its reply's final
    #: repeat, or the tool call that follows it, writes it).
    streamed: list[str] = attrs.field(factory=list)

    def note_user(self, message: Json) -> None:
        """A user message joins the session: a string, or text and image blocks."""
        images = [{"type": "image", "media_type": part["mediaType"], "data": part["raw"], "ref_id": None}
                  for part in message.get("parts") or () if "raw" in part and "mediaType" in part]
        text = _message_text(message)
        blocks = [{"type": "text", "text": text}] if text else []
        content: list[Json] | str = [*blocks, *images] if images else text
        self.transcript.append({"role": "user", "content": content, "metadata": {}})
        self.streamed.clear()

    def note_thinking(self, text: str) -> None:
        """Reasoning joins the model's reply (a thinking block, grown as it streams)."""
        last = self.transcript[-1] if self.transcript else None
        blocks = last["content"] if last is not None and last["role"] == "assistant" else None
        if blocks and blocks[-1]["type"] == "thinking":
            blocks[-1]["thinking"] += text
        else:
            self.note_block("assistant", {"type": "thinking", "thinking": text, "provider_metadata": {}})

    def note_text(self, text: str | None = None) -> None:
        """The reply's text joins the session: ``text`` (a final repeat), or
        what was streamed since the last block (before a tool call)."""
        written = text if text is not None else "".join(self.streamed)
        self.streamed.clear()
        if written:
            self.note_block("assistant", {"type": "text", "text": written})

    def note_block(self, role: str, block: Json) -> None:
        """A content block joins the session's last message of ``role``
        (a new message when the last one is someone else's)."""
        last = self.transcript[-1] if self.transcript else None
        if last is None or last["role"] != role or not isinstance(last["content"], list):
            last = {"role": role, "content": [], "metadata": {}}
            self.transcript.append(last)
        last["content"].append(block)


@attrs.define
class DemoState:
    """Everything the runtime knows; tests read it to check what really happened."""

    tasks: dict[str, TaskRecord] = attrs.field(factory=dict)
    contexts: dict[str, ContextRecord] = attrs.field(factory=dict)
    tool_runs: collections.Counter[str] = attrs.field(factory=collections.Counter)
    tool_runs_by_use_id: collections.Counter[str] = attrs.field(factory=collections.Counter)
    cancel_calls: collections.Counter[str] = attrs.field(factory=collections.Counter)
    # Every shell command a permitted tool really ran, in order.
    commands_run: list[str] = attrs.field(factory=list)
    # Every well-formed user message that arrived, as sent (refused ones too).
    received: list[Json] = attrs.field(factory=list)
    server_instance_id: str = attrs.field(factory=lambda: f"instance-{uuid.uuid4().hex}")
    # Where task, session and execution ids and timestamps come from (recordings fix them).
    new_id: Callable[[], str] = _new_uuid
    clock: Callable[[], str] = scripts.utc_timestamp

    @property
    def total_cancel_calls(self) -> int:
        """How many CancelTask requests arrived, whatever their outcome."""
        return sum(self.cancel_calls.values())

    def context(self, context_id: str, session_id: str | None = None) -> ContextRecord:
        """The context record, created on first use."""
        if context_id not in self.contexts:
            session = session_id or self.new_id()
            self.contexts[context_id] = ContextRecord(context_id, session)
        return self.contexts[context_id]


def _is_duplicate_receipt(update: Json) -> bool:
    received = update.get("metadata", {}).get(wire.IAC_CODE_KEY, {}).get("inputReceived")
    return isinstance(received, dict) and received.get("duplicate") is True


def _message_text(message: Json) -> str:
    return "".join(str(part["text"]) for part in message["parts"] if "text" in part)


def _turn_options(task: TaskRecord, message: Json) -> None:
    """Take the cwd and language the client sent under ``metadata.iac_code``."""
    meta = message.get("metadata")
    iac = meta.get("iac_code") if isinstance(meta, dict) else None
    if isinstance(iac, dict):
        if isinstance(iac.get("cwd"), str) and iac["cwd"]:
            task.cwd = iac["cwd"]
        if isinstance(iac.get("preferredLanguage"), str) and iac["preferredLanguage"]:
            task.language = iac["preferredLanguage"]


def _echo(message: Json, task: TaskRecord) -> Json:
    """The user message as stored on the task (ids filled in, proto field order)."""
    echoed: Json = {
        "messageId": message["messageId"],
        "contextId": task.context_id,
        "taskId": task.id,
    }
    echoed.update({k: v for k, v in message.items() if k not in echoed})
    return echoed


def _check_message(message: Any) -> Json:
    """The message param, or INVALID_PARAMS when it is not a usable user message."""
    if not isinstance(message, dict):
        raise RpcError(wire.INVALID_PARAMS, "params.message must be an object")
    if message.get("role") != wire.ROLE_USER:
        raise RpcError(wire.INVALID_PARAMS, "message.role must be ROLE_USER")
    if not isinstance(message.get("messageId"), str) or not message["messageId"]:
        raise RpcError(wire.INVALID_PARAMS, "message.messageId is required")
    parts = message.get("parts")
    if not isinstance(parts, list) or not parts or not all(isinstance(p, dict) for p in parts):
        raise RpcError(wire.INVALID_PARAMS, "message.parts must be a non-empty list of parts")
    for key in ("taskId", "contextId"):
        if key in message and not isinstance(message[key], str):
            raise RpcError(wire.INVALID_PARAMS, f"message.{key} must be a string")
    return message


def _permission_answer(message: Json) -> Json | None:
    """The permission answer data part, if the message carries one."""
    answers = [
        part["data"]
        for part in message["parts"]
        if isinstance(part.get("data"), dict) and part["data"].get("kind") == "permission"
    ]
    if answers and len(message["parts"]) != 1:
        raise RpcError(wire.INVALID_PARAMS, "A permission answer must be the message's only part.")
    return answers[0] if answers else None


def _received(pending: PendingInput) -> Json:
    """``inputReceived``: which interrupt was answered."""
    return {"inputId": pending.input_id, "toolUseId": pending.tool_use_id, "kind": pending.kind}


def check_permission_answer(
    answer: Mapping[str, Any], task_id: str, pending: PendingInput | None, canceled: bool
) -> str | None:
    """Why iac-code would refuse this permission answer, or None when it is
    valid: an input it does not wait for is "not active"; one it waits for,
    named with other ids, is a correlation mismatch."""
    if canceled:
        return "permission_resume_invalid: permission boundary is canceled"
    if answer.get("decision") not in ("allow_once", "deny"):
        return "Permission decision must be allow_once or deny."
    if set(answer) != PERMISSION_KEYS or answer.get("schemaVersion") != 1:
        return "Permission response payload fields do not match schemaVersion 1."
    if answer.get("requestTaskId") != task_id:
        return "Permission response taskId does not match requestTaskId."
    if pending is None or pending.kind != "permission" or answer.get("inputId") != pending.input_id:
        return "permission_resume_invalid: pending permission is not active."
    if answer.get("toolUseId") != pending.tool_use_id:
        return "input_response_mismatch: permission correlation does not match."
    return None


@attrs.frozen
class Reply:
    """The single result of a message that starts no turn (a side-band permission's ack)."""

    result: Json


class DemoAgent:
    """Admits messages, runs turns, cancels and describes tasks over a :class:`DemoState`."""

    def __init__(self, state: DemoState) -> None:
        self.state = state
        self._background: set[asyncio.Task[None]] = set()

    # --- admission ----------------------------------------------------------

    def send(self, message: Any) -> tuple[TaskRecord, Listener]:
        """Admit a user message, start its turn, and listen to it from the start. A side-band
        answer starts no turn: its listener holds the acknowledgement (``reply``) and is closed."""
        message = _check_message(message)
        self.state.received.append(message)
        task_id = message.get("taskId")
        task, steps = self._continue(task_id, message) if task_id else self._new_task(message)
        listener = Listener()
        if isinstance(steps, Reply):
            listener.reply = steps.result
            listener.push((dumps(steps.result),))
            listener.close()
            return task, listener
        self._attach(task, listener)
        self._start(task, steps)
        return task, listener

    @staticmethod
    def _attach(task: TaskRecord, listener: Listener) -> None:
        task.listeners.add(listener)
        task.followed.set()

    def _execution_id(self) -> str:
        return f"exec-{self.state.new_id().replace('-', '')}"

    def _plan(self, task: TaskRecord, message: Json) -> Iterator[PipelineStep] | None:
        """The body of a pipeline turn, or None for an ordinary turn."""
        request = pipeline.pipeline_request(message)
        if request is None:
            return None
        task.pipeline = PipelineRun.start(task.turn_context(), request, task.pipeline, pipeline.pipeline_script)
        return task.pipeline.script

    def _new_task(self, message: Json) -> tuple[TaskRecord, Iterator[PipelineStep]]:
        request = pipeline.pipeline_request(message)
        if request is not None and request.name not in pipeline.PIPELINE_NAMES:
            # As iac-code: a pipeline it does not have is refused before any task.
            raise RpcError(wire.INVALID_PARAMS, f"Unknown pipeline: {request.name}")
        context = self.state.context(message.get("contextId") or self.state.new_id())
        context.note_user(message)
        task_id, clock = self.state.new_id(), self.state.clock
        task = TaskRecord(task_id, context.id, context.session_id, execution_id=self._execution_id(), clock=clock)
        _turn_options(task, message)
        self.state.tasks[task.id] = task
        context.task_ids.append(task.id)
        ctx = task.turn_context()
        # Like iac-code, the opening message is in the task result but not in the history;
        # a pipeline's first event follows the task directly.
        echoed = _echo(message, task)
        script = self._plan(task, message)
        if script is not None:
            return task, chain([scripts.task_opened(ctx, echoed)], script)
        return task, chain(scripts.open_new_task(ctx, echoed), scripts.plan_turn(ctx, _message_text(message)))

    def _continue(self, task_id: str, message: Json) -> tuple[TaskRecord, Iterator[PipelineStep] | Reply]:
        """The steps of the message's turn, or the reply to an answer the running turn takes."""
        task = self.task(task_id)
        if (message.get("contextId") or task.context_id) != task.context_id:
            raise RpcError(wire.INVALID_PARAMS, "bad context id")
        answer = _permission_answer(message)
        if answer is not None and task.side_pending:
            return task, self._answer_side_band(task, answer)
        if answer is not None and str(answer.get("inputId")) in task.answered and task.pipeline is None:
            return task, self._repeated_permission(task, answer)
        if task.runner is not None:
            raise RpcError(wire.INVALID_PARAMS, f"Task {task.id} is still working; wait for it or cancel it")
        _turn_options(task, message)
        if answer is not None:
            return task, self._resume_permission(task, answer)
        if task.state in wire.TERMINAL_STATES - {wire.CANCELED}:
            raise RpcError(wire.UNSUPPORTED_OPERATION, f"Task {task.id} is in terminal state: {task.state}")
        text = _message_text(message)
        pending, run = task.pending, task.pipeline
        if pending is not None and pending.kind in ("ask_user_question", "candidate_selection"):
            if not text.strip():
                raise RpcError(wire.INVALID_PARAMS, "The answer to a question must be text.")
            _into_history(task, _echo(message, task))
            self.state.contexts[task.context_id].note_user(message)
            self._take_pending(task, pending)
            if run is not None and run.script is not None:
                return task, run.resume(text)
            return task, scripts.answer_question(task.turn_context(), pending, text)
        # A text message on a finished, canceled or permission-waiting task is a new
        # turn on the same task; a pending tool call is dropped (as iac-code does).
        _into_history(task, _echo(message, task))
        self.state.contexts[task.context_id].note_user(message)
        task.pending = task.permission = task.input_received = task.frozen = None
        task.execution_id = self._execution_id()
        script = self._plan(task, message)
        if script is not None:
            return task, script
        ctx = task.turn_context()
        return task, chain(scripts.open_follow_up(ctx), scripts.plan_turn(ctx, _message_text(message)))

    def _resume_permission(self, task: TaskRecord, answer: Json) -> Iterator[PipelineStep]:
        pending, canceled = task.pending, task.state == wire.CANCELED
        problem = check_permission_answer(answer, task.id, pending, canceled)
        if problem is not None or pending is None:
            raise RpcError(wire.INVALID_PARAMS, problem or "permission_resume_invalid")
        self._take_pending(task, pending, str(answer["decision"]))
        decision, run = str(answer["decision"]), task.pipeline
        if run is not None and run.script is not None:
            return run.resume(decision)
        return scripts.answer_permission(task.turn_context(), pending, decision)

    @staticmethod
    def _take_pending(task: TaskRecord, pending: PendingInput, decision: str | None = None) -> None:
        """The interrupt is answered: it leaves the task, ``inputReceived`` names it."""
        task.pending = task.permission = None
        task.input_received = _received(pending)
        task.answered[pending.input_id] = {**task.input_received, "decision": decision}

    @staticmethod
    def _repeated_permission(task: TaskRecord, answer: Json) -> Iterator[PipelineStep]:
        """An answer to an input taken before: iac-code acknowledges it as a
        duplicate (the same decision) in one update and runs nothing; another
        decision conflicts with its receipt."""
        receipt = task.answered[str(answer["inputId"])]
        if receipt.get("decision") != answer.get("decision"):
            refusal = "permission_resume_invalid: permission decision conflicts with receipt."
            raise RpcError(wire.INVALID_PARAMS, refusal)
        received = {**receipt, "recovered": True, "duplicate": True}
        return iter([scripts.working(task.turn_context(), session=False, inputReceived=received)])

    def _answer_side_band(self, task: TaskRecord, answer: Json) -> Reply:
        """Hand a validated side-band permission answer to the waiting turn: the
        resolution is published at once, the caller gets an acknowledgement."""
        pending = task.side_pending.get(str(answer.get("inputId")))
        if pending is None:  # let the check name the mismatch
            pending = next(iter(task.side_pending.values()))
        problem = check_permission_answer(answer, task.id, pending, task.state == wire.CANCELED)
        run = task.pipeline
        if problem is not None or run is None:
            raise RpcError(wire.INVALID_PARAMS, problem or "permission_resume_invalid")
        del task.side_pending[pending.input_id]
        decision, ctx = str(answer["decision"]), task.turn_context()
        self.emit(task, pipeline.side_permission_resolved(ctx, run, pending, decision))
        task.followed.clear()
        future = task.side_answers.get(pending.input_id)
        if future is not None and not future.done():
            future.set_result(decision)
        return Reply(pipeline.permission_ack(ctx, run.ids, pending, decision))

    def task(self, task_id: Any) -> TaskRecord:
        """The task, or TASK_NOT_FOUND."""
        if not isinstance(task_id, str) or task_id not in self.state.tasks:
            raise RpcError(wire.TASK_NOT_FOUND, "Task not found")
        return self.state.tasks[task_id]

    # --- running a turn -----------------------------------------------------

    def _start(self, task: TaskRecord, steps: Iterable[PipelineStep]) -> None:
        runner = asyncio.get_running_loop().create_task(self._drive(task, steps), name=f"demo-turn-{task.id}")
        task.runner = runner
        self._background.add(runner)
        runner.add_done_callback(self._background.discard)

    async def _drive(self, task: TaskRecord, steps: Iterable[PipelineStep]) -> None:
        try:
            for step in steps:
                if await self._perform(task, step):
                    return
        except asyncio.CancelledError:
            raise
        except Exception:
            # A broken script must not leave its clients waiting forever.
            log.exception("demo turn of task %s crashed", task.id)
            self._crash(task, RpcFailure(wire.INTERNAL_ERROR, "Internal error in the demo runtime"))
        finally:
            if task.runner is asyncio.current_task():
                task.runner = None
                self._close_listeners(task)

    async def _perform(self, task: TaskRecord, step: PipelineStep) -> bool:
        """Do one step; True when the turn's stream is over."""
        if isinstance(step, Sleep):
            await asyncio.sleep(step.seconds)
            return False
        if isinstance(step, Burst):
            await self._burst(task, step)
            return False
        if isinstance(step, scripts.ToolExecuted):
            self.state.tool_runs[step.tool_name] += 1
            self.state.tool_runs_by_use_id[step.tool_use_id] += 1
            if step.command is not None:
                self.state.commands_run.append(step.command)
            return False
        if isinstance(step, RpcFailure):
            self._crash(task, step)
            return True
        if isinstance(step, AwaitAnswer):
            try:
                step.box.decision = await task.side_answers[step.input_id]
            finally:
                task.side_answers.pop(step.input_id, None)
            return False
        if isinstance(step, AwaitFollower):
            # Whoever answered follows the task next (GetTask, then SubscribeToTask):
            # wait a little so that their stream starts here.
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(task.followed.wait(), step.seconds)
            return False
        more = isinstance(step, Emit | Interrupt) and step.more
        if isinstance(step, Interrupt):
            # Recorded before it is sent, so an immediate answer finds it pending.
            task.pending, task.permission = step.pending, step.pending.permission
            if task.pipeline is None and task.frozen is None:
                over = self.emit(task, step.result, more=more)
                task.frozen = self.snapshot(task)
                # As iac-code shows it at that moment: waiting, its stream open.
                task.frozen["metadata"]["iac_code"]["executionControl"]["executionStatus"] = "input-required"
                return over
        elif isinstance(step, SideInterrupt):
            task.side_pending[step.pending.input_id] = step.pending
            task.side_answers[step.pending.input_id] = asyncio.get_running_loop().create_future()
        return self.emit(task, step.result, more=more)

    async def _burst(self, task: TaskRecord, burst: Burst) -> None:
        if burst.texts:
            _status_into_history(task)
            task.history.extend(burst.texts[:-1])
            task.status = {
                "state": wire.WORKING,
                "message": scripts.delta_message(task.turn_context(), burst.texts[-1]),
            }
        for listener in list(task.listeners):
            listener.push(burst.encoded)
        for listener in list(task.listeners):
            await listener.wait_room()
        await asyncio.sleep(0)  # let the writers run between bursts

    def emit(self, task: TaskRecord, result: Json, *, more: bool = False) -> bool:
        """Apply *result* to the task and send it; True (and streams closed) at a stream
        end, unless *more* results follow."""
        self._apply(task, result)
        encoded = (dumps(result),)
        for listener in task.listeners:
            listener.push(encoded)
        update = result.get("statusUpdate")
        if update is not None and update["status"]["state"] in wire.STREAM_END_STATES and not more:
            self._close_listeners(task)
            return True
        return False

    def _apply(self, task: TaskRecord, result: Json) -> None:
        if "statusUpdate" in result and _is_duplicate_receipt(result["statusUpdate"]):
            return  # a repeated answer's receipt changes nothing of the task
        if "statusUpdate" in result:
            status = result["statusUpdate"]["status"]
            _status_into_history(task)
            task.status, task.state = status, status["state"]
            if task.pipeline is None:
                self._transcribe(task, result["statusUpdate"])
            if task.pipeline is not None:
                iac = result["statusUpdate"].get("metadata", {}).get(wire.IAC_CODE_KEY, {})
                task.shown_input = iac.get("input")
                sent = iac.get("pipelineBatch", {}).get("events") or [iac.get("pipeline")]
                task.last_pipeline = sent[-1] or task.last_pipeline
        elif "artifactUpdate" in result:
            task.artifacts.append(result["artifactUpdate"]["artifact"])
        elif "task" in result:
            task.status = result["task"]["status"]
            task.state = task.status["state"]

    def _transcribe(self, task: TaskRecord, update: Json) -> None:
        """What iac-code writes to the session for this update: the gated or
        read-only tool's call and result, and the reply's final text."""
        iac = update.get("metadata", {}).get(wire.IAC_CODE_KEY, {})
        context = self.state.contexts[task.context_id]
        thinking = iac.get("thinking")
        if isinstance(thinking, dict) and isinstance(thinking.get("text"), str):
            context.note_thinking(thinking["text"])
        tool = iac.get("tool")
        if isinstance(tool, dict) and tool.get("status") == "input_complete":
            context.note_text()
            block = {"type": "tool_use", "id": tool["toolUseId"], "name": tool.get("name"),
                     "input": tool.get("toolInput"), "provider_metadata": {}}
            context.note_block("assistant", block)
        elif isinstance(tool, dict) and tool.get("status") in ("completed", "failed"):
            block = {"type": "tool_result", "tool_use_id": tool["toolUseId"], "content": tool.get("result"),
                     "is_error": tool["status"] == "failed", "metadata": {}}
            context.note_block("user", block)
        message = update["status"].get("message")
        if message is None or update["status"].get("state") != wire.WORKING:
            return
        if iac.get("assistantFinal"):
            context.note_text(_message_text(message))
        elif message.get("role") == "ROLE_AGENT":
            context.streamed.append(_message_text(message))

    def execution(self, context_id: str) -> Json | None:
        """The context's current execution as iac-code's execution state
        route shows it (``None``: no such context)."""
        context = self.state.contexts.get(context_id)
        if context is None or not context.task_ids:
            return None
        task = self.state.tasks[context.task_ids[-1]]
        status = "working" if task.runner is not None else _EXECUTION_STATUS.get(task.state, "working")
        if task.state == wire.COMPLETED:
            status = "completed"
        return {**self._execution_control(task), "executionStatus": status, "streamAvailable": False,
                "blockers": []}

    def recovery(self, context_id: str, execution_id: str) -> Json | None:
        """iac-code's session recovery document for the context's current
        execution (``None``: not that execution)."""
        execution = self.execution(context_id)
        if execution is None or execution["executionId"] != execution_id:
            return None
        task = self.state.tasks[execution["taskId"]]
        return {"contextId": context_id, "taskId": task.id, "executionId": execution_id,
                "executionStatus": execution["executionStatus"], "task": self.snapshot(task),
                "messages": copy.deepcopy(self.state.contexts[context_id].transcript),
                "executionControl": execution}

    def _crash(self, task: TaskRecord, failure: RpcFailure) -> None:
        """A JSON-RPC error ends the stream; the task is left FAILED."""
        _status_into_history(task)
        task.status = scripts.crashed_status(task.turn_context(), failure.message)
        task.state = wire.FAILED
        for listener in task.listeners:
            listener.push(failure)
        self._close_listeners(task)

    @staticmethod
    def _close_listeners(task: TaskRecord) -> None:
        for listener in task.listeners:
            listener.close()
        task.listeners.clear()

    # --- other methods --------------------------------------------------------

    def cancel(self, task_id: Any) -> Json:
        """CancelTask: stop the turn or drop the interrupt, and report the task."""
        self.state.cancel_calls[str(task_id)] += 1
        task = self.task(task_id)
        if not task.cancelable:
            raise RpcError(wire.TASK_NOT_CANCELABLE, "Task cannot be canceled")
        runner, task.runner, task.pending, task.shown_input = task.runner, None, None, None
        task.side_pending.clear()
        task.side_answers.clear()
        if task.pipeline is not None:
            task.pipeline.cancel()
        if runner is not None:
            runner.cancel()
        # A cancel is stored: the task shows it from now on (and, as iac-code
        # does, keeps showing the permission it canceled: recording 08.2).
        task.frozen = None
        self.emit(task, scripts.canceled_update(task.turn_context()))
        return self.snapshot(task)

    def subscribe(self, task_id: Any) -> tuple[TaskRecord, Listener]:
        """SubscribeToTask: the snapshot now, then the task's further events."""
        task = self.task(task_id)
        if not task.cancelable:
            raise RpcError(wire.TASK_NOT_FOUND, f"Task {task.id} is not active")
        listener = Listener()
        listener.push((dumps({"task": self.snapshot(task)}),))
        self._attach(task, listener)
        return task, listener

    @staticmethod
    def detach(task: TaskRecord, listener: Listener) -> None:
        """Forget a listener whose client went away; the turn goes on."""
        listener.close()
        task.listeners.discard(listener)

    def snapshot(self, task: TaskRecord, history_length: int | None = None) -> Json:
        """The Task as GetTask returns it (bare, with ``executionControl``);
        an ordinary task as it was at its first interrupt."""
        if task.frozen is not None:
            return copy.deepcopy(task.frozen)
        entries = task.history
        if history_length is not None:
            entries = entries[-history_length:] if history_length > 0 else []
        ctx = task.turn_context()
        history = [scripts.delta_message(ctx, e) if isinstance(e, str) else e for e in entries]
        result: Json = {
            "id": task.id,
            "contextId": task.context_id,
            "status": task.status,
            "history": history,
        }
        if task.artifacts:
            result["artifacts"] = list(task.artifacts)
        if task.pipeline is not None:
            return self._pipeline_snapshot(task, result)
        iac: Json = {
            "iacCodeSessionId": task.session_id,
            "executionControl": self._execution_control(task),
        }
        if task.permission is not None:
            iac["permission"] = task.permission
        if task.pending is not None:
            iac["input"] = task.pending.envelope
        if task.side_pending:
            iac["pendingPermissions"] = [pending.envelope for pending in task.side_pending.values()]
        if task.input_received is not None:
            iac["inputReceived"] = task.input_received
        result["metadata"] = {"iac_code": iac}
        return result

    def _pipeline_snapshot(self, task: TaskRecord, result: Json) -> Json:
        """A pipeline task as iac-code shows it: the last envelope sent, the ``input`` only
        while the latest update carried it, side-band permissions without scope, no
        ``inputReceived``, and no ``history`` while it is empty."""
        if not result["history"]:
            del result["history"]
        iac: Json = {"iacCodeSessionId": task.session_id, "executionControl": self._execution_control(task)}
        if task.last_pipeline is not None:
            iac["pipeline"] = task.last_pipeline
        if task.state == wire.INPUT_REQUIRED and task.shown_input is not None:
            iac["input"] = task.shown_input
        if task.side_pending:
            iac["pendingPermissions"] = [pipeline.pending_permission(p) for p in task.side_pending.values()]
        result["metadata"] = {"iac_code": iac}
        return result

    def _execution_control(self, task: TaskRecord) -> Json:
        idle_status = _EXECUTION_STATUS.get(task.state, "working")
        blockers: list[Json] = [{"kind": "execution", "count": 1.0}] if task.cancelable else []
        run = task.pipeline
        if run is not None and not run.finished and task.state not in wire.TERMINAL_STATES:
            # A pipeline's execution keeps working through its pauses.
            idle_status = "working"
            if task.side_pending:
                blockers = [{"kind": "tool", "count": 1.0}, {"kind": "tool_batch", "count": 1.0}]
            elif task.runner is not None:
                blockers = [{"kind": "agent_loop", "count": 1.0}]
        elif run is not None and task.state == wire.COMPLETED:
            idle_status = "completed"
        return {
            "executionId": task.execution_id,
            "executionStatus": "working" if task.runner is not None else idle_status,
            "phase": "running",
            "blockers": blockers,
            "expiresAt": None,
            "streamAvailable": task.cancelable,
            "serverInstanceId": self.state.server_instance_id,
            "taskId": task.id,
            "contextId": task.context_id,
            "revision": 0.0,
            "persistedRevision": 0.0,
            "connectionEpoch": -1.0,
            "commitError": None,
            "pauseId": None,
            "pauseReason": None,
            "pauseComplete": False,
            "releaseReady": False,
            "externalOperations": [],
            "terminationReason": None,
            "backup": {"status": "not_requested"},
        }

    def shutdown(self) -> None:
        """Stop every turn and end every stream (the server is going away)."""
        for task in self.state.tasks.values():
            task.runner = None
            self._close_listeners(task)
        for runner in list(self._background):
            runner.cancel()


def _status_into_history(task: TaskRecord) -> None:
    """As a2a-sdk keeps a task: the message of the status a new one replaces
    goes to the history (each text delta becomes a message of its own there;
    the newest stays in ``status.message``, as a subscription's snapshot shows)."""
    message = task.status.get("message")
    if message is not None:
        task.history.append(message)


def _into_history(task: TaskRecord, message: Json) -> None:
    """A user's message joins the history after the status message it follows."""
    if "message" in task.status:
        task.history.append(task.status["message"])
        task.status = {key: value for key, value in task.status.items() if key != "message"}
    task.history.append(message)
