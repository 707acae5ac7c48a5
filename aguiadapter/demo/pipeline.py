"""The scripted pipeline of the demo runtime (pure: no sockets, no tasks).

A user message whose ``metadata.iac_code.run_mode`` is ``"pipeline"`` (or that
sets ``cleanupOnly: true``) runs :func:`pipeline_script` instead of a text
behaviour. The script follows what a real ``iac-code a2a`` 0.16.0 sends for a
``selling`` pipeline (``tests/fixtures/a2a-pipeline/`` holds recordings of
it): five steps, the same event types and ``data`` shapes, the same pauses
and the same answers.

Each pipeline event is an envelope under ``metadata.iac_code.pipeline`` of a
status update whose metadata holds nothing else (the session id travels in
the envelope), or one of several under ``pipelineBatch.events``. Numbers are
floats on the stream (a proto Struct) and integers in the task's
:class:`PipelineLog`, which the runtime serves at ``GET /iac-code/pipeline/state``
with a snapshot of the run (:meth:`PipelineRun.snapshot`).

The pauses, and what answers them:

* a clarifying ``ask_user_question`` (only when the user's text starts with
  ``question`` or ``full``): INPUT_REQUIRED with the ``input`` envelope; a
  text answer;
* candidate B's ``write_file`` permission (``scope: "candidate_step"``; in a
  ``full`` run candidate A asks too, just before B, as in the recorded
  ``full`` run): the task stays WORKING and the stream open; a permission
  data part sent with ``SendMessage`` or ``SendStreamingMessage`` is
  acknowledged at once with a single ``permission_ack`` message and the
  pipeline goes on, to be followed with ``GetTask`` and ``SubscribeToTask``
  (``GetTask`` lists what waits in ``pendingPermissions`` without ``scope``
  and ``subPipelineId``);
* the candidate selection, asked once ``confirm_and_select`` has completed:
  INPUT_REQUIRED with the ``input`` envelope; a text answer naming a
  candidate; the same step then goes on and completes again;
* the deploy step's ``bash`` command (``scope: "step"``): INPUT_REQUIRED with
  the ``input`` envelope, then one more INPUT_REQUIRED without it
  (``backup_committed``); a permission data part, after which the stream runs
  to ``TASK_STATE_COMPLETED``.

A top-level pause ends the turn's stream but not the script: the generator is
kept on the :class:`PipelineRun` and resumed by the turn that carries the
answer (:meth:`PipelineRun.resume`). Every id a test may want to predict comes
from :class:`PipelineIds`; only ``createdAt`` (the clock) varies between runs.
"""

from __future__ import annotations

import copy
import hashlib
import json
import uuid
from collections.abc import Generator, Iterator, Mapping
from typing import Any, Final

import attrs

from aguiadapter.a2a.wire import COMPLETED, INPUT_REQUIRED, ROLE_AGENT, WORKING
from aguiadapter.demo import scripts
from aguiadapter.demo.scripts import (
    DENIED_RESULT,
    Emit,
    Interrupt,
    Json,
    PendingInput,
    Sleep,
    Step,
    ToolExecuted,
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
_QUESTION_PROMPT: Final = "Which environment is this service for?"
_QUESTION_OPTIONS: Final = (("env-test", "Test"), ("env-prod", "Production"))
_SELECTION_PROMPT: Final = "Which candidate should the demo deploy?"
_CLEANUP_UNAVAILABLE: Final = "Cleanup state unavailable. Inspect the session file and cloud resources manually."


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


def _template(plan: CandidatePlan) -> str:
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
        cls, ctx: TurnContext, request: PipelineRequest, previous: PipelineRun | None = None
    ) -> PipelineRun:
        """A new run with its script; a task's later runs share its log (sequences keep growing)."""
        ids = PipelineIds(ctx.task_id, ctx.context_id, previous.ids.run + 1 if previous else 1)
        run = cls(ids, request, _seconds(ctx.clock()))
        if previous is not None:
            run.log = previous.log
        run.script = pipeline_script(ctx, run)
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


# --- the inputs -----------------------------------------------------------------


def _permission_fields(ctx: TurnContext, input_id: str, use_id: str, tool_name: str, **fields: Any) -> Json:
    options = [{"id": "allow_once", "label": "Allow once"}, {"id": "deny", "label": "Deny"}]
    envelope: Json = {"schemaVersion": 1, "kind": "permission", "requestTaskId": ctx.task_id}
    envelope.update(contextId=ctx.context_id, inputId=input_id, toolUseId=use_id, toolName=tool_name, **fields)
    envelope.update(isReadOnly=False, options=options, language=ctx.language, required=True)
    return envelope


