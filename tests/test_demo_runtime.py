"""The embedded demo runtime over real loopback sockets.

The reference a2a-sdk 1.3.0 client parses every stream into SDK types, so the
SDK judges the wire. Raw aiohttp requests check what the SDK hides (header and
auth refusals, disconnects) and replay the recorded iac-code conversations
under tests/fixtures/a2a to compare the shape of every object we send.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx
import pytest
from a2a.client import A2AClientError, Client, ClientConfig, create_client
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    InternalError,
    InvalidParamsError,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskNotCancelableError,
    TaskNotFoundError,
    TaskState,
)
from google.protobuf.json_format import MessageToDict, ParseDict

from aguiadapter.demo.runtime import DemoRuntime
from tests.support.eventually import eventually
from tests.support.serve import demo_runtime
from tests.support.recordings import INDEX, recorded_objects, recorded_request_text

TOKEN = "demo-runtime-test-token"
HEADERS = {"A2A-Version": "1.0", "Authorization": f"Bearer {TOKEN}"}
DENIAL = "The user explicitly denied this tool operation."
Json = dict[str, Any]


@pytest.fixture
async def runtime() -> AsyncIterator[DemoRuntime]:
    async with demo_runtime(token=TOKEN) as demo:
        yield demo


@pytest.fixture
async def sdk_client(runtime: DemoRuntime) -> AsyncIterator[Client]:
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=20) as http:
        sdk_client = await create_client(runtime.url, ClientConfig(httpx_client=http))
        yield sdk_client
        await sdk_client.close()


@pytest.fixture
async def http_session(runtime: DemoRuntime) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(base_url=runtime.url) as session:
        yield session


# --- helpers ---------------------------------------------------------------


def user(text: str, *, context: str = "ctx-demo", task: str = "") -> Message:
    return Message(
        message_id=str(uuid.uuid4()),
        context_id=context,
        task_id=task,
        role=Role.ROLE_USER,
        parts=[Part(text=text)],
    )


def answer(task: str, envelope: Json, decision: str, *, context: str = "ctx-demo") -> Message:
    data = {
        "schemaVersion": 1,
        "kind": "permission",
        "requestTaskId": task,
        "inputId": envelope["inputId"],
        "toolUseId": envelope["toolUseId"],
        "decision": decision,
    }
    part = ParseDict({"data": data, "mediaType": "application/json"}, Part())
    return Message(
        message_id=str(uuid.uuid4()),
        context_id=context,
        task_id=task,
        role=Role.ROLE_USER,
        parts=[part],
    )


async def send(sdk_client: Client, message: Message) -> list[StreamResponse]:
    return [event async for event in sdk_client.send_message(SendMessageRequest(message=message))]


def state(event: StreamResponse) -> str:
    return TaskState.Name(event.status_update.status.state)


def iac(event: StreamResponse) -> Json:
    meta: Json = MessageToDict(event.status_update.metadata).get("iac_code", {})
    return meta


def deltas(events: list[StreamResponse]) -> list[str]:
    return [
        e.status_update.status.message.parts[0].text
        for e in events
        if e.status_update.status.message.message_id.endswith("-message")
    ]


def final_text(events: list[StreamResponse]) -> str:
    finals = [e for e in events if "assistantFinal" in iac(e)]
    assert len(finals) == 1 and iac(finals[0])["assistantFinal"] == {"complete": True}
    return finals[0].status_update.status.message.parts[0].text


def tool_trace(events: list[StreamResponse]) -> list[Json]:
    return [iac(e)["tool"] for e in events if "tool" in iac(e)]


def assert_end_of_turn(event: StreamResponse) -> None:
    assert state(event) == "TASK_STATE_INPUT_REQUIRED"
    assert event.status_update.status.HasField("timestamp")
    assert set(iac(event)) == {"iacCodeSessionId"}


async def rpc(http_session: aiohttp.ClientSession, body: Json, headers: dict[str, str] = HEADERS) -> tuple[str, Any]:
    """POST one JSON-RPC body; the content type and the parsed reply (SSE → list)."""
    async with http_session.post("/", json=body, headers=headers) as response:
        assert response.status == 200
        if response.content_type == "text/event-stream":
            lines = [line async for line in response.content if line.startswith(b"data: ")]
            return response.content_type, [json.loads(line[6:]) for line in lines]
        return response.content_type, await response.json()


def call(method: str, params: Json) -> Json:
    return {"jsonrpc": "2.0", "id": "req-test", "method": method, "params": params}


async def interrupted(sdk_client: Client, text: str = "permission notes.txt") -> tuple[str, Json]:
    """Run a turn up to its interrupt; the task id and the input envelope."""
    events = await send(sdk_client, user(text))
    assert state(events[-1]) == "TASK_STATE_INPUT_REQUIRED"
    return events[0].task.id, iac(events[-1])["input"]


# --- turns through the SDK ----------------------------------------------------


async def test_default_turn_streams_a_reply_quoting_the_user(sdk_client: Client) -> None:
    events = await send(sdk_client, user("Good morning, demo"))
    task = events[0].task
    assert TaskState.Name(task.status.state) == "TASK_STATE_SUBMITTED"
    assert task.history[0].parts[0].text == "Good morning, demo"
    assert [state(e) for e in events[1:3]] == ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"]
    pieces = deltas(events)
    assert 3 <= len(pieces) <= 6
    assert {e.status_update.status.message.message_id for e in events[3 : 3 + len(pieces)]} == {f"{task.id}-message"}
    assert "".join(pieces) == final_text(events)
    assert '"Good morning, demo"' in final_text(events)
    usage = [iac(e)["usage"] for e in events if "usage" in iac(e)]
    assert usage and usage[0]["totalTokens"] == usage[0]["inputTokens"] + usage[0]["outputTokens"]
    assert_end_of_turn(events[-1])


async def test_think_turn_streams_raw_thinking_before_text(sdk_client: Client) -> None:
    events = await send(sdk_client, user("Think about regions"))
    kinds = ["thinking" if "thinking" in iac(e) else "text" if deltas([e]) else "" for e in events]
    thinking = [iac(e)["thinking"] for e in events if "thinking" in iac(e)]
    assert 2 <= len(thinking) <= 3 and all(t["type"] == "raw_thinking" for t in thinking)
    assert kinds.index("text") > max(i for i, k in enumerate(kinds) if k == "thinking")
    assert_end_of_turn(events[-1])


async def test_tool_turn_runs_list_files_once_and_sends_an_artifact(sdk_client: Client, runtime: DemoRuntime) -> None:
    events = await send(sdk_client, user("tool please"))
    trace = tool_trace(events)
    assert [t["status"] for t in trace] == [
        "started",
        "input_delta",
        "input_delta",
        "input_complete",
        "progress",
        "progress",
        "completed",
    ]
    assert trace[3]["toolInput"] == {"path": "."} and trace[3]["name"] == "list_files"
    artifacts = [e.artifact_update for e in events if e.HasField("artifact_update")]
    assert len(artifacts) == 1 and artifacts[0].last_chunk
    part = artifacts[0].artifact.parts[0]
    assert part.url == f"iac-code-artifact://{artifacts[0].artifact.artifact_id}/{part.filename}"
    assert trace[-1]["artifact"]["artifactId"] == artifacts[0].artifact.artifact_id
    assert runtime.state.tool_runs["list_files"] == 1
    assert final_text(events) and deltas(events)
    assert_end_of_turn(events[-1])


async def test_slow_turn_sends_a_delta_every_fifth_of_a_second(sdk_client: Client) -> None:
    started = asyncio.get_running_loop().time()
    events = await send(sdk_client, user("slow 0.6"))
    assert deltas(events) == ["tick 1. ", "tick 2. ", "tick 3. "]
    assert asyncio.get_running_loop().time() - started >= 0.4
    assert_end_of_turn(events[-1])


async def test_silent_turn_sends_one_delta_then_nothing_until_its_end(sdk_client: Client) -> None:
    started = asyncio.get_running_loop().time()
    events = await send(sdk_client, user("silent 0.5"))
    assert deltas(events) == ["waiting. "]
    assert asyncio.get_running_loop().time() - started >= 0.5
    assert final_text(events) == "waiting. "
    assert_end_of_turn(events[-1])


async def test_firehose_sends_every_delta_the_sdk_can_parse(sdk_client: Client) -> None:
    events = await send(sdk_client, user("firehose 3000"))
    pieces = deltas(events)
    assert len(pieces) == 3000 and pieces[0] == "w0 " and pieces[-1] == "w2999 "
    assert "".join(pieces) == final_text(events)
    assert_end_of_turn(events[-1])


async def test_fail_turn_ends_failed_with_a_non_retryable_error(sdk_client: Client) -> None:
    events = await send(sdk_client, user("fail now"))
    assert state(events[-1]) == "TASK_STATE_FAILED"
    assert "failed on purpose" in events[-1].status_update.status.message.parts[0].text
    error = iac(events[-1])["error"]
    assert error["retryable"] is False and error["errorId"].startswith("err-")


async def test_rpcerror_arrives_mid_stream_and_leaves_the_task_failed(sdk_client: Client, runtime: DemoRuntime) -> None:
    seen: list[StreamResponse] = []
    with pytest.raises(InternalError, match="on purpose"):
        async for event in sdk_client.send_message(SendMessageRequest(message=user("rpcerror"))):
            seen.append(event)
    assert len(deltas(seen)) == 2
    task = await sdk_client.get_task(GetTaskRequest(id=seen[0].task.id))
    assert TaskState.Name(task.status.state) == "TASK_STATE_FAILED"


# --- interrupts -------------------------------------------------------------------


async def test_permission_interrupt_carries_the_full_envelope(sdk_client: Client) -> None:
    task_id, envelope = await interrupted(sdk_client, "permission plan.tf")
    assert envelope["kind"] == "permission" and envelope["required"] is True
    assert envelope["requestTaskId"] == task_id and envelope["contextId"] == "ctx-demo"
    assert re.fullmatch(r"permission-[0-9a-f]{32}", envelope["inputId"])
    assert (envelope["toolName"], envelope["effect"], envelope["target"]) == (
        "write_file",
        "file_change",
        "plan.tf",
    )
    assert envelope["isReadOnly"] is False
    assert [o["id"] for o in envelope["options"]] == ["allow_once", "deny"]
    task = await sdk_client.get_task(GetTaskRequest(id=task_id))
    meta = MessageToDict(task.metadata)["iac_code"]
    assert meta["input"] == envelope and meta["permission"]["pending"] is True
    assert meta["executionControl"]["executionStatus"] == "input-required"


async def test_permission_allow_runs_the_tool_exactly_once(sdk_client: Client, runtime: DemoRuntime) -> None:
    task_id, envelope = await interrupted(sdk_client)
    assert runtime.state.tool_runs["write_file"] == 0
    events = await send(sdk_client, answer(task_id, envelope, "allow_once"))
    assert not events[0].HasField("task")
    assert iac(events[0]) == {
        "inputReceived": {
            "inputId": envelope["inputId"],
            "toolUseId": envelope["toolUseId"],
            "kind": "permission",
        }
    }
    assert events[1].artifact_update.artifact.name == "notes.txt"
    assert tool_trace(events)[0]["status"] == "completed"
    assert_end_of_turn(events[-1])
    assert runtime.state.tool_runs_by_use_id[envelope["toolUseId"]] == 1
    # As iac-code: the same answer again is acknowledged as a duplicate and runs nothing;
    # another decision for the same input conflicts with the receipt.
    (again,) = await send(sdk_client, answer(task_id, envelope, "allow_once"))
    assert iac(again)["inputReceived"] == {
        "inputId": envelope["inputId"], "toolUseId": envelope["toolUseId"], "kind": "permission",
        "decision": "allow_once", "recovered": True, "duplicate": True,
    }
    with pytest.raises(InvalidParamsError, match="conflicts with receipt"):
        await send(sdk_client, answer(task_id, envelope, "deny"))
    assert runtime.state.tool_runs["write_file"] == 1


async def test_permission_deny_fails_the_tool_without_running_it(sdk_client: Client, runtime: DemoRuntime) -> None:
    task_id, envelope = await interrupted(sdk_client)
    events = await send(sdk_client, answer(task_id, envelope, "deny"))
    failed = tool_trace(events)
    assert [t["status"] for t in failed] == ["failed"] and failed[0]["result"].startswith(DENIAL)
    assert not any(e.HasField("artifact_update") for e in events)
    assert_end_of_turn(events[-1])
    assert runtime.state.tool_runs["write_file"] == 0


@pytest.mark.parametrize(
    ("context", "decision", "input_id", "refusal"),
    [
        ("ctx-other", "allow_once", "", "bad context id"),
        ("ctx-demo", "maybe", "", "Permission decision must be allow_once or deny."),
        ("ctx-demo", "allow_once", "permission-0000", "pending permission is not active"),
    ],
    ids=["wrong-context", "unknown-decision", "wrong-input-id"],
)
async def test_bad_permission_answers_are_refused(
    sdk_client: Client, runtime: DemoRuntime, context: str, decision: str, input_id: str, refusal: str
) -> None:
    task_id, envelope = await interrupted(sdk_client)
    if input_id:
        envelope = {**envelope, "inputId": input_id}
    with pytest.raises(InvalidParamsError, match=re.escape(refusal)):
        await send(sdk_client, answer(task_id, envelope, decision, context=context))
    assert runtime.state.tasks[task_id].pending is not None  # still waiting for a valid answer


async def test_answer_to_a_canceled_permission_is_refused(sdk_client: Client, runtime: DemoRuntime) -> None:
    task_id, envelope = await interrupted(sdk_client)
    canceled = await sdk_client.cancel_task(CancelTaskRequest(id=task_id))
    assert TaskState.Name(canceled.status.state) == "TASK_STATE_CANCELED"
    assert canceled.status.message.parts[0].text == "Task canceled."
    with pytest.raises(InvalidParamsError, match="permission boundary is canceled"):
        await send(sdk_client, answer(task_id, envelope, "allow_once"))
    assert runtime.state.tool_runs["write_file"] == 0


async def test_question_is_answered_with_an_option_label(sdk_client: Client) -> None:
    task_id, envelope = await interrupted(sdk_client, "question")
    assert envelope["kind"] == "ask_user_question" and envelope["required"] is True
    assert len(envelope["options"]) == 3 and envelope["allowFreeText"] is True and envelope["freeTextPrompt"]
    label = envelope["options"][1]["label"]
    events = await send(sdk_client, user(label, task=task_id))
    assert iac(events[0])["inputReceived"]["kind"] == "ask_user_question"
    assert label in final_text(events)
    assert_end_of_turn(events[-1])


# --- cancel, subscribe, disconnect ----------------------------------------------


async def test_cancel_stops_a_slow_task_mid_stream(sdk_client: Client, runtime: DemoRuntime) -> None:
    events: list[StreamResponse] = []
    async for event in sdk_client.send_message(SendMessageRequest(message=user("slow 20"))):
        events.append(event)
        if deltas([event]) and len(deltas(events)) == 2:
            task_id = events[0].task.id
            canceled = await sdk_client.cancel_task(CancelTaskRequest(id=task_id))
            assert TaskState.Name(canceled.status.state) == "TASK_STATE_CANCELED"
    assert state(events[-1]) == "TASK_STATE_CANCELED"
    assert events[-1].status_update.status.message.parts[0].text == "Task canceled."
    assert len(deltas(events)) == 2
    task = await sdk_client.get_task(GetTaskRequest(id=task_id))
    assert TaskState.Name(task.status.state) == "TASK_STATE_CANCELED"
    assert runtime.state.total_cancel_calls == 1 and runtime.state.tasks[task_id].runner is None


async def test_cancel_of_a_finished_turn_is_refused(sdk_client: Client) -> None:
    events = await send(sdk_client, user("hello"))
    with pytest.raises(TaskNotCancelableError, match="Task cannot be canceled"):
        await sdk_client.cancel_task(CancelTaskRequest(id=events[0].task.id))


async def test_unknown_tasks_are_not_found(sdk_client: Client) -> None:
    with pytest.raises(TaskNotFoundError):
        await sdk_client.get_task(GetTaskRequest(id="no-such-task"))
    with pytest.raises(TaskNotFoundError):
        await sdk_client.cancel_task(CancelTaskRequest(id="no-such-task"))
    with pytest.raises(TaskNotFoundError):
        await send(sdk_client, user("hello", task="no-such-task"))


async def test_subscribe_follows_a_running_task_and_refuses_a_finished_one(sdk_client: Client) -> None:
    stream = sdk_client.send_message(SendMessageRequest(message=user("slow 0.8")))
    task_id = (await anext(stream)).task.id
    followed = [e async for e in sdk_client.subscribe(SubscribeToTaskRequest(id=task_id))]
    assert followed[0].task.id == task_id and deltas(followed)
    assert_end_of_turn(followed[-1])
    rest = [e async for e in stream]
    assert_end_of_turn(rest[-1])
    with pytest.raises(TaskNotFoundError, match="is not active"):
        [e async for e in sdk_client.subscribe(SubscribeToTaskRequest(id=task_id))]


async def test_client_disconnect_leaves_the_task_running(http_session: aiohttp.ClientSession, runtime: DemoRuntime) -> None:
    body = call(
        "SendStreamingMessage",
        {
            "message": {
                "messageId": "m-1",
                "contextId": "ctx-leave",
                "role": "ROLE_USER",
                "parts": [{"text": "slow 1"}],
            }
        },
    )
    response = await http_session.post("/", json=body, headers=HEADERS)
    first = json.loads((await response.content.readline())[6:])
    task = runtime.state.tasks[first["result"]["task"]["id"]]
    response.close()  # the client goes away mid-stream
    await eventually(lambda: not task.listeners, "the runtime notices that the client left")
    assert task.state == "TASK_STATE_WORKING" and task.runner is not None
    await eventually(lambda: task.state == "TASK_STATE_INPUT_REQUIRED", "the turn ends without its client")
    assert runtime.state.total_cancel_calls == 0
    texts = [entry["parts"][0]["text"] for entry in task.history if isinstance(entry, dict)]
    assert "tick 5. " in texts  # written after the client had left


async def test_non_streaming_send_returns_the_task_after_the_turn(runtime: DemoRuntime) -> None:
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        sdk = await create_client(runtime.url, ClientConfig(httpx_client=http, streaming=False))
        [event] = [e async for e in sdk.send_message(SendMessageRequest(message=user("hello there")))]
    assert TaskState.Name(event.task.status.state) == "TASK_STATE_INPUT_REQUIRED"
    assert event.task.history[-1].parts[0].text.startswith("Hello!")


async def test_turns_in_one_context_are_new_tasks_in_one_session(sdk_client: Client, runtime: DemoRuntime) -> None:
    first, second = await send(sdk_client, user("one")), await send(sdk_client, user("two"))
    assert first[0].task.id != second[0].task.id
    assert iac(first[-1])["iacCodeSessionId"] == iac(second[-1])["iacCodeSessionId"]
    with pytest.raises(InvalidParamsError, match="bad context id"):
        await send(sdk_client, user("three", task=first[0].task.id, context="ctx-elsewhere"))
    follow_up = await send(sdk_client, user("again", task=first[0].task.id))
    assert not follow_up[0].HasField("task") and state(follow_up[0]) == "TASK_STATE_SUBMITTED"
    sent = [m["parts"][0]["text"] for m in runtime.state.received]
    assert sent == ["one", "two", "three", "again"]


# --- HTTP edge ----------------------------------------------------------------------


async def test_missing_or_old_a2a_version_header_is_refused(http_session: aiohttp.ClientSession) -> None:
    for headers in ({"Authorization": f"Bearer {TOKEN}"}, {**HEADERS, "A2A-Version": "0.3"}):
        content_type, reply = await rpc(http_session, call("GetTask", {"id": "x"}), headers)
        assert content_type == "application/json" and reply["error"]["code"] == -32009


async def test_wrong_token_gets_401_but_health_and_card_are_open(
    runtime: DemoRuntime, http_session: aiohttp.ClientSession
) -> None:
    async with http_session.post(
        "/", json=call("GetTask", {"id": "x"}), headers={**HEADERS, "Authorization": "Bearer nope"}
    ) as r:
        assert r.status == 401
    async with http_session.get("/health") as r:
        assert r.status == 200 and await r.json() == {"status": "ok"}
    async with httpx.AsyncClient(headers={"Authorization": "Bearer nope"}) as http:
        sdk = await create_client(runtime.url, ClientConfig(httpx_client=http))
        with pytest.raises(A2AClientError, match="401"):
            await sdk.get_task(GetTaskRequest(id="x"))


async def test_unknown_method_and_bad_params(http_session: aiohttp.ClientSession) -> None:
    _, reply = await rpc(http_session, call("ListEverything", {}))
    assert reply["error"]["code"] == -32601
    _, reply = await rpc(http_session, call("SendStreamingMessage", {"message": {"parts": "nope"}}))
    assert reply["error"]["code"] == -32602


async def test_ensure_restored_answers_like_iac_code(sdk_client: Client, http_session: aiohttp.ClientSession) -> None:
    events = await send(sdk_client, user("hello", context="ctx-restore"))
    session_id = iac(events[-1])["iacCodeSessionId"]
    route = "/iac-code/session/ensure-restored"
    async with http_session.post(route, json={"cwd": "/workspace", "sessionId": session_id}, headers=HEADERS) as response:
        assert (response.status, await response.json()) == (200, {"status": "current"})
    async with http_session.post(route, json={"cwd": "/workspace", "sessionId": "unknown"}, headers=HEADERS) as response:
        assert (response.status, await response.json()) == (404, {"status": "not_found"})
    async with http_session.post(route, json={"cwd": "/workspace"}, headers=HEADERS) as response:
        assert response.status == 400


# --- wire shape against the iac-code recordings -------------------------------------


def shape(value: Any) -> Any:
    """Keys and leaf types, ignoring values and key order (lists: first item)."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shape(item) for item in value[:1]]
    return type(value).__name__


