"""Token usage as AG-UI 1.0 counts it, from what ``iac-code a2a`` 0.16.0 reports.

The recordings carry the runtime's own ``usage`` metadata (one per model call:
floats, ``provider: "openai"``, ``cachedInputTokens: 0``, a ``totalTokens`` of
its own); the accounting rules are ``events/lifecycle.mdx#token-usage``.
"""

from __future__ import annotations

import copy
from typing import Any

from aguiadapter.translate.usage import UsageLedger
from tests.support.recordings import recorded_objects
from tests.support.stream_rules import check_usage_entries
from tests.pure.test_translator import load, translate


def _usage_reports(name: str) -> list[dict[str, Any]]:
    """The runtime's per-call usage objects of a recording."""
    reports = []
    for result in load(name):
        update = result.get("statusUpdate") or {}
        usage = ((update.get("metadata") or {}).get("iac_code") or {}).get("usage")
        if usage is not None:
            reports.append(usage)
    return reports


def _with_usage(name: str, **changes: Any) -> list[dict[str, Any]]:
    """A recording whose usage reports carry ``changes`` (the shape a provider
    reporting cache reads gives the runtime)."""
    results = copy.deepcopy(load(name))
    for result in results:
        usage = ((result.get("statusUpdate") or {}).get("metadata") or {}).get("iac_code", {}).get("usage")
        if usage is not None:
            usage.update(changes)
    return results


def test_a_recorded_turn_reports_one_entry_with_a_computed_total_and_no_invented_zero() -> None:
    assert len(_usage_reports("04-readonly-tool")) == 2, "the recording has two model calls"
    translator, events = translate(load("04-readonly-tool"))
    assert translator.usage() == [
        {"provider": "openai", "model": "other", "inputTokens": 200, "outputTokens": 6, "totalTokens": 206}
    ]
    # cachedInputTokens: 0.0 is the runtime's default, not the provider's word.
    assert events[-1]["usage"] == translator.usage()
    assert check_usage_entries(events) == []


def test_cache_reads_are_part_of_an_openai_input_never_added_twice() -> None:
    # The runtime's totalTokens adds cache reads to an input that holds them already.
    results = _with_usage("01-normal-text", cachedInputTokens=60.0, totalTokens=160.0 + 1)
    translator, events = translate(results)
    (entry,) = translator.usage()
    (report,) = _usage_reports("01-normal-text")
    output = int(report["outputTokens"])
    assert entry["inputTokens"] == 100 and entry["cachedInputTokens"] == 60
    assert entry["totalTokens"] == 100 + output, "computed, not the runtime's double count"
    assert "reasoningTokens" not in entry, "the runtime forwards none: no zero without data"
    assert check_usage_entries(events) == []


def test_cache_reads_reported_beside_an_anthropic_input_are_added_into_it() -> None:
    results = _with_usage("01-normal-text", provider="anthropic", model="claude", inputTokens=40.0,
                          cachedInputTokens=60.0)
    translator, _ = translate(results)
    (entry,) = translator.usage()
    assert entry["inputTokens"] == 100 and entry["cachedInputTokens"] == 60
    assert entry["totalTokens"] == entry["inputTokens"] + entry["outputTokens"]


def test_one_entry_per_provider_and_model() -> None:
    ledger = UsageLedger()
    for model in ("small", "large", "small"):
        ledger.add({"provider": "openai", "model": model, "inputTokens": 10.0, "outputTokens": 2.0,
                    "totalTokens": 12.0, "cachedInputTokens": 0.0})
    ledger.add({"provider": "anthropic", "model": "small", "inputTokens": 5, "outputTokens": 1})
    assert ledger.entries() == [
        {"provider": "openai", "model": "small", "inputTokens": 20, "outputTokens": 4, "totalTokens": 24},
        {"provider": "openai", "model": "large", "inputTokens": 10, "outputTokens": 2, "totalTokens": 12},
        {"provider": "anthropic", "model": "small", "inputTokens": 5, "outputTokens": 1, "totalTokens": 6},
    ]


def test_a_call_that_reported_nothing_adds_no_entry() -> None:
    ledger = UsageLedger()
    # What the runtime sends for a provider that gave no usage: its zero defaults.
    ledger.add({"provider": "openai", "model": "m", "inputTokens": 0, "outputTokens": 0, "totalTokens": 0,
                "cachedInputTokens": 0})
    ledger.add({"provider": "openai", "model": "m", "inputTokens": "many", "outputTokens": -3})
    assert ledger.entries() == []


def test_reasoning_tokens_a_runtime_sends_stay_a_part_of_the_output() -> None:
    ledger = UsageLedger()
    ledger.add({"provider": "openai", "model": "m", "inputTokens": 10, "outputTokens": 30, "reasoningTokens": 20})
    assert ledger.entries() == [{"provider": "openai", "model": "m", "inputTokens": 10, "outputTokens": 30,
                                 "reasoningTokens": 20, "totalTokens": 40}]


def test_a_resumed_run_reports_only_the_calls_it_made() -> None:
    # 05-permission-allow: .1 asks (one call), .2 answers, .3 is the resumed turn (one call).
    asked, _ = translate(load("05-permission-allow.1"))
    resumed_results = [obj["result"] for obj in recorded_objects("05-permission-allow.3")]
    task_id = resumed_results[0]["statusUpdate"]["taskId"]
    resumed, _ = translate(resumed_results, task_id=task_id)
    (first,), (second,) = _usage_reports("05-permission-allow.1"), _usage_reports("05-permission-allow.3")
    assert asked.usage()[0]["outputTokens"] == int(first["outputTokens"])
    assert resumed.usage() == [{"provider": "openai", "model": "other", "inputTokens": 100,
                                "outputTokens": int(second["outputTokens"]),
                                "totalTokens": 100 + int(second["outputTokens"])}]
