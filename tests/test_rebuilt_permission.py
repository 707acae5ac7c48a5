"""A permission rebuilt from the runtime's checkpoint (nobody read its own
words) shows what it gates as the runtime would: a command's head and tail,
file contents as a fingerprint, and says it was rebuilt."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from aguiadapter.protocol.interrupts import build_interrupt
from aguiadapter.runtime.checkpoints import waiting_permission
from aguiadapter.runtime.tool_summary import SUMMARY_LIMIT

FIXTURES = Path(__file__).parent / "fixtures"
TASK, CONTEXT = "task-1", "ctx-1"

#: 370 characters, the destructive part at the end (the prompt cut at 300 once hid it).
LONG_COMMAND = (
    "cd /srv/apps1 && " + "echo checking quota for the region cn-hangzhou && " * 5
    + "aliyun ecs DescribeInstances --RegionId cn-hangzhou && aliyun ecs DeleteInstance --InstanceId i-bp1f00d"
)


def rebuilt(tool_name: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    """The AG-UI interrupt of a permission rebuilt for this tool call."""
    checkpoint = {"phase": "WAITING", "taskId": TASK, "contextId": CONTEXT, "toolUseId": "call-1",
                  "inputId": "permission-1", "toolName": tool_name}
    envelope = waiting_permission([checkpoint], TASK, CONTEXT, {"id": "call-1", "name": tool_name,
                                                                "input": tool_input})
    assert envelope is not None
    return build_interrupt(envelope.fields, expires_at=2_000_000_000)


def recorded_calls() -> list[tuple[str, dict[str, Any], str]]:
    """(tool, input, the runtime's safeSummary) of every permission recorded
    with its tool call: the session recovery reads of the multi-input
    recordings, and the recorded session of the history fixture."""
    found: dict[str, tuple[str, dict[str, Any], str]] = {}
    documents = [json.loads(line) for path in sorted((FIXTURES / "a2a-multi-input").glob("*session-recovery*.jsonl"))
                 for line in path.read_text(encoding="utf-8").splitlines()]
    documents.append(json.loads((FIXTURES / "history" / "iac-code-0.16.0.json").read_text(encoding="utf-8")))
    for document in documents:
        uses: dict[str, tuple[str, dict[str, Any]]] = {}
        summaries: dict[str, str] = {}
        _collect(document, uses, summaries)
        for tool_use_id, summary in summaries.items():
            if tool_use_id in uses:
                found[summary] = (*uses[tool_use_id], summary)
    return list(found.values())


def _collect(node: Any, uses: dict[str, tuple[str, dict[str, Any]]], summaries: dict[str, str]) -> None:
    if isinstance(node, dict):
        if node.get("type") == "tool_use" and isinstance(node.get("input"), dict):
            uses[node["id"]] = (node["name"], node["input"])
        if isinstance(node.get("safeSummary"), str) and isinstance(node.get("toolUseId"), str):
            summaries[node["toolUseId"]] = node["safeSummary"]
        for value in node.values():
            _collect(value, uses, summaries)
    elif isinstance(node, list):
        for value in node:
            _collect(value, uses, summaries)


def test_the_recordings_hold_tool_calls_with_their_summaries() -> None:
    assert {tool for tool, _, _ in recorded_calls()} == {"bash", "write_file"}


@pytest.mark.parametrize(("tool", "tool_input", "summary"), recorded_calls())
def test_a_rebuilt_summary_is_the_one_the_runtime_wrote(tool: str, tool_input: dict[str, Any], summary: str) -> None:
    assert rebuilt(tool, tool_input)["metadata"]["safeSummary"] == summary


def test_a_long_command_keeps_its_end_in_the_question_and_the_summary() -> None:
    assert len(LONG_COMMAND) == 370
    interrupt = rebuilt("bash", {"command": LONG_COMMAND, "description": "clean up"})
    assert "aliyun ecs DeleteInstance --InstanceId i-bp1f00d" in interrupt["message"]
    assert LONG_COMMAND in interrupt["message"], "370 characters are shown whole to the person"
    summary = json.loads(interrupt["metadata"]["safeSummary"].removeprefix("bash: "))
    assert summary["command"]["length"] == 370 and summary["command"]["truncated"] is True
    assert summary["command"]["prefix"].startswith("cd /srv/apps1 && ")
    assert summary["command"]["suffix"].endswith("aliyun ecs DeleteInstance --InstanceId i-bp1f00d")


def test_a_very_long_command_shows_its_head_and_tail_and_how_much_is_left_out() -> None:
    command = "echo start && " + "true && " * 2000 + "rm -rf /srv/data"
    message = rebuilt("bash", {"command": command})["message"]
    assert message.startswith("Allow once? bash: echo start && ") and message.endswith("rm -rf /srv/data")
    assert f"[… {len(command) - 960} characters …]" in message and len(message) < 1100


def test_file_contents_are_a_fingerprint_never_text() -> None:
    content = "db_password_hint: ask ops\n" * 40
    interrupt = rebuilt("write_file", {"path": "config/app.yml", "content": content})
    shown = json.dumps(interrupt)
    assert "ask ops" not in shown
    fingerprint = "sha256:" + hashlib.sha256(content.encode()).hexdigest()[:16]
    assert interrupt["metadata"]["safeSummary"] == (
        f'write_file: {{"content":{{"fingerprint":"{fingerprint}","length":{len(content)},"type":"str"}},'
        '"path":"config/app.yml"}')
    assert interrupt["message"] == "Allow once? write_file: config/app.yml"


def test_the_metadata_says_the_approval_was_rebuilt() -> None:
    metadata = rebuilt("bash", {"command": "ls"})["metadata"]
    assert metadata["rebuilt"] is True and metadata["title"] == "Run bash"


def test_credentials_in_a_command_or_a_secret_field_are_not_shown() -> None:
    interrupt = rebuilt("bash", {"command": "curl -H 'Authorization: Bearer abcdefghijkl0123' https://api.example",
                                 "api_token": "tok-9f8e7d6c5b4a"})
    shown = json.dumps(interrupt)
    assert "abcdefghijkl0123" not in shown and "tok-9f8e7d6c5b4a" not in shown
    assert "https://api.example" in interrupt["message"]


def test_a_hostile_tool_input_is_described_in_bounded_work() -> None:
    nested: dict[str, Any] = {}
    for _ in range(50_000):  # far deeper than any recursion limit
        nested = {"x": nested}
    wide = {f"field-{n}": "v" * 10 for n in range(10_000)}
    for tool_input in ({"deep": nested}, wide):
        summary = rebuilt("mcp_tool", tool_input)["metadata"]["safeSummary"]
        assert len(summary) <= SUMMARY_LIMIT and '"truncated":true' in summary