def write_permission(ctx: TurnContext, ids: PipelineIds, candidate: CandidateAt, tool_input: Json) -> PendingInput:
    """Candidate B's ``write_file`` permission (``scope: "candidate_step"``), as streamed."""
    use_id, path = ids.tool_use_id(f"{candidate.plan.letter}/write_file"), str(tool_input["path"])
    envelope = _permission_fields(
        ctx,
        ids.permission_input_id(f"{candidate.plan.letter}/write_file"),
        use_id,
        "write_file",
        title="Change a workspace file",
        purpose="Write a file needed for the requested infrastructure task.",
        effect="file_change",
        target=path,
        prompt="Change a workspace file Allow once?",
        safeSummary=_safe_summary("write_file", {"content": _fingerprint(str(tool_input["content"])), "path": path}),
        scope="candidate_step",
        subPipelineId=candidate.id,
    )
    return PendingInput("permission", envelope["inputId"], use_id, "write_file", tool_input, struct(envelope))


def bash_permission(ctx: TurnContext, ids: PipelineIds, tool_input: Json) -> PendingInput:
    """The deploy step's ``bash`` permission (``scope: "step"``), as streamed."""
    use_id, command = ids.tool_use_id("deploy/bash"), str(tool_input["command"])
    hidden = "sha256:" + hashlib.sha256(b"description").hexdigest()[:16]
    envelope = _permission_fields(
        ctx,
        ids.permission_input_id("deploy/bash"),
        use_id,
        "bash",
        title="Run a local shell command",
        purpose="Execute a local command needed for the requested infrastructure task.",
        effect="local_execution",
        target=f"the current local workspace; command: {command}",
        prompt="Run a local shell command Allow once?",
        safeSummary=_safe_summary("bash", {"command": command, hidden: _fingerprint(DEPLOY_DESCRIPTION)}),
        scope="step",
    )
    return PendingInput("permission", envelope["inputId"], use_id, "bash", tool_input, struct(envelope))


def pending_permission(pending: PendingInput) -> Json:
    """A side-band permission as ``GetTask`` lists it in ``pendingPermissions[]``: without
    ``scope`` and ``subPipelineId``."""
    return {key: value for key, value in pending.envelope.items() if key not in ("scope", "subPipelineId")}


def _fingerprint(text: str) -> Json:
    digest = "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]
    return {"fingerprint": digest, "length": len(text), "type": "str"}


def _safe_summary(tool_name: str, shown: Json) -> str:
    return f"{tool_name}: {json.dumps(shown, separators=(',', ':'), sort_keys=True)}"


def _requested(pending: PendingInput, permission_id: str) -> Json:
    """The ``permission`` field of a ``permission_requested`` envelope."""
    skipped = ("schemaVersion", "kind", "requestTaskId", "contextId", "required", "scope", "subPipelineId")
    fields = {key: value for key, value in pending.envelope.items() if key not in skipped}
    return {**fields, "pending": True, "permissionId": permission_id}


def _resolution(pending: PendingInput, decision: str) -> Json:
    """The ``data`` of ``permission_resolved``."""
    fields = {"kind": "permission", "permissionId": pending.input_id, "decision": decision}
    return {**fields, "inputId": pending.input_id, "toolName": pending.tool_name, "pending": False}


def question_pending(ctx: TurnContext, ids: PipelineIds) -> tuple[PendingInput, Json]:
    """The clarifying question: its pending input (``input`` envelope) and the
    ``input_required`` data, which names the same inputId."""
    use_id, input_id = ids.tool_use_id("question"), ids.question_input_id
    options = [{"id": option_id, "label": label} for option_id, label in _QUESTION_OPTIONS]
    envelope: Json = {"schemaVersion": 1, "kind": "ask_user_question", "requestTaskId": ctx.task_id}
    envelope.update(contextId=ctx.context_id, inputId=input_id, toolUseId=use_id, required=True)
    envelope.update(prompt=_QUESTION_PROMPT, options=options, allowFreeText=True)
    kind = "ask_user_question"
    data: Json = {"kind": kind, "inputId": input_id, "toolUseId": use_id, "prompt": _QUESTION_PROMPT}
    data.update(question=_QUESTION_PROMPT, options=copy.deepcopy(options), allowFreeText=True, freeTextPrompt="")
    return PendingInput(kind, input_id, use_id, kind, {"options": options}, struct(envelope)), data


