"""What the runtime's task says about an answer: does the input still wait?

Pure: a :class:`TaskView` (the task from ``GetTask``, the execution's state,
the session transcript and, for a pipeline, the state route's document)
goes in, a verdict comes out. The same rules decide before an answer is
sent (a resume) and after a crash (was the answer taken?).

"Taken" needs positive evidence: the runtime names the input as received,
the gated tool call has its result in the transcript, the execution (which
follows the turn, as GetTask does not) works on past a turn that waited for
the input, or a pipeline's state route logs the input's resolution.
Nothing else counts. Outside a pipeline
iac-code's ``GetTask`` is frozen at the first input of a task (it keeps
naming it after a second one is raised and after the turn ended), and after
a restart of the runtime the task is a bare summary with no metadata at
all: neither says anything about a later input (a pipeline's state route,
kept on disk, still logs the resolutions after a restart). An input without positive
evidence is answered again; the runtime's reply decides (it acknowledges a
duplicate as such, and refuses an input it does not wait for).
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, Final

import attrs

from ..a2a import wire

from .envelope import InputEnvelope, envelope_of, required_inputs
from .transcript import has_result, open_tool_uses

#: Pipeline events that say an input was answered.
_RESOLUTIONS: Final = frozenset({"permission_resolved", "input_received"})
_FAILED_STATES: Final = frozenset({wire.FAILED, wire.REJECTED, wire.AUTH_REQUIRED})
_LIVE_STATES: Final = frozenset({wire.WORKING, wire.SUBMITTED})
#: Execution states in which no input of the task can be answered any more.
_EXECUTION_GONE: Final = frozenset({"failed", "canceled", "rejected"})
#: Execution states of a turn that goes on (the execution route, unlike GetTask, follows it).
_LIVE_EXECUTION: Final = frozenset({"working", "submitted"})
#: Keys of a state-route display entry that are not part of the input.
_DISPLAY_ONLY: Final = frozenset({"pending", "sequence", "eventId", "createdAt"})


class InputStatus(enum.Enum):
    """What became of one input."""

    #: The runtime still waits for it: an answer may be sent.
    WAITS = "waits"
    #: The runtime took an answer to it: never send another.
    TAKEN = "taken"
    #: The task ended without it (cancelled, failed, or unknown to the runtime).
    GONE = "gone"
    #: The runtime's signals do not tell (a pipeline whose state was not read).
    UNKNOWN = "unknown"


class TaskFate(enum.Enum):
    """Where the task is now, as far as a run of ours is concerned."""

    WORKS = "works"
    TURN_ENDED = "turn_ended"
    ASKS = "asks"
    FAILED = "failed"
    CANCELED = "canceled"
    GONE = "gone"
    UNKNOWN = "unknown"
    #: A restarted runtime lists the task but runs nothing for it (a bare
    #: summary), or asks again for an input whose answer it may have taken:
    #: whatever followed the answers it took is lost.
    ORPHANED = "orphaned"
    #: The runtime waits for an input no stream of ours announced (it was
    #: raised while no stream followed the task): its ids are nowhere to be
    #: read, so no answer can reach it.
    UNSEEN = "unseen"


@attrs.frozen
class TaskView:
    """The runtime's view of one task, read for a decision."""

    #: ``GetTask``'s task; ``None`` when the runtime does not know it.
    task: Mapping[str, Any] | None
    #: The pipeline state route's document (``None``: not a pipeline, or not read).
    pipeline: Mapping[str, Any] | None = None
    #: The task runs a pipeline, so its state route is the authority on inputs.
    is_pipeline: bool = False
    #: The execution state route's document (``None``: not read).
    execution: Mapping[str, Any] | None = None
    #: The session transcript (``None``: not read).
    transcript: Sequence[Mapping[str, Any]] | None = None

    @property
    def execution_status(self) -> str | None:
        """What the runtime's execution of this task does now (``working``,
        ``input-required``...); unlike ``GetTask``, it follows a turn whose
        stream lost its client. ``None`` when not read or of another task."""
        execution = self.execution
        if execution is None or self.task is None or execution.get("taskId") != self.task.get("id"):
            return None
        status = execution.get("executionStatus")
        return status if isinstance(status, str) else None

    @property
    def state(self) -> str | None:
        """The task's state (``None`` for an unknown task)."""
        if self.task is None:
            return None
        status = self.task.get("status")
        return str(status.get("state")) if isinstance(status, Mapping) else None

    @property
    def bare(self) -> bool:
        """A task the runtime lists without any ``metadata.iac_code``: what
        iac-code keeps of a task across its own restart (no execution runs it)."""
        if self.task is None:
            return False
        metadata = self.task.get("metadata")
        return not (isinstance(metadata, Mapping) and isinstance(metadata.get(wire.IAC_CODE_KEY), Mapping))

    @property
    def iac(self) -> Mapping[str, Any]:
        """The task's ``metadata.iac_code``."""
        metadata = self.task.get("metadata") if self.task is not None else None
        iac = metadata.get(wire.IAC_CODE_KEY) if isinstance(metadata, Mapping) else None
        return iac if isinstance(iac, Mapping) else {}

    @property
    def detail(self) -> str | None:
        """The text of the task's status message (why it failed or stopped)."""
        status = self.task.get("status") if self.task is not None else None
        message = status.get("message") if isinstance(status, Mapping) else None
        if not isinstance(message, Mapping):
            return None
        text = "".join(str(part.get("text")) for part in message.get("parts") or () if isinstance(part, Mapping)
                       and isinstance(part.get("text"), str))
        return text or None


