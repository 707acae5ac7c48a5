"""Token usage end to end: what the model reported, through the real
``iac-code a2a``, counted as AG-UI 1.0 counts it (``events/lifecycle.mdx#token-usage``).

The scripted model reports cache reads inside its prompt count and reasoning
tokens inside its completion count, as OpenAI does. The runtime forwards the
cache reads and drops the reasoning count; its ``totalTokens`` adds the cache
reads a second time. The run must say: input and output as the provider
counted them, cache reads as a part of the input, a computed total, no
reasoning count it has no data for, and a resumed run only its own calls.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.adapter import RunningAdapter, run_body
from tests.support.model_stub import ModelStub, RecordedCall

CACHED, REASONING = 40, 7


def expected(calls: list[RecordedCall]) -> dict[str, Any]:
    """One TokenUsage entry summing what the stub reported for these calls."""
    reports = [call.usage for call in calls]
    assert calls and all(report is not None for report in reports)
    inputs = sum(r["prompt_tokens"] for r in reports if r)
    outputs = sum(r["completion_tokens"] for r in reports if r)
    cached = sum(r["prompt_tokens_details"]["cached_tokens"] for r in reports if r)
    return {"inputTokens": inputs, "outputTokens": outputs, "cachedInputTokens": cached,
            "totalTokens": inputs + outputs}


def counts(entry: dict[str, Any]) -> dict[str, Any]:
    assert entry["provider"] == "openai" and isinstance(entry["model"], str), entry
    return {key: value for key, value in entry.items() if key not in ("provider", "model")}


async def test_a_turn_reports_cache_reads_inside_its_input_and_a_computed_total(
    iac_adapter: RunningAdapter, iac_workspace: Path, model_stub: ModelStub
) -> None:
    text = f"[scenario:normal cached={CACHED} reasoning={REASONING}] usage please"
    before = len(model_stub.calls)
    events = (await iac_adapter.run(run_body(thread_id="e2e-usage", text=text, cwd=str(iac_workspace)))).events()
    calls = [call for call in model_stub.calls[before:] if call.contains("usage please")]
    (entry,) = events[-1]["usage"]
    assert counts(entry) == expected(calls)
    assert "reasoningTokens" not in entry, "the runtime does not forward it: no zero without data"


async def test_a_resumed_turn_reports_only_the_calls_it_made(
    iac_adapter: RunningAdapter, iac_workspace: Path, model_stub: ModelStub
) -> None:
    text = f"[scenario:permission file=paid.txt cached={CACHED} reasoning={REASONING}] write it"
    before = len(model_stub.calls)
    body = run_body(thread_id="e2e-usage-resume", text=text, cwd=str(iac_workspace))
    asked = (await iac_adapter.run(body)).events()
    asking_calls = model_stub.calls[before:]
    (interrupt,) = asked[-1]["outcome"]["interrupts"]
    (entry,) = asked[-1]["usage"]
    assert counts(entry) == expected(asking_calls)

    middle = len(model_stub.calls)
    resume = run_body(thread_id="e2e-usage-resume", text=None, cwd=str(iac_workspace))
    resume["resume"] = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "allow_once"}}]
    resumed = (await iac_adapter.run(resume)).events()
    assert resumed[-1]["outcome"] == {"type": "success"}
    resumed_calls = model_stub.calls[middle:]
    assert [call.reply for call in resumed_calls] == ["tool-result"]
    (entry,) = resumed[-1]["usage"]
    assert counts(entry) == expected(resumed_calls), "the interrupted run's call is not counted again"
    assert (iac_workspace / "paid.txt").exists()