def question_answer(pending: PendingInput, data: Json, text: str) -> Json:
    """The ``data`` of ``input_received`` for an answer to the question."""
    chosen = next((o for o in data["options"] if text.strip() in (o["id"], o["label"])), None)
    free_text = "" if chosen is not None else text
    answer: Json = {"kind": "ask_user_question", "inputId": pending.input_id, "toolUseId": pending.tool_use_id}
    answer.update(question=data["question"], options=copy.deepcopy(data["options"]), allowFreeText=True)
    answer.update(selectedId=chosen["id"] if chosen else "", selectedLabel=chosen["label"] if chosen else "")
    answer.update(freeText=free_text, freeTextLength=len(free_text), answerTextLength=len(text))
    return answer


def selection_pending(ctx: TurnContext, run: PipelineRun, event_id: str) -> PendingInput:
    """The ``candidate_selection`` input of the ``input_required`` event *event_id*."""
    input_id = selection_input_id(event_id)
    options = envelope_options(run.request.rich)
    envelope: Json = {"schemaVersion": 1, "kind": "candidate_selection", "requestTaskId": ctx.task_id}
    envelope.update(contextId=ctx.context_id, inputId=input_id, required=True, prompt=_SELECTION_PROMPT)
    envelope["options"] = options
    kind = "candidate_selection"
    return PendingInput(kind, input_id, "", kind, {"options": raw_options(run.request.rich)}, struct(envelope))


def selected_index(text: str, options: list[Json]) -> int | None:
    """Which option an answer picks: its exact name, or ``{"selected_candidate_index": n}``."""
    stripped = text.strip()
    try:
        decoded = json.loads(stripped)
    except ValueError:
        decoded = None
    if isinstance(decoded, dict):
        index = decoded.get("selected_candidate_index")
        if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < len(options):
            return index
        stripped = str(decoded.get("selected_candidate_name", ""))
    matches = [index for index, option in enumerate(options) if option["name"] == stripped]
    return matches[0] if len(matches) == 1 else None


def permission_ack(ctx: TurnContext, ids: PipelineIds, pending: PendingInput, decision: str) -> Json:
    """The single result that answers a side-band permission (``SendMessage`` or a stream)."""
    data = {"accepted": True, "kind": "permission_ack", "schemaVersion": 1.0, "toolUseId": pending.tool_use_id}
    data.update(decision=decision, inputId=pending.input_id)
    message: Json = {"messageId": ids.ack_message_id(pending.input_id), "contextId": ctx.context_id}
    message["taskId"] = ctx.task_id
    message.update(role=ROLE_AGENT, parts=[{"data": data, "mediaType": "application/json"}])
    return {"message": message}


def side_permission_resolved(ctx: TurnContext, run: PipelineRun, pending: PendingInput, decision: str) -> Json:
    """The WORKING update with ``permission_resolved``, published as the side-band answer is taken."""
    resolution = {**_resolution(pending, decision), "toolUseId": pending.tool_use_id}
    keys = ("toolName", "permissionId", "decision", "toolUseId", "pending", "inputId")
    shown = {key: resolution[key] for key in keys}
    at = run.side_at.pop(pending.input_id, {})
    envelope = run.publish(ctx, "permission_resolved", "candidate_step", resolution, at=at, extra={"permission": shown})
    return _update(ctx, envelope)


def _update(ctx: TurnContext, envelope: Json, state: str = WORKING, **iac: Any) -> Json:
    """A status update carrying one envelope (and nothing else but *iac*)."""
    return scripts.status_update(ctx, {"state": state}, {"pipeline": envelope, **iac}, session=False)


# --- the script ------------------------------------------------------------------


