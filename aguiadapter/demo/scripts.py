"""Scripted behaviours of the embedded demo runtime (pure: no sockets, no tasks).

A behaviour is chosen by the first word of the user's text (case-insensitive,
trailing punctuation ignored); the rest of the text holds its arguments.

=====================  ===================================================================
first word             what happens
=====================  ===================================================================
*(anything else)*      A short friendly reply quoting the user's text: 3-6 text deltas,
                       usage, the final full text (``assistantFinal``), end of turn.
``think``              2-3 ``raw_thinking`` updates, then a reply as above.
``tool``               Read-only ``list_files {"path": "."}``: started, input deltas,
                       input_complete, usage, two ``progress`` updates, an
                       ``artifactUpdate`` (the listing as a file), completed, reply, end.
``slow [seconds]``     One text delta every 0.2 s for *seconds* (default 30), then usage,
                       final text, end of turn. For cancel/disconnect/heartbeat tests.
``silent [seconds]``   One text delta, then nothing at all for *seconds* (default 60), then
                       usage, final text, end of turn. For idle-stream capacity tests.
``fail``               Some text, then ``TASK_STATE_FAILED`` with an agent message and
                       ``metadata.iac_code.error = {retryable: false, errorId}``.
``rpcerror``           Two text deltas, then a JSON-RPC error object (-32603) in the
                       stream; the task is left FAILED.
``firehose [N]``       N (default 1000) tiny text deltas as fast as possible, pre-encoded
                       with string templates (:class:`Burst`), then usage, final, end.
``permission [file]``  Some text, a ``write_file`` trace up to input_complete, usage, then
                       the permission interrupt (``metadata.iac_code.input`` and
                       ``.permission``); the stream closes. ``allow_once`` runs the tool
                       (artifact + completed), ``deny`` fails it; then a reply and end.
``question``           Some text, usage, then an ``ask_user_question`` interrupt with 3
                       options and free text allowed. A plain text answer on the same task
                       gets a reply naming the choice, then end of turn.
=====================  ===================================================================

``metadata.iac_code.run_mode == "pipeline"`` (``pipeline_name`` selling or selling_solution_first) runs the pipeline of
:mod:`aguiadapter.demo.pipeline` instead, whatever the text says:

=========================  ===============================================================
step                       what happens (one pipeline envelope per status update)
=========================  ===============================================================
``intent_parsing``         pipeline_started, step_started, thinking, text, complete_step,
                           step_completed. A text starting with ``question`` first asks
                           a clarifying question: INPUT_REQUIRED with an
                           ``ask_user_question`` input; answer with text.
``architecture_planning``  text, complete_step, step_completed.
``evaluate_candidates``    Candidates A and B start; their text interleaves in one
                           ``pipelineBatch``; A runs ``list_files`` (its result is sent
                           twice, a deliberate replay), an ``internal_debug`` event,
                           stack_progress. B asks to ``write_file``: a WORKING update with
                           the ``input`` envelope (``scope: "candidate_step"``), the
                           stream stays open; A finishes. Answer with a permission data
                           part: a single ``permission_ack`` message comes back at once;
                           the pipeline goes on (follow it with GetTask + SubscribeToTask).
``confirm_and_select``     text, complete_step, step_completed, then INPUT_REQUIRED with a
                           ``candidate_selection`` input; answer with a candidate's name
                           (``candidate-a``, ``candidate-b``); the step goes on and
                           completes again.
``deploying``              A ``bash`` command asks permission: INPUT_REQUIRED with the
                           ``input`` envelope, then INPUT_REQUIRED ``backup_committed``
                           without it. Answer with a permission data part; the command
                           runs once, 2 stack_progress, step_completed, then
                           ``pipeline_completed`` in TASK_STATE_COMPLETED.
``cleanupOnly: true``      Only cleanup_started, 2 cleanup_progress, cleanup_completed,
                           pipeline_completed (TASK_STATE_COMPLETED).
=========================  ===============================================================

``GET /iac-code/pipeline/state?taskId=&afterSequence=N`` returns the run's snapshot and
every envelope after sequence N.

A turn is planned as an iterator of :data:`Step` values; the runtime performs
them (emits results, sleeps, counts tool runs, records interrupts). Numbers
under ``metadata.iac_code`` are floats because iac-code sends a proto Struct.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timezone
from typing import Any, Final

import attrs

from aguiadapter.a2a.wire import (
    CANCELED,
    FAILED,
    INPUT_REQUIRED,
    INTERNAL_ERROR,
    ROLE_AGENT,
    SUBMITTED,
    WORKING,
)

Json = dict[str, Any]

DELTA_DELAY: Final = 0.02
SLOW_INTERVAL: Final = 0.2
BURST_SIZE: Final = 512
DENIED_RESULT: Final = (
    "The user explicitly denied this tool operation. This is not a cloud API or IAM"
    " permission error. Do not retry this operation or perform the same action with"
    " another tool unless the user asks again."
)
# iac-code numbers its non-delta agent messages per turn; these are the numbers
# the recordings show for the final text and for "Task canceled.".
_FINAL_SEQ: Final = 2
_FAILURE_SEQ: Final = 3
_CANCEL_SEQ: Final = 5
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_TEXT_MARK: Final = "@@demo-delta@@"
_QUESTION_OPTIONS: Final = (
    ("cn-hangzhou", "China (Hangzhou)"),
    ("ap-southeast-1", "Singapore"),
    ("us-west-1", "US (Silicon Valley)"),
)


def utc_timestamp() -> str:
    """The current time in the proto Timestamp JSON form (``...123456Z``)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def new_hex() -> str:
    """A fresh random 32-digit hex id."""
    return uuid.uuid4().hex


