"""Inputs the real runtime would fail on inside the stream are refused before it; odd but valid ones run.

Each refused case was seen failing a run of `iac-code a2a` 0.16 after a 200
(`A2A_EXECUTION_FAILED` with the runtime's exception text); now it is a 400
naming the field, and the runtime never hears of it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.adapter import RunningAdapter, run_body
from tests.support.model_stub import ModelStub

Body = dict[str, Any]


def turn(cwd: Path, text: str = "[scenario:normal] hello") -> Body:
    return run_body(thread_id=f"e2e-edge-{uuid.uuid4()}", text=text, cwd=str(cwd))


def symlink_loop(cwd: Path) -> str:
    (cwd / "a").symlink_to(cwd / "b")
    (cwd / "b").symlink_to(cwd / "a")
    return str(cwd / "a")


def below_a_file(cwd: Path) -> str:
    (cwd / "notes.txt").write_text("x")
    return str(cwd / "notes.txt" / "work")


REFUSED: dict[str, tuple[Callable[[Body, Path], None], str]] = {
    "a non-ASCII llmApiKey": (
        lambda body, cwd: body["forwardedProps"]["iacCode"].update(llmApiKey="sk-été"),
        "forwardedProps.iacCode.llmApiKey"),
    "a component over 255 bytes": (
        lambda body, cwd: body["forwardedProps"]["iacCode"].update(cwd=str(cwd / ("n" * 256))),
        "forwardedProps.iacCode.cwd"),
    "a symlink loop": (
        lambda body, cwd: body["forwardedProps"]["iacCode"].update(cwd=symlink_loop(cwd)),
        "forwardedProps.iacCode.cwd"),
    "a path below a regular file": (
        lambda body, cwd: body["forwardedProps"]["iacCode"].update(cwd=below_a_file(cwd)),
        "forwardedProps.iacCode.cwd"),
    "a region ID the runtime refuses": (
        lambda body, cwd: body["forwardedProps"]["iacCode"].update(alibabaCloud={"regionId": "杭州"}),
        "forwardedProps.iacCode.alibabaCloud.regionId"),
}


@pytest.mark.parametrize(("change", "field"), REFUSED.values(), ids=REFUSED.keys())
async def test_what_the_runtime_would_fail_on_is_refused_before_the_stream(
    iac_adapter: RunningAdapter, iac_workspace: Path, model_stub: ModelStub,
    change: Callable[[Body, Path], None], field: str,
) -> None:
    body = turn(iac_workspace)
    change(body, iac_workspace)
    before = len(model_stub.calls)
    reply = await iac_adapter.run(body)
    assert reply.status == 400, reply.body[:300]
    error = reply.json()["error"]
    assert error["code"] == "INVALID_INPUT" and field in error["message"]
    assert "Errno" not in error["message"] and "Error" not in error["message"]
    assert len(model_stub.calls) == before, "the runtime was never asked"


ODD_BUT_VALID: dict[str, Callable[[Body], None]] = {
    "a thread id with a newline": lambda body: body.update(threadId="tenant-1\nthread-2"),
    "a 300-character run id": lambda body: body.update(runId="r" * 300),
    "an unknown field in the message": lambda body: body["messages"][0].update(thread_id="t-1"),
    "an empty text earlier in the history": lambda body: body["messages"].insert(
        0, {"id": "m-0", "role": "user", "content": ""}),
}


@pytest.mark.parametrize("change", ODD_BUT_VALID.values(), ids=ODD_BUT_VALID.keys())
async def test_odd_but_valid_input_runs_to_the_end(
    iac_adapter: RunningAdapter, iac_workspace: Path, change: Callable[[Body], None]
) -> None:
    body = turn(iac_workspace)
    change(body)
    events = (await iac_adapter.run(body)).events()
    assert events[0]["threadId"] == body["threadId"]
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"] == {"type": "success"}