@attrs.frozen
class _Writer:
    """Builds a run's envelopes and the status updates that carry them."""

    ctx: TurnContext
    run: PipelineRun

    def event(self, kind: str, scope: str, data: Json | None = None, *, at: Mapping[str, Json] | None = None,
              status: str | None = "working", **extra: Any) -> Json:
        """An envelope; *at* holds its coordinates (step, candidate, candidateStep)."""
        return self.run.publish(self.ctx, kind, scope, data or {}, at=at, status=status, extra=extra)

    def emit(self, kind: str, scope: str, data: Json | None = None, *, at: Mapping[str, Json] | None = None,
             state: str = WORKING, status: str | None = "working", more: bool = False, **extra: Any) -> Emit:
        return self.send(self.event(kind, scope, data, at=at, status=status, **extra), state, more=more)

    def send(self, envelope: Json, state: str = WORKING, *, more: bool = False, **iac: Any) -> Emit:
        return Emit(_update(self.ctx, envelope, state, **iac), more=more)

    def batch(self, envelopes: list[Json]) -> Emit:
        batch = {"pipelineBatch": {"events": envelopes}}
        return Emit(scripts.status_update(self.ctx, {"state": WORKING}, batch, session=False))

    def backup_committed(self, committed: Json) -> Json:
        """The acknowledgement iac-code logs once a gated event is backed up (with
        the event's ``status`` on the stream only)."""
        ack = {"committedEventId": committed["eventId"], "committedEventType": committed["eventType"]}
        ack["committedSequence"] = int(committed["sequence"])
        status = committed["status"]
        return self.run.publish(self.ctx, "backup_committed", "pipeline", ack, status=status, stored_status=False)

    def step_started(self, spec: StepSpec) -> Emit:
        attempt = self.run.next_attempt()
        data = {"name": spec.id, "index": spec.index, "total": len(STEPS), "attempt": 1, "stepType": spec.type}
        data.update(uiMode=spec.ui_mode, active_attempt_id=attempt, transcript_id=f"transcript_{attempt}")
        return self.emit("step_started", "step", data, at={"step": step_coordinate(spec, opening=True)})

    def step_completed(self, spec: StepSpec, conclusion: Any, **more: Any) -> Emit:
        data = {"durationS": 0.1, "conclusionField": spec.conclusion_field, "conclusion": conclusion, **more}
        return self.emit("step_completed", "step", data, at={"step": step_coordinate(spec)})

    def message(self, scope: str, at: Mapping[str, Json], purpose: str, texts: list[str],
                thinking: str | None = None) -> Iterator[PipelineStep]:
        """One model reply: ``message_started``, thinking, text deltas, usage."""
        yield Sleep(EVENT_DELAY)
        yield self.emit("message_started", scope, {"messageId": self.run.ids.message_id(purpose)}, at=at)
        if thinking is not None:
            yield self.emit("thinking_delta", scope, {"type": "raw_thinking", "text": thinking}, at=at)
        for text in texts:
            yield self.emit("text_delta", scope, {"text": text}, at=at)
        yield self.usage(scope, at, len(" ".join(texts).split()))

    def usage(self, scope: str, at: Mapping[str, Json], output_tokens: int) -> Emit:
        data: Json = {"inputTokens": 100, "outputTokens": output_tokens, "totalTokens": 100 + output_tokens}
        data.update(cachedInputTokens=0, model="demo-script", provider="demo")
        return self.emit("usage", scope, data, at=at)

    def complete_step(self, scope: str, at: Mapping[str, Json], purpose: str, title: str,
                      conclusion: Json) -> Iterator[PipelineStep]:
        """The model submits the step's conclusion with the ``complete_step`` tool."""
        tool = {"toolName": "complete_step", "toolUseId": self.run.ids.tool_use_id(purpose)}
        yield self.emit("tool_started", scope, {**tool, "input": {"conclusion": conclusion}}, at=at)
        result = {"isError": False, "result": f"Step {title} completed. Conclusion submitted."}
        data = {**tool, "input": {"conclusion": conclusion}, **result, "normalizedConclusion": conclusion}
        yield self.emit("tool_result", scope, data, at=at)


def pipeline_script(ctx: TurnContext, run: PipelineRun) -> Iterator[PipelineStep]:
    """The whole pipeline (or the cleanup path), paused at each top-level input."""
    w = _Writer(ctx, run)
    if run.request.cleanup_only:
        yield from _cleanup(w)
        return
    data = {"pipelineType": run.request.name, "stepNames": list(STEP_NAMES), "totalSteps": len(STEPS)}
    yield w.emit("pipeline_started", "pipeline", {**data, "userRequest": run.request.user_request})
    yield from _intent(w)
    yield from _architecture(w)
    yield from _evaluate(w)
    chosen = yield from _select(w)
    yield from _deploy(w, chosen)


