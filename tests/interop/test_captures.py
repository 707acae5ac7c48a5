"""Every stream the adapter can be made to send, judged by ``ag-ui-validate`` 0.4.

Each test records the raw SSE body of one scenario against the demo runtime,
writes it to ``<tmp>/<name>.sse`` and runs the validator's CLI on it
(``ag-ui-validate FILE --max-warnings 0``, exit 0 required), then its pytest
helper ``assert_valid_agui(events, max_warnings=0)`` on the parsed events,
then this project's own stream checks.

Every capture is taken in both wire profiles (the ``profile`` fixture: AG-UI
1.0, the default, and ``--compat iac-code-agui``), and the stream checker is
strict in the profile that served it. Most streams are the same in both;
the stops and the skipped content part differ, and each test asserts its
profile's form. Only the AGUI207 options, a client-side rewrite, run once.

One rule is excluded, for one kind of capture only: AGUI207 on a resumed run
that reports the result of the tool call started before the interrupt (see
"AGUI207" in tests/interop/README.md). ``test_the_agui207_exclusion_hides_nothing_else``
proves that nothing else fires there, and fails once the adapter re-opens the
tool call, which is when the exclusion has to go.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.protocol.profile import DEFAULT_PROFILE, Profile
from tests.support.adapter import RunningAdapter, run_body, start_adapter
from tests.support.agui import parse_sse
from tests.support.stops import PROFILES, assert_stopped
from tests.support.validation import findings, run_validator
from tests.support.validation import validate as validate_once

from .conftest import drive, iac_props
from tests.support.reading import read_until

#: Rules excluded per capture: none (see the AGUI207 section of tests/interop/README.md).
AGUI207_ONLY: tuple[str, ...] = ()


def run_of(workspace: Path, thread_id: str, text: str | None) -> dict[str, Any]:
    return run_body(thread_id=thread_id, text=text, cwd=str(workspace))


def resume_of(workspace: Path, thread_id: str, interrupt: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    body = run_of(workspace, thread_id, None)
    body["resume"] = [{"interruptId": interrupt["id"], **answer}]
    return body


async def capture(adapter: RunningAdapter, body: dict[str, Any]) -> bytes:
    reply = await adapter.run(body)
    assert reply.status == 200, reply.body
    assert reply.headers["Content-Type"].startswith("text/event-stream")
    return reply.body


def terminal(events: list[dict[str, Any]]) -> dict[str, Any]:
    return events[-1]


@pytest.fixture(params=PROFILES, ids=lambda profile: profile.value)
def profile(request: pytest.FixtureRequest) -> Profile:
    """The wire profile every adapter of a test serves: each capture is taken in both."""
    chosen: Profile = request.param
    return chosen


@pytest.fixture
async def adapter(tmp_path: Path, demo: DemoRuntime, profile: Profile) -> AsyncIterator[RunningAdapter]:
    """``tests/conftest.py``'s adapter, serving ``profile``."""
    running = await start_adapter(tmp_path / "state", demo.url, allowed_cwds=(str(tmp_path / "workspaces"),),
                                  profile=profile)
    try:
        yield running
    finally:
        await running.close()


@pytest.fixture
def validate(profile: Profile) -> Any:
    """:func:`tests.support.validation.validate`, the capture named for ``profile``
    and the checker strict in it."""

    async def judged(directory: Path, name: str, body: bytes, excluded: tuple[str, ...] = ()) -> list[dict[str, Any]]:
        return await validate_once(directory, f"{name}-{profile.value}", body, excluded, advertised=profile.value)

    return judged


@pytest.fixture
def captures(tmp_path: Path) -> Path:
    """Where the .sse files go (``AGUI_INTEROP_CAPTURE_DIR`` keeps them)."""
    keep = os.environ.get("AGUI_INTEROP_CAPTURE_DIR")
    directory = Path(keep) if keep else tmp_path / "captures"
    directory.mkdir(parents=True, exist_ok=True)
    return directory


