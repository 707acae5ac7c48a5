"""The scripted pipeline of the demo runtime (pure: no sockets, no tasks).

A user message whose ``metadata.iac_code.run_mode`` is ``"pipeline"`` (or that
sets ``cleanupOnly: true``) runs :func:`plan_pipeline` instead of a text
behaviour. Pipeline events travel in WORKING status updates, one envelope under
``metadata.iac_code.pipeline`` or several under ``pipelineBatch.events``; every
envelope gets the task's next ``sequence`` (a float, as a proto Struct has it)
and lands in the task's :class:`PipelineLog`, which the runtime serves at
``GET /iac-code/pipeline/state``.

Every id a test may want to predict comes from :class:`PipelineIds`, derived
from the task id; only ``createdAt`` (the clock) varies between runs.

The script pauses twice: candidate B's ``write_file`` permission is a side-band
input (:class:`SideInterrupt`, the task stays WORKING and its stream stays
open; it is answered with ``SendMessage``), and the choice between the two
candidates is an ordinary INPUT_REQUIRED interrupt answered with text.
"""

from __future__ import annotations

import uuid
from collections.abc import Generator, Iterator, Mapping
from typing import Any, Final

import attrs

from aguiadapter.a2a.wire import WORKING
from aguiadapter.demo import scripts
from aguiadapter.demo.scripts import Emit, Json, PendingInput, Sleep, Step, ToolExecuted, TurnContext

EXTENSION_URI: Final = "urn:iac-code:a2a:pipeline-events:v1"
SCHEMA_VERSION: Final = "1.0"
DEFAULT_NAME: Final = "selling"
EVENT_DELAY: Final = 0.01
# How long the script waits, once a side-band input is answered, for a client
# to follow the task (SubscribeToTask) before it goes on without one.
FOLLOW_GRACE: Final = 2.0
STEPS: Final = ("requirements", "candidates", "selection", "deploy")
CANDIDATES: Final = ("a", "b")
CANDIDATE_STEP: Final = "template_generating"
_ID_NAMESPACE: Final = uuid.UUID("80d314bb-7bb8-4df0-970f-d3bae90c247b")
_STEP_STATUS: Final = {"step_started": "running", "step_completed": "completed", "step_failed": "failed"}
_CANDIDATE_STATUS: Final = {
    "candidate_started": "running",
    "candidate_completed": "completed",
    "candidate_failed": "failed",
}
_RUN_STATUS: Final = {
    "pipeline_started": "running",
    "cleanup_started": "running",
    "pipeline_completed": "completed",
    "pipeline_error": "failed",
}
_TEMPLATE_B: Final = (
    'resource "alicloud_fc_service" "demo" {\n  name = "demo-candidate-b"\n}\n'
    'resource "alicloud_ots_instance" "demo" {\n  name = "demo-b"\n}\n'
)
# (label, summary, diagram, cost items) of each candidate.
_OPTIONS: Final = {
    "a": (
        "Candidate A",
        "One ECS instance behind an SLB, with an RDS MySQL database.",
        "graph LR; user --> slb; slb --> ecs; ecs --> rds",
        (("ECS ecs.t6-c1m2.large", 21.6), ("SLB", 9.8), ("RDS MySQL", 27.0)),
    ),
    "b": (
        "Candidate B",
        "Serverless: Function Compute behind API Gateway, with Tablestore.",
        "graph LR; user --> apigw; apigw --> fc; fc --> ots",
        (("Function Compute", 12.5), ("API Gateway", 6.0), ("Tablestore", 8.2)),
    ),
}


# --- the request and its ids -------------------------------------------------


@attrs.frozen
class PipelineRequest:
    """What a user message asked of the pipeline (``metadata.iac_code``)."""

    name: str = DEFAULT_NAME
    cleanup_only: bool = False
    presentation: str | None = None


