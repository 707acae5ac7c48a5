"""The one place captures meet the AG-UI 1.0 checker (``tests.support.agui.judge``),
and how it picks the profile."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.adapter import RunningAdapter, run_body
from tests.support.agui import judge, product_profile


def sse(*events: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(event).encode() + b"\n\n" for event in events)


START = {"type": "RUN_STARTED", "threadId": "t", "runId": "r", "protocolVersion": "1.0"}
STOP_AS_ERROR = sse(START, {"type": "RUN_ERROR", "message": "cancelled", "code": "CANCELLED"})
STOP_AS_OUTCOME = sse(START, {"type": "RUN_FINISHED", "threadId": "t", "runId": "r", "outcome": {"type": "cancelled"}})


async def test_the_hook_judges_by_the_profile_the_adapter_advertises(adapter: RunningAdapter) -> None:
    capabilities = (await adapter.get("/capabilities")).json()
    health = (await adapter.get("/health")).json()
    said = [place.get(key) for place in (capabilities.get("custom", {}).get("iacCode", {}), capabilities, health)
            for key in ("profile", "compat")]
    advertised = {name for name in said if name is not None}
    assert advertised == ({adapter.advertised()} if adapter.advertised() is not None else set())
    assert adapter.advertised() == product_profile()


async def test_a_capture_that_breaks_a_rule_fails_the_test_that_made_it(adapter: RunningAdapter,
                                                                         workspace: Path) -> None:
    body = run_body(thread_id="hook-1", text="hello", cwd=str(workspace))
    reply = await adapter.run(body)  # judged on the way in, with its input
    assert reply.request == body
    other = {**body, "runId": "another-run"}
    with pytest.raises(AssertionError, match=r"identity \[basic/run-input.mdx#identity\]"):
        judge(reply.body, request=other)


def test_every_violation_is_listed_with_its_rule_and_page() -> None:
    with pytest.raises(AssertionError) as caught:
        judge(sse({"type": "RUN_STARTED", "threadId": "t", "runId": "r"}, {"type": "TEXT_MESSAGE_END", "messageId": "m"}))
    text = str(caught.value)
    for rule in ("protocol_version", "streaming_discipline", "terminated"):
        assert rule in text


def test_each_profile_takes_only_its_own_form_of_a_stop() -> None:
    # Named profiles are strict, each in its own form.
    with pytest.raises(AssertionError, match="cancelled_runs"):
        judge(STOP_AS_ERROR, advertised="ag-ui-1.0")
    with pytest.raises(AssertionError, match="cancelled_runs"):
        judge(STOP_AS_OUTCOME, advertised="iac-code-agui")
    judge(STOP_AS_ERROR, advertised="iac-code-agui")
    judge(STOP_AS_OUTCOME, advertised="default")
    # Unnamed: the product's own default, AG-UI 1.0.
    with pytest.raises(AssertionError, match="cancelled_runs"):
        judge(STOP_AS_ERROR)
    with pytest.raises(AssertionError, match="closed_before_finish"):
        judge(sse(START, {"type": "STEP_STARTED", "stepName": "s"},
                  {"type": "RUN_FINISHED", "threadId": "t", "runId": "r"}))