# ------------------------------------------------------------ successful runs


@pytest.mark.parametrize(
    ("name", "text", "needle"),
    [
        ("normal", "hello", "TEXT_MESSAGE_CONTENT"),
        ("tool", "tool", "TOOL_CALL_RESULT"),
        ("reasoning", "think", "REASONING_MESSAGE_CONTENT"),
    ],
)
async def test_turns(
    adapter: RunningAdapter, workspace: Path, captures: Path, validate: Any, name: str, text: str, needle: str
) -> None:
    events = await validate(captures, name, await capture(adapter, run_of(workspace, f"c-{name}", text)))
    assert needle in {e["type"] for e in events}
    assert terminal(events)["outcome"] == {"type": "success"}


async def test_heartbeats(
    tmp_path: Path, demo: DemoRuntime, workspace: Path, captures: Path, validate: Any, profile: Profile
) -> None:
    # SSE comments between events (": heartbeat"), as after 15 s of silence in production.
    running = await start_adapter(tmp_path / "hb-state", demo.url, heartbeat_seconds=0.05, profile=profile)
    try:
        body = await capture(running, run_of(workspace, "c-hb", "slow 1"))
    finally:
        await running.close()
    assert b": heartbeat\n\n" in body
    events = await validate(captures, "heartbeat", body)
    assert terminal(events)["outcome"] == {"type": "success"}


@pytest.mark.parametrize(("answer", "word"), [({"status": "resolved", "payload": {"decision": "allow_once"}}, "Successfully"),
                                              ({"status": "resolved", "payload": {"decision": "deny"}}, "denied"),
                                              ({"status": "cancelled"}, "denied")],
                         ids=["allow", "deny", "cancelled"])
async def test_permission_interrupt_and_resume(
    adapter: RunningAdapter, demo: DemoRuntime, workspace: Path, captures: Path, validate: Any,
    answer: dict[str, Any], word: str,
) -> None:
    thread = f"c-perm-{answer['status']}-{answer.get('payload', {}).get('decision', '')}"
    interrupted = await validate(captures, f"interrupt-{thread}", await capture(adapter, run_of(workspace, thread, "permission x.txt")))
    outcome = terminal(interrupted)["outcome"]
    assert outcome["type"] == "interrupt"
    (interrupt,) = outcome["interrupts"]
    body = await capture(adapter, resume_of(workspace, thread, interrupt, answer))
    events = await validate(captures, f"resume-{thread}", body, excluded=AGUI207_ONLY)
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert result["toolCallId"] == interrupt["toolCallId"] and word.lower() in result["content"].lower()
    assert terminal(events)["outcome"] == {"type": "success"}
    assert sum(demo.state.tool_runs.values()) == (1 if word == "Successfully" else 0)


async def test_question_interrupt_and_answer(
    adapter: RunningAdapter, workspace: Path, captures: Path, validate: Any
) -> None:
    interrupted = await validate(captures, "interrupt-question", await capture(adapter, run_of(workspace, "c-q", "question")))
    (interrupt,) = terminal(interrupted)["outcome"]["interrupts"]
    option = interrupt["metadata"]["options"][0]
    answer = {"status": "resolved", "payload": {"selectedId": option["id"]}}
    events = await validate(captures, "resume-question", await capture(adapter, resume_of(workspace, "c-q", interrupt, answer)))
    assert terminal(events)["outcome"] == {"type": "success"}


# ------------------------------------------------------------- RUN_ERROR paths


def run_error(events: list[dict[str, Any]], code: str) -> None:
    assert events[0]["type"] == "RUN_STARTED"
    assert terminal(events)["type"] == "RUN_ERROR" and terminal(events)["code"] == code
    assert terminal(events)["message"]


