"""The demo pipeline's state: its steps and candidates, the ids it derives, its
event log, and the run that :mod:`.pipeline`'s script moves (pure)."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

import attrs

from aguiadapter.demo import scripts
from aguiadapter.demo.scripts import (
    Json,
    PendingInput,
    Step,
    TurnContext,
)


EXTENSION_URI: Final = "urn:iac-code:a2a:pipeline-events:v1"
SCHEMA_VERSION: Final = "1.0"
SNAPSHOT_SCHEMA_VERSION: Final = "1.2"
DEFAULT_NAME: Final = "selling"
#: The pipelines iac-code 0.16.0 has (others are refused with INVALID_PARAMS).
PIPELINE_NAMES: Final = frozenset({"selling", "selling_solution_first"})
# The only candidatePresentation iac-code 0.16.0 honours; anything else is standard.
RICH_PRESENTATION: Final = "rich-v1"
EVENT_DELAY: Final = 0.01
# How long the script waits, once a side-band input is answered, for a client
# to follow the task (SubscribeToTask) before it goes on without one.
FOLLOW_GRACE: Final = 2.0
CANDIDATE_PIPELINE: Final = "evaluate_candidate"
CANDIDATE_STEP: Final = "template_generating"
DEPLOY_COMMAND: Final = "echo demo-deploy-marker >> deploy-marker.txt"
DEPLOY_DESCRIPTION: Final = "record the deployment attempt"
PENDING_BACKUP: Final = "pending_backup"
COMMITTED: Final = "committed"
_ID_NAMESPACE: Final = uuid.UUID("80d314bb-7bb8-4df0-970f-d3bae90c247b")
QUESTION_PROMPT: Final = "Which environment is this service for?"
QUESTION_OPTIONS: Final = (("env-test", "Test"), ("env-prod", "Production"))
SELECTION_PROMPT: Final = "Which candidate should the demo deploy?"
CLEANUP_UNAVAILABLE: Final = "Cleanup state unavailable. Inspect the session file and cloud resources manually."


@attrs.frozen
class StepSpec:
    """One step of the ``selling`` pipeline."""

    id: str
    index: int
    type: str
    conclusion_field: str
    title: str
    ui_mode: str | None = None


STEPS: Final = (
    StepSpec("intent_parsing", 1, "normal", "intent", "Intent parsing"),
    StepSpec("architecture_planning", 2, "normal", "architecture", "Architecture planning"),
    StepSpec("evaluate_candidates", 3, "parallel_sub_pipeline", "evaluated_candidates", "Evaluate candidates"),
    StepSpec("confirm_and_select", 4, "normal", "selected_plan", "Confirm and select", "candidate_selection"),
    StepSpec("deploying", 5, "normal", "deployment", "Deploying"),
)
INTENT, ARCHITECTURE, EVALUATE, SELECT, DEPLOY = STEPS
STEP_NAMES: Final = tuple(spec.id for spec in STEPS)


@attrs.frozen
class CandidatePlan:
    """One of the two designs the architecture step proposes."""

    letter: str
    name: str
    summary: str
    topology: str
    diagram: str
    # (product, spec or None, monthly cost) per resource
    costs: tuple[tuple[str, str | None, str], ...]
    total: str


CANDIDATES: Final = (
    CandidatePlan(
        "a",
        "candidate-a",
        "One ECS instance behind an SLB, with an RDS MySQL database.",
        "VPC + SLB + ECS + RDS",
        "flowchart LR\n  U[user] --> S[SLB]\n  S --> E[ECS]\n  E --> R[RDS MySQL]",
        (
            ("ECS", "ecs.t6-c1m2.large", "USD 21.60/month"),
            ("SLB", None, "USD 9.80/month"),
            ("RDS MySQL", None, "USD 27.00/month"),
        ),
        "USD 58.40/month",
    ),
    CandidatePlan(
        "b",
        "candidate-b",
        "Serverless: Function Compute behind API Gateway, with Tablestore.",
        "API Gateway + Function Compute + Tablestore",
        "flowchart LR\n  U[user] --> G[API Gateway]\n  G --> F[Function Compute]\n  F --> T[Tablestore]",
        (
            ("Function Compute", None, "USD 12.50/month"),
            ("API Gateway", None, "USD 6.00/month"),
            ("Tablestore", None, "USD 8.20/month"),
        ),
        "USD 26.70/month",
    ),
)


def template_of(plan: CandidatePlan) -> str:
    """The ROS template a candidate writes."""
    resource = "ALIYUN::ECS::Instance" if plan.letter == "a" else "ALIYUN::FC::Service"
    return (
        "ROSTemplateFormatVersion: '2015-09-01'\n"
        f"Description: {plan.name} of the aguiadapter demo\n"
        "Resources:\n"
        "  Main:\n"
        f"    Type: {resource}\n"
    )


def struct(value: Any) -> Any:
    """*value* as a proto Struct carries it: every number a float."""
    if isinstance(value, bool) or not isinstance(value, int | float | dict | list | tuple):
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, dict):
        return {key: struct(item) for key, item in value.items()}
    return [struct(item) for item in value]


def _seconds(timestamp: str) -> str:
    """``createdAt`` as iac-code writes it: whole seconds, ``Z``."""
    return timestamp[:19] + "Z"


# --- the request and its ids -------------------------------------------------


@attrs.frozen
class PipelineRequest:
    """What a user message asked of the pipeline (``metadata.iac_code`` and its text)."""

    name: str = DEFAULT_NAME
    cleanup_only: bool = False
    presentation: str | None = None
    user_request: str = ""
    asks_question: bool = False
    both_write: bool = False

    @property
    def rich(self) -> bool:
        """Rich candidate options (diagram, costs), as iac-code gives them for ``rich-v1`` only."""
        return self.presentation == RICH_PRESENTATION


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
    parts = [part for part in message.get("parts") or () if isinstance(part, dict) and "text" in part]
    text = "".join(str(part["text"]) for part in parts)
    # As the recorded runs: "full" asks a question and has both candidates ask to write.
    word = scripts.parse_command(text)[0]
    return PipelineRequest(
        name if isinstance(name, str) and name else DEFAULT_NAME,
        cleanup_only,
        presentation if isinstance(presentation, str) and presentation else None,
        text,
        asks_question=word in ("question", "full"),
        both_write=word == "full",
    )


@attrs.frozen
class PipelineIds:
    """Every id of the *run*-th pipeline of a task, derived from the task id."""

    task_id: str
    context_id: str
    run: int = 1

    @property
    def run_id(self) -> str:
        """``pipelineRunId``: the context id, as iac-code has it (``-<run>`` from the second run on)."""
        return self.context_id + (f"-{self.run}" if self.run > 1 else "")

    def _hex(self, purpose: str) -> str:
        return uuid.uuid5(_ID_NAMESPACE, f"{self.task_id}/{self.run}/{purpose}").hex

    def event_id(self, sequence: int) -> str:
        """The ``eventId`` of the task's envelope number *sequence*: ``evt-<32 hex>``."""
        return f"evt-{self._hex(f'event/{sequence}')}"

    def candidate_id(self, letter: str) -> str:
        """``evaluate_candidate_<8 hex>``: a candidate's id and its ``subPipelineId``."""
        return f"{CANDIDATE_PIPELINE}_{self._hex(f'candidate/{letter}')[:8]}"

    def tool_use_id(self, purpose: str) -> str:
        """``call_<24 hex>``; *purpose* is e.g. ``b/write_file``, ``deploy/bash``, ``question``."""
        return f"call_{self._hex(f'tool/{purpose}')[:24]}"

    def permission_input_id(self, purpose: str) -> str:
        """``permission-<32 hex>`` of the ``b/write_file`` or ``deploy/bash`` permission."""
        return f"permission-{self._hex(f'permission/{purpose}')}"

    @property
    def question_input_id(self) -> str:
        """The clarifying question's inputId: ``ask-<its toolUseId>``."""
        return f"ask-{self.tool_use_id('question')}"

    def message_id(self, purpose: str) -> str:
        """The ``messageId`` of a ``message_started`` event."""
        return f"msg_{self._hex(f'message/{purpose}')[:24]}"

    def ack_message_id(self, input_id: str) -> str:
        """The id of the ``permission_ack`` message for a side-band answer."""
        return f"permission-ack-{self._hex(f'ack/{input_id}')}"

    def artifact_id(self, purpose: str) -> str:
        """The artifactId of a file a candidate wrote."""
        return str(uuid.uuid5(_ID_NAMESPACE, f"{self.task_id}/{self.run}/artifact/{purpose}"))


