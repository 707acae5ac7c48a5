"""The real `iac-code a2a` runs the recorded `selling` pipelines to
`pipeline_completed`, driven by the scripted model and answered at every pause
the way the recorded client did (raw A2A JSON-RPC, no adapter involved).

Besides proving the harness, these tests pin the runtime facts the adapter has
to live with (tests/fixtures/a2a-pipeline/README.md): the envelope-less
INPUT_REQUIRED after a step permission, `candidate_step` scopes that GetTask
drops, `permission_ack` acknowledgements, and `confirm_and_select` completing
before the selection and again after it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from tests.support.iac_runtime import (
    INPUT_REQUIRED,
    WORKING,
    IacRuntime,
    iac_code,
    permission_answer,
    pipeline_event,
    required_input,
    status_updates,
    task_state,
    user_message,
)
from tests.support.model_stub import ModelStub
from tests.support.pipeline_script import (
    CANDIDATE_PERMISSIONS,
    DEPLOY_MARKER_FILE,
    QUESTION,
    SELECTION,
    STEP_PERMISSION,
    PipelineScenario,
    deploy_count,
    load_script,
    scenario,
)

COMPLETED = "TASK_STATE_COMPLETED"
STREAM_TIMEOUT = 60.0  # a whole pipeline segment, several model calls


# ---------------------------------------------------------------- one pipeline run


@dataclass
class PipelineRun:
    """One scenario on one task: the ids, and every stream read so far."""

    runtime: IacRuntime
    scenario: PipelineScenario
    cwd: Path
    context_id: str = field(default_factory=lambda: f"ctx-{uuid.uuid4().hex}")
    task_id: str = ""
    session_id: str = ""

    @property
    def options(self) -> dict[str, Any]:
        return self.scenario.a2a_options(self.cwd)

    async def start(self) -> list[dict[str, Any]]:
        message = user_message(self.scenario.prompt, self.context_id, self.cwd, options=self.options)
        responses = await self.runtime.send_streaming(message, STREAM_TIMEOUT)
        self.task_id = responses[0]["result"]["task"]["id"]
        # The session id rides on pipeline events (and on GetTask's metadata).
        self.session_id = next(e["iacCodeSessionId"] for e in events(responses) if "iacCodeSessionId" in e)
        return responses

    async def restore(self) -> None:
        """What the recorded client did before each answer; the session is live here."""
        restored = await self.runtime.ensure_restored(self.cwd, self.session_id, self.task_id)
        assert restored == {"status": "current"}

    def text(self, text: str) -> dict[str, Any]:
        return user_message(text, self.context_id, self.cwd, task_id=self.task_id, options=self.options)

    def permission(self, envelope: dict[str, Any]) -> dict[str, Any]:
        return permission_answer(envelope, self.scenario.decision, self.cwd, options=self.options)

    def stream(self, message: dict[str, Any]) -> AsyncGenerator[dict[str, Any], None]:
        return self.runtime.stream(message, STREAM_TIMEOUT)


def events(responses: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for u in status_updates(responses) if (e := pipeline_event(u))]


def event_types(responses: list[dict[str, Any]], step: str | None = None) -> list[str]:
    return [e["eventType"] for e in events(responses) if step is None or e.get("step", {}).get("id") == step]


def inputs(responses: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for u in status_updates(responses) if (e := required_input(u))]


def assert_paused_on(responses: list[dict[str, Any]], pause_kind: str) -> dict[str, Any]:
    """The stream closed on INPUT_REQUIRED whose envelope is of this kind; the envelope."""
    last = status_updates(responses)[-1]
    envelope = required_input(last)
    assert task_state(last) == INPUT_REQUIRED and envelope is not None, last
    assert envelope["kind"] == pause_kind
    return envelope


def model_replies(stub: ModelStub, since: int) -> list[str]:
    return [call.reply for call in stub.calls[since:]]


# ---------------------------------------------------------------- the pauses


async def check_pending_input(run: PipelineRun, envelope: dict[str, Any]) -> None:
    """A question or a selection is also the pipeline state route's ``pendingInput``
    (a selection's has no inputId: its envelope's is ``input-<eventId>``)."""
    snapshot = (await run.runtime.pipeline_state(run.task_id))["snapshot"]
    assert snapshot["status"] == "waiting_input"
    pending = snapshot["pendingInput"]
    assert pending["kind"] == envelope["kind"]
    assert envelope["inputId"] in (pending.get("inputId"), f"input-{pending['eventId']}")


async def answer_question(run: PipelineRun, question: dict[str, Any]) -> list[dict[str, Any]]:
    """Answer the clarifying question; read the stream until both candidates ask
    to write their template (the task stays WORKING, so the stream stays open),
    then leave it, as the recorded client did."""
    await run.restore()
    assert run.scenario.pause_for(question) is QUESTION
    await check_pending_input(run, question)
    stream = run.stream(run.text(run.scenario.text_answer(question)))
    responses: list[dict[str, Any]] = []
    async for response in stream:
        responses.append(response)
        if len(inputs(responses)) == CANDIDATE_PERMISSIONS.count:
            break
    await stream.aclose()
    return responses


async def answer_candidate_permissions(run: PipelineRun, announced: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Both sub-pipeline permissions: GetTask, one SendMessage each, then follow the task."""
    await run.restore()
    task = await run.runtime.get_task(run.task_id)
    assert task_state(task) == WORKING
    pending = iac_code(task)["pendingPermissions"]
    assert [p["inputId"] for p in pending] == [e["inputId"] for e in announced]
    # Announced again by GetTask, they lose what the stream said about them.
    assert not any("scope" in p or "subPipelineId" in p for p in pending)
    assert not (run.cwd / "templates").exists()

    for entry in pending:
        result = await run.runtime.send_message(run.permission(entry))
        [part] = result["message"]["parts"]
        assert part["data"]["kind"] == "permission_ack" and part["data"]["accepted"] is True
        assert part["data"]["inputId"] == entry["inputId"]
    return await run.runtime.follow_task(run.task_id, STREAM_TIMEOUT)