def pipeline_request(message: Mapping[str, Any]) -> PipelineRequest | None:
    """The pipeline a user message asks for, or None for an ordinary turn."""
    meta = message.get("metadata")
    iac = meta.get("iac_code") if isinstance(meta, dict) else None
    if not isinstance(iac, dict):
        return None
    cleanup_only = iac.get("cleanupOnly") is True
    if iac.get("run_mode") != "pipeline" and not cleanup_only:
        return None
    name, presentation = iac.get("pipeline_name"), iac.get("candidatePresentation")
    return PipelineRequest(
        name if isinstance(name, str) and name else DEFAULT_NAME,
        cleanup_only,
        presentation if isinstance(presentation, str) and presentation else None,
    )


@attrs.frozen
class PipelineIds:
    """Every id of the *run*-th pipeline of a task, derived from the task id."""

    task_id: str
    run: int = 1

    @property
    def run_id(self) -> str:
        """``pipelineRunId``: ``pipeline-<taskId>`` (``-<run>`` from the second run on)."""
        return f"pipeline-{self.task_id}" + (f"-{self.run}" if self.run > 1 else "")

    def event_id(self, sequence: float) -> str:
        """The ``eventId`` of the task's envelope number *sequence* (a UUID)."""
        return str(uuid.uuid5(_ID_NAMESPACE, f"{self.task_id}/event/{int(sequence)}"))

    def _hex(self, purpose: str) -> str:
        return uuid.uuid5(_ID_NAMESPACE, f"{self.run_id}/{purpose}").hex

    @property
    def permission_input_id(self) -> str:
        """The inputId of candidate B's ``write_file`` permission."""
        return f"permission-{self._hex('permission/sub-b')}"

    @property
    def selection_input_id(self) -> str:
        """The inputId of the candidate selection."""
        return f"selection-{self._hex('selection')}"

    def tool_use_id(self, purpose: str) -> str:
        """``call_<24 hex>`` for ``sub-a/list_files``, ``sub-b/write_file`` or ``selection``."""
        return f"call_{self._hex(f'tool/{purpose}')[:24]}"


def step_coordinate(step_id: str) -> Json:
    """The ``step`` of an envelope for one of :data:`STEPS`."""
    return {"id": step_id, "runId": f"step-{step_id}-1", "attempt": 1.0, "index": float(STEPS.index(step_id) + 1)}


def candidate_coordinates(letter: str) -> Json:
    """``candidate`` and ``candidateStep`` of candidate *letter* (``a`` or ``b``)."""
    run_id = f"candidate-{letter}-1"
    return {
        "candidate": {
            "id": f"candidate-{letter}",
            "runId": run_id,
            "index": float(CANDIDATES.index(letter) + 1),
            "subPipelineId": f"sub-{letter}",
        },
        "candidateStep": {"id": CANDIDATE_STEP, "runId": f"{run_id}-{CANDIDATE_STEP}-1", "attempt": 1.0, "index": 1.0},
    }


# --- the log and the run -------------------------------------------------------


@attrs.define(eq=False)
class PipelineLog:
    """Every envelope of a task's pipelines, once each, in sequence order."""

    events: list[Json] = attrs.Factory(list)
    last_sequence: int = 0

    def after(self, sequence: float) -> list[Json]:
        """The envelopes whose sequence is greater than *sequence*."""
        return [event for event in self.events if event["sequence"] > sequence]