@attrs.frozen
class Findings:
    """What the runtime says about the inputs a dead run carried."""

    statuses: Mapping[str, InputStatus]
    fate: TaskFate
    #: What the task asks for now (fate ``ASKS``).
    asks: tuple[InputEnvelope, ...] = ()
    detail: str | None = None

    @property
    def decided(self) -> bool:
        """Whether the signals were enough to decide."""
        return self.fate is not TaskFate.UNKNOWN and InputStatus.UNKNOWN not in self.statuses.values()

    def waiting(self) -> set[str]:
        """The inputs the runtime still waits for."""
        return {key for key, status in self.statuses.items() if status is InputStatus.WAITS}

    def taken(self) -> set[str]:
        """The inputs the runtime took an answer to."""
        return {key for key, status in self.statuses.items() if status is InputStatus.TAKEN}

    @property
    def unanswerable(self) -> bool:
        """The task waits for an input whose ids nobody can read (none of the
        carried ones): no answer can reach it, and it would wait forever."""
        return self.fate is TaskFate.UNSEEN and not self.waiting()


def input_status(envelope: InputEnvelope, raised_after: int, view: TaskView, *, in_doubt: bool = False) -> InputStatus:
    """Whether the runtime still waits for ``envelope`` (raised after
    pipeline sequence ``raised_after``; ``in_doubt``: an answer to it may
    have reached the runtime, which never confirmed it)."""
    state = view.state
    if state is None:
        return InputStatus.GONE
    if _received(envelope, view.iac) or _resolved_in_pipeline(envelope, raised_after, view.pipeline):
        return InputStatus.TAKEN
    tool_use_id = envelope.tool_use_id
    if view.transcript is not None and tool_use_id is not None and has_result(view.transcript, tool_use_id):
        return InputStatus.TAKEN
    if in_doubt and view.bare:
        # The runtime restarted since: it keeps no receipt across a restart,
        # and answered again it carries the decision out from its own
        # checkpoint, a second time if it had already begun. Whether the
        # first answer was applied cannot be known: the execution is lost.
        return InputStatus.GONE
    if not view.is_pipeline:
        return _outside_pipeline(view)
    asked = required_inputs(view.iac)
    if any(item.input_id == envelope.input_id for item in asked):
        return InputStatus.WAITS
    if state == wire.COMPLETED:
        return InputStatus.TAKEN
    if state in wire.TERMINAL_STATES or state in _FAILED_STATES:
        return InputStatus.GONE
    if asked and not envelope.sideband:
        # One top-level input at a time: the task asks for the next one.
        return InputStatus.TAKEN
    if _pending_in_pipeline(envelope, view.pipeline):
        return InputStatus.WAITS
    if envelope.sideband or state in _LIVE_STATES:
        # The task lists every sub-pipeline input it still waits for; and a
        # top-level input holds it in INPUT_REQUIRED until answered.
        return InputStatus.TAKEN
    if view.pipeline is None:
        return InputStatus.UNKNOWN
    # INPUT_REQUIRED with nothing asked for: the pipeline's state route
    # (read above) no longer lists the input.
    return InputStatus.TAKEN