async def answer_selection(run: PipelineRun, selection: dict[str, Any]) -> list[dict[str, Any]]:
    await run.restore()
    assert run.scenario.pause_for(selection) is SELECTION
    await check_pending_input(run, selection)
    assert [o["id"] for o in selection["options"]] == ["0", "1"]
    label = run.scenario.text_answer(selection)
    assert label == "single-ecs"
    return await run.runtime.send_streaming(run.text(label), STREAM_TIMEOUT)


async def check_step_permission_waits(run: PipelineRun, responses: list[dict[str, Any]]) -> dict[str, Any]:
    """The deploy step's permission: the envelope, then an INPUT_REQUIRED without
    one; GetTask shows none either, yet the permission waits and nothing ran."""
    *_, asked, after = status_updates(responses)
    envelope = required_input(asked)
    assert envelope is not None and run.scenario.pause_for(envelope) is STEP_PERMISSION
    assert task_state(asked) == INPUT_REQUIRED
    assert "subPipelineId" not in envelope and envelope["requestTaskId"] == run.task_id
    assert "echo pipeline-deploy-marker" in envelope["target"]

    assert task_state(after) == INPUT_REQUIRED and "input" not in iac_code(after)
    backup = pipeline_event(after)
    assert backup is not None and backup["eventType"] == "backup_committed"
    assert backup["data"]["committedEventType"] == "permission_requested"

    await run.restore()
    task = await run.runtime.get_task(run.task_id)
    assert task_state(task) == INPUT_REQUIRED
    assert "input" not in iac_code(task) and not iac_code(task).get("pendingPermissions")

    state = await run.runtime.pipeline_state(run.task_id)
    snapshot = state["snapshot"]
    assert snapshot["status"] == "waiting_input"
    assert snapshot["pendingInput"] is None  # a permission is only in display.permissions
    waiting = [p for p in snapshot["display"]["permissions"] if p["inputId"] == envelope["inputId"]]
    assert [(p["pending"], p["scope"], p["toolName"]) for p in waiting] == [(True, "step", "bash")]
    assert waiting[0]["id"] == f"perm-{envelope['toolUseId']}"
    assert deploy_count(run.cwd) == 0  # the missing envelope is not an answer
    return envelope


async def answer_step_permission(run: PipelineRun, envelope: dict[str, Any]) -> list[dict[str, Any]]:
    responses = await run.runtime.send_streaming(run.permission(envelope), STREAM_TIMEOUT)
    first = status_updates(responses)[0]
    assert iac_code(first)["inputReceived"]["inputId"] == envelope["inputId"]
    resolved = next(e for e in events(responses) if e["eventType"] == "permission_resolved")
    assert resolved["step"]["id"] == "deploying"
    return responses