def _intent(w: _Writer) -> Iterator[PipelineStep]:
    at = {"step": step_coordinate(INTENT)}
    yield w.step_started(INTENT)
    choice = "not asked"
    if w.run.request.asks_question:
        yield from w.message("step", at, "intent/ask", ["One detail first: ", "which environment is this for?"])
        pending, data = question_pending(w.ctx, w.run.ids)
        question = {"question": _QUESTION_PROMPT, "allow_free_text": True, "options": data["options"]}
        yield w.emit("tool_started", "step", {"toolName": "ask_user_question", "toolUseId": pending.tool_use_id,
                                              "input": question}, at=at)
        shown = {**data, "required": True}
        required = w.event("input_required", "step", data, at=at, status="input_required", input=shown)
        yield Interrupt(pending, _update(w.ctx, required, INPUT_REQUIRED, input=pending.envelope))
        answer = question_answer(pending, data, w.run.take_answer())
        yield w.emit("input_received", "step", answer, at=at)
        choice = answer["selectedId"] or answer["freeText"]
    yield from w.message("step", at, "intent/reply", ["Reading your requirements: ", "a small web service."],
                         thinking="A small web service with a database; two designs fit.")
    conclusion: Json = {"user_message_summary": w.run.request.user_request, "clarification_choice": choice}
    conclusion.update(is_infra_intent=True, cloud_platform="alibaba_cloud", business_type="web")
    yield from w.complete_step("step", at, "intent/complete", INTENT.title, conclusion)
    yield w.step_completed(INTENT, conclusion)


def _architecture(w: _Writer) -> Iterator[PipelineStep]:
    at = {"step": step_coordinate(ARCHITECTURE)}
    yield w.step_started(ARCHITECTURE)
    yield from w.message("step", at, "architecture/reply", ["Two designs fit: ", "one classic, one serverless."])
    plans = [
        {"name": plan.name, "topology": plan.topology, "output_path": f"templates/{index + 1}-{plan.name}.yml"}
        for index, plan in enumerate(CANDIDATES)
    ]
    conclusion = {"candidates": plans}
    yield from w.complete_step("step", at, "architecture/complete", ARCHITECTURE.title, conclusion)
    yield w.step_completed(ARCHITECTURE, conclusion)


def _evaluate(w: _Writer) -> Iterator[PipelineStep]:
    """Both candidates start; A reads its workspace; B asks to write its template (a
    side-band permission) while A finishes; B goes on once answered. In a ``full`` run
    A asks to write its template too, right before B: two permissions wait at once."""
    ids, run = w.run.ids, w.run
    a, b = CandidateAt.of(ids, 0), CandidateAt.of(ids, 1)
    writers = (a, b) if run.request.both_write else (b,)
    yield w.step_started(EVALUATE)
    for candidate in (a, b):
        yield w.emit("candidate_started", "candidate", candidate.data(), at=candidate.at_start())
    for candidate in (a, b):
        attempt = run.next_attempt()
        data = candidate.data(stepId=CANDIDATE_STEP, stepIndex=0, active_attempt_id=attempt)
        data["transcript_id"] = f"transcript_{attempt}"
        yield w.emit("candidate_step_started", "candidate_step", data, at=candidate.at())
    for candidate in (a, b):
        message = {"messageId": ids.message_id(f"{candidate.plan.letter}/reply")}
        yield w.emit("message_started", "candidate_step", message, at=candidate.at())
    yield Sleep(EVENT_DELAY)
    pieces = (
        (a, "Candidate A: ECS behind SLB, "),
        (b, "Candidate B: serverless, "),
        (a, "with RDS MySQL "),
        (b, "Function Compute and Tablestore "),
        (a, "for steady traffic."),
        (b, "for spiky traffic."),
    )
    yield w.batch([w.event("text_delta", "candidate_step", {"text": text}, at=c.at()) for c, text in pieces])
    # Candidate A reads its workspace; the result is sent twice (a deliberate replay).
    tool_a = {"toolName": "list_files", "toolUseId": ids.tool_use_id("a/list_files")}
    yield w.emit("tool_started", "candidate_step", {**tool_a, "input": {"path": "."}}, at=a.at())
    yield ToolExecuted("list_files", tool_a["toolUseId"])
    listing = {**tool_a, "input": {"path": "."}, "isError": False, "result": "main.tf\nvariables.tf"}
    result = w.event("tool_result", "candidate_step", listing, at=a.at())
    yield w.send(result)
    yield w.send(result)
    yield w.emit("internal_debug", "pipeline", {"note": "demo: an event type clients do not know"})
    progress = {"stackName": "demo-candidate-a", "progress": 40}
    yield w.emit("stack_progress", "candidate", progress, at=a.at(with_step=False))
    yield Sleep(EVENT_DELAY)
    # The writers want to write their templates: side-band permissions, asked back to
    # back (a client that stops reading at the first learns of the others from GetTask).
    writes = [_TemplateWrite.of(w, candidate) for candidate in writers]
    for write in writes:
        yield w.emit("tool_started", "candidate_step", {**write.tool, "input": write.tool_input}, at=write.at)
    for write in writes:
        yield w.usage("candidate_step", write.at, 1)
    for write in writes:
        permission = _requested(write.pending, write.pending.input_id)
        requested = w.event("permission_requested", "candidate_step", dict(write.tool), at=write.at,
                            permission=permission)
        run.side_at[write.pending.input_id] = write.at
        yield SideInterrupt(write.pending, _update(w.ctx, requested, input=write.pending.envelope))
    if a not in writers:
        yield Sleep(EVENT_DELAY)
        yield from _candidate_done(w, a, "Template of candidate A is ready.")
    for write in writes:
        yield AwaitAnswer(write.pending.input_id, write.box)
    yield AwaitFollower()
    for write in writes:
        yield from write.finish(w)
    evaluated = [{"candidate": {"name": plan.name}, "failed": False} for plan in CANDIDATES]
    yield w.step_completed(EVALUATE, evaluated, candidatesCount=len(CANDIDATES))