@pytest.mark.parametrize(("name", "text"), [("error-fail", "fail"), ("error-rpcerror", "rpcerror")])
async def test_runtime_failures(
    adapter: RunningAdapter, workspace: Path, captures: Path, validate: Any, name: str, text: str
) -> None:
    events = await validate(captures, name, await capture(adapter, run_of(workspace, f"c-{name}", text)))
    run_error(events, "A2A_EXECUTION_FAILED")


async def test_a_cancelled_question(
    adapter: RunningAdapter, workspace: Path, captures: Path, validate: Any, profile: Profile
) -> None:
    interrupted = await capture(adapter, run_of(workspace, "c-qc", "question"))
    (interrupt,) = parse_sse(interrupted)[0][-1]["outcome"]["interrupts"]
    body = await capture(adapter, resume_of(workspace, "c-qc", interrupt, {"status": "cancelled"}))
    assert_stopped(await validate(captures, "stop-cancelled-question", body), profile)


IMAGE_BY_URL = {"type": "image", "source": {"type": "url", "value": "https://example.invalid/a.png"}}


async def test_a_part_the_adapter_cannot_use(
    adapter: RunningAdapter, workspace: Path, captures: Path, validate: Any, profile: Profile
) -> None:
    """AG-UI 1.0 skips an image by URL and says so before the first text; the
    ``iac-code-agui`` profile refuses the run, as the protocol reference does."""
    body = run_of(workspace, "c-skip", None)
    body["messages"] = [{"id": "m-skip", "role": "user",
                         "content": [{"type": "text", "text": "look at this"}, IMAGE_BY_URL]}]
    reply = await adapter.run(body)
    if profile is Profile.IAC_CODE_AGUI:
        assert reply.status == 400 and reply.json()["error"]["code"] == "INVALID_INPUT", reply.body
        return
    assert reply.status == 200, reply.body
    events = await validate(captures, "skipped-part", reply.body)
    (notice,) = [e for e in events if e["type"] == "CUSTOM" and e["name"] == "iac-code.input.skipped.v1"]
    first_text = next(i for i, e in enumerate(events) if e["type"] == "TEXT_MESSAGE_START")
    assert events.index(notice) < first_text
    assert 'You said: "look at this"' in "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert terminal(events)["outcome"] == {"type": "success"}


