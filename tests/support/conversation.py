"""A conversation with every kind of message, driven through the adapter.

Used by the e2e history test and by the recorder of the transcript fixture
(``python -m tests.fixtures.history.record``): text and an image, reasoning,
a read-only tool call, a tool call that asks permission (answered), and a
closing turn, each turn one run (the permission two: the interrupt and the
resume).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .adapter import RunningAdapter, run_body
from .agui import check_stream, interrupts_of
from .envelopes import image_part

#: The user texts of the conversation's turns, in order (for the scripted model of
#: the e2e tests; a turn that mentions a picture carries an image).
TURNS = (
    "[scenario:reasoning] why is the sky blue?",
    "[scenario:normal] what is in this picture?",
    "[scenario:readonly-tool] list the files here",
    "[scenario:permission file=notes.txt] write my notes",
    "[scenario:normal] thanks, that is all",
)
#: The same conversation with the demo runtime's scripts.
DEMO_TURNS = ("think why is the sky blue?", "what is in this picture?", "tool", "permission notes.txt",
              "thanks, that is all")


async def _run(adapter: RunningAdapter, body: dict[str, Any]) -> list[dict[str, Any]]:
    reply = await adapter.run(body)
    assert reply.status == 200, reply.body[:500]
    return check_stream(reply.body)


async def converse(
    adapter: RunningAdapter, thread_id: str, cwd: Path, turns: tuple[str, ...] = TURNS
) -> list[list[dict[str, Any]]]:
    """Hold the conversation of ``turns`` on ``thread_id`` (permissions
    allowed); the events of each run."""
    runs = []
    for text in turns:
        body = run_body(thread_id=thread_id, text=text, cwd=str(cwd))
        if "picture" in text:
            body["messages"][0]["content"] = [{"type": "text", "text": text}, image_part()]
        events = await _run(adapter, body)
        runs.append(events)
        interrupts = interrupts_of(events)
        if interrupts:
            resume = run_body(thread_id=thread_id, text=None, cwd=str(cwd))
            resume["resume"] = [{"interruptId": interrupt["id"], "status": "resolved",
                                 "payload": {"decision": "allow_once"}} for interrupt in interrupts]
            runs.append(await _run(adapter, resume))
    return runs


def live_tool_call_ids(runs: list[list[dict[str, Any]]]) -> list[str]:
    """The tool call ids the live streams started, first sighting, in order."""
    seen: list[str] = []
    for events in runs:
        for event in events:
            if event["type"] in ("TOOL_CALL_START", "TOOL_CALL_RESULT") and event["toolCallId"] not in seen:
                seen.append(event["toolCallId"])
    return seen