def collapsed(objects: list[Json]) -> list[Any]:
    """Shapes with runs of equal shapes folded (delta counts differ)."""
    shapes: list[Any] = []
    for obj in objects:
        if not shapes or shapes[-1] != shape(obj):
            shapes.append(shape(obj))
    return shapes


def learn_ids(recorded: Any, ours: Any, ids: dict[str, str]) -> None:
    """Map the recorded ids to ours by walking two objects of the same shape."""
    if isinstance(recorded, dict) and isinstance(ours, dict):
        for key, value in recorded.items():
            if key in ("id", "taskId", "inputId", "toolUseId") and isinstance(value, str):
                ids.setdefault(value, ours.get(key, value))
            elif key in ours:
                learn_ids(value, ours[key], ids)
    elif isinstance(recorded, list) and isinstance(ours, list):
        for left, right in zip(recorded, ours, strict=False):
            learn_ids(left, right, ids)


def adapt(text: str, ids: dict[str, str]) -> str:
    """A recorded request rewritten for the demo: our ids, our script words."""
    for old, new in ids.items():
        text = text.replace(old, new)
    text = re.sub(r"\[scenario:permission file=(\S+)\]", r"permission \1", text)
    return text.replace("[scenario:reasoning]", "think")


CONVERSATIONS = {
    "normal-then-followup": ["01-normal-text", "09-followup-same-task"],
    "second-turn": ["02-second-turn.1", "02-second-turn.2"],
    "reasoning": ["03-reasoning"],
    "permission-allow": ["05-permission-allow.1", "05-permission-allow.2", "05-permission-allow.3"],
    "permission-deny": ["06-permission-deny.1", "06-permission-deny.2"],
    "cancel-interrupted": [f"08-cancel-interrupted.{k}" for k in range(1, 8)],
    # .6 is left out: iac-code still cancels that finished turn, the demo refuses (-32002).
    "error-interrupted": [f"10-error-interrupted-task.{k}" for k in range(1, 6)],
    "task-not-found": ["11-error-task-not-found"],
}