@attrs.frozen
class _TemplateWrite:
    """A candidate's ``write_file`` of its template, which asks permission."""

    candidate: CandidateAt
    path: str
    tool_input: Json
    tool: Json
    pending: PendingInput
    box: AnswerBox

    @classmethod
    def of(cls, w: _Writer, candidate: CandidateAt) -> _TemplateWrite:
        letter, ids = candidate.plan.letter, w.run.ids
        path = f"templates/{candidate.index + 1}-{candidate.plan.name}.yml"
        tool_input = {"content": _template(candidate.plan), "path": path}
        tool = {"toolName": "write_file", "toolUseId": ids.tool_use_id(f"{letter}/write_file")}
        return cls(candidate, path, tool_input, tool, write_permission(w.ctx, ids, candidate, tool_input), AnswerBox())

    @property
    def at(self) -> Json:
        return self.candidate.at()

    def finish(self, w: _Writer) -> Iterator[PipelineStep]:
        """The write (or its denial), then the candidate completes."""
        name = self.candidate.plan.name
        if self.box.decision == "allow_once":
            yield ToolExecuted("write_file", self.pending.tool_use_id)
            content = str(self.tool_input["content"])
            wrote = f"Successfully wrote {content.count(chr(10))} lines to {w.ctx.cwd.rstrip('/')}/{self.path}"
            data = {**self.tool, "input": self.tool_input, "isError": False, "result": wrote}
            yield w.emit("tool_result", "candidate_step", data, at=self.at)
            yield from _artifact(w, self.candidate, self.path, content)
            yield from _candidate_done(w, self.candidate, f"Template of {name} is written.")
        else:
            data = {**self.tool, "input": self.tool_input, "isError": True, "result": DENIED_RESULT}
            yield w.emit("tool_result", "candidate_step", data, at=self.at)
            yield from _candidate_done(w, self.candidate, f"{name} has no template: writing it was denied.")


def _candidate_done(w: _Writer, candidate: CandidateAt, text: str) -> Iterator[PipelineStep]:
    letter = candidate.plan.letter
    yield from w.message("candidate_step", candidate.at(), f"{letter}/done", [text])
    conclusion = {"file_path": f"templates/{candidate.index + 1}-{candidate.plan.name}.yml", "region": "cn-hangzhou"}
    title = "Template generation"
    yield from w.complete_step("candidate_step", candidate.at(), f"{letter}/complete", title, conclusion)
    data = candidate.data(stepId=CANDIDATE_STEP, conclusionField="template", conclusion=conclusion)
    yield w.emit("candidate_step_completed", "candidate_step", data, at=candidate.at())
    done = candidate.data(failed=False, conclusions={"template": conclusion})
    done["step_conclusions"] = {CANDIDATE_STEP: conclusion}
    yield w.emit("candidate_completed", "candidate", done, at=candidate.at(with_step=False))


