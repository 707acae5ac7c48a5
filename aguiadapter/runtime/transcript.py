"""The iac-code session transcript, read for what a client did not see (pure).

``GET /iac-code/session/recovery`` returns the session's messages, each
``{role, content: [blocks]}`` with ``text``, ``tool_use`` (``id``, ``name``)
and ``tool_result`` (``tool_use_id``, ``content``, ``is_error``) blocks. When
a stream of ours broke after the runtime took an answer, the transcript is
the only record of what followed: the gated tool's result and the reply.
(iac-code does not update the A2A task of a stream whose client went away:
``GetTask`` still shows the old request for input.)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import attrs


@attrs.frozen
class ToolResult:
    """A tool call's outcome, as the transcript has it."""

    tool_use_id: str
    name: str | None
    content: Any
    is_error: bool


@attrs.frozen
class ReplyText:
    """Text the assistant wrote."""

    text: str


TranscriptItem = ToolResult | ReplyText


def _blocks(messages: Iterable[Mapping[str, Any]]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for message in messages:
        role = str(message.get("role") or "")
        for block in message.get("content") or ():
            if isinstance(block, Mapping):
                yield role, block


def has_result(messages: Sequence[Mapping[str, Any]], tool_use_id: str) -> bool:
    """Whether the tool call has a result: its gating input was answered."""
    return any(
        block.get("type") == "tool_result" and block.get("tool_use_id") == tool_use_id
        for _, block in _blocks(messages)
    )


def after_answers(messages: Sequence[Mapping[str, Any]], tool_use_ids: Iterable[str]) -> list[TranscriptItem]:
    """What happened from the first result of these tool calls on: tool
    results (with the called tool's name) and the assistant's text."""
    wanted = set(tool_use_ids)
    names: dict[str, str] = {}
    found: list[TranscriptItem] = []
    started = False
    for role, block in _blocks(messages):
        kind = block.get("type")
        if kind == "tool_use" and isinstance(block.get("id"), str):
            names[str(block["id"])] = str(block.get("name") or "tool")
        elif kind == "tool_result":
            tool_use_id = str(block.get("tool_use_id") or "")
            started = started or tool_use_id in wanted
            if started:
                found.append(ToolResult(tool_use_id, names.get(tool_use_id), block.get("content"),
                                        block.get("is_error") is True))
        elif kind == "text" and started and role == "assistant":
            text = block.get("text")
            if isinstance(text, str) and text:
                found.append(ReplyText(text))
    return found


def open_tool_uses(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """The tool calls of the transcript that have no result yet, in order:
    each waits for something (an input gating it, or its own run)."""
    called: list[str] = []
    answered: set[str] = set()
    for _, block in _blocks(messages):
        kind = block.get("type")
        if kind == "tool_use" and isinstance(block.get("id"), str):
            called.append(str(block["id"]))
        elif kind == "tool_result":
            answered.add(str(block.get("tool_use_id") or ""))
    return [tool_use_id for tool_use_id in called if tool_use_id not in answered]


def tool_call(messages: Sequence[Mapping[str, Any]], tool_use_id: str) -> Mapping[str, Any] | None:
    """The transcript's ``tool_use`` block of that id (``{id, name, input}``)."""
    for _, block in _blocks(messages):
        if block.get("type") == "tool_use" and block.get("id") == tool_use_id:
            return block
    return None
