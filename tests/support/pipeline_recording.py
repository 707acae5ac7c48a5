"""The recorded pipelines of the real ``iac-code a2a``, read for tests.

``tests/fixtures/a2a-pipeline/`` holds three complete ``selling`` pipelines
(its README says what they show). A :class:`Recording` is one of them: its
exchanges in order, the runtime's **moves** (the user message, every answer,
every ``SubscribeToTask``) and what was read in between, the runtime's event
log (every event a recorded state reply carried, by sequence), the inputs it
asked for as it first described them, the answers the recorded client gave,
and the pauses those answers came in. Read from the checkout only.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Final

RECORDINGS: Final = Path(__file__).resolve().parents[1] / "fixtures" / "a2a-pipeline"
SCENARIOS: Final = ("direct", "full", "rich")
RESTORE_PATH: Final = "/iac-code/session/ensure-restored"
STATE_PATH: Final = "/iac-code/pipeline/state"
MOVES: Final = frozenset({"SendStreamingMessage", "SendMessage", "SubscribeToTask"})
STREAM_END_STATES: Final = frozenset({
    "TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED",
    "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED",
})


@dataclass(frozen=True, eq=False)
class Exchange:
    """One recorded HTTP exchange."""

    seq: int
    method: str
    path: str
    rpc_method: str | None
    request: Any
    events: list[Any]

    @property
    def kind(self) -> str:
        """The JSON-RPC method, or ``restore`` / ``state`` for the REST routes."""
        if self.rpc_method is not None:
            return self.rpc_method
        return "restore" if self.path.startswith(RESTORE_PATH) else "state"

    @property
    def message(self) -> dict[str, Any]:
        """The A2A message a SendMessage / SendStreamingMessage carried."""
        return dict(self.request["params"]["message"])

    @property
    def natural_end(self) -> bool:
        """Whether the runtime itself ended this stream (else the recorded client stopped reading)."""
        result = self.events[-1].get("result") or {}
        holder = result.get("statusUpdate") or result.get("task")
        if holder is None:
            return "message" in result
        return (holder.get("status") or {}).get("state") in STREAM_END_STATES

    def __str__(self) -> str:
        return f"#{self.seq} {self.kind}"


@dataclass(frozen=True)
class RecordedInput:
    """One input the recorded runtime asked for, as it first described it."""

    input_id: str
    kind: str
    scope: str | None
    sub_pipeline_id: str | None
    tool_use_id: str | None
    options: list[dict[str, Any]]


@dataclass(frozen=True)
class RecordedAnswer:
    """One answer the recorded client sent, and the move that carried it."""

    input: RecordedInput
    move: Exchange

    @property
    def method(self) -> str:
        return str(self.move.rpc_method)

    @property
    def part(self) -> dict[str, Any]:
        (part,) = self.move.message["parts"]
        return dict(part)


def pipeline_sequences(value: Any) -> Iterator[int]:
    """Every pipeline sequence in a recorded reply: each event's, and a snapshot's ``lastSequence``."""
    if isinstance(value, dict):
        if "eventType" in value and isinstance(value.get("sequence"), (int, float)):
            yield int(value["sequence"])
        if isinstance(value.get("lastSequence"), (int, float)):
            yield int(value["lastSequence"])
        for item in value.values():
            yield from pipeline_sequences(item)
    elif isinstance(value, list):
        for item in value:
            yield from pipeline_sequences(item)


def _iac(holder: Any) -> dict[str, Any]:
    metadata = holder.get("metadata") if isinstance(holder, dict) else None
    iac = metadata.get("iac_code") if isinstance(metadata, dict) else None
    return iac if isinstance(iac, dict) else {}


def _asked(exchange: Exchange) -> Iterator[dict[str, Any]]:
    """The required input envelopes a stream or GetTask reply shows."""
    if exchange.kind not in MOVES and exchange.kind != "GetTask":
        return
    for event in exchange.events:
        result = event.get("result") or {}
        for holder in (result.get("statusUpdate"), result.get("task"), result if "status" in result else None):
            iac = _iac(holder)
            for envelope in [iac.get("input"), *(iac.get("pendingPermissions") or ())]:
                if isinstance(envelope, dict) and envelope.get("required") is True:
                    yield envelope


class Recording:
    """One recorded pipeline, read from ``tests/fixtures/a2a-pipeline``."""

    def __init__(self, name: str, exchanges: list[Exchange]) -> None:
        self.name = name
        self.exchanges = exchanges
        self.moves = [x for x in exchanges if x.kind in MOVES]
        first = self.moves[0].message
        self.user_message = first
        self.context_id: str = first["contextId"]
        self.task_id: str = self.moves[0].events[0]["result"]["task"]["id"]
        restores = [x for x in exchanges if x.kind == "restore"]
        self.session_id: str = restores[0].request["sessionId"]
        self.restore_reply: dict[str, Any] = restores[0].events[0]
        self.log = self._event_log()
        self.inputs = self._inputs()
        self.answers = self._answers()
        self.pauses = self._pauses()

    @classmethod
    def load(cls, name: str) -> Recording:
        path = RECORDINGS / f"{name}.a2a-exchanges.jsonl.gz"
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            rows = [json.loads(line) for line in handle if line.strip()]
        exchanges = [
            Exchange(row["seq"], row["method"], row["path"], row["rpcMethod"], row["request"], row["events"])
            for row in rows
        ]
        return cls(name, sorted(exchanges, key=lambda x: x.seq))

    # ------------------------------------------------------------- moments
    def next_move_after(self, moment: int) -> int:
        """The seq of the first move after ``moment`` (past the end: one past the last exchange)."""
        later = [move.seq for move in self.moves if move.seq > moment]
        return later[0] if later else self.exchanges[-1].seq + 1

    def recorded_at(self, moment: int) -> list[Exchange]:
        """The reads recorded while the runtime was at ``moment`` (after that move, before the next)."""
        end = self.next_move_after(moment)
        return [x for x in self.exchanges if moment < x.seq < end and x.kind not in MOVES]

    def until(self, moment: int) -> list[Exchange]:
        """Everything recorded up to the end of ``moment``."""
        end = self.next_move_after(moment)
        return [x for x in self.exchanges if x.seq < end]

    def horizon(self, moment: int) -> int:
        """The highest pipeline sequence the runtime had reached by the end of ``moment``."""
        return max((s for x in self.until(moment) for s in pipeline_sequences(x.events)), default=0)

    # -------------------------------------------------------------- content
    def _event_log(self) -> dict[int, dict[str, Any]]:
        """The runtime's pipeline events in the state route's own form, by sequence."""
        log: dict[int, dict[str, Any]] = {}
        for exchange in self.exchanges:
            if exchange.kind != "state":
                continue
            for event in exchange.events[0].get("events") or ():
                sequence = int(event["sequence"])
                assert log.setdefault(sequence, event) == event, f"{self.name}: two different events {sequence}"
        return log

    def _inputs(self) -> dict[str, RecordedInput]:
        first: dict[str, dict[str, Any]] = {}
        display: dict[str, dict[str, Any]] = {}
        for exchange in self.exchanges:
            for envelope in _asked(exchange):
                first.setdefault(str(envelope["inputId"]), envelope)
            if exchange.kind == "state":
                snapshot = exchange.events[0].get("snapshot") or {}
                for entry in (snapshot.get("display") or {}).get("permissions") or ():
                    display.setdefault(str(entry.get("inputId")), entry)
        inputs = {}
        for input_id, envelope in first.items():
            entry = display.get(input_id, {})
            sub_pipeline = envelope.get("subPipelineId") or entry.get("subPipelineId") or (
                (entry.get("candidate") or {}).get("id") if entry.get("scope") else None
            )
            inputs[input_id] = RecordedInput(
                input_id=input_id,
                kind=str(envelope["kind"]),
                scope=envelope.get("scope") or entry.get("scope"),
                sub_pipeline_id=sub_pipeline,
                tool_use_id=envelope.get("toolUseId"),
                options=list(envelope.get("options") or ()),
            )
        return inputs

    def _answers(self) -> list[RecordedAnswer]:
        answers = []
        for move in self.moves[1:]:
            if move.kind == "SubscribeToTask":
                continue
            (part,) = move.message["parts"]
            data = part.get("data")
            if isinstance(data, dict):
                found = self.inputs[str(data["inputId"])]
            else:
                # A question or a selection is answered with its option's label.
                found = next(
                    item for item in self.inputs.values()
                    if item.kind != "permission" and any(o.get("label") == part["text"] for o in item.options)
                    and item.input_id not in {a.input.input_id for a in answers}
                )
            answers.append(RecordedAnswer(found, move))
        return answers

    def _pauses(self) -> list[tuple[RecordedInput, ...]]:
        """The inputs of each pause, in order: the answers one resume carried
        (sub-pipeline answers sent with SendMessage, then at most one streamed one)."""
        pauses: list[tuple[RecordedInput, ...]] = []
        current: list[RecordedInput] = []
        for move in self.moves[1:]:
            answer = next((a for a in self.answers if a.move is move), None)
            if answer is None:
                if current:
                    pauses.append(tuple(current))
                    current = []
                continue
            current.append(answer.input)
            if answer.method == "SendStreamingMessage":
                pauses.append(tuple(current))
                current = []
        if current:
            pauses.append(tuple(current))
        return pauses

    def pipeline_events(self) -> dict[int, dict[str, Any]]:
        """Every pipeline event the recording shows (streams, GetTask, state route), by sequence."""
        found: dict[int, dict[str, Any]] = {}
        for exchange in self.exchanges:
            if exchange.kind in MOVES or exchange.kind == "GetTask":
                for event in exchange.events:
                    result = event.get("result") or {}
                    for holder in (result.get("statusUpdate"), result.get("task"), result):
                        envelope = _iac(holder).get("pipeline")
                        if isinstance(envelope, dict):
                            found.setdefault(int(envelope["sequence"]), envelope)
        for sequence, event in self.log.items():
            found.setdefault(sequence, event)
        return found


@cache
def recording(name: str) -> Recording:
    """A recording by scenario name (``direct``, ``full``, ``rich``); read once."""
    return Recording.load(name)