def _artifact(w: _Writer, candidate: CandidateAt, path: str, content: str) -> Iterator[PipelineStep]:
    """A template a candidate wrote, as an A2A artifact and an ``artifact_created`` event."""
    artifact_id, filename = w.run.ids.artifact_id(candidate.plan.letter), path.rsplit("/", 1)[-1]
    body = content.encode()
    uri = f"iac-code-artifact://{artifact_id}/{filename}"
    meta: Json = {"mediaType": "text/yaml", "uri": uri, "sha256": hashlib.sha256(body).hexdigest()}
    meta["byteSize"] = float(len(body))
    part = {"url": uri, "metadata": meta, "filename": filename, "mediaType": "text/yaml"}
    artifact = {"artifactId": artifact_id, "name": filename, "parts": [part], "metadata": dict(meta)}
    update = {"taskId": w.ctx.task_id, "contextId": w.ctx.context_id, "artifact": artifact, "lastChunk": True}
    yield Emit({"artifactUpdate": update})
    data = {**meta, "byteSize": len(body), "artifactId": artifact_id, "filename": filename, "source": "conclusion"}
    data.update(role="final", supersedesPath=path)
    data["dedupeKey"] = hashlib.sha256(f"{artifact_id}/{path}".encode()).hexdigest()
    data["supersedesKey"] = "sha256:" + hashlib.sha256(path.encode()).hexdigest()[:16]
    yield w.emit("artifact_created", "candidate_step", data, at=candidate.at(), artifact=struct(data))


def _select(w: _Writer) -> Generator[PipelineStep, None, CandidatePlan]:
    """``confirm_and_select`` completes, then asks; after the answer the same step
    goes on and completes again. An answer that names no candidate is asked again."""
    at, rich = {"step": step_coordinate(SELECT)}, w.run.request.rich
    yield w.step_started(SELECT)
    yield from w.message("step", at, "select/reply", ["Both candidates are ready. ", "Pick the one to deploy."])
    options = raw_options(rich)
    conclusion = {"user_prompt": _SELECTION_PROMPT, "options": options}
    yield from w.complete_step("step", at, "select/complete", SELECT.title, conclusion)
    yield w.step_completed(SELECT, conclusion)
    attempt = 0
    while True:
        attempt += 1
        data = {"stepId": SELECT.id, "kind": "candidate_selection", "prompt": _SELECTION_PROMPT, "options": options}
        required = w.event("input_required", "step", copy.deepcopy(data), at=at, status="input_required")
        pending = selection_pending(w.ctx, w.run, str(required["eventId"]))
        yield Interrupt(pending, _update(w.ctx, required, INPUT_REQUIRED, input=pending.envelope))
        text = w.run.take_answer()
        index = selected_index(text, options)
        received: Json = {"kind": "candidate_selection", "selectedValue": text, "userInputLength": len(text)}
        if index is not None:
            received.update(selectedIndex=index, selectedOption=copy.deepcopy(options[index]))
        yield w.emit("input_received", "step", received, at=at)
        if index is not None:
            break
        names = " or ".join(plan.name for plan in CANDIDATES)
        yield from w.message("step", at, f"select/again-{attempt}", [f"Which one? Answer {names}."])
    chosen = CANDIDATES[index]
    candidate = CandidateAt.of(w.run.ids, index)
    selected = {"candidateId": candidate.id, "candidateIndex": index, "candidateName": chosen.name}
    yield w.emit("candidate_selected", "step", selected, at=at)
    diagram = {"candidateId": candidate.id, "format": "mermaid", "diagram": chosen.diagram}
    yield w.emit("diagram_shown", "step", diagram, at=at)
    yield from w.message("step", at, "select/confirm", [f"{chosen.name} it is. ", "Handing it to the deploy step."])
    final: Json = {**conclusion, "user_input": text, "selected_candidate_name": chosen.name}
    final["selected_candidate_index"] = index
    yield from w.complete_step("step", at, "select/confirmed", SELECT.title, final)
    yield w.step_completed(SELECT, final)
    return chosen