def _outside_pipeline(view: TaskView) -> InputStatus:
    """No receipt and no result: the input waits, unless the task or its
    execution ended (no answer can reach it then), or the execution works:
    a turn that waited for this input went on, so the input was taken."""
    status = view.execution_status
    if status in _EXECUTION_GONE:
        return InputStatus.GONE
    if status in _LIVE_EXECUTION:
        return InputStatus.TAKEN
    if view.state in wire.TERMINAL_STATES or view.state in _FAILED_STATES:
        return InputStatus.GONE
    return InputStatus.WAITS


def waiting_inputs(
    view: TaskView, known: Iterable[InputEnvelope] = (), answered: Collection[str] = ()
) -> list[InputEnvelope]:
    """Every input the task waits for now; a pipeline's state route fills in
    what ``GetTask`` no longer shows. Inputs in ``answered`` (taken answers)
    are not waited for, whatever a stale ``GetTask`` still shows."""
    known = list(known)
    found = [
        _with_display_scope(envelope, view.pipeline)
        for envelope in required_inputs(view.iac, known)
        if envelope.input_id not in answered
    ]
    if found or view.state != wire.INPUT_REQUIRED or view.pipeline is None:
        return found
    rebuilt = _pipeline_inputs(view, {envelope.input_id: envelope for envelope in known})
    return [envelope for envelope in rebuilt if envelope.input_id not in answered]


def _with_display_scope(envelope: InputEnvelope, document: Mapping[str, Any] | None) -> InputEnvelope:
    """``GetTask`` lists sub-pipeline permissions without their scope; the
    pipeline's display entry of the same input still has it."""
    if envelope.fields.get("scope") is not None:
        return envelope
    entry = _permission_entries(document).get(envelope.input_id)
    if entry is None or not isinstance(entry.get("scope"), str):
        return envelope
    fields = {**envelope.fields, "scope": entry["scope"]}
    candidate = entry.get("candidate")
    sub_pipeline = entry.get("subPipelineId") or (candidate.get("id") if isinstance(candidate, Mapping) else None)
    if isinstance(sub_pipeline, str) and fields.get("subPipelineId") is None:
        fields["subPipelineId"] = sub_pipeline
    return envelope_of(fields, listed=envelope.sideband)


def task_fate(
    view: TaskView, known: Iterable[InputEnvelope] = (), answered: Collection[str] = ()
) -> tuple[TaskFate, list[InputEnvelope]]:
    """Where the task is now, and what it asks for (``known``: the inputs
    already announced; ``answered``: those whose answers were taken)."""
    known = list(known)
    state = view.state
    if state is None:
        return TaskFate.GONE, []
    if not view.is_pipeline:
        return _fate_outside_pipeline(view, known, answered)
    if state == wire.COMPLETED:
        return TaskFate.TURN_ENDED, []
    if state == wire.CANCELED:
        return TaskFate.CANCELED, []
    if state in _FAILED_STATES:
        return TaskFate.FAILED, []
    if view.bare and state in _LIVE_STATES:
        # A restarted runtime lists the pipeline's task in the state it died
        # in and runs nothing of it (it refuses a subscriber): its state
        # route, kept on disk, still tells which answers it took.
        return TaskFate.ORPHANED, []
    if view.pipeline is None and state == wire.INPUT_REQUIRED and not required_inputs(view.iac):
        return TaskFate.UNKNOWN, []
    asks = waiting_inputs(view, known, answered)
    if asks:
        return TaskFate.ASKS, asks
    if state in _LIVE_STATES:
        return TaskFate.WORKS, []
    return TaskFate.TURN_ENDED, []