@attrs.frozen
class TurnContext:
    """Who a turn belongs to, plus the clock and id source it may use."""

    task_id: str
    context_id: str
    session_id: str
    cwd: str = "/workspace"
    language: str = "en"
    clock: Callable[[], str] = utc_timestamp
    new_hex: Callable[[], str] = new_hex


@attrs.frozen
class PendingInput:
    """An interrupt the task waits on, with what its answer needs to resume."""

    kind: str
    input_id: str
    tool_use_id: str
    tool_name: str
    tool_input: Json
    envelope: Json
    permission: Json | None = None


@attrs.frozen
class Emit:
    """Send one A2A result (the value of JSON-RPC ``result``).

    A result in a stream-ending state (INPUT_REQUIRED, COMPLETED...) closes the
    stream unless *more* says that further results follow (iac-code sends a
    ``backup_committed`` update after some of those)."""

    result: Json
    more: bool = False


@attrs.frozen
class Burst:
    """Text deltas already encoded as ``result`` JSON texts, sent back to back."""

    encoded: tuple[str, ...]
    texts: tuple[str, ...]


@attrs.frozen
class Sleep:
    """Wait before the next step."""

    seconds: float


@attrs.frozen
class ToolExecuted:
    """The tool really ran now (the runtime counts these, and records a shell *command*)."""

    tool_name: str
    tool_use_id: str
    command: str | None = None


@attrs.frozen
class Interrupt:
    """Record *pending* on the task, then send *result* (which closes the stream
    unless *more*, as for :class:`Emit`)."""

    pending: PendingInput
    result: Json
    more: bool = False


@attrs.frozen
class RpcFailure:
    """Send a JSON-RPC error object instead of a result; the turn dies."""

    code: int
    message: str


Step = Emit | Burst | Sleep | ToolExecuted | Interrupt | RpcFailure
Behaviour = Callable[[TurnContext, str, str], Iterator[Step]]


# --- result builders -------------------------------------------------------


def agent_message(ctx: TurnContext, message_id: str, text: str) -> Json:
    """An agent Message with one text part."""
    return {
        "messageId": message_id,
        "contextId": ctx.context_id,
        "taskId": ctx.task_id,
        "role": ROLE_AGENT,
        "parts": [{"text": text}],
    }


def delta_message(ctx: TurnContext, text: str) -> Json:
    """A text delta message; iac-code uses ``<taskId>-message`` for every delta."""
    return agent_message(ctx, f"{ctx.task_id}-message", text)


def status_update(
    ctx: TurnContext, status: Json, iac: Mapping[str, Any] | None = None, *, session: bool = True
) -> Json:
    """A ``statusUpdate`` result with runtime metadata under ``iac_code``."""
    meta = dict(iac or {})
    if session:
        meta["iacCodeSessionId"] = ctx.session_id
    update = {"taskId": ctx.task_id, "contextId": ctx.context_id, "status": status}
    update["metadata"] = {"iac_code": meta}
    return {"statusUpdate": update}


def working(ctx: TurnContext, *, session: bool = True, **iac: Any) -> Emit:
    """A WORKING update that carries only runtime metadata (tool, usage, thinking...)."""
    return Emit(status_update(ctx, {"state": WORKING}, iac, session=session))