def _deploy(w: _Writer, chosen: CandidatePlan) -> Iterator[PipelineStep]:
    """A mutating ``bash`` command asks permission (the step's own), then the pipeline ends."""
    at, ids, ctx = {"step": step_coordinate(DEPLOY)}, w.run.ids, w.ctx
    yield w.step_started(DEPLOY)
    yield from w.message("step", at, "deploy/reply", [f"Deploying {chosen.name}: ", "recording the attempt first."])
    tool_input = {"command": DEPLOY_COMMAND, "description": DEPLOY_DESCRIPTION}
    tool = {"toolName": "bash", "toolUseId": ids.tool_use_id("deploy/bash")}
    yield w.emit("tool_started", "step", {**tool, "input": tool_input}, at=at)
    yield w.usage("step", at, 1)
    pending = bash_permission(ctx, ids, tool_input)
    permission = _requested(pending, f"perm-{pending.tool_use_id}")
    # The request is logged twice (pending backup, then committed); only the committed one is sent.
    w.event("permission_requested", "step", dict(tool), at=at, status="input_required",
            permission=permission, visibility=PENDING_BACKUP)
    requested = w.event("permission_requested", "step", dict(tool), at=at, status="input_required",
                        permission=permission, visibility=COMMITTED)
    yield Interrupt(pending, _update(ctx, requested, INPUT_REQUIRED, input=pending.envelope), more=True)
    yield w.send(w.backup_committed(requested), INPUT_REQUIRED)
    decision = w.run.take_answer()
    yield scripts.input_received(ctx, pending)
    yield w.emit("permission_resolved", "step", {**_resolution(pending, decision), "toolUseId": pending.tool_use_id},
                 at=at)
    stack = f"demo-{chosen.name}"
    if decision == "allow_once":
        yield ToolExecuted("bash", pending.tool_use_id, DEPLOY_COMMAND)
        yield w.emit("tool_result", "step", {**tool, "input": tool_input, "isError": False, "result": "Exit code: 0"},
                     at=at)
        for progress in (50, 100):
            yield Sleep(EVENT_DELAY)
            yield w.emit("stack_progress", "step", {"stackName": stack, "progress": progress}, at=at)
        outcome, text = {"status": "deployed", "stackName": stack}, f"{chosen.name} is deployed as stack {stack}."
    else:
        yield w.emit("tool_result", "step", {**tool, "input": tool_input, "isError": True, "result": DENIED_RESULT},
                     at=at)
        outcome, text = {"status": "skipped", "reason": "the deploy command was denied"}, "Nothing was deployed."
    yield from w.message("step", at, "deploy/done", [text])
    yield from w.complete_step("step", at, "deploy/complete", DEPLOY.title, outcome)
    yield w.step_completed(DEPLOY, outcome)
    yield from _finish(w, {"totalSteps": len(STEPS)})


def _finish(w: _Writer, data: Json) -> Iterator[PipelineStep]:
    """``pipeline_completed`` and the hand-off back to normal chat, both gated on a
    backup: each is logged pending, then committed; the stream carries the committed
    completion, its ``backup_committed``, then the committed hand-off, all COMPLETED."""
    handoff: Json = {"action": "switch_to_normal", "targetMode": "normal", "outcome": "completed"}
    handoff.update(summary=f"[Pipeline Handoff Context]\nPipeline: {w.run.request.name}\nOutcome: completed")
    handoff["cleanup"] = {"status": "unavailable", "statusMessage": _CLEANUP_UNAVAILABLE}
    w.event("pipeline_completed", "pipeline", data, status="completed", visibility=PENDING_BACKUP)
    w.event("pipeline_handoff_ready", "pipeline", handoff, status="completed", visibility=PENDING_BACKUP)
    done = w.event("pipeline_completed", "pipeline", data, status="completed", visibility=COMMITTED)
    ready = w.event("pipeline_handoff_ready", "pipeline", handoff, status="completed", visibility=COMMITTED)
    done_ack = w.backup_committed(done)
    w.backup_committed(ready)  # logged only: iac-code does not stream the hand-off's acknowledgement
    yield w.send(done, COMPLETED, more=True)
    yield w.send(done_ack, COMPLETED, more=True)
    yield w.send(ready, COMPLETED)


def _cleanup(w: _Writer) -> Iterator[PipelineStep]:
    """``cleanupOnly``: delete the demo stacks, nothing else."""
    stacks = [f"demo-{plan.name}" for plan in CANDIDATES]
    yield w.emit("cleanup_started", "pipeline", {"stacks": stacks, "cleanupOnly": True})
    for index, stack in enumerate(stacks, start=1):
        yield Sleep(EVENT_DELAY)
        progress = {"stackName": stack, "progress": 100 * index // len(stacks), "cleanupStatus": "deleted"}
        yield w.emit("cleanup_progress", "pipeline", progress)
    yield w.emit("cleanup_completed", "pipeline", {"deletedStacks": len(stacks)}, status="completed")
    yield from _finish(w, {"totalSteps": 0, "cleanupOnly": True})