def _fate_outside_pipeline(
    view: TaskView, known: list[InputEnvelope], answered: Collection[str]
) -> tuple[TaskFate, list[InputEnvelope]]:
    """Outside a pipeline the execution state follows the turn (``GetTask``
    does not), and the transcript tells a turn that waits for an input (a
    tool call without its result) from one that ended."""
    state = view.state
    if state == wire.CANCELED:
        return TaskFate.CANCELED, []
    if state in _FAILED_STATES:
        return TaskFate.FAILED, []
    status = view.execution_status
    if status is None:
        if view.bare:
            return TaskFate.ORPHANED, []
        return _fate_by_task(view, known, answered)
    fate = _fate_by_execution(status)
    if fate is not TaskFate.TURN_ENDED or status != "input-required":
        return fate, []
    if view.transcript is None:
        # Waiting for an input and having ended the turn look the same here.
        return TaskFate.UNKNOWN, []
    waiting = open_tool_uses(view.transcript)
    if not waiting:
        return TaskFate.TURN_ENDED, []
    by_tool = {item.tool_use_id: item for item in known if item.input_id not in answered}
    asks = [by_tool[tool_use_id] for tool_use_id in waiting if tool_use_id in by_tool]
    if len(asks) < len(waiting):
        return TaskFate.UNSEEN, asks
    return TaskFate.ASKS, asks


def _fate_by_task(
    view: TaskView, known: list[InputEnvelope], answered: Collection[str]
) -> tuple[TaskFate, list[InputEnvelope]]:
    """A runtime without the execution state route: what ``GetTask`` says
    (an input it names that was already answered is not asked again)."""
    state = view.state
    if state == wire.COMPLETED:
        return TaskFate.TURN_ENDED, []
    asks = [item for item in required_inputs(view.iac, known) if item.input_id not in answered]
    if asks:
        return TaskFate.ASKS, asks
    if state in _LIVE_STATES:
        return TaskFate.WORKS, []
    return TaskFate.TURN_ENDED, []


def _fate_by_execution(status: str) -> TaskFate:
    if status in ("failed", "rejected"):
        return TaskFate.FAILED
    if status == "canceled":
        return TaskFate.CANCELED
    if status in ("working", "submitted"):
        return TaskFate.WORKS
    return TaskFate.TURN_ENDED


def assess(
    carried: Sequence[tuple[InputEnvelope, int]],
    view: TaskView,
    known: Iterable[InputEnvelope] = (),
    answered: Collection[str] = (),
    in_doubt: Collection[str] = (),
) -> Findings:
    """What became of the inputs a dead run carried (each with the pipeline
    sequence it was raised after; ``in_doubt``: those whose answers may have
    reached the runtime), and of its task."""
    statuses = {
        envelope.input_id: input_status(envelope, after, view, in_doubt=envelope.input_id in in_doubt)
        for envelope, after in carried
    }
    taken = {envelope.input_id for envelope, _ in carried if statuses[envelope.input_id] is InputStatus.TAKEN}
    fate, asks = task_fate(view, known, {*answered, *taken})
    lost = {key for key in in_doubt if statuses.get(key) is InputStatus.GONE}
    if fate is TaskFate.ASKS and any(envelope.input_id in lost for envelope in asks):
        # A restarted pipeline asks again (from its state route) for an input
        # whose answer it may have taken: answered, it would carry the
        # decision out a second time. Nobody can answer it safely.
        return Findings(statuses, TaskFate.ORPHANED, (), view.detail)
    return Findings(statuses, fate, tuple(asks), view.detail)


def _received(envelope: InputEnvelope, iac: Mapping[str, Any]) -> bool:
    received = iac.get("inputReceived")
    return isinstance(received, Mapping) and str(received.get("inputId") or "") == envelope.input_id