def stamped(ctx: TurnContext, state: str, message: Json | None = None) -> Json:
    """A TaskStatus with a timestamp (and optionally a message)."""
    status: Json = {"state": state}
    if message is not None:
        status["message"] = message
    status["timestamp"] = ctx.clock()
    return status


def canceled_update(ctx: TurnContext) -> Json:
    """The CANCELED status update (with the "Task canceled." agent message)."""
    message = agent_message(ctx, f"{ctx.task_id}-{_CANCEL_SEQ}", "Task canceled.")
    return status_update(ctx, stamped(ctx, CANCELED, message))


def crashed_status(ctx: TurnContext, text: str) -> Json:
    """The FAILED status a task is left in after a JSON-RPC error mid-stream."""
    return stamped(ctx, FAILED, agent_message(ctx, f"{ctx.task_id}-{_FAILURE_SEQ}", text))


def usage(ctx: TurnContext, output_tokens: int) -> Emit:
    """The usage update that follows each model reply."""
    tokens = {
        "inputTokens": 100.0,
        "outputTokens": float(output_tokens),
        "totalTokens": float(100 + output_tokens),
        "cachedInputTokens": 0.0,
        "model": "demo-script",
        "provider": "demo",
    }
    return working(ctx, usage=tokens)


def end_of_turn(ctx: TurnContext) -> Emit:
    """A finished turn: INPUT_REQUIRED with a timestamp and nothing pending."""
    return Emit(status_update(ctx, stamped(ctx, INPUT_REQUIRED)))


# --- step sequences ----------------------------------------------------------


def task_opened(ctx: TurnContext, user_message: Json) -> Emit:
    """A new task's first result: the Task, SUBMITTED, with the user message."""
    task = {"id": ctx.task_id, "contextId": ctx.context_id, "status": {"state": SUBMITTED}}
    return Emit({"task": {**task, "history": [user_message]}})


def open_new_task(ctx: TurnContext, user_message: Json) -> Iterator[Step]:
    """A new task's stream opening: the Task (SUBMITTED), then SUBMITTED and WORKING."""
    yield task_opened(ctx, user_message)
    yield from open_follow_up(ctx)


def open_follow_up(ctx: TurnContext) -> Iterator[Step]:
    """A new turn on an existing task starts with SUBMITTED and WORKING updates."""
    yield Emit(status_update(ctx, stamped(ctx, SUBMITTED)))
    yield Emit(status_update(ctx, stamped(ctx, WORKING)))