async def check_completed(run: PipelineRun, responses: list[dict[str, Any]], permission: dict[str, Any]) -> None:
    updates = status_updates(responses)
    assert task_state(updates[-1]) == COMPLETED
    assert "pipeline_completed" in event_types(responses)
    assert event_types(responses, "deploying")[-1] == "step_completed"
    # Only the stream and the pipeline state route say so: GetTask keeps the
    # deploy permission's pause (INPUT_REQUIRED, no input, its backup_committed
    # event), so a GetTask alone cannot tell a finished pipeline from a pause.
    task = await run.runtime.get_task(run.task_id)
    assert task_state(task) == INPUT_REQUIRED and required_input(task) is None
    assert iac_code(task)["pipeline"]["eventType"] == "backup_committed"
    snapshot = (await run.runtime.pipeline_state(run.task_id))["snapshot"]
    assert snapshot["status"] == "completed"
    # The pending entry of the deploy permission stays pending: true; a second
    # entry, under the inputId, records the answer.
    entries = [(p["id"], p["pending"]) for p in snapshot["display"]["permissions"] if p["inputId"] == permission["inputId"]]
    assert entries == [(f"perm-{permission['toolUseId']}", True), (permission["inputId"], False)]
    # The permitted command ran, exactly once.
    assert (run.cwd / DEPLOY_MARKER_FILE).read_text() == "pipeline-deploy-marker\n"
    assert deploy_count(run.cwd) == 1