@attrs.define(eq=False)
class PipelineRun:
    """One pipeline run of a task: what the state route's snapshot shows."""

    ids: PipelineIds
    request: PipelineRequest
    log: PipelineLog = attrs.Factory(PipelineLog)
    status: str = "running"
    steps: dict[str, str] = attrs.Factory(dict)
    candidates: dict[str, str] = attrs.Factory(dict)
    pending_inputs: dict[str, Json] = attrs.Factory(dict)

    @classmethod
    def start(cls, task_id: str, request: PipelineRequest, previous: PipelineRun | None = None) -> PipelineRun:
        """A new run; a task's later runs share its log (sequences keep growing)."""
        run = cls(PipelineIds(task_id, previous.ids.run + 1 if previous else 1), request)
        if previous is not None:
            run.log = previous.log
        if not request.cleanup_only:
            run.steps = dict.fromkeys(STEPS, "pending")
            run.candidates = {f"candidate-{letter}": "pending" for letter in CANDIDATES}
        return run

    def envelope(
        self,
        ctx: TurnContext,
        event_type: str,
        scope: str,
        status: str,
        data: Json,
        coordinates: Mapping[str, Json] | None = None,
    ) -> Json:
        """The next envelope (logged and applied to the snapshot)."""
        self.log.last_sequence += 1
        sequence = float(self.log.last_sequence)
        envelope: Json = {
            "schemaVersion": SCHEMA_VERSION,
            "extensionUri": EXTENSION_URI,
            "eventId": self.ids.event_id(sequence),
            "sequence": sequence,
            "createdAt": ctx.clock(),
            "eventType": event_type,
            "scope": scope,
            "pipelineRunId": self.ids.run_id,
            "taskId": ctx.task_id,
            "contextId": ctx.context_id,
            "pipelineName": self.request.name,
            "status": status,
            "data": data,
            **(coordinates or {}),
        }
        self.log.events.append(envelope)
        self._track(envelope)
        return envelope

    def _track(self, envelope: Json) -> None:
        kind = envelope["eventType"]
        if kind in _STEP_STATUS:
            self.steps[envelope["step"]["id"]] = _STEP_STATUS[kind]
        elif kind in _CANDIDATE_STATUS:
            self.candidates[envelope["candidate"]["id"]] = _CANDIDATE_STATUS[kind]
        elif kind in _RUN_STATUS:
            self.status = _RUN_STATUS[kind]
        elif kind == "input_required":
            pending = envelope["input"]
            self.pending_inputs[pending["inputId"]] = pending
            if pending.get("scope") != "candidate":
                self.status = "input_required"
        elif kind == "input_received":
            self.answered(envelope["data"]["inputId"])

    def answered(self, input_id: str) -> None:
        """An input is no longer pending (its answer was accepted)."""
        self.pending_inputs.pop(input_id, None)
        if self.status == "input_required" and not self.pending_inputs:
            self.status = "running"

    def cancel(self) -> None:
        """The task was canceled: nothing is pending any more."""
        self.pending_inputs.clear()
        self.status = "canceled"

    def snapshot(self) -> Json:
        """The run as the state route describes it."""
        return {
            "pipelineRunId": self.ids.run_id,
            "pipelineName": self.request.name,
            "status": self.status,
            "lastSequence": float(self.log.last_sequence),
            "steps": [{"id": key, "status": value} for key, value in self.steps.items()],
            "candidates": [{"id": key, "status": value} for key, value in self.candidates.items()],
            "pendingInputs": list(self.pending_inputs.values()),
        }

    def state_after(self, sequence: float) -> Json:
        """The body of ``GET /iac-code/pipeline/state?afterSequence=<sequence>``."""
        return {"snapshot": self.snapshot(), "events": self.log.after(sequence)}


# --- steps the pipeline adds to scripts.Step ---------------------------------


@attrs.define(eq=False)
class AnswerBox:
    """Where the runtime puts a side-band answer for the script to read."""

    decision: str | None = None


@attrs.frozen
class SideInterrupt:
    """Record *pending* as a side-band input, then send *result*; the task stays WORKING."""

    pending: PendingInput
    result: Json


@attrs.frozen
class AwaitAnswer:
    """Wait (stream open) for the answer to side-band input *input_id*, put it in
    *box*, then wait up to *follow_grace* seconds for a client to follow the task."""

    input_id: str
    box: AnswerBox
    follow_grace: float = FOLLOW_GRACE


PipelineStep = Step | SideInterrupt | AwaitAnswer


# --- the script ------------------------------------------------------------------


@attrs.frozen
class _Writer:
    """Builds a run's envelopes and the status updates that carry them."""

    ctx: TurnContext
    run: PipelineRun

    def event(
        self, kind: str, scope: str, data: Json | None = None, status: str = "running", at: Json | None = None
    ) -> Json:
        """An envelope; *at* holds its coordinates (step, candidate, candidateStep, input)."""
        return self.run.envelope(self.ctx, kind, scope, status, data or {}, at)

    def emit(
        self, kind: str, scope: str, data: Json | None = None, status: str = "running", at: Json | None = None
    ) -> Emit:
        return self.send(self.event(kind, scope, data, status, at))

    def send(self, envelope: Json) -> Emit:
        return scripts.working(self.ctx, pipeline=envelope)

    def batch(self, envelopes: list[Json]) -> Emit:
        return scripts.working(self.ctx, pipelineBatch={"events": envelopes})


