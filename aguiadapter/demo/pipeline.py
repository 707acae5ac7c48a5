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
from collections.abc import Generator, Iterator, Mapping
from typing import Any

import attrs

from aguiadapter.a2a.wire import COMPLETED, INPUT_REQUIRED, WORKING
from aguiadapter.demo import scripts
from aguiadapter.demo.scripts import (
    DENIED_RESULT,
    Emit,
    Interrupt,
    Json,
    PendingInput,
    Sleep,
    ToolExecuted,
    TurnContext,
)
from aguiadapter.demo.pipeline_inputs import (
    bash_permission,
    pending_permission,
    permission_ack,
    permission_resolution,
    pipeline_update,
    question_answer,
    question_pending,
    requested_permission,
    selected_index,
    selection_pending,
    side_permission_resolved,
    write_permission,
)
from aguiadapter.demo.pipeline_state import (
    ARCHITECTURE,
    CANDIDATES,
    CANDIDATE_STEP,
    CLEANUP_UNAVAILABLE,
    COMMITTED,
    DEPLOY,
    DEPLOY_COMMAND,
    DEPLOY_DESCRIPTION,
    EVALUATE,
    EVENT_DELAY,
    INTENT,
    PENDING_BACKUP,
    PIPELINE_NAMES,
    QUESTION_PROMPT,
    SELECT,
    SELECTION_PROMPT,
    STEPS,
    STEP_NAMES,
    AnswerBox,
    AwaitAnswer,
    AwaitFollower,
    CandidateAt,
    CandidatePlan,
    PipelineIds,
    PipelineRun,
    PipelineStep,
    SideInterrupt,
    StepSpec,
    pipeline_request,
    raw_options,
    selection_input_id,
    step_coordinate,
    struct,
    template_of,
)


#: What the agent and the tests take from here (the script's parts live beside it).
__all__ = [
    "DEPLOY_COMMAND",
    "PIPELINE_NAMES",
    "AwaitAnswer",
    "AwaitFollower",
    "PipelineIds",
    "PipelineRun",
    "PipelineStep",
    "SideInterrupt",
    "pending_permission",
    "permission_ack",
    "pipeline_request",
    "pipeline_script",
    "selection_input_id",
    "side_permission_resolved",
]


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
        return Emit(pipeline_update(self.ctx, envelope, state, **iac), more=more)

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
        question = {"question": QUESTION_PROMPT, "allow_free_text": True, "options": data["options"]}
        yield w.emit("tool_started", "step", {"toolName": "ask_user_question", "toolUseId": pending.tool_use_id,
                                              "input": question}, at=at)
        shown = {**data, "required": True}
        required = w.event("input_required", "step", data, at=at, status="input_required", input=shown)
        yield Interrupt(pending, pipeline_update(w.ctx, required, INPUT_REQUIRED, input=pending.envelope))
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
        permission = requested_permission(write.pending, write.pending.input_id)
        requested = w.event("permission_requested", "candidate_step", dict(write.tool), at=write.at,
                            permission=permission)
        run.side_at[write.pending.input_id] = write.at
        yield SideInterrupt(write.pending, pipeline_update(w.ctx, requested, input=write.pending.envelope))
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
        tool_input = {"content": template_of(candidate.plan), "path": path}
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
    conclusion = {"user_prompt": SELECTION_PROMPT, "options": options}
    yield from w.complete_step("step", at, "select/complete", SELECT.title, conclusion)
    yield w.step_completed(SELECT, conclusion)
    attempt = 0
    while True:
        attempt += 1
        data = {"stepId": SELECT.id, "kind": "candidate_selection", "prompt": SELECTION_PROMPT, "options": options}
        required = w.event("input_required", "step", copy.deepcopy(data), at=at, status="input_required")
        pending = selection_pending(w.ctx, w.run, str(required["eventId"]))
        yield Interrupt(pending, pipeline_update(w.ctx, required, INPUT_REQUIRED, input=pending.envelope))
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
    permission = requested_permission(pending, f"perm-{pending.tool_use_id}")
    # The request is logged twice (pending backup, then committed); only the committed one is sent.
    w.event("permission_requested", "step", dict(tool), at=at, status="input_required",
            permission=permission, visibility=PENDING_BACKUP)
    requested = w.event("permission_requested", "step", dict(tool), at=at, status="input_required",
                        permission=permission, visibility=COMMITTED)
    yield Interrupt(pending, pipeline_update(ctx, requested, INPUT_REQUIRED, input=pending.envelope), more=True)
    yield w.send(w.backup_committed(requested), INPUT_REQUIRED)
    decision = w.run.take_answer()
    yield scripts.input_received(ctx, pending)
    resolved = {**permission_resolution(pending, decision), "toolUseId": pending.tool_use_id}
    yield w.emit("permission_resolved", "step", resolved, at=at)
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
    handoff["cleanup"] = {"status": "unavailable", "statusMessage": CLEANUP_UNAVAILABLE}
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