def selection_input_id(event_id: str) -> str:
    """A candidate selection has no tool call: its inputId is ``input-<eventId of input_required>``."""
    return f"input-{event_id}"


def step_coordinate(spec: StepSpec, *, opening: bool = False) -> Json:
    """The ``step`` of an envelope; ``step_started`` adds the type and UI mode."""
    coordinate: Json = {"id": spec.id, "runId": f"step-{spec.id}-1", "attempt": 1, "index": spec.index}
    coordinate["total"] = len(STEPS)
    if opening:
        coordinate.update(type=spec.type, uiMode=spec.ui_mode)
    return coordinate


@attrs.frozen
class CandidateAt:
    """A candidate of the run with its coordinates (``candidate``, ``candidateStep``)."""

    plan: CandidatePlan
    index: int
    candidate: Json
    candidate_step: Json

    @classmethod
    def of(cls, ids: PipelineIds, index: int) -> CandidateAt:
        plan = CANDIDATES[index]
        candidate_id = ids.candidate_id(plan.letter)
        run_id = f"candidate-{candidate_id}-{index}-1"
        candidate = {"id": candidate_id, "runId": run_id, "index": index, "name": plan.name}
        candidate.update(pipelineName=CANDIDATE_PIPELINE, attempt=1, totalSteps=1)
        step = {"id": CANDIDATE_STEP, "runId": f"{run_id}-{CANDIDATE_STEP}-1", "attempt": 1, "index": 1, "total": 1}
        return cls(plan, index, candidate, step)

    @property
    def id(self) -> str:
        return str(self.candidate["id"])

    def at(self, *, with_step: bool = True) -> Json:
        """Coordinates of an event of this candidate (of its step unless *with_step* is false)."""
        coordinates = {"step": step_coordinate(EVALUATE), "candidate": self.candidate}
        if with_step:
            coordinates["candidateStep"] = self.candidate_step
        return coordinates

    def at_start(self) -> Json:
        """Coordinates of ``candidate_started``: the candidate lists its steps, all pending."""
        step = {**self.candidate_step, "name": CANDIDATE_STEP, "status": "pending"}
        return {"step": step_coordinate(EVALUATE), "candidate": {**self.candidate, "steps": [step]}}

    def data(self, **more: Any) -> Json:
        """The candidate fields every candidate event's ``data`` repeats."""
        base = {"subPipelineId": self.id, "subPipelineName": CANDIDATE_PIPELINE, "candidateIndex": self.index}
        return {**base, "candidateName": self.plan.name, "totalSteps": 1, **more}