def split_text(text: str, pieces: int) -> list[str]:
    """Cut *text* into at most *pieces* consecutive chunks."""
    size = max(1, -(-len(text) // max(1, pieces)))
    return [text[i : i + size] for i in range(0, len(text), size)]


def text_deltas(ctx: TurnContext, chunks: list[str], delay: float = DELTA_DELAY) -> Iterator[Step]:
    """Stream *chunks* as text deltas, pausing *delay* between them."""
    for index, chunk in enumerate(chunks):
        if index and delay:
            yield Sleep(delay)
        status = {"state": WORKING, "message": delta_message(ctx, chunk)}
        yield Emit(status_update(ctx, status))


def finish_reply(ctx: TurnContext, text: str) -> Iterator[Step]:
    """Usage, the final full-text repeat, and the end of the turn."""
    yield usage(ctx, len(text.split()))
    final = stamped(ctx, WORKING, agent_message(ctx, f"{ctx.task_id}-{_FINAL_SEQ}", text))
    yield Emit(status_update(ctx, final, {"assistantFinal": {"complete": True}}))
    yield end_of_turn(ctx)


def reply(ctx: TurnContext, text: str) -> Iterator[Step]:
    """A whole model reply: 3-6 deltas, usage, final text, end of turn."""
    yield from text_deltas(ctx, split_text(text, min(6, max(3, len(text) // 25))))
    yield from finish_reply(ctx, text)


def _quote(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _number(args: str, default: float, low: float, high: float) -> float:
    try:
        value = float(args.split()[0]) if args.split() else default
    except ValueError:
        return default
    return default if math.isnan(value) else min(high, max(low, value))


# --- behaviours ----------------------------------------------------------------


def default_turn(ctx: TurnContext, args: str, text: str) -> Iterator[Step]:
    """A friendly reply that quotes the user's text."""
    yield from reply(
        ctx,
        f'Hello! You said: "{_quote(text)}". I am the demo runtime of aguiadapter; start a'
        " message with think, tool, slow, fail, rpcerror, firehose, permission or question"
        " to see other behaviours.",
    )


def think_turn(ctx: TurnContext, args: str, text: str) -> Iterator[Step]:
    """Raw thinking first, then the reply."""
    for piece in ("Let me think about ", "what was asked, ", "then answer briefly."):
        yield working(ctx, thinking={"type": "raw_thinking", "text": piece})
        yield Sleep(DELTA_DELAY)
    yield from reply(ctx, f'After thinking it over: "{_quote(args or text)}" gets a short answer.')


def _tool_opening(ctx: TurnContext, name: str, use_id: str, tool_input: Json) -> Iterator[Step]:
    """started → input deltas → input_complete → usage, as a model's tool call streams."""
    yield working(ctx, tool={"status": "started", "toolUseId": use_id, "name": name})
    encoded = json.dumps(tool_input)
    for length in (len(encoded) // 2, len(encoded)):
        delta = {"status": "input_delta", "toolUseId": use_id, "partialJsonLength": float(length)}
        yield working(ctx, tool=delta)
    fields = {key: {"type": type(value).__name__} for key, value in tool_input.items()}
    summary = {"tool_name": name, "fields": fields}
    complete = {"status": "input_complete", "toolInput": tool_input, "toolUseId": use_id}
    yield working(ctx, tool={**complete, "name": name, "inputSummary": summary})
    yield usage(ctx, 1)


def file_artifact(ctx: TurnContext, filename: str, content: str) -> tuple[Emit, Json]:
    """An ``artifactUpdate`` for a generated text file, and the tool's ``artifact`` ref."""
    artifact_id = str(uuid.UUID(ctx.new_hex()))
    data = content.encode()
    uri = f"iac-code-artifact://{artifact_id}/{filename}"
    meta = {
        "uri": uri,
        "sourcePath": f"{ctx.cwd.rstrip('/')}/{filename}",
        "sha256": hashlib.sha256(data).hexdigest(),
        "mediaType": "text/plain",
        "byteSize": float(len(data)),
    }
    part = {"url": uri, "metadata": meta, "filename": filename, "mediaType": "text/plain"}
    artifact = {"artifactId": artifact_id, "name": filename, "parts": [part], "metadata": meta}
    update = {"taskId": ctx.task_id, "contextId": ctx.context_id, "artifact": artifact}
    ref = {**meta, "filename": filename, "artifactId": artifact_id}
    return Emit({"artifactUpdate": {**update, "lastChunk": True}}), ref


def tool_turn(ctx: TurnContext, args: str, text: str) -> Iterator[Step]:
    """A read-only ``list_files`` call that runs without asking."""
    use_id = f"call_{ctx.new_hex()[:24]}"
    tool = {"toolUseId": use_id, "name": "list_files"}
    yield from _tool_opening(ctx, "list_files", use_id, {"path": "."})
    yield ToolExecuted("list_files", use_id)
    for step, note in enumerate(("Reading directory .", "Collecting file sizes"), start=1):
        yield Sleep(DELTA_DELAY)
        progress = {"message": note, "current": float(step), "total": 2.0}
        yield working(ctx, tool={"status": "progress", **tool, **progress})
    listing = f"Directory: {ctx.cwd}\n\n  README.md (512B)\n  main.tf (1024B)"
    artifact_event, artifact_ref = file_artifact(ctx, "file-list.txt", listing + "\n")
    yield artifact_event
    done = {"status": "completed", "result": listing, **tool, "artifact": artifact_ref}
    yield working(ctx, tool=done)
    yield from reply(ctx, "The workspace holds README.md and main.tf.")


def slow_turn(ctx: TurnContext, args: str, text: str) -> Iterator[Step]:
    """One delta every 0.2 s for the requested number of seconds."""
    count = max(1, round(_number(args, 30.0, 0.2, 86_400.0) / SLOW_INTERVAL))
    chunks = [f"tick {index + 1}. " for index in range(count)]
    yield from text_deltas(ctx, chunks, SLOW_INTERVAL)
    yield from finish_reply(ctx, "".join(chunks))


def silent_turn(ctx: TurnContext, args: str, text: str) -> Iterator[Step]:
    """One delta, then silence: a stream that waits on a quiet runtime."""
    seconds = _number(args, 60.0, 0.0, 86_400.0)
    yield from text_deltas(ctx, ["waiting. "])
    yield Sleep(seconds)
    yield from finish_reply(ctx, "waiting. ")


def fail_turn(ctx: TurnContext, args: str, text: str) -> Iterator[Step]:
    """Some text, then the task fails with an explanation."""
    yield from text_deltas(ctx, ["Trying to do that", " now..."])
    explanation = "The demo agent failed on purpose (you asked for 'fail')."
    message = agent_message(ctx, f"{ctx.task_id}-{_FAILURE_SEQ}", explanation)
    error = {"retryable": False, "errorId": f"err-{ctx.new_hex()}"}
    yield Emit(status_update(ctx, stamped(ctx, FAILED, message), {"error": error}))


def rpcerror_turn(ctx: TurnContext, args: str, text: str) -> Iterator[Step]:
    """Two deltas, then a JSON-RPC internal error in the middle of the stream."""
    yield from text_deltas(ctx, ["Starting, ", "then breaking"])
    yield RpcFailure(INTERNAL_ERROR, "Internal error: the demo agent raised on purpose")


def delta_template(ctx: TurnContext) -> tuple[str, str]:
    """The encoded text-delta result split around its text, to format without json."""
    sample = status_update(ctx, {"state": WORKING, "message": delta_message(ctx, _TEXT_MARK)})
    head, tail = json.dumps(sample, separators=(",", ":"), ensure_ascii=False).split(_TEXT_MARK)
    return head, tail


def firehose_turn(ctx: TurnContext, args: str, text: str) -> Iterator[Step]:
    """N tiny deltas as fast as the socket takes them (the texts need no escaping)."""
    count = int(_number(args, 1000.0, 1.0, 50_000_000.0))
    head, tail = delta_template(ctx)
    for start in range(0, count, BURST_SIZE):
        texts = tuple(f"w{index} " for index in range(start, min(count, start + BURST_SIZE)))
        yield Burst(tuple([head + piece + tail for piece in texts]), texts)
    yield from finish_reply(ctx, "".join(f"w{index} " for index in range(count)))


def _safe_summary(tool_name: str, tool_input: Json) -> str:
    """A summary that fingerprints the content instead of showing it."""
    content = str(tool_input.get("content", ""))
    fingerprint = "sha256:" + hashlib.sha256(content.encode()).hexdigest()[:16]
    shown: Json = {"content": {"fingerprint": fingerprint, "length": len(content), "type": "str"}}
    shown["path"] = tool_input.get("path")
    return f"{tool_name}: {json.dumps(shown, separators=(',', ':'), sort_keys=True)}"


def input_envelope(ctx: TurnContext, kind: str, input_id: str, use_id: str, **fields: Any) -> Json:
    """An interrupt envelope (``metadata.iac_code.input``)."""
    ids = {"requestTaskId": ctx.task_id, "contextId": ctx.context_id, "inputId": input_id}
    envelope = {"schemaVersion": 1.0, "kind": kind, **ids, "toolUseId": use_id, **fields}
    return {**envelope, "language": ctx.language, "required": True}


def permission_pending(
    ctx: TurnContext, use_id: str, tool_input: Json, *, input_id: str | None = None
) -> PendingInput:
    """The ``write_file`` permission interrupt iac-code raises for *tool_input*."""
    target = str(tool_input["path"])
    envelope = input_envelope(
        ctx,
        "permission",
        input_id or f"permission-{ctx.new_hex()}",
        use_id,
        toolName="write_file",
        title="Change a workspace file",
        purpose="Write a file needed for the requested infrastructure task.",
        effect="file_change",
        target=target,
        isReadOnly=False,
        prompt=f"Change a workspace file ({target}). Allow once?",
        safeSummary=_safe_summary("write_file", tool_input),
        options=[{"id": "allow_once", "label": "Allow once"}, {"id": "deny", "label": "Deny"}],
    )
    permission = {
        "pending": True,
        "autoApproved": False,
        "toolName": "write_file",
        "toolUseId": use_id,
    }
    return PendingInput("permission", envelope["inputId"], use_id, "write_file", tool_input, envelope, permission)


def interrupt(ctx: TurnContext, pending: PendingInput) -> Interrupt:
    """Record *pending* and send the INPUT_REQUIRED update carrying its envelope."""
    iac: Json = {"input": pending.envelope}
    if pending.permission is not None:
        iac["permission"] = pending.permission
    return Interrupt(pending, status_update(ctx, {"state": INPUT_REQUIRED}, iac))


def permission_turn(ctx: TurnContext, args: str, text: str) -> Iterator[Step]:
    """Text, a ``write_file`` call, then the permission interrupt."""
    words = args.split()
    filename = words[0] if words and _SAFE_NAME.match(words[0]) else "demo.txt"
    yield from text_deltas(ctx, ["I will write ", f"{filename} now."])
    use_id = f"call_{ctx.new_hex()[:24]}"
    tool_input = {"path": filename, "content": "hello from the demo runtime\n"}
    yield from _tool_opening(ctx, "write_file", use_id, tool_input)
    yield interrupt(ctx, permission_pending(ctx, use_id, tool_input))


def input_received(ctx: TurnContext, pending: PendingInput) -> Emit:
    """The first update of an answer stream (iac-code omits the session id here)."""
    received = {"inputId": pending.input_id, "toolUseId": pending.tool_use_id}
    return working(ctx, session=False, inputReceived={**received, "kind": pending.kind})


def answer_permission(ctx: TurnContext, pending: PendingInput, decision: str) -> Iterator[Step]:
    """Resume after a validated permission answer (``allow_once`` or ``deny``)."""
    yield input_received(ctx, pending)
    tool = {"toolUseId": pending.tool_use_id, "name": pending.tool_name}
    if decision != "allow_once":
        yield working(ctx, tool={"status": "failed", "result": DENIED_RESULT, **tool})
        yield from reply(ctx, "Understood: I did not write the file.")
        return
    path, content = str(pending.tool_input["path"]), str(pending.tool_input["content"])
    yield ToolExecuted(pending.tool_name, pending.tool_use_id)
    artifact_event, artifact_ref = file_artifact(ctx, path, content)
    yield artifact_event
    lines = content.count("\n") or 1
    result = f"Successfully wrote {lines} lines to {ctx.cwd.rstrip('/')}/{path}"
    yield working(ctx, tool={"status": "completed", "result": result, **tool, "artifact": artifact_ref})
    yield from reply(ctx, f"Done: {path} was written.")


def question_turn(ctx: TurnContext, args: str, text: str) -> Iterator[Step]:
    """Some text, then an ``ask_user_question`` interrupt."""
    yield from text_deltas(ctx, ["I need one detail ", "before I go on."])
    yield usage(ctx, 8)
    use_id = f"call_{ctx.new_hex()[:24]}"
    options = [{"id": option_id, "label": label} for option_id, label in _QUESTION_OPTIONS]
    envelope = input_envelope(
        ctx,
        "ask_user_question",
        f"question-{ctx.new_hex()}",
        use_id,
        prompt="Which region should the demo deploy to?",
        options=options,
        allowFreeText=True,
        freeTextPrompt="Or type another region",
    )
    tool_input: Json = {"options": options}
    kind = "ask_user_question"
    yield interrupt(ctx, PendingInput(kind, envelope["inputId"], use_id, kind, tool_input, envelope))


def answer_question(ctx: TurnContext, pending: PendingInput, answer: str) -> Iterator[Step]:
    """Resume after a text answer: name the chosen option (or the free text)."""
    yield input_received(ctx, pending)
    chosen = " ".join(answer.split())
    for option in pending.tool_input.get("options", []):
        if chosen.lower() in (str(option["id"]).lower(), str(option["label"]).lower()):
            chosen = str(option["label"])
    yield from reply(ctx, f"You chose {chosen}. The demo will use it.")


BEHAVIOURS: Final[Mapping[str, Behaviour]] = {
    "think": think_turn,
    "tool": tool_turn,
    "slow": slow_turn,
    "silent": silent_turn,
    "fail": fail_turn,
    "rpcerror": rpcerror_turn,
    "firehose": firehose_turn,
    "permission": permission_turn,
    "question": question_turn,
}


def parse_command(text: str) -> tuple[str, str]:
    """The lower-cased first word of *text* and the rest of it."""
    words = text.strip().split(maxsplit=1)
    if not words:
        return "", ""
    return words[0].lower().rstrip(".,:;!?"), words[1] if len(words) > 1 else ""


def plan_turn(ctx: TurnContext, text: str) -> Iterator[Step]:
    """The body of a turn for the user's *text* (after the stream opening)."""
    word, args = parse_command(text)
    return BEHAVIOURS.get(word, default_turn)(ctx, args, text)
