"""Our adapter through the recorded pipelines of the real runtime.

``tests/fixtures/a2a-pipeline/`` holds three complete ``selling`` pipelines
of the real ``iac-code a2a`` 0.16.0; ``tests/support/replay_runtime.py``
serves the runtime's side of each to our adapter on a real socket (its
docstring says how replies are chosen and what it refuses). A client runs
each pipeline as a person would, as ``tests/e2e/test_pipeline_e2e.py`` does
against the live runtime: one user turn, then one resume per pause answered
as the recorded client answered, until ``pipeline_completed``. Then:

* every pause the runtime raised reaches the client once, with its kind,
  scope and options (the two candidates' permissions in one pause);
* every answer reaches the runtime once, in the form the recorded client
  sent it (the method, the permission's data part, the option's label, the
  task and context);
* every run is a valid AG-UI stream, balanced, with no empty step and no
  pipeline text, reasoning or tool call outside a step, one
  ``ACTIVITY_SNAPSHOT`` per resumed run, every piece of text the runtime
  streamed shown once, and ``pipeline_completed`` once, at the end.

The same holds when the adapter restarts (same state folder) before every
resume, and when a client sends each answer twice.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import attrs
import pytest
from ag_ui_validate.pytest_plugin import assert_valid_agui

from tests.support.adapter import RunningAdapter, run_body, start_adapter
from tests.support.agui import STEP_WORK, assert_content_inside_steps, assert_no_empty_step, check_stream, interrupts_of
from tests.support.pipeline_recording import SCENARIOS, Recording, recording
from tests.support.pipeline_script import PipelineScenario, scenario
from tests.support.replay_runtime import ReplayRuntime

PIPELINE_EVENT = "iac-code.pipeline.v1"
#: What the recorded client asked for besides the pipeline itself.
RECORDED_OPTIONS = {"preferredLanguage": "en", "cleanupOnly": False}
#: Only a run that hangs (a stream read past what the recording holds) gets near this.
RUN_DEADLINE_SECONDS = 60.0


@attrs.define
class Adapters:
    """Our adapter in front of the replay, restartable on the same state folder."""

    state_dir: Path
    replay: ReplayRuntime
    allowed: str
    current: RunningAdapter | None = None

    async def start(self) -> RunningAdapter:
        self.current = await start_adapter(self.state_dir, self.replay.url, allowed_cwds=(self.allowed,))
        return self.current

    async def restart(self) -> None:
        await self.close()
        await self.start()

    async def close(self) -> None:
        if self.current is not None:
            running, self.current = self.current, None
            await running.close()


@pytest.fixture(params=SCENARIOS)
def name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def replay(name: str) -> Any:
    runtime = ReplayRuntime(recording(name))
    await runtime.start()
    try:
        yield runtime
    finally:
        await runtime.close()


@pytest.fixture
async def adapters(tmp_path: Path, replay: ReplayRuntime) -> Any:
    running = Adapters(tmp_path / "state", replay, str(tmp_path / "workspaces"))
    await running.start()
    try:
        yield running
    finally:
        await running.close()


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    path = tmp_path / "workspaces" / "pipeline"
    path.mkdir(parents=True)
    return path


class Client:
    """A person at an AG-UI client: posts a run, reads it to its end."""

    def __init__(self, adapters: Adapters, plan: PipelineScenario, cwd: Path) -> None:
        self.adapters = adapters
        self.replay = adapters.replay
        self.plan = plan
        self.cwd = cwd
        self.thread_id = f"replay-{plan.name}"
        self.runs: list[list[dict[str, Any]]] = []

    def body(self, text: str | None) -> dict[str, Any]:
        return run_body(thread_id=self.thread_id, text=text, cwd=str(self.cwd),
                        **self.plan.agui_options(), **RECORDED_OPTIONS)

    async def start(self) -> list[dict[str, Any]]:
        return await self._run(self.body(self.plan.prompt))

    async def answer(self, interrupts: list[dict[str, Any]], *, retry: bool = False) -> list[dict[str, Any]]:
        body = self.body(None)
        body["resume"] = self.plan.resume(interrupts)
        events = await self._run(body)
        if retry:
            # The same answers again, as a client that never saw the reply would send them.
            assert self.adapters.current is not None
            again = await self.adapters.current.run({**body, "runId": f"{body['runId']}-retry"})
            assert again.status == 409 and again.json()["error"]["code"] == "RESUME_ALREADY_APPLIED", again.body
        return events

    async def _run(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        assert self.adapters.current is not None
        try:
            reply = await asyncio.wait_for(self.adapters.current.run(body), RUN_DEADLINE_SECONDS)
        except asyncio.TimeoutError:
            pytest.fail(f"run {len(self.runs) + 1} never ended; the replay saw:\n{self.replay.describe()}")
        assert not self.replay.refusals, (
            f"run {len(self.runs) + 1}: the recorded runtime refused:\n" + "\n".join(self.replay.refusals)
            + f"\nevery request:\n{self.replay.describe()}"
        )
        assert reply.status == 200, reply.body
        events = check_stream(reply.body)
        assert_valid_agui(events, max_warnings=0)
        self.runs.append(events)
        return events


async def run_to_completion(client: Client, *, restart: bool, retry: bool = False) -> list[int]:
    """Answer every pause until the pipeline ends, restarting the adapter
    before each resume or sending each answer twice if asked; where in
    :attr:`ReplayRuntime.seen` each adapter process began."""
    pauses = client.replay.recording.pauses
    began = [0]
    events = await client.start()
    while interrupts := interrupts_of(events):
        number = len(client.runs)
        assert number <= len(pauses), f"run {number} pauses for {[i['id'] for i in interrupts]}: the recording does not"
        expected = sorted(item.input_id for item in pauses[number - 1])
        assert sorted(i["id"] for i in interrupts) == expected, f"run {number}: the pause's inputs, all at once"
        if restart:
            await client.adapters.restart()
            began.append(len(client.replay.seen))
        events = await client.answer(interrupts, retry=retry)
    return began


def judge_pauses(client: Client) -> None:
    """Each recorded pause reached the client once, in order, with what the runtime said of it."""
    recorded: Recording = client.replay.recording
    assert len(client.runs) == len(recorded.pauses) + 1, "one run per pause, and the last one ends the pipeline"
    for number, events in enumerate(client.runs[:-1], 1):
        for interrupt in interrupts_of(events):
            asked = recorded.inputs[interrupt["id"]]
            metadata = interrupt["metadata"]
            assert metadata["kind"] == asked.kind, interrupt
            assert metadata.get("scope") == asked.scope, f"run {number}: scope of {asked.input_id}"
            assert metadata.get("subPipelineId") == asked.sub_pipeline_id, f"run {number}: {asked.input_id}"
            assert metadata.get("options") == client.replay.learned.ours(asked.options), interrupt
            assert interrupt.get("toolCallId") == asked.tool_use_id, interrupt
    assert client.runs[-1][-1]["outcome"] == {"type": "success"}


def judge_answers(client: Client) -> None:
    """Each answer reached the runtime once, exactly as the recorded client sent it."""
    replay = client.replay
    recorded = replay.recording
    assert replay.user_message is not None
    sent_user = {k: v for k, v in replay.user_message.items() if k != "messageId"}
    recorded_user = replay.learned.ours(recorded.user_message)
    assert sent_user == {k: v for k, v in recorded_user.items() if k != "messageId"}, "the user turn as recorded"
    for answer in recorded.answers:
        sent = replay.answers.get(answer.input.input_id, [])
        assert len(sent) == 1, f"{answer.input.input_id} answered {len(sent)} times"
        (only,) = sent
        assert only.method == answer.method, f"{answer.input.input_id}: sent with {only.method}"
        expected = replay.learned.ours(answer.move.message)
        assert {k: v for k, v in only.message.items() if k != "messageId"} == {
            k: v for k, v in expected.items() if k != "messageId"}, f"the answer to {answer.input.input_id}"
        assert only.message["contextId"] == replay.context_id
    assert set(replay.answers) == {answer.input.input_id for answer in recorded.answers}
    assert replay.served == recorded.moves, "the runtime went the recorded way, to its end"


def judge_streams(client: Client) -> None:
    """What the person sees: steps that hold the work, a view restored once per resume, one end."""
    for number, events in enumerate(client.runs, 1):
        assert_content_inside_steps(events, STEP_WORK)
        assert_no_empty_step(events)
        snapshots = [e for e in events if e["type"] == "ACTIVITY_SNAPSHOT"]
        assert len(snapshots) == (0 if number == 1 else 1), f"run {number}: one snapshot per resumed run"
    pipeline = [[e["value"] for e in events if e.get("name") == PIPELINE_EVENT] for events in client.runs]
    kinds = [event["eventType"] for run in pipeline for event in run]
    assert kinds.count("pipeline_started") == 1 and kinds.count("pipeline_completed") == 1, kinds
    assert pipeline[-1][-1]["eventType"] == "pipeline_completed", "the pipeline's end comes last"
    repeated = [key for key, count in Counter(e["eventId"] for run in pipeline for e in run).items() if count > 1]
    assert not repeated, f"pipeline events relayed twice: {repeated}"
    # Every piece of text the runtime streamed reaches the person once.
    recorded = client.replay.recording.pipeline_events().values()
    expected = sorted(e["data"]["text"] for e in recorded if e["eventType"] == "text_delta")
    shown = sorted(e["delta"] for events in client.runs for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert shown == expected


@pytest.mark.parametrize("restart", [False, True], ids=["one-adapter", "restarted-before-each-resume"])
async def test_a_recorded_pipeline_runs_to_completion(
    name: str, restart: bool, adapters: Adapters, cwd: Path
) -> None:
    client = Client(adapters, scenario(name), cwd)
    await run_to_completion(client, restart=restart)
    judge_pauses(client)
    judge_answers(client)
    judge_streams(client)


async def test_an_answer_sent_again_is_refused_and_never_reaches_the_runtime_twice(
    name: str, adapters: Adapters, cwd: Path
) -> None:
    client = Client(adapters, scenario(name), cwd)
    await run_to_completion(client, restart=False, retry=True)
    assert not client.replay.refusals, "\n".join(client.replay.refusals)
    judge_pauses(client)
    judge_answers(client)


async def test_every_run_names_the_runtime_session(name: str, adapters: Adapters, cwd: Path) -> None:
    # A pipeline's status updates name the session only inside their pipeline
    # event (metadata.iac_code.pipeline.iacCodeSessionId); GetTask names it in
    # metadata.iac_code.iacCodeSessionId. iac-code.session.v1 carries it
    # (docs/integrators-guide.md).
    client = Client(adapters, scenario(name), cwd)
    await run_to_completion(client, restart=False)
    recorded = client.replay.recording
    for number, events in enumerate(client.runs, 1):
        (session,) = [e["value"] for e in events if e.get("name") == "iac-code.session.v1"]
        assert session.get("sessionId") == recorded.session_id, (
            f"run {number}: the runtime named session {recorded.session_id} in every pipeline event; "
            f"the client was told {session}")


async def test_a_restarted_adapter_restores_the_session_before_it_answers(
    name: str, adapters: Adapters, cwd: Path
) -> None:
    # The recorded client asked the runtime to restore the session before
    # every resume (POST /iac-code/session/ensure-restored); an adapter that
    # restarted must do it before its first answer, as its own docs say.
    client = Client(adapters, scenario(name), cwd)
    began = await run_to_completion(client, restart=True)
    seen = client.replay.seen
    for number, (start, end) in enumerate(itertools.pairwise([*began[1:], len(seen)]), 2):
        requests = [str(item) for item in seen[start:end]]
        first_answer = next(i for i, item in enumerate(seen[start:end]) if item.kind.startswith("Send"))
        assert any(item.kind == "restore" for item in seen[start:start + first_answer]), (
            f"run {number}, in a new adapter process: no session restore before the answer; it asked:\n"
            + "\n".join(requests))


async def _rpc(session: aiohttp.ClientSession, url: str, method: str, params: dict[str, Any]) -> Any:
    """One JSON-RPC call: the JSON reply, or the list of a stream's events."""
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
    async with session.post(url, json=body) as resp:
        if resp.content_type == "text/event-stream":
            return [json.loads(line[len("data: "):]) for line in (await resp.text()).splitlines() if line]
        return await resp.json()


