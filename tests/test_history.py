"""The projection of an iac-code transcript to AG-UI messages, and paging by turn (pure)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ag_ui.core import Message
from pydantic import TypeAdapter

from aguiadapter.runtime.history import Turn, page, parse_cursor, project, tool_calls_with_results
from tests.support.conversation import TURNS, live_tool_call_ids

MESSAGES = TypeAdapter(list[Message])


def user(content: Any, **metadata: Any) -> dict[str, Any]:
    return {"role": "user", "content": content, "metadata": metadata}


def assistant(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": list(blocks), "metadata": {}}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_use(call_id: str, name: str = "read_file", **arguments: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def tool_result(call_id: str, content: str, is_error: bool = False) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": content, "is_error": is_error}


def flat(turns: list[Turn]) -> list[dict[str, Any]]:
    return [message for turn in turns for message in turn.messages]


TRANSCRIPT = [
    user("<system-reminder>\nRelevant persistent memories recalled for this conversation:\n\nx\n</system-reminder>",
         type="recalled_memory"),
    user("read the notes"),
    assistant({"type": "thinking", "thinking": "I should read it."}, text("Reading."),
              tool_use("toolu_1", path="notes.txt")),
    user([tool_result("toolu_1", "hello notes")]),
    assistant(text("The notes say hello.")),
    user("[Conversation Summary]\nthe user read notes", type="compaction_summary", preserved_tail=2),
    user([text("what is in this picture?"), {"type": "image", "media_type": "image/png", "data": "iVBORw0KGgo="}]),
    assistant(tool_use("toolu_2", "bash", command="false"), tool_use("toolu_3", "bash", command="true")),
    user([tool_result("toolu_2", "exit 1", is_error=True), tool_result("toolu_3", "ok")]),
    assistant({"type": "redacted_thinking", "data": "opaque"}, text("A cat.")),
]


def test_every_visible_message_in_order_parses_as_ag_ui() -> None:
    turns = project(TRANSCRIPT)
    messages = flat(turns)
    MESSAGES.validate_python(messages)
    assert [(message["role"], message.get("content")) for message in messages] == [
        ("user", "read the notes"),
        ("reasoning", "I should read it."),
        ("assistant", "Reading."),
        ("assistant", None),
        ("tool", "hello notes"),
        ("assistant", "The notes say hello."),
        ("user", [{"type": "text", "text": "what is in this picture?"},
                  {"type": "image", "source": {"type": "data", "value": "iVBORw0KGgo=", "mimeType": "image/png"}}]),
        ("assistant", None),
        ("assistant", None),
        ("tool", "exit 1"),
        ("tool", "ok"),
        ("assistant", "A cat."),
    ]
    assert len(turns) == 2 and [turn.index for turn in turns] == [0, 1]


def test_tool_calls_keep_the_runtimes_ids_and_meet_their_results() -> None:
    messages = flat(project(TRANSCRIPT))
    assert list(tool_calls_with_results(messages)) == [
        ("toolu_1", messages[4]["id"]), ("toolu_2", messages[9]["id"]), ("toolu_3", messages[10]["id"]),
    ]
    call = messages[3]
    # The id an AG-UI client gives the message of a TOOL_CALL_START without a parent.
    assert call["id"] == "toolu_1"
    assert call["toolCalls"] == [
        {"id": "toolu_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "notes.txt"}'}}
    ]
    assert messages[9]["error"] == "exit 1" and "error" not in messages[10]


@pytest.mark.parametrize(
    "row",
    [
        user("remember: x", type="recalled_memory"),
        user("clean up stack-1", type="pipeline_cleanup_prompt"),
        user("<skill-name>deploy</skill-name> context", type="internal-skill-context"),
        user("<skill-name>deploy</skill-name>\nbody"),
        user("[Pipeline Handoff Context]\nstep 2"),
        {"role": "user", "content": "[Conversation Summary]\nold", "version": "0.8.0", "metadata": {}},
        user("Rollback cleanup required: leftover resource stack-9"),
    ],
)
def test_rows_written_for_the_model_stay_hidden(row: dict[str, Any]) -> None:
    assert flat(project([user("hi"), row, assistant(text("hello"))])) == flat(project([user("hi"),
                                                                                      assistant(text("hello"))]))


def test_a_user_who_writes_like_a_summary_is_still_shown() -> None:
    row = {"role": "user", "content": "[Conversation Summary] is my title", "version": "0.16.0", "metadata": {}}
    assert flat(project([row]))[0]["content"] == "[Conversation Summary] is my title"


def test_ids_are_stable_as_the_conversation_grows_and_a_summary_is_inserted() -> None:
    before = flat(project(TRANSCRIPT[:5]))
    grown = [*TRANSCRIPT[:4], user("[Conversation Summary]\nx", type="compaction_summary"), *TRANSCRIPT[4:]]
    after = flat(project([*grown, user("next"), assistant(text("sure"))]))
    assert after[: len(before)] == before
    assert len({message["id"] for message in after}) == len(after), "ids are unique"


def many_turns(count: int) -> list[Turn]:
    rows: list[dict[str, Any]] = []
    for n in range(count):
        rows += [user(f"question {n}"), assistant(text(f"answer {n} " + "x" * 100))]
    return project(rows)


def test_pages_reach_the_first_turn_and_cursors_survive_new_turns() -> None:
    turns = many_turns(10)
    first = page(turns, 3)
    assert [message["content"] for message in first.messages[::2]] == ["question 7", "question 8", "question 9"]
    assert first.before is not None and first.turns == 3
    grown = many_turns(12)  # two more turns arrive meanwhile
    second = page(grown, 3, first.before)
    assert [message["content"] for message in second.messages[::2]] == ["question 4", "question 5", "question 6"]
    seen = second.messages + first.messages
    cursor = second.before
    while cursor is not None:
        older = page(grown, 3, cursor)
        seen = older.messages + seen
        cursor = older.before
    assert [message["content"] for message in seen[::2]] == [f"question {n}" for n in range(10)]


def test_the_byte_budget_cuts_pages_but_always_sends_one_turn() -> None:
    turns = many_turns(5)
    size = turns[0].size
    assert page(turns, 5, byte_budget=size * 2).turns == 2
    assert page(turns, 5, byte_budget=1).turns == 1
    assert page(turns, 5, byte_budget=None).turns == 5


@pytest.mark.parametrize("cursor", ["", "t0", "t-1", "x3", "t01", "t" + "9" * 12])
def test_only_cursors_the_pager_makes_are_taken(cursor: str) -> None:
    with pytest.raises(ValueError):
        parse_cursor(cursor)


def test_an_empty_conversation_is_one_empty_page() -> None:
    assert page([], 10) == page(project([]), 10)
    assert page([], 10).messages == [] and page([], 10).before is None


# ------------------------------------------------------- a transcript of the real iac-code
RECORDING = json.loads((Path(__file__).parent / "fixtures" / "history" / "iac-code-0.16.0.json").read_text())


def live(runs: list[list[dict[str, Any]]], kind: str) -> list[dict[str, Any]]:
    return [event for events in runs for event in events if event["type"] == kind]


def test_a_real_transcript_becomes_what_the_live_streams_showed() -> None:
    """Recorded from iac-code 0.16.0 with the AG-UI streams of the same conversation
    (python -m tests.fixtures.history.record): text, an image, reasoning, a read-only
    tool, a permissioned tool answered, a closing turn."""
    runs = RECORDING["runs"]
    turns = project(RECORDING["transcript"])
    messages = flat(turns)
    MESSAGES.validate_python(messages)
    assert len(turns) == len(TURNS)
    users = [message["content"] for message in messages if message["role"] == "user"]
    assert [content if isinstance(content, str) else content[0]["text"] for content in users] == list(TURNS)
    assert users[1][1]["type"] == "image" and users[1][1]["source"]["mimeType"] == "image/png"
    # Every tool call the live streams started, with the live ids, answered by the live results.
    calls = [call for message in messages for call in message.get("toolCalls") or ()]
    assert [call["id"] for call in calls] == live_tool_call_ids(runs)
    for start in live(runs, "TOOL_CALL_START"):
        (message,) = [m for m in messages if m["id"] == start["toolCallId"]]  # the id the client gave it
        assert message["toolCalls"][0]["function"]["name"] == start["toolCallName"]
    args = {event["toolCallId"]: json.loads(event["delta"]) for event in live(runs, "TOOL_CALL_ARGS")}
    assert {call["id"]: json.loads(call["function"]["arguments"]) for call in calls} == args
    results = [(event["toolCallId"], event["content"]) for event in live(runs, "TOOL_CALL_RESULT")]
    assert [(m["toolCallId"], m["content"]) for m in messages if m["role"] == "tool"] == results
    assert all(answer is not None for _, answer in tool_calls_with_results(messages))
    # The reasoning and the replies, as streamed.
    reasoning = "".join(event["delta"] for event in live(runs, "REASONING_MESSAGE_CONTENT"))
    assert [m["content"] for m in messages if m["role"] == "reasoning"] == [reasoning]
    streamed = {}
    for event in live(runs, "TEXT_MESSAGE_CONTENT"):
        streamed[event["messageId"]] = streamed.get(event["messageId"], "") + event["delta"]
    assert [m["content"] for m in messages if m["role"] == "assistant" and "content" in m] == list(streamed.values())


def _recoveries() -> tuple[list[Path], list[Path]]:
    """The recorded recovery documents with messages, and those the route refused."""
    found = sorted((Path(__file__).parent / "fixtures" / "a2a-multi-input").glob("*session-recovery*.jsonl"))
    served = [path for path in found if "messages" in json.loads(path.read_text().splitlines()[0])]
    return served, [path for path in found if path not in served]


SERVED, REFUSED = _recoveries()


def _name(path: Path) -> str:
    return ".".join(path.name.split(".")[:2])


@pytest.mark.parametrize("path", SERVED, ids=[_name(path) for path in SERVED])
def test_every_recorded_recovery_document_projects_to_valid_messages(path: Path) -> None:
    """The recovery documents iac-code 0.16.0 sent at interrupts and after answers
    (tests/fixtures/a2a-multi-input): each tool call once, before its result."""
    rows = json.loads(path.read_text().splitlines()[0])["messages"]
    messages = flat(project(rows))
    MESSAGES.validate_python(messages)
    uses = [block["id"] for row in rows if isinstance(row["content"], list)
            for block in row["content"] if block["type"] == "tool_use"]
    assert [call for call, _ in tool_calls_with_results(messages)] == uses
    seen: set[str] = set()
    for message in messages:
        seen.update(call["id"] for call in message.get("toolCalls") or ())
        if message["role"] == "tool":
            assert message["toolCallId"] in seen, "a result never comes before its call"


def test_after_a_restart_the_recorded_route_refused_until_the_next_turn() -> None:
    """Why HISTORY_UNAVAILABLE exists: every read after a runtime restart in the recordings."""
    assert REFUSED and all("after-restart" in path.name or "after-answer" in path.name for path in REFUSED)
    for path in REFUSED:
        assert json.loads(path.read_text().splitlines()[0]) == {"error": "Execution was not found"}