def raw_options(rich: bool) -> list[Json]:
    """The options as the pipeline itself writes them (``input_required.data``, the snapshot)."""
    options: list[Json] = []
    for index, plan in enumerate(CANDIDATES):
        option: Json = {"name": plan.name, "candidate_index": index, "summary": plan.summary}
        if rich:
            costs = [_cost(product, spec, cost, "monthly_cost") for product, spec, cost in plan.costs]
            option.update(total_monthly_cost=plan.total, cost_items=costs, architecture_diagram=plan.diagram)
        options.append(option)
    return options


def envelope_options(rich: bool) -> list[Json]:
    """The options of the ``candidate_selection`` input envelope: ``{id: "<index>", label, summary}``."""
    options: list[Json] = []
    for index, plan in enumerate(CANDIDATES):
        option: Json = {"id": str(index), "label": plan.name, "summary": plan.summary}
        if rich:
            costs = [_cost(product, spec, cost, "monthlyCost") for product, spec, cost in plan.costs]
            option.update(costItems=costs, architectureDiagram=plan.diagram, totalMonthlyCost=plan.total)
        options.append(option)
    return options


def _cost(product: str, spec: str | None, cost: str, cost_key: str) -> Json:
    item: Json = {"name": product}
    if spec is not None:
        item["spec"] = spec
    item[cost_key] = cost
    return item