def check_selection_step_completes_twice(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> None:
    """confirm_and_select completes before the selection is asked, then goes on
    after the answer (text, a tool call) and completes again, never restarted."""
    asked = event_types(before, "confirm_and_select")
    assert asked[0] == "step_started" and asked[-2:] == ["step_completed", "input_required"]
    resumed = event_types(after, "confirm_and_select")
    assert resumed[0] == "input_received" and resumed[-1] == "step_completed"
    assert "step_started" not in resumed and "text_delta" in resumed and "tool_result" in resumed


async def run_from_selection(run: PipelineRun, asked: list[dict[str, Any]], selection: dict[str, Any]) -> None:
    """The common end of every scenario: the selection, then the deploy
    step's permission, then ``pipeline_completed``. ``asked`` is the stream
    that paused on the selection."""
    selected = await answer_selection(run, selection)
    check_selection_step_completes_twice(asked, selected)
    envelope = await check_step_permission_waits(run, selected)
    await check_completed(run, await answer_step_permission(run, envelope), envelope)


def assert_every_reply_scripted(replies: list[str]) -> None:
    assert replies and not [r for r in replies if r == "fallback" or r.startswith("exhausted")], replies


# ---------------------------------------------------------------- the scenarios


async def test_full_pipeline_runs_to_completion_through_question_candidate_permissions_selection_and_deploy(
    iac_runtime: IacRuntime, model_stub: ModelStub, iac_workspace: Path
) -> None:
    plan = scenario("full", load_script())
    run = PipelineRun(iac_runtime, plan, iac_workspace)
    since = len(model_stub.calls)
    with model_stub.use_pipeline_script(plan.script, plan.name):
        first = await run.start()
        question = assert_paused_on(first, "ask_user_question")
        assert question["inputId"] == f"ask-{question['toolUseId']}"

        announced = inputs(await answer_question(run, question))
        assert [run.scenario.pause_for(e) for e in announced] == [CANDIDATE_PERMISSIONS] * 2
        assert sorted(e["target"] for e in announced) == list(CANDIDATE_PERMISSIONS.targets)
        assert len({e["subPipelineId"] for e in announced}) == 2

        followed = await answer_candidate_permissions(run, announced)
        selection = assert_paused_on(followed, "candidate_selection")
        for slot, name in ((1, "single-ecs"), (2, "ecs-with-slb")):
            written = (iac_workspace / "templates" / f"{slot}-{name}.yml").read_text()
            assert f"Description: Candidate {slot} (offline acceptance fixture)" in written

        await run_from_selection(run, followed, selection)

    replies = model_replies(model_stub, since)
    assert "意图解析[1]" in replies and replies.count("模板生成[1]") == 2  # question answered, files written
    assert_every_reply_scripted(replies)


async def test_direct_pipeline_runs_to_completion_through_selection_and_deploy_permission(
    iac_runtime: IacRuntime, model_stub: ModelStub, iac_workspace: Path
) -> None:
    plan = scenario("direct", load_script())
    run = PipelineRun(iac_runtime, plan, iac_workspace)
    since = len(model_stub.calls)
    with model_stub.use_pipeline_script(plan.script, plan.name):
        first = await run.start()
        assert inputs(first)[:-1] == []  # nothing asked before the selection
        selection = assert_paused_on(first, "candidate_selection")
        assert {"architectureDiagram", "totalMonthlyCost", "costItems"}.isdisjoint(selection["options"][0])

        await run_from_selection(run, first, selection)

    assert not (iac_workspace / "templates").exists()  # the candidates wrote no file
    replies = model_replies(model_stub, since)
    assert "方案确认与选择/case0[0]" in replies
    assert_every_reply_scripted(replies)


async def test_rich_pipeline_shows_rich_candidates_and_runs_to_completion(
    iac_runtime: IacRuntime, model_stub: ModelStub, iac_workspace: Path
) -> None:
    plan = scenario("rich", load_script())
    assert (plan.candidate_presentation, plan.runtime_candidate_presentation) == ("rich", "rich-v1")
    run = PipelineRun(iac_runtime, plan, iac_workspace)
    since = len(model_stub.calls)
    with model_stub.use_pipeline_script(plan.script, plan.name):
        first = await run.start()
        selection = assert_paused_on(first, "candidate_selection")
        single = selection["options"][0]
        assert single["label"] == "single-ecs" and single["totalMonthlyCost"] == "询价失败"
        assert single["architectureDiagram"].startswith("flowchart LR")
        assert single["costItems"] == [{"name": "ECS", "spec": "ecs.t6-c1m1.large", "monthlyCost": "询价失败"}]

        await run_from_selection(run, first, selection)

    # The runtime took the rich step prompt: the rich-v1 value reached it.
    replies = model_replies(model_stub, since)
    assert "方案确认与选择（富展示）[0]" in replies
    assert_every_reply_scripted(replies)


async def test_a_streamed_answer_to_a_sub_pipeline_permission_is_only_an_acknowledgement(
    iac_runtime: IacRuntime, model_stub: ModelStub, iac_workspace: Path
) -> None:
    """SendStreamingMessage with a candidate's permission answer returns one
    `permission_ack` message and closes; the pipeline is not over: it goes on
    to the candidate selection."""
    plan = scenario("full", load_script())
    run = PipelineRun(iac_runtime, plan, iac_workspace)
    with model_stub.use_pipeline_script(plan.script, plan.name):
        question = assert_paused_on(await run.start(), "ask_user_question")
        announced = inputs(await answer_question(run, question))

        for envelope in announced:
            acknowledged = await iac_runtime.send_streaming(run.permission(envelope), STREAM_TIMEOUT)
            [only] = acknowledged
            [part] = only["result"]["message"]["parts"]
            assert part["data"]["kind"] == "permission_ack" and part["data"]["inputId"] == envelope["inputId"]

        followed = await iac_runtime.follow_task(run.task_id, STREAM_TIMEOUT)
        assert_paused_on(followed, "candidate_selection")
        canceled = await iac_runtime.rpc("CancelTask", {"id": run.task_id})
        assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED"


# ---------------------------------------------------------------- the stub's script rules


async def test_stub_answers_outside_the_script_with_fallback_and_past_the_end_with_the_last_text(
    model_stub: ModelStub,
) -> None:
    """The rules the script documents for requests it does not cover."""
    plan = scenario("full", load_script())
    deploying = [{"role": "system", "content": "# 步骤：部署\n..."}, {"role": "user", "content": "go"}]
    past_end = deploying + [{"role": "assistant", "content": "x"}, {"role": "tool", "content": "y"}] * 5
    planning = [{"role": "system", "content": "# 步骤：架构规划\n"}, {"role": "user", "content": "go"}]
    planning_past_end = [*planning, {"role": "assistant", "content": "x"}, {"role": "user", "content": "again"}]
    with model_stub.use_pipeline_script(plan.script, plan.name):
        assert await _stub_text(model_stub, [{"role": "user", "content": "hello"}]) == plan.script["fallback"]["text"]
        assert await _stub_text(model_stub, past_end) == "部署步骤已结束。"
        assert await _stub_text(model_stub, planning_past_end) == plan.script["exhausted"]["text"]
    assert model_replies(model_stub, len(model_stub.calls) - 3) == ["fallback", "部署[5]+repeat", "exhausted:架构规划"]
    # Once the script is stopped the plain stub is back.
    assert await _stub_text(model_stub, planning) == "Hello from the scripted model."


async def _stub_text(stub: ModelStub, messages: list[dict[str, Any]]) -> str:
    body = {"model": "stub-model", "stream": True, "messages": messages}
    text = []
    async with aiohttp.ClientSession() as session, session.post(stub.url + "/chat/completions", json=body) as reply:
        async for raw in reply.content:
            line = raw.decode().strip()
            if line.startswith("data: {"):
                for choice in json.loads(line[6:])["choices"]:
                    text.append(choice["delta"].get("content") or "")
    return "".join(text)
