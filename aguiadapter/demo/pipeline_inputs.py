"""The demo pipeline's pauses: the permissions, the question and the candidate
selection it asks, and the answers and acknowledgements it sends (pure)."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any


from aguiadapter.a2a.wire import ROLE_AGENT, WORKING
from aguiadapter.demo import scripts
from aguiadapter.demo.scripts import (
    Json,
    PendingInput,
    TurnContext,
)
from aguiadapter.demo.pipeline_state import (
    DEPLOY_DESCRIPTION,
    QUESTION_OPTIONS,
    QUESTION_PROMPT,
    SELECTION_PROMPT,
    CandidateAt,
    PipelineIds,
    PipelineRun,
    envelope_options,
    raw_options,
    selection_input_id,
    struct,
)


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


def requested_permission(pending: PendingInput, permission_id: str) -> Json:
    """The ``permission`` field of a ``permission_requested`` envelope."""
    skipped = ("schemaVersion", "kind", "requestTaskId", "contextId", "required", "scope", "subPipelineId")
    fields = {key: value for key, value in pending.envelope.items() if key not in skipped}
    return {**fields, "pending": True, "permissionId": permission_id}


def permission_resolution(pending: PendingInput, decision: str) -> Json:
    """The ``data`` of ``permission_resolved``."""
    fields = {"kind": "permission", "permissionId": pending.input_id, "decision": decision}
    return {**fields, "inputId": pending.input_id, "toolName": pending.tool_name, "pending": False}


def question_pending(ctx: TurnContext, ids: PipelineIds) -> tuple[PendingInput, Json]:
    """The clarifying question: its pending input (``input`` envelope) and the
    ``input_required`` data, which names the same inputId."""
    use_id, input_id = ids.tool_use_id("question"), ids.question_input_id
    options = [{"id": option_id, "label": label} for option_id, label in QUESTION_OPTIONS]
    envelope: Json = {"schemaVersion": 1, "kind": "ask_user_question", "requestTaskId": ctx.task_id}
    envelope.update(contextId=ctx.context_id, inputId=input_id, toolUseId=use_id, required=True)
    envelope.update(prompt=QUESTION_PROMPT, options=options, allowFreeText=True)
    kind = "ask_user_question"
    data: Json = {"kind": kind, "inputId": input_id, "toolUseId": use_id, "prompt": QUESTION_PROMPT}
    data.update(question=QUESTION_PROMPT, options=copy.deepcopy(options), allowFreeText=True, freeTextPrompt="")
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
    envelope.update(contextId=ctx.context_id, inputId=input_id, required=True, prompt=SELECTION_PROMPT)
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
    resolution = {**permission_resolution(pending, decision), "toolUseId": pending.tool_use_id}
    keys = ("toolName", "permissionId", "decision", "toolUseId", "pending", "inputId")
    shown = {key: resolution[key] for key in keys}
    at = run.side_at.pop(pending.input_id, {})
    envelope = run.publish(ctx, "permission_resolved", "candidate_step", resolution, at=at, extra={"permission": shown})
    return pipeline_update(ctx, envelope)


def pipeline_update(ctx: TurnContext, envelope: Json, state: str = WORKING, **iac: Any) -> Json:
    """A status update carrying one envelope (and nothing else but *iac*)."""
    return scripts.status_update(ctx, {"state": state}, {"pipeline": envelope, **iac}, session=False)


# --- the script ------------------------------------------------------------------