# --- the log and the run -------------------------------------------------------


@attrs.define(eq=False)
class PipelineLog:
    """Every envelope of a task's pipelines, once each, in sequence order (numbers as integers)."""

    events: list[Json] = attrs.Factory(list)
    last_sequence: int = 0

    def after(self, sequence: float) -> list[Json]:
        """The envelopes whose sequence is greater than *sequence*."""
        return [event for event in self.events if event["sequence"] > sequence]


@attrs.define(eq=False)
class PipelineRun:
    """One pipeline run of a task: its script, its log, and what the state route shows."""

    ids: PipelineIds
    request: PipelineRequest
    started_at: str = ""
    log: PipelineLog = attrs.Factory(PipelineLog)
    status: str = "working"
    steps: dict[str, Json] = attrs.Factory(dict)
    pending_input: Json | None = None
    permissions: list[Json] = attrs.Factory(list)
    artifacts: list[Json] = attrs.Factory(list)
    input_history: list[Json] = attrs.Factory(list)
    handoff_history: list[Json] = attrs.Factory(list)
    active_candidates: list[str] = attrs.Factory(list)
    selected: Json | None = None
    cleanup: Json = attrs.Factory(lambda: {"status": "none"})
    snapshot_version: int = 0
    attempts: int = 0
    # The suspended script between top-level pauses, and the answer it resumes with.
    script: Iterator[PipelineStep] | None = None
    answer: str | None = None
    # Where each side-band permission was asked (its coordinates), by inputId.
    side_at: dict[str, Json] = attrs.Factory(dict)

    @classmethod
    def start(
        cls,
        ctx: TurnContext,
        request: PipelineRequest,
        previous: PipelineRun | None,
        script: Callable[[TurnContext, PipelineRun], Iterator[PipelineStep]],
    ) -> PipelineRun:
        """A new run with its ``script`` (:func:`.pipeline.pipeline_script`); a task's
        later runs share its log (sequences keep growing)."""
        ids = PipelineIds(ctx.task_id, ctx.context_id, previous.ids.run + 1 if previous else 1)
        run = cls(ids, request, _seconds(ctx.clock()))
        if previous is not None:
            run.log = previous.log
        run.script = script(ctx, run)
        return run

    @property
    def finished(self) -> bool:
        """Completed or canceled: nothing more will happen in this run."""
        return self.status in ("completed", "canceled")

    def resume(self, answer: str) -> Iterator[PipelineStep]:
        """The rest of the script after a top-level pause, given the answer's text or decision."""
        if self.script is None:
            raise RuntimeError("the pipeline has no suspended script")
        self.answer = answer
        return self.script

    def take_answer(self) -> str:
        """The answer the script was resumed with (once)."""
        answer, self.answer = self.answer, None
        return answer or ""

    def next_attempt(self) -> str:
        """``att_<n>``: numbers each step and candidate step attempt, as iac-code does."""
        self.attempts += 1
        return f"att_{self.attempts:04d}"

    def publish(
        self,
        ctx: TurnContext,
        kind: str,
        scope: str,
        data: Json,
        *,
        at: Mapping[str, Json] | None = None,
        status: str | None = "working",
        extra: Mapping[str, Any] | None = None,
        stored_status: bool = True,
    ) -> Json:
        """Log the next envelope, apply it to the snapshot, and return it as the stream carries it.

        *stored_status* false keeps ``status`` out of the log (``backup_committed``
        has it only on the stream). Envelopes with ``visibility: "pending_backup"``
        are logged but change nothing: their committed copy follows."""
        self.log.last_sequence += 1
        sequence = self.log.last_sequence
        envelope: Json = {
            "schemaVersion": SCHEMA_VERSION,
            "extensionUri": EXTENSION_URI,
            "eventId": self.ids.event_id(sequence),
            "sequence": sequence,
            "createdAt": _seconds(ctx.clock()),
            "eventType": kind,
            "scope": scope,
            "pipelineRunId": self.ids.run_id,
            "taskId": ctx.task_id,
            "contextId": ctx.context_id,
            "pipelineName": self.request.name,
            "status": status,
            "data": copy.deepcopy(data),
            "iacCodeSessionId": ctx.session_id,
            **copy.deepcopy(dict(at or {})),
            **copy.deepcopy(dict(extra or {})),
        }
        stored = envelope if stored_status else {k: v for k, v in envelope.items() if k != "status"}
        self.log.events.append(stored)
        if envelope.get("visibility") != PENDING_BACKUP:
            self._track(stored)
        streamed: Json = struct(envelope)
        return streamed

    # --- the snapshot ---------------------------------------------------------

    def _track(self, envelope: Json) -> None:
        self.snapshot_version += 1
        kind, data = envelope["eventType"], envelope["data"]
        step = self.steps.get(envelope.get("step", {}).get("id", ""))
        entry = {key: envelope[key] for key in ("createdAt", "eventId", "sequence", "scope")}
        if kind == "step_started":
            coordinate = envelope["step"]
            self.steps[coordinate["id"]] = {
                **{key: value for key, value in coordinate.items() if value is not None},
                "status": "working",
                "startedAt": envelope["createdAt"],
                "candidates": [],
            }
        elif kind == "step_completed" and step is not None:
            step.update(status="completed", completedAt=envelope["createdAt"])
            step.update({key: copy.deepcopy(data[key]) for key in ("durationS", "conclusionField", "conclusion")})
        elif kind == "candidate_started" and step is not None:
            candidate = dict(envelope["candidate"], status="working", startedAt=envelope["createdAt"], steps=[])
            step["candidates"].append(candidate)
            self.active_candidates.append(candidate["runId"])
        elif kind == "candidate_completed" and step is not None:
            for candidate in step["candidates"]:
                if candidate["id"] == envelope["candidate"]["id"]:
                    candidate.update(status="completed", completedAt=envelope["createdAt"], failed=data["failed"])
            self.active_candidates.remove(envelope["candidate"]["runId"])
        elif kind == "input_required":
            # A question shows its envelope; a selection, which has none, its data.
            where = {"scope": envelope["scope"], "runId": envelope["step"]["runId"], "step": envelope["step"]}
            shown = envelope.get("input") or data
            self.status = "waiting_input"
            when = {"createdAt": entry["createdAt"], "eventId": entry["eventId"]}
            self.pending_input = copy.deepcopy({**shown, **when, **where})
            asked = {key: data[key] for key in ("kind", "options", "prompt")}
            history = {**entry, **where, "eventType": kind, "status": envelope["status"], "data": data, **asked}
            self.input_history.append(copy.deepcopy(history))
            if step is not None:
                step["status"] = "waiting_input"
        elif kind == "input_received":
            self.status, self.pending_input = "working", None
            if step is not None:
                step.update(status="working", inputReceived=copy.deepcopy(data))
        elif kind in ("permission_requested", "permission_resolved"):
            self._permission(envelope, entry)
        elif kind == "artifact_created":
            self.artifacts.append({**entry, **copy.deepcopy(data), "id": data["artifactId"]})
        elif kind == "candidate_selected":
            self.selected = {"candidateIndex": data["candidateIndex"], "candidateName": data["candidateName"]}
        elif kind == "pipeline_handoff_ready":
            facts = {key: data[key] for key in ("action", "outcome", "summary", "targetMode")}
            handoff = {**entry, "eventType": kind, "status": envelope["status"], "data": data, **facts}
            del handoff["scope"]
            handoff["visibility"] = envelope.get("visibility")
            self.handoff_history.append(copy.deepcopy(handoff))
            self.cleanup = copy.deepcopy(data["cleanup"])
        elif kind == "cleanup_started":
            self.cleanup = {"status": "running"}
        elif kind == "pipeline_completed":
            self.status = "completed"

    def _permission(self, envelope: Json, entry: Json) -> None:
        """``display.permissions``: one entry per ``id``; a resolution of a step
        permission has another id than its request, so both stay listed."""
        fields = envelope.get("permission") or envelope["data"]
        coordinates = {key: envelope[key] for key in ("step", "candidate", "candidateStep") if key in envelope}
        run_id = (envelope.get("candidateStep") or envelope["step"])["runId"]
        shown = {**entry, **copy.deepcopy(fields), **coordinates, "id": fields["permissionId"], "runId": run_id}
        self.permissions = [item for item in self.permissions if item["id"] != shown["id"]] + [shown]
        requested = envelope["eventType"] == "permission_requested"
        if envelope["scope"] == "step":
            self.status = "waiting_input" if requested else "working"

    def cancel(self) -> None:
        """The task was canceled: nothing is pending any more."""
        self.pending_input, self.script = None, None
        self.status = "canceled"

    def snapshot(self) -> Json:
        """The run as the state route describes it."""
        control: Json = {
            "stepNames": list(STEP_NAMES) if not self.request.cleanup_only else [],
            "totalSteps": len(STEPS) if not self.request.cleanup_only else 0,
            "userRequest": self.request.user_request,
            "inputHistory": copy.deepcopy(self.input_history),
            "activeCandidateRunIds": list(self.active_candidates),
            "handoffHistory": copy.deepcopy(self.handoff_history),
            **{key: [] for key in ("candidateRestarts", "interruptHistory", "rollbackHistory", "warningHistory")},
        }
        if self.selected is not None:
            control["selectedCandidate"] = dict(self.selected)
        display: Json = {
            "permissions": copy.deepcopy(self.permissions),
            "artifacts": copy.deepcopy(self.artifacts),
            **{key: [] for key in ("messages", "toolResults", "diagrams", "candidateDetails")},
        }
        handoff = self.handoff_history[-1] if self.handoff_history else None
        return {
            "schemaVersion": SNAPSHOT_SCHEMA_VERSION,
            "snapshotVersion": self.snapshot_version,
            "generatedAt": self.started_at,
            "pipelineRunId": self.ids.run_id,
            "pipelineName": self.request.name,
            "taskId": self.ids.task_id,
            "contextId": self.ids.context_id,
            "status": self.status,
            "lastSequence": self.log.last_sequence,
            "steps": copy.deepcopy(list(self.steps.values())),
            "pendingInput": copy.deepcopy(self.pending_input),
            "pendingTerminal": None,
            "normalHandoff": copy.deepcopy(handoff),
            "pendingNormalHandoff": None,
            "cleanup": {"history": [], "resources": [], "resourceCount": 0, **copy.deepcopy(self.cleanup)},
            "stacks": {"byId": {}, "current": None, "history": []},
            "control": control,
            "display": display,
        }

    def state_after(self, sequence: float) -> Json:
        """The body of ``GET /iac-code/pipeline/state?afterSequence=<sequence>``."""
        return {"snapshot": self.snapshot(), "events": copy.deepcopy(self.log.after(sequence))}


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
    """Wait (stream open) for the answer to side-band input *input_id* and put it in *box*."""

    input_id: str
    box: AnswerBox


@attrs.frozen
class AwaitFollower:
    """Wait up to *seconds* for a client to follow the task after a side-band answer."""

    seconds: float = FOLLOW_GRACE


PipelineStep = Step | SideInterrupt | AwaitAnswer | AwaitFollower