def plan_pipeline(ctx: TurnContext, run: PipelineRun) -> Iterator[PipelineStep]:
    """The body of a pipeline turn, up to the candidate selection (or the cleanup path)."""
    writer = _Writer(ctx, run)
    if run.request.cleanup_only:
        yield from _cleanup(writer)
        return
    yield from _requirements(writer)
    box = AnswerBox()
    permission = yield from _candidates(writer, box)
    yield from _after_permission(writer, permission, box)


def _requirements(w: _Writer) -> Iterator[PipelineStep]:
    names = list(STEPS)
    yield w.emit("pipeline_started", "pipeline", {"pipelineName": w.run.request.name, "stepNames": names})
    step = {"step": step_coordinate("requirements")}
    yield w.emit("step_started", "step", {"stepId": "requirements"}, at=step)
    yield Sleep(EVENT_DELAY)
    yield w.emit("thinking_delta", "pipeline", {"text": "A small web service with a database; two designs fit."})
    for text in ("Reading your requirements: ", "a small web service with a database."):
        yield Sleep(EVENT_DELAY)
        yield w.emit("text_delta", "pipeline", {"text": text})
    yield w.emit("usage", "pipeline", {"inputTokens": 120.0, "outputTokens": 18.0, "totalTokens": 138.0})
    yield w.emit("step_completed", "step", {"stepId": "requirements"}, "completed", at=step)


def _candidates(w: _Writer, box: AnswerBox) -> Generator[PipelineStep, None, PendingInput]:
    """Both candidates start; A runs a tool; B asks permission; A finishes; wait."""
    ids = w.run.ids
    step = {"step": step_coordinate("candidates")}
    a, b = candidate_coordinates("a"), candidate_coordinates("b")
    yield w.emit("step_started", "step", {"stepId": "candidates"}, at=step)
    for letter, coords in (("a", a), ("b", b)):
        name = {"name": _OPTIONS[letter][0]}
        yield w.emit("candidate_started", "candidate", name, at={"candidate": coords["candidate"]})
    for coords in (a, b):
        yield w.emit("candidate_step_started", "candidate_step", {"stepId": CANDIDATE_STEP}, at=coords)
    yield Sleep(EVENT_DELAY)
    pieces = (
        (a, "Candidate A: ECS behind SLB, "),
        (b, "Candidate B: serverless, "),
        (a, "with RDS MySQL "),
        (b, "Function Compute and Tablestore "),
        (a, "for steady traffic."),
        (b, "for spiky traffic."),
    )
    yield w.batch([w.event("text_delta", "candidate_step", {"text": text}, at=coords) for coords, text in pieces])
    # Candidate A reads its workspace; the result is sent twice (a deliberate replay).
    use_a = ids.tool_use_id("sub-a/list_files")
    tool_a = {"toolUseId": use_a, "toolName": "list_files"}
    yield w.emit("tool_started", "candidate_step", {**tool_a, "input": {"path": "candidate-a"}}, at=a)
    yield ToolExecuted("list_files", use_a)
    listing = {**tool_a, "result": "main.tf\nvariables.tf", "isError": False}
    result = w.event("tool_result", "candidate_step", listing, "completed", at=a)
    yield w.send(result)
    yield w.send(result)
    yield w.emit("internal_debug", "pipeline", {"note": "demo: an event type clients do not know"})
    progress = {"stackName": "demo-candidate-a", "progress": 40.0}
    yield w.emit("stack_progress", "candidate", progress, at={"candidate": a["candidate"]})
    yield Sleep(EVENT_DELAY)
    # Candidate B wants to write its template: a side-band permission.
    use_b = ids.tool_use_id("sub-b/write_file")
    tool_input = {"path": "candidate-b/main.tf", "content": _TEMPLATE_B}
    started = {"toolUseId": use_b, "toolName": "write_file", "input": tool_input}
    yield w.emit("tool_started", "candidate_step", started, at=b)
    pending = candidate_permission(w.ctx, ids, tool_input)
    asked = {"inputId": pending.input_id, "kind": "permission", "toolUseId": use_b}
    at_b = {"candidate": b["candidate"], "input": pending.envelope}
    required = w.event("input_required", "candidate", asked, "input_required", at_b)
    iac = {"pipeline": required, "pendingPermissions": [pending.envelope]}
    yield SideInterrupt(pending, scripts.status_update(w.ctx, {"state": WORKING}, iac))
    yield Sleep(EVENT_DELAY)
    done = {"stepId": CANDIDATE_STEP}
    yield w.emit("candidate_step_completed", "candidate_step", done, "completed", at=a)
    only_a = {"candidate": a["candidate"]}
    yield w.emit("candidate_completed", "candidate", {"name": "Candidate A"}, "completed", at=only_a)
    yield AwaitAnswer(pending.input_id, box)
    return pending


