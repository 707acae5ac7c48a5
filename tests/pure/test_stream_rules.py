"""The stream checker (tests/support/stream_rules.py) judged on streams written
for it: every good stream passes, every bad one is caught by exactly the rules
it targets.

The streams are this project's own (tests/fixtures/conformance/), one per
producer rule of the AG-UI 1.0 spec and the cases the spec's consumer corpus
(``spec/1.1/conformance/streams/`` in ag-ui-protocol/ag-ui) pins, written anew:
the corpus asserts what a *client* does, so its files are not copied here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support import stream_rules as sr

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "conformance"
FIXTURES = {path.stem: json.loads(path.read_text()) for path in sorted(CORPUS.glob("*.json"))}


def judge(fixture: dict[str, Any]) -> list[sr.Violation]:
    options = {"profile": fixture["profile"], "input": fixture.get("input")}
    if "body" in fixture:
        return sr.check_body(fixture["body"].encode(), **options)
    return sr.check_events(fixture["stream"], **options)


@pytest.mark.parametrize("name", [n for n in FIXTURES if n.startswith("good-")])
def test_a_good_stream_passes_every_rule(name: str) -> None:
    assert judge(FIXTURES[name]) == []


@pytest.mark.parametrize("name", [n for n in FIXTURES if n.startswith("bad-")])
def test_a_bad_stream_is_caught_by_the_rules_it_targets(name: str) -> None:
    fixture = FIXTURES[name]
    found = judge(fixture)
    assert {v.rule for v in found} == set(fixture["rules"]), "\n".join(map(str, found))


def test_every_rule_has_a_bad_stream_and_names_its_spec_page() -> None:
    targeted = {rule for fixture in FIXTURES.values() for rule in fixture["rules"]}
    for name, page, _ in sr.RULES:
        assert name in targeted, f"no bad stream targets {name}"
        assert page.split("#")[0].endswith(".mdx"), page
    assert len(FIXTURES) == len(list(CORPUS.glob("*.json")))
    assert all(n.startswith(("good-", "bad-")) and FIXTURES[n]["name"] == n for n in FIXTURES)


def test_violations_are_all_reported_not_only_the_first() -> None:
    events = [{"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "x"},
              {"type": "RUN_STARTED", "threadId": "t", "runId": "r"},
              {"type": "RUN_FINISHED", "threadId": "t", "runId": "r", "result": None}]
    rules = {v.rule for v in sr.check_events(events)}
    assert rules == {"first_event", "streaming_discipline", "protocol_version", "no_null"}


def test_only_a_stop_as_run_error_breaks_the_cancelled_runs_rule() -> None:
    stop = FIXTURES["bad-stop-as-run-error"]["stream"]
    assert [v.rule for v in sr.check_events(stop)] == ["cancelled_runs"]
    other = [*stop[:-1], {"type": "RUN_ERROR", "message": "boom", "code": "RUNTIME_ERROR"}]
    assert sr.check_events(other) == []