def dead_url() -> str:
    """A loopback URL where nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/"


async def test_a2a_unavailable(tmp_path: Path, workspace: Path, captures: Path, validate: Any, profile: Profile) -> None:
    running = await start_adapter(tmp_path / "dead-state", dead_url(), profile=profile)
    try:
        body = await capture(running, run_of(workspace, "c-dead", "hello"))
    finally:
        await running.close()
    run_error(await validate(captures, "error-a2a-unavailable", body), "A2A_UNAVAILABLE")


async def test_a_runtime_cancel_through_the_cancel_route(
    tmp_path: Path, demo: DemoRuntime, workspace: Path, captures: Path, validate: Any, profile: Profile
) -> None:
    adapter = await start_adapter(tmp_path / "cancel-state", demo.url, allowed_cwds=(str(workspace.parent),),
                                  profile=profile)
    try:
        await cancel_through_the_route(adapter, demo, workspace, captures, validate, profile)
    finally:
        await adapter.close()


async def cancel_through_the_route(
    adapter: RunningAdapter, demo: DemoRuntime, workspace: Path, captures: Path, validate: Any, profile: Profile
) -> None:
    body = run_of(workspace, "c-cancel", "slow 10")
    async with adapter.session.post(adapter.url, json=body) as resp:
        seen = await read_until(resp, b"TEXT_MESSAGE_CONTENT")
        (session,) = [e for e in parse_sse(seen.rsplit(b"\n\n", 1)[0] + b"\n\n")[0] if e.get("name") == "iac-code.session.v1"]
        value = session["value"]
        reply = await adapter.post(
            f"/extensions/iac-code/v1/executions/{value['executionId']}/cancel",
            {"threadId": "c-cancel", "rosInvocationId": value["rosInvocationId"]},
        )
        rest = await asyncio.wait_for(resp.read(), 10)
    assert reply.status == 200 and reply.json()["status"] == "cancelled"
    assert_stopped(await validate(captures, "stop-cancel-route", seen + rest), profile)
    assert demo.state.cancel_calls[value["taskId"]] == 1


async def test_the_runtime_cutting_the_stream(
    tmp_path: Path, workspace: Path, captures: Path, validate: Any, profile: Profile
) -> None:
    runtime = DemoRuntime()
    await runtime.start()
    running = await start_adapter(tmp_path / "cut-state", runtime.url, profile=profile)
    try:
        async with running.session.post(running.url, json=run_of(workspace, "c-cut", "slow 10")) as resp:
            seen = await read_until(resp, b"TEXT_MESSAGE_CONTENT", 2)
            await runtime.close()
            rest = await asyncio.wait_for(resp.read(), 10)
    finally:
        await running.close()
        await runtime.close()
    run_error(await validate(captures, "error-runtime-cut", seen + rest), "A2A_UNAVAILABLE")


async def test_the_adapter_shutting_down(
    tmp_path: Path, demo: DemoRuntime, workspace: Path, captures: Path, validate: Any, profile: Profile
) -> None:
    running = await start_adapter(tmp_path / "shut-state", demo.url, profile=profile)
    try:
        async with running.session.post(running.url, json=run_of(workspace, "c-shut", "slow 10")) as resp:
            seen = await read_until(resp, b"TEXT_MESSAGE_CONTENT", 2)
            stopping = asyncio.create_task(running.runner.cleanup())
            rest = await asyncio.wait_for(resp.read(), 10)
            await stopping
    finally:
        await running.session.close()
    assert_stopped(await validate(captures, "stop-shutdown", seen + rest), profile)
    assert sum(demo.state.cancel_calls.values()) == 1


# ------------------------------------------------------------------ AGUI207


async def test_the_resumed_run_passes_the_validator_with_no_rule_excluded(
    adapter: RunningAdapter, workspace: Path, captures: Path
) -> None:
    interrupted = await capture(adapter, run_of(workspace, "c-207", "permission x.txt"))
    (interrupt,) = parse_sse(interrupted)[0][-1]["outcome"]["interrupts"]
    body = await capture(adapter, resume_of(workspace, "c-207", interrupt, {"status": "resolved", "payload": {"decision": "allow_once"}}))
    path = captures / "resume-without-exclusion.sse"
    path.write_bytes(body)
    code, report, text = await run_validator(path)
    assert findings(report) == set(), text
    assert code == 0


@pytest.mark.parametrize(
    ("variant", "rules"),
    [("result-only", {"AGUI207"}), ("reopen", set()), ("reopen-args", set())],
    ids=["result-only", "reopen", "reopen-args"],
)
@pytest.mark.parametrize("profile", [DEFAULT_PROFILE], ids=[DEFAULT_PROFILE.value])  # the client's rewrite: once
async def test_agui207_options_under_the_validator(
    node: str, adapter: RunningAdapter, workspace: Path, captures: Path, variant: str, rules: set[str]
) -> None:
    """The resumed run in each shape, as the client received it (rewritten by drive.mjs)."""
    steps: list[dict[str, Any]] = [{"say": "permission x.txt"}, {"resume": {"status": "resolved", "payload": {"decision": "allow_once"}}}]
    summary = await drive(node, adapter.url, f"c-207-{variant}", iac_props(workspace), steps, resumeVariant=variant)
    assert summary["errors"] == []
    resumed = summary["steps"][1]
    body = (resumed["rewrittenSse"] or resumed["sse"]).encode()
    thread = (summary["steps"][0]["sse"]).encode() + body  # both runs in one capture
    for name, data in ((f"agui207-{variant}-resume", body), (f"agui207-{variant}-thread", thread)):
        path = captures / f"{name}.sse"
        path.write_bytes(data)
        code, report, text = await run_validator(path)
        assert findings(report) == rules, text
        assert code == (1 if rules else 0)