def candidate_permission(ctx: TurnContext, ids: PipelineIds, tool_input: Json) -> PendingInput:
    """Candidate B's ``write_file`` permission: the permission script's envelope plus
    the sub-pipeline fields."""
    use_id = ids.tool_use_id("sub-b/write_file")
    base = scripts.permission_pending(ctx, use_id, tool_input, input_id=ids.permission_input_id)
    path = str(tool_input["path"])
    envelope = {
        **base.envelope,
        "scope": "candidate",
        "subPipelineId": "sub-b",
        "operation": "write_template",
        "displayParameters": {"candidate": "Candidate B", "path": path},
    }
    return attrs.evolve(base, envelope=envelope)


def _after_permission(w: _Writer, pending: PendingInput, box: AnswerBox) -> Iterator[PipelineStep]:
    """B's tool runs (or not), both candidates are done, the selection is asked."""
    b = candidate_coordinates("b")
    only_b = {"candidate": b["candidate"]}
    decision = box.decision or "deny"
    yield scripts.input_received(w.ctx, pending)
    received = {"inputId": pending.input_id, "kind": "permission", "toolUseId": pending.tool_use_id}
    yield w.emit("input_received", "candidate", {**received, "decision": decision}, at=only_b)
    tool = {"toolUseId": pending.tool_use_id, "toolName": pending.tool_name}
    if decision == "allow_once":
        yield ToolExecuted(pending.tool_name, pending.tool_use_id)
        lines = str(pending.tool_input["content"]).count("\n")
        path = f"{w.ctx.cwd.rstrip('/')}/{pending.tool_input['path']}"
        outcome = {**tool, "result": f"Successfully wrote {lines} lines to {path}", "isError": False}
    else:
        outcome = {**tool, "result": scripts.DENIED_RESULT, "isError": True}
    status = "failed" if outcome["isError"] else "completed"
    yield Sleep(EVENT_DELAY)
    yield w.emit("tool_result", "candidate_step", outcome, status, at=b)
    yield w.emit("candidate_step_completed", "candidate_step", {"stepId": CANDIDATE_STEP}, "completed", at=b)
    yield w.emit("candidate_completed", "candidate", {"name": "Candidate B"}, "completed", at=only_b)
    candidates = {"step": step_coordinate("candidates")}
    yield w.emit("step_completed", "step", {"stepId": "candidates"}, "completed", at=candidates)
    step = {"step": step_coordinate("selection")}
    yield w.emit("step_started", "step", {"stepId": "selection"}, at=step)
    selection = selection_pending(w.ctx, w.run)
    asked = {"inputId": selection.input_id, "kind": selection.kind, "toolUseId": selection.tool_use_id}
    yield w.emit("input_required", "step", asked, "input_required", at={**step, "input": selection.envelope})
    yield scripts.interrupt(w.ctx, selection)