async def test_the_replay_refuses_what_the_recorded_runtime_would_not_do() -> None:
    recorded = recording("direct")
    replay = ReplayRuntime(recorded)
    await replay.start()
    user = {**recorded.user_message, "contextId": "ctx-test", "messageId": "m-1",
            "metadata": {"iac_code": {**recorded.user_message["metadata"]["iac_code"], "cwd": "/w"}}}
    selection = recorded.answers[0].move.message
    answer = {**selection, "contextId": "ctx-test", "messageId": "m-2"}
    try:
        async with aiohttp.ClientSession() as session:
            streamed = await _rpc(session, replay.url, "SendStreamingMessage", {"message": user})
            assert len(streamed) == len(recorded.moves[0].events)
            assert all(event["id"] == 7 for event in streamed), "the events answer this request"
            assert "ctx-test" in json.dumps(streamed) and recorded.context_id not in json.dumps(streamed)
            await _rpc(session, replay.url, "SendStreamingMessage", {"message": answer})
            again = await _rpc(session, replay.url, "SendStreamingMessage", {"message": {**answer, "messageId": "m-3"}})
            assert "a second answer" in again["error"]["message"]
            text = {**answer, "messageId": "m-4", "parts": [{"text": "yes"}]}
            refused = await _rpc(session, replay.url, "SendStreamingMessage", {"message": text})
            assert "a text message ('yes') to a task waiting for" in refused["error"]["message"]
            other = await _rpc(session, replay.url, "GetTask", {"id": "another-task"})
            assert other["error"]["code"] == -32001
            state = replay.url + "iac-code/pipeline/state"
            async with session.get(state, params={"taskId": recorded.task_id, "afterSequence": "0"}) as resp:
                assert resp.status == 409, "events the recording never saw"
            async with session.get(state, params={"taskId": recorded.task_id, "afterSequence": "102"}) as resp:
                document = await resp.json()
            assert [event["sequence"] for event in document["events"]] == [103]
    finally:
        await replay.close()
    assert len(replay.refusals) == 4, replay.refusals
    assert [move.seq for move in replay.served] == [1, 5], "a refused request moves nothing"