@pytest.mark.parametrize("steps", CONVERSATIONS.values(), ids=list(CONVERSATIONS))
async def test_replayed_conversation_matches_the_recorded_wire(http_session: aiohttp.ClientSession, steps: list[str]) -> None:
    ids: dict[str, str] = {}
    for name in steps:
        body = json.loads(adapt(recorded_request_text(name), ids))
        content_type, reply = await rpc(http_session, body)
        recorded = recorded_objects(name)
        assert content_type == INDEX[name]["contentType"], name
        ours = reply if isinstance(reply, list) else [reply]
        if "error" in recorded[0]:
            expected = json.loads(adapt(json.dumps(recorded[0]["error"]), ids))
            assert ours[0]["error"] == expected, name
            continue
        assert collapsed(ours) == collapsed(recorded), name
        # The first and last objects line up (equal shapes); they carry the ids.
        learn_ids([recorded[0], recorded[-1]], [ours[0], ours[-1]], ids)


async def test_metadata_numbers_are_floats_on_the_wire(http_session: aiohttp.ClientSession) -> None:
    body = call(
        "SendStreamingMessage",
        {
            "message": {
                "messageId": "m-2",
                "contextId": "ctx-floats",
                "role": "ROLE_USER",
                "parts": [{"text": "permission a.txt"}],
            }
        },
    )
    async with http_session.post("/", json=body, headers=HEADERS) as response:
        text = await response.text()
    assert '"inputTokens":100.0' in text and '"schemaVersion":1.0' in text and '"partialJsonLength":' in text
    assert all(line.startswith('data: {"result":') for line in text.split("\n\n") if line)
