"""A2A 1.0 (iac-code vocabulary) → AG-UI 1.0, as a pure object.

:class:`RunTranslator` takes the ``result`` objects of one A2A stream, one at a
time, and hands back the AG-UI events they mean. It does no I/O and keeps no
clock: the service feeds it, writes what it returns, and reads
:attr:`RunTranslator.outcome` once the runtime has said how the turn ended.
Terminal events (``RUN_FINISHED`` / ``RUN_ERROR``) are not its business: the
thread machine emits them on its transitions.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

import attrs

from ..a2a import wire
from ..protocol.events import ARTIFACT_EVENT, PIPELINE_EVENT, SESSION_EVENT, TOOL_PROGRESS_EVENT, Event
from ..runtime.envelope import InputEnvelope, acknowledgement, required_inputs
from ..runtime.transcript import ToolResult, TranscriptItem
from . import pipeline as pl
from .alignment import TailOverlap, missing_text, turn_deltas
from .spans import SpanTracker
from .usage import UsageLedger

OutcomeKind = Literal["success", "interrupt", "failed", "canceled"]


class IdentityMismatch(Exception):
    """An A2A event names a task or context other than the one of this run."""


@attrs.frozen
class TurnOutcome:
    """How the runtime ended the turn (or paused it for input)."""

    kind: OutcomeKind
    inputs: tuple[InputEnvelope, ...] = ()
    detail: str | None = None
    #: The task stopped in INPUT_REQUIRED asking for nothing its status
    #: shows: a pipeline's state route must say whether an input waits.
    unconfirmed: bool = False


@attrs.frozen
class RunIdentity:
    """The identifiers that tie one AG-UI run to its A2A task."""

    thread_id: str
    run_id: str
    execution_id: str
    context_id: str
    ros_invocation_id: str
    task_id: str | None = None
    session_id: str | None = None


@attrs.frozen
class IdentityLearned:
    """The stream named the run's task or session: the ids the run stores
    before any event of the chunk that named them goes out."""

    task_id: str | None
    session_id: str | None


@attrs.frozen
class Chunk:
    """What one network chunk of results means (:meth:`RunTranslator.take`):
    its events, how the turn ended if it said so, the ids it named, and the
    error it stopped at. The run writes what the chunk needs (its ids, an
    answer's acceptance), then sends the events; a chunk whose writes fail
    is forgotten (:meth:`RunTranslator.forget`): its events never go out."""

    events: list[Event]
    outcome: TurnOutcome | None = None
    learned: IdentityLearned | None = None
    #: The mismatch the chunk stopped at, raised once its ids are stored.
    error: IdentityMismatch | None = None
    #: The spans before the chunk, when it was taken on trust.
    before: tuple[object, ...] | None = attrs.field(default=None, repr=False)

    @property
    def bare(self) -> bool:
        """It named no id and stopped at no error: nothing of it to store first."""
        return self.learned is None and self.error is None


_ERROR_STATES = frozenset({wire.FAILED, wire.REJECTED, wire.AUTH_REQUIRED})


class RunTranslator:
    """Translate one run's A2A results into AG-UI events."""

    def __init__(
        self,
        identity: RunIdentity,
        *,
        known_session: bool = False,
        pipeline: pl.PipelineState | None = None,
        resumed_tools: dict[str, str] | None = None,
        known_inputs: tuple[InputEnvelope, ...] = (),
        span_prefix: str | None = None,
    ) -> None:
        self.identity = identity
        #: Inputs announced before, whose first sighting lends what a re-listing drops.
        self.known_inputs = known_inputs
        #: Acknowledgements of answers seen on this run's streams.
        self.acks: list[dict[str, Any]] = []
        #: The inputs whose answers the runtime said it received (``inputReceived``),
        #: each with whether it called the answer a duplicate (taken before).
        self.received: dict[str, bool] = {}
        #: toolCallId → tool name of the calls whose interrupts this run answers.
        self._resumed_tools = resumed_tools or {}
        #: The thread's pipeline cursor; advanced in place, saved with the record.
        self.pipeline = pipeline if pipeline is not None else pl.PipelineState()
        #: Message ids start with the run id (``span_prefix``: a run adopted
        #: from another process, whose ids must not repeat the first ones).
        self.spans = SpanTracker(span_prefix or f"{identity.run_id}")
        self.outcome: TurnOutcome | None = None
        #: A task or session id was learned and not yet handed out (:meth:`learned`).
        self._learned = False
        self._session_announced = False
        #: Text deltas since the last final repeat (joined only when one comes:
        #: growing a string per delta would cost quadratic time).
        self._streamed_since_final: list[str] = []
        #: Each subscription's opening Task is lined up with the text relayed
        #: so far (a run adopted after a handover: :meth:`resume_text`, :meth:`align`).
        self._aligning = False
        #: While set, live deltas that repeat the snapshot's tail are dropped.
        self._overlap: TailOverlap | None = None
        #: This run's own model calls only (a resumed run reports what it spent).
        self._usage = UsageLedger()
        self._known_session = known_session
        self._results = 0

    # ----------------------------------------------------------------- input
    def feed(self, result: dict[str, Any]) -> list[Event]:
        """Translate one A2A ``result`` object."""
        out: list[Event] = []
        if self._overlap is not None and not _keeps_overlap(result):
            self._settle_overlap(out)
        update = result.get("statusUpdate")
        if update is not None:
            self._check_identity(update.get("taskId"), update.get("contextId"))
            self._status_update(update, out)
        elif "artifactUpdate" in result:
            artifact_update = result["artifactUpdate"]
            self._check_identity(artifact_update.get("taskId"), artifact_update.get("contextId"))
            out.append(_artifact_event(artifact_update))
        elif "task" in result:
            task = result["task"]
            self._check_identity(task.get("id"), task.get("contextId"))
            self._end_state(task.get("status") or {}, _iac(task), out)
        elif "message" in result:
            ack = acknowledgement(result)
            if ack is not None:
                # The runtime took an answer; the task goes on without this stream.
                self.acks.append(ack)
            else:
                self._final_text(_text_of(result["message"]), out)
                self.outcome = TurnOutcome("success")
        if self._learned and not self._session_announced:
            self._announce_session(out, final=False)
        return out

    def take(self, batch: list[dict[str, Any]], *, tentative: bool = False) -> Chunk:
        """Translate one network chunk, and empty it (its decoded results are
        not kept while its events wait for a write). The chunk is taken on
        trust (its spans can be forgotten) when ``tentative`` (it may carry
        an answer's acceptance) or while the run's ids are not all known (it
        may name them, and they are stored before its events go out). A
        result it cannot read raises; :meth:`learned` then still has the ids
        named before it."""
        ident = self.identity
        held = tentative or ident.task_id is None or ident.session_id is None
        before = self.spans.snapshot() if held else None
        events: list[Event] = []
        error: IdentityMismatch | None = None
        try:
            for result in batch:
                events += self.feed(result)
                if self.outcome is not None:
                    break
        except IdentityMismatch as exc:
            error = exc
        finally:
            batch.clear()
        outcome, self.outcome = self.outcome, None
        return Chunk(events, outcome, self.learned(), error, before)

    def forget(self, chunk: Chunk) -> None:
        """The chunk's writes failed and its events never go out: forget the
        spans it opened, so that nothing closes them (ids given out stay used)."""
        if chunk.before is not None:
            self.spans.restore(chunk.before)

    def learned(self) -> IdentityLearned | None:
        """The run's task and session ids once the stream named a new one
        since the last call, else ``None`` (as h11 hands out its next event:
        the run takes it, and stores the ids)."""
        if not self._learned:
            return None
        self._learned = False
        return IdentityLearned(self.identity.task_id, self.identity.session_id)

    def finish(self) -> list[Event]:
        """Close every open span; call before the terminal event."""
        out: list[Event] = []
        if self._overlap is not None:
            self._settle_overlap(out)
        if not self._session_announced and self.identity.task_id is not None:
            self._announce_session(out, final=True)
        self.spans.close_all(out)
        return out

    def hand_over(self) -> tuple[list[Event], str | None]:
        """A shutdown hands the run to another replica: like :meth:`finish`,
        except that an assistant message that is the only open span stays
        open, for the adopting replica to go on with (:meth:`continue_text`),
        so the reply in flight stays one message. Returns the events and
        that message's id (``None``: everything was closed)."""
        out: list[Event] = []
        if self._overlap is not None:
            self._settle_overlap(out)
        text_id = self.spans.lone_text()
        if text_id is None:
            return out + self.finish(), None
        if not self._session_announced and self.identity.task_id is not None:
            self._announce_session(out, final=True)
        return out, text_id

    def continue_text(self, message_id: str) -> None:
        """Go on with an assistant message the previous relay of this run
        left open (see :meth:`hand_over`): no new TEXT_MESSAGE_START."""
        self.spans.text_id = message_id

    def resume_text(self, message_id: str, relayed: str) -> None:
        """:meth:`continue_text`, knowing the text the turn's earlier relays
        sent: the Task each subscription of this run opens with is lined up
        with it and what this run relays after it (:meth:`align`)."""
        self.continue_text(message_id)
        self._streamed_since_final = [relayed] if relayed else []
        self._aligning = bool(relayed)

    def relayed_text(self) -> str:
        """The reply's text relayed since the runtime last repeated it whole
        (what a handover leaves for the adopter to line up with)."""
        return "".join(self._streamed_since_final)

    def align(self, task: Any) -> list[Event]:
        """The text a handover left unsent, from the Task a subscription
        opens with (see :mod:`.alignment`); nothing unless :meth:`resume_text`
        asked for it, or when the snapshot is not of the text relayed."""
        if not self._aligning:
            return []
        deltas = turn_deltas(task)
        rest = missing_text("".join(self._streamed_since_final), deltas)
        if rest is None:
            return []
        out: list[Event] = []
        if rest:
            message_id = self.spans.open_text(out)
            out.append({"type": "TEXT_MESSAGE_CONTENT", "messageId": message_id, "delta": rest})
            self._streamed_since_final.append(rest)
        self._overlap = TailOverlap(deltas)
        return out

    def opening(self) -> list[Event]:
        """The session event, first thing in a run whose ids are all known
        already (a resume)."""
        out: list[Event] = []
        if self.identity.task_id is not None and self.identity.session_id is not None:
            self._announce_session(out, final=False)
        return out

    def reopen_steps(self) -> list[Event]:
        """Open, in this run, the pipeline steps an earlier run left active."""
        out: list[Event] = []
        for key in self.pipeline.open_steps:
            self.spans.open_step(out, pl.step_name(key))
        return out

    def recover(self, state: dict[str, Any], *, snapshot_view: bool = True) -> list[Event]:
        """The runtime's pipeline state route: a snapshot for the client's
        view (unless it already has one from this run), then the events the
        cursor has not seen yet."""
        out: list[Event] = []
        snapshot = state.get("snapshot")
        if snapshot_view and isinstance(snapshot, dict):
            run_id = snapshot.get("pipelineRunId") or self.pipeline.pipeline_run_id
            run_id = run_id if isinstance(run_id, str) else None
            out.append(pl.activity_snapshot(f"pipeline:{run_id or self.identity.thread_id}", run_id, snapshot))
        for envelope in state.get("events") or ():
            if isinstance(envelope, dict):
                self._pipeline_event(envelope, out)
        return out

    def missed(self, items: Sequence[TranscriptItem]) -> list[Event]:
        """What the runtime did while no stream of ours was open, from its
        transcript: tool results and the assistant's reply."""
        out: list[Event] = []
        for item in items:
            if isinstance(item, ToolResult):
                status = "failed" if item.is_error else "completed"
                self._tool({"status": status, "toolUseId": item.tool_use_id, "name": item.name,
                            "result": item.content}, out)
            else:
                message_id = self.spans.open_text(out)
                out.append({"type": "TEXT_MESSAGE_CONTENT", "messageId": message_id, "delta": item.text})
                self.spans.close_text(out)
        return out

    @property
    def relayed_results(self) -> bool:
        """Whether this run relayed a tool result (it saw the resumed turn)."""
        return self._results > 0

    def usage(self) -> list[dict[str, Any]]:
        """Token usage of the run's model calls, one AG-UI ``TokenUsage`` entry
        per provider and model (:mod:`.usage` says how the counts are read)."""
        return self._usage.entries()

    # --------------------------------------------------------------- helpers
    def _check_identity(self, task_id: Any, context_id: Any) -> None:
        ident = self.identity
        if context_id != ident.context_id:
            raise IdentityMismatch(f"context {context_id!r} is not {ident.context_id!r}")
        if task_id != ident.task_id:
            if ident.task_id is not None or not isinstance(task_id, str) or not task_id:
                raise IdentityMismatch(f"task {task_id!r} is not {ident.task_id!r}")
            self.identity = attrs.evolve(ident, task_id=task_id)
            self._learned = True

    def _status_update(self, update: dict[str, Any], out: list[Event]) -> None:
        status = update.get("status") or {}
        iac = _iac(update)
        if iac:
            self._metadata(iac, out)
        message = status.get("message")
        state = status.get("state")
        if message is not None and state == wire.WORKING:
            if iac.get("assistantFinal"):
                self._final_text(_text_of(message), out)
            else:
                self._text_parts(message.get("parts") or (), out)
        if iac and ("pendingPermissions" in iac or "input" in iac):
            inputs = required_inputs(iac, self.known_inputs)
            if inputs:
                # Also while WORKING: a sub-pipeline waits for the user.
                self.outcome = TurnOutcome("interrupt", inputs=tuple(inputs))
                return
        if state != wire.WORKING and state != wire.SUBMITTED:
            self._end_state(status, iac, out)

    def _metadata(self, iac: dict[str, Any], out: list[Event]) -> None:
        session_id = iac.get("iacCodeSessionId")
        if session_id is not None and session_id != self.identity.session_id:
            self._learn_session(session_id)
        thinking = iac.get("thinking")
        if thinking is not None:
            text = thinking.get("text")
            if text:
                rid = self.spans.open_reasoning(out)
                out.append({"type": "REASONING_MESSAGE_CONTENT", "messageId": rid, "delta": text})
        tool = iac.get("tool")
        if tool is not None:
            self._tool(tool, out)
        received = iac.get("inputReceived")
        if isinstance(received, dict) and isinstance(received.get("inputId"), str):
            self.received[received["inputId"]] = received.get("duplicate") is True
        usage = iac.get("usage")
        if isinstance(usage, dict):
            self._usage.add(usage)
        if "pipeline" in iac or "pipelineBatch" in iac:
            for envelope in pl.envelopes_of(iac):
                if session_id is None:
                    # A pipeline names its session inside each event only.
                    session_id = envelope.get("iacCodeSessionId")
                    if session_id is not None and session_id != self.identity.session_id:
                        self._learn_session(session_id)
                self._pipeline_event(envelope, out)

    def _pipeline_event(self, envelope: dict[str, Any], out: list[Event]) -> None:
        state = self.pipeline
        if state.is_replay(envelope):
            return
        state.remember(envelope)
        kind = envelope.get("eventType")
        data = envelope.get("data")
        data = data if isinstance(data, dict) else {}
        if kind in pl.STEP_CONTENT:
            self._enter_step(envelope, out)
        if kind == "text_delta":
            text = data.get("text")
            if isinstance(text, str) and text:
                message_id = self.spans.open_keyed_text(out, pl.text_key(envelope))
                out.append({"type": "TEXT_MESSAGE_CONTENT", "messageId": message_id, "delta": text})
        elif kind == "thinking_delta":
            text = data.get("text")
            if isinstance(text, str) and text:
                rid = self.spans.open_reasoning(out)
                out.append({"type": "REASONING_MESSAGE_CONTENT", "messageId": rid, "delta": text})
        elif kind == "tool_started":
            self._tool({"status": "input_complete", "toolUseId": data.get("toolUseId"),
                        "name": data.get("toolName"), "toolInput": data.get("input")}, out)
        elif kind == "tool_result":
            status = "failed" if data.get("isError") is True else "completed"
            self._tool({"status": status, "toolUseId": data.get("toolUseId"), "result": data.get("result")}, out)
        elif kind == "usage":
            self._usage.add(data)
        if kind in pl.STEP_OPENERS or kind in pl.STEP_CLOSERS:
            self._pipeline_step(envelope, kind in pl.STEP_OPENERS, out)
        if kind in pl.CUSTOM_TYPES:
            out.append({"type": "CUSTOM", "name": PIPELINE_EVENT, "value": envelope})

    def _pipeline_step(self, envelope: dict[str, Any], opens: bool, out: list[Event]) -> None:
        key = pl.step_key(envelope)
        if key is None:
            return
        open_steps = self.pipeline.open_steps
        if opens:
            if key not in open_steps:
                open_steps.append(key)
            self.spans.open_step(out, pl.step_name(key))
        elif key in open_steps:
            open_steps.remove(key)
            self.spans.close_step(out, pl.step_name(key))
        # A step that completes while not open (it completed already, or
        # never started in a way we saw) announces nothing: an empty pair
        # would tell the client about a step that did no visible work.

    def _enter_step(self, envelope: dict[str, Any], out: list[Event]) -> None:
        """Content of a step that is not open (iac-code continues a step it
        completed, without a new step_started): open it again first."""
        key = pl.step_key(envelope)
        if key is not None and key not in self.pipeline.open_steps:
            self.pipeline.open_steps.append(key)
            # Parallel candidates stream at once: their messages stay open.
            self.spans.open_step(out, pl.step_name(key), close_messages=False)

    def _learn_session(self, session_id: Any) -> None:
        if not isinstance(session_id, str) or not session_id:
            return
        if self._known_session and self.identity.session_id is not None:
            raise IdentityMismatch("the iac-code session changed")
        self.identity = attrs.evolve(self.identity, session_id=session_id)
        self._learned = True

    def _text_parts(self, parts: Any, out: list[Event]) -> None:
        for part in parts:
            text = part.get("text")
            if text:
                if self._overlap is not None:
                    self._pass_overlap(text, out)
                    continue
                message_id = self.spans.open_text(out)
                out.append({"type": "TEXT_MESSAGE_CONTENT", "messageId": message_id, "delta": text})
                self._streamed_since_final.append(text)

    def _pass_overlap(self, text: str, out: list[Event]) -> None:
        overlap = self._overlap
        assert overlap is not None
        released = overlap.take(text)
        if overlap.done:
            self._overlap = None
        self._send_text(released, out)

    def _settle_overlap(self, out: list[Event]) -> None:
        overlap, self._overlap = self._overlap, None
        assert overlap is not None
        self._send_text(overlap.settle(), out)

    def _send_text(self, texts: list[str], out: list[Event]) -> None:
        for text in texts:
            message_id = self.spans.open_text(out)
            out.append({"type": "TEXT_MESSAGE_CONTENT", "messageId": message_id, "delta": text})
            self._streamed_since_final.append(text)

    def _final_text(self, text: str, out: list[Event]) -> None:
        # The runtime repeats the whole reply once it is complete; show only
        # what the deltas did not already carry.
        streamed = "".join(self._streamed_since_final)
        self._streamed_since_final.clear()
        if streamed and not text.startswith(streamed):
            return
        rest = text[len(streamed):]
        if rest:
            message_id = self.spans.open_text(out)
            out.append({"type": "TEXT_MESSAGE_CONTENT", "messageId": message_id, "delta": rest})
        self.spans.close_text(out)

    def _tool(self, tool: dict[str, Any], out: list[Event]) -> None:
        status = tool.get("status")
        tool_call_id = tool.get("toolUseId")
        if not isinstance(tool_call_id, str) or not tool_call_id:
            return
        spans = self.spans
        if status == "started" or status == "input_delta":
            if status == "started" or tool_call_id not in spans.open_tools:
                spans.open_tool(out, tool_call_id, str(tool.get("name") or "tool"))
        elif status == "input_complete":
            spans.open_tool(out, tool_call_id, str(tool.get("name") or "tool"))
            args = tool.get("toolInput")
            if args is None:
                args = tool.get("inputSummary")
            if args is not None:
                delta = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
                if delta:
                    out.append({"type": "TOOL_CALL_ARGS", "toolCallId": tool_call_id, "delta": delta})
            spans.close_tool(out, tool_call_id)
        elif status == "completed" or status == "failed":
            if tool_call_id not in spans.started_tools:
                # Started before an interrupt, in an earlier run: open it again
                # here (same id and name, no arguments: clients would append
                # them twice) so the result answers a tool call of this run.
                name = tool.get("name") or self._resumed_tools.get(tool_call_id) or "tool"
                spans.open_tool(out, tool_call_id, str(name))
            spans.close_tool(out, tool_call_id)
            spans.close_messages(out)
            result = tool.get("result")
            content = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
            self._results += 1
            out.append(
                {
                    "type": "TOOL_CALL_RESULT",
                    "messageId": spans.new_id("t"),
                    "toolCallId": tool_call_id,
                    "content": content,
                    "role": "tool",
                }
            )
        elif status == "progress":
            value = {key: item for key, item in tool.items() if key != "status" and item is not None}
            value["schemaVersion"] = 1
            value["toolCallId"] = value.pop("toolUseId")
            out.append({"type": "CUSTOM", "name": TOOL_PROGRESS_EVENT, "value": value})

    def _end_state(self, status: dict[str, Any], iac: dict[str, Any], out: list[Event]) -> None:
        state = status.get("state")
        if state == wire.INPUT_REQUIRED:
            inputs = required_inputs(iac, self.known_inputs)
            if inputs:
                self.outcome = TurnOutcome("interrupt", inputs=tuple(inputs))
            else:
                in_pipeline = self.pipeline.pipeline_run_id is not None or "pipeline" in iac
                self.outcome = TurnOutcome("success", unconfirmed=in_pipeline)
        elif state == wire.COMPLETED:
            message = status.get("message")
            if message is not None:
                self._final_text(_text_of(message), out)
            self.outcome = TurnOutcome("success")
        elif state == wire.CANCELED:
            self.outcome = TurnOutcome("canceled", detail=_text_of(status.get("message")))
        elif state in _ERROR_STATES:
            self.outcome = TurnOutcome("failed", detail=_text_of(status.get("message")) or state)

    def _announce_session(self, out: list[Event], *, final: bool) -> None:
        ident = self.identity
        if ident.task_id is None or (ident.session_id is None and not final):
            return
        self._session_announced = True
        value = {
            "schemaVersion": 1,
            "threadId": ident.thread_id,
            "aguiRunId": ident.run_id,
            "executionId": ident.execution_id,
            "contextId": ident.context_id,
            "taskId": ident.task_id,
            "rosInvocationId": ident.ros_invocation_id,
            "sessionId": ident.session_id,
        }
        out.append({"type": "CUSTOM", "name": SESSION_EVENT, "value": _compact(value)})


def _keeps_overlap(result: dict[str, Any]) -> bool:
    """Whether a result leaves a live repeat of a snapshot's tail possible:
    the snapshot itself, or a text delta of the reply (not its final repeat)."""
    update = result.get("statusUpdate")
    if update is None:
        return "task" in result
    status = update.get("status") or {}
    return status.get("state") == wire.WORKING and "message" in status and not _iac(update).get("assistantFinal")


def _iac(obj: dict[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata")
    if not metadata:
        return {}
    iac = metadata.get(wire.IAC_CODE_KEY)
    return iac if isinstance(iac, dict) else {}


def _text_of(message: Any) -> str:
    if not isinstance(message, dict):
        return ""
    return "".join(
        part["text"] for part in message.get("parts") or () if isinstance(part.get("text"), str)
    )


def _compact(value: dict[str, Any]) -> dict[str, Any]:
    return {key: item for key, item in value.items() if item is not None}


def _artifact_event(update: dict[str, Any]) -> Event:
    artifact = update.get("artifact") or {}
    value: dict[str, Any] = {
        "schemaVersion": 1,
        "taskId": update.get("taskId"),
        "artifactId": artifact.get("artifactId"),
        "name": artifact.get("name"),
        "description": artifact.get("description"),
        "parts": [_artifact_part(part) for part in artifact.get("parts") or ()],
        "metadata": artifact.get("metadata"),
        "append": update.get("append"),
        "lastChunk": update.get("lastChunk"),
    }
    return {"type": "CUSTOM", "name": ARTIFACT_EVENT, "value": _compact(value)}


def _artifact_part(part: dict[str, Any]) -> dict[str, Any]:
    # Raw bytes are not relayed: a UI fetches the file through its uri.
    projected: dict[str, Any] = {
        "mediaType": part.get("mediaType"),
        "filename": part.get("filename"),
        "metadata": part.get("metadata"),
    }
    if "text" in part:
        projected["kind"] = "text"
        projected["text"] = part["text"]
    elif "url" in part:
        projected["kind"] = "url"
        projected["url"] = part["url"]
    elif "data" in part:
        projected["kind"] = "data"
        projected["data"] = part["data"]
    else:
        projected["kind"] = "file"
    return _compact(projected)