def selection_pending(ctx: TurnContext, run: PipelineRun) -> PendingInput:
    """The ``candidate_selection`` interrupt (echoing ``candidatePresentation``)."""
    options: list[Json] = []
    for letter, (label, summary, diagram, items) in _OPTIONS.items():
        costs = [{"name": name, "monthlyCost": cost, "currency": "USD"} for name, cost in items]
        total = round(sum(cost for _, cost in items), 2)
        options.append(
            {
                "id": f"candidate-{letter}",
                "label": label,
                "summary": summary,
                "architectureDiagram": diagram,
                "totalMonthlyCost": total,
                "costItems": costs,
            }
        )
    use_id = run.ids.tool_use_id("selection")
    fields: Json = {
        "prompt": "Which candidate should the demo deploy?",
        "options": options,
        "allowFreeText": False,
    }
    if run.request.presentation is not None:
        fields["metadata"] = {"candidatePresentation": run.request.presentation}
    envelope = scripts.input_envelope(ctx, "candidate_selection", run.ids.selection_input_id, use_id, **fields)
    kind = "candidate_selection"
    return PendingInput(kind, envelope["inputId"], use_id, kind, {"options": options}, envelope)


def chosen_option(pending: PendingInput, answer: str) -> Json | None:
    """The option an answer names by id or label (case and spaces ignored)."""
    wanted = " ".join(answer.split()).lower()
    for option in pending.tool_input.get("options", []):
        if wanted in (str(option["id"]).lower(), str(option["label"]).lower()):
            return dict(option)
    return None


def answer_selection(ctx: TurnContext, run: PipelineRun, pending: PendingInput, option: Json) -> Iterator[PipelineStep]:
    """After the selection: deploy the chosen candidate and finish the pipeline."""
    w = _Writer(ctx, run)
    label, candidate_id = str(option["label"]), str(option["id"])
    step = {"step": step_coordinate("selection")}
    yield scripts.input_received(ctx, pending)
    received = {"inputId": pending.input_id, "kind": pending.kind, "toolUseId": pending.tool_use_id}
    yield w.emit("input_received", "step", {**received, "selectedOption": label}, at=step)
    yield w.emit("candidate_selected", "step", {"candidateId": candidate_id, "label": label}, at=step)
    diagram = {"candidateId": candidate_id, "format": "mermaid", "diagram": option["architectureDiagram"]}
    yield w.emit("diagram_shown", "pipeline", diagram)
    yield w.emit("step_completed", "step", {"stepId": "selection"}, "completed", at=step)
    step = {"step": step_coordinate("deploy")}
    yield w.emit("step_started", "step", {"stepId": "deploy"}, at=step)
    for progress in (50.0, 100.0):
        yield Sleep(EVENT_DELAY)
        yield w.emit("stack_progress", "step", {"stackName": f"demo-{candidate_id}", "progress": progress}, at=step)
    yield w.emit("step_completed", "step", {"stepId": "deploy"}, "completed", at=step)
    yield w.emit("pipeline_completed", "pipeline", {"selectedCandidateId": candidate_id}, "completed")
    text = f"{label} is deployed as stack demo-{candidate_id}."
    yield from scripts.text_deltas(ctx, [text])
    yield scripts.usage(ctx, len(text.split()))
    yield scripts.end_of_turn(ctx)


def _cleanup(w: _Writer) -> Iterator[PipelineStep]:
    """``cleanupOnly``: delete the demo stacks, nothing else."""
    stacks = [f"demo-candidate-{letter}" for letter in CANDIDATES]
    yield w.emit("cleanup_started", "pipeline", {"stacks": stacks, "cleanupOnly": True})
    for index, stack in enumerate(stacks, start=1):
        yield Sleep(EVENT_DELAY)
        progress = {"stackName": stack, "progress": 100.0 * index / len(stacks), "cleanupStatus": "deleted"}
        yield w.emit("cleanup_progress", "pipeline", progress)
    yield w.emit("cleanup_completed", "pipeline", {"deletedStacks": float(len(stacks))}, "completed")
    yield w.emit("pipeline_completed", "pipeline", {"cleanupOnly": True}, "completed")
    text = "Cleanup finished: the demo stacks are deleted."
    yield from scripts.text_deltas(ctx=w.ctx, chunks=[text])
    yield scripts.usage(w.ctx, len(text.split()))
    yield scripts.end_of_turn(w.ctx)