def _events_after(document: Mapping[str, Any] | None, after: int) -> list[Mapping[str, Any]]:
    if document is None:
        return []
    events = [item for item in document.get("events") or () if isinstance(item, Mapping)]
    return [item for item in events if (wire.as_int(item.get("sequence")) or 0) > after]


def _names(data: Mapping[str, Any], envelope: InputEnvelope) -> bool:
    for key in ("inputId", "permissionId"):
        if data.get(key) == envelope.input_id:
            return True
    tool_use_id = envelope.tool_use_id
    return tool_use_id is not None and data.get("toolUseId") == tool_use_id


def _resolved_in_pipeline(envelope: InputEnvelope, after: int, document: Mapping[str, Any] | None) -> bool:
    for item in _events_after(document, after):
        if item.get("eventType") not in _RESOLUTIONS:
            continue
        data = item.get("data")
        data = data if isinstance(data, Mapping) else {}
        if _names(data, envelope):
            return True
        # A selection's input_received names no input; there is one
        # top-level input at a time, so the next one of its kind is its answer.
        if not envelope.sideband and "inputId" not in data and data.get("kind") == envelope.kind:
            return True
    return False


def _snapshot(document: Mapping[str, Any] | None) -> Mapping[str, Any]:
    snapshot = document.get("snapshot") if document is not None else None
    return snapshot if isinstance(snapshot, Mapping) else {}


def _permission_entries(document: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    """The newest display entry of each permission (entries are appended)."""
    display = _snapshot(document).get("display")
    entries = display.get("permissions") if isinstance(display, Mapping) else None
    newest: dict[str, Mapping[str, Any]] = {}
    for entry in entries or ():
        if isinstance(entry, Mapping) and isinstance(entry.get("inputId"), str):
            newest[str(entry["inputId"])] = entry
    return newest


def _pending_input(document: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    pending = _snapshot(document).get("pendingInput")
    return pending if isinstance(pending, Mapping) else None


def _pending_input_id(pending: Mapping[str, Any]) -> str:
    explicit = pending.get("inputId")
    if isinstance(explicit, str) and explicit:
        return explicit
    return f"input-{pending.get('eventId')}"


def _pending_in_pipeline(envelope: InputEnvelope, document: Mapping[str, Any] | None) -> bool:
    entry = _permission_entries(document).get(envelope.input_id)
    if entry is not None:
        return entry.get("pending") is True
    pending = _pending_input(document)
    if pending is None:
        return False
    # A question's pendingInput carries the event id, not the input id; a
    # top-level input of the same kind is the one waiting (there is one).
    return _pending_input_id(pending) == envelope.input_id or (
        not envelope.sideband and pending.get("kind") == envelope.kind
    )


def _pipeline_inputs(view: TaskView, known: Mapping[str, InputEnvelope]) -> list[InputEnvelope]:
    """Inputs a pipeline waits for, rebuilt from its state route."""
    document = view.pipeline
    task_id = view.task.get("id") if view.task is not None else None
    events = _events_after(document, 0)
    found: list[InputEnvelope] = []
    for input_id, entry in _permission_entries(document).items():
        if entry.get("pending") is not True:
            continue
        probe = envelope_of({"inputId": input_id, "kind": "permission", "toolUseId": entry.get("toolUseId")})
        after = wire.as_int(entry.get("sequence")) or 0
        if any(_names(item.get("data") or {}, probe) for item in events
               if item.get("eventType") in _RESOLUTIONS and (wire.as_int(item.get("sequence")) or 0) > after):
            continue
        fields = {key: value for key, value in entry.items() if key not in _DISPLAY_ONLY}
        fields.update({"kind": "permission", "inputId": input_id, "required": True, "requestTaskId": task_id})
        found.append(envelope_of(fields, known=known.get(input_id)))
    pending = _pending_input(document)
    if pending is not None:
        input_id = _pending_input_id(pending)
        fields = {key: value for key, value in pending.items() if key not in ("eventId", "createdAt")}
        fields.update({"inputId": input_id, "required": True, "requestTaskId": task_id})
        found.append(envelope_of(fields, known=known.get(input_id)))
    return found
