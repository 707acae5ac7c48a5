"""A thread's conversation as AG-UI messages, from the iac-code transcript (pure).

The session transcript (``GET /iac-code/session/recovery``, or the session's
``session.jsonl`` on disk) is a list of rows ``{role, content, metadata}``:
``content`` a string or a list of blocks (``text``, ``image``, ``thinking``,
``redacted_thinking``, ``tool_use``, ``tool_result``). :func:`project` turns
it into AG-UI 1.0 ``Message`` objects (plain JSON, camelCase, no ``null``),
grouped into :class:`Turn` s; :func:`page` cuts the newest turns before a
cursor out of them. No I/O here: :mod:`aguiadapter.service.history_reader`
reads the transcript and calls these.

What a row becomes:

- a user row with ``tool_result`` blocks: one ``tool`` message per result
  (``toolCallId`` is the runtime's ``tool_use_id``; ``error`` repeats the
  content of a failed one). Other blocks of such a row are context the
  runtime added for the model, not something the user typed: not shown.
- any other user row: a ``user`` message (a string, or text and image parts
  when it has images: ``{type: image, source: {type: data, value, mimeType}}``).
  It starts a turn.
- an assistant row: a ``reasoning`` message per ``thinking`` block, an
  ``assistant`` message per run of text, and one ``assistant`` message per
  ``tool_use`` block carrying that one call in ``toolCalls`` (arguments: the
  call's input as JSON text with sorted keys, as iac-code 0.16's live stream
  carries it to ``TOOL_CALL_ARGS``).
  ``redacted_thinking`` is opaque and not shown.

Hidden rows stay hidden, as iac-code's own UIs hide them: rows whose
``metadata.type`` is ``recalled_memory``, ``compaction_summary``,
``pipeline_cleanup_prompt`` or ``internal-skill-context``, and user rows
written before those marks existed (recalled memory, a rollback cleanup
prompt, a skill's context, a pipeline hand-off, a compaction summary of
iac-code before 0.9.1), recognised by their text.

Ids. Tool call ids are the runtime's, the same ``toolCallId`` s the live
stream used; an assistant message carrying a tool call has the call's id as
its own, which is the id an AG-UI client gives the message it creates for
a ``TOOL_CALL_START`` without a parent (so those match the live stream's).
The ids of the other messages of the live stream (the client's user message
ids, ``<runId>-m1``...) are not in the transcript and cannot be derived;
history ids are ``hist-<turn>-<kind><position>``: stable across calls
(turns only grow at the end; hidden rows the runtime inserts, such as a
compaction summary, do not count), and unlike the live ones unless a client
names its runs ``hist-<number>``. A client
that hydrates **replaces** its messages with the snapshot (the AG-UI
reducer of ``MESSAGES_SNAPSHOT`` does), so the differing ids do not
duplicate anything.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

import attrs

from ..fastjson import dumps

Message = dict[str, Any]

#: ``metadata.type`` of the rows iac-code writes for the model, not the user.
HIDDEN_TYPES: Final = frozenset(
    {"recalled_memory", "compaction_summary", "pipeline_cleanup_prompt", "internal-skill-context"}
)
_RECALLED_MEMORY_MARKER: Final = "Relevant persistent memories recalled for this conversation"
_LEGACY_SUMMARY_PREFIX: Final = "[Conversation Summary]"
#: The first iac-code version that marks compaction summaries with metadata.
_SUMMARY_MARKED_SINCE: Final = (0, 9, 1)
_HANDOFF_PREFIX: Final = "[Pipeline Handoff Context]"
_SKILL_CONTEXT: Final = re.compile(r"^\s*<skill-name>[^<]+</skill-name>(?:\s|\Z)")
_VERSION: Final = re.compile(r"^(\d+)\.(\d+)\.(\d+)")
_CLEANUP_ZH: Final = "检测到 pipeline rollback 后仍需要清理的云资源"
_CLEANUP_RESOURCE_WORDS: Final = (
    "leftover resource", "stack-", "delete_complete", "仍需要清理", "待清理资源", "回滚残留资源",
)

_CURSOR: Final = re.compile(r"t([1-9][0-9]{0,8})")


@attrs.frozen
class Turn:
    """One turn: a visible user message and everything after it up to the next."""

    #: Position from the start of the conversation (0: the first turn).
    index: int
    messages: tuple[Message, ...]
    #: Bytes of the messages as compact JSON (what a page of them costs).
    size: int


@attrs.frozen
class Page:
    """The newest turns before a cursor, oldest first, and the cursor to the older ones."""

    messages: list[Message]
    #: Opaque cursor to the turns before these; ``None``: this page reaches the first turn.
    before: str | None
    #: How many turns the page holds.
    turns: int


# ------------------------------------------------------------------ hidden rows
def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(block.get("text") or "")
            for block in content
            if isinstance(block, Mapping) and block.get("type") == "text"
        )
    return ""


def _older_than_summary_marks(version: Any) -> bool:
    match = _VERSION.match(version) if isinstance(version, str) else None
    return match is not None and tuple(int(part) for part in match.groups()) < _SUMMARY_MARKED_SINCE


def _legacy_cleanup(text: str) -> bool:
    if _CLEANUP_ZH in text and "DELETE_COMPLETE" in text:
        return True
    lowered = text.lower()
    return "rollback cleanup required" in lowered and any(word in lowered for word in _CLEANUP_RESOURCE_WORDS)


def is_hidden(row: Mapping[str, Any]) -> bool:
    """Whether a transcript row is written for the model and never shown."""
    metadata = row.get("metadata")
    if isinstance(metadata, Mapping) and metadata.get("type") in HIDDEN_TYPES:
        return True
    if row.get("role") != "user":
        return False
    content = row.get("content")
    if (
        isinstance(content, str)
        and content.startswith(_LEGACY_SUMMARY_PREFIX)
        and _older_than_summary_marks(row.get("version"))
    ):
        return True
    text = _text_of(content)
    return bool(text) and (
        _RECALLED_MEMORY_MARKER in text
        or _legacy_cleanup(text)
        or _SKILL_CONTEXT.match(text) is not None
        or text.startswith(_HANDOFF_PREFIX)
    )


# ------------------------------------------------------------------ projection
def _blocks(content: Any) -> list[Mapping[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [block for block in content if isinstance(block, Mapping)]
    return []


def _as_text(value: Any, sort_keys: bool = False) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=sort_keys)


def _user_content(blocks: Sequence[Mapping[str, Any]]) -> str | list[dict[str, Any]] | None:
    parts: list[dict[str, Any]] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str) and block["text"]:
            parts.append({"type": "text", "text": block["text"]})
        elif kind == "image" and isinstance(block.get("data"), str) and isinstance(block.get("media_type"), str):
            source = {"type": "data", "value": block["data"], "mimeType": block["media_type"]}
            parts.append({"type": "image", "source": source})
    if not parts:
        return None
    if all(part["type"] == "text" for part in parts):
        return "\n".join(part["text"] for part in parts)
    return parts


class _TurnBuilder:
    """The messages of the turn being built, with their ids."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.messages: list[Message] = []
        #: The assistant text being gathered (consecutive text blocks of one row).
        self._text: list[str] = []

    def _id(self, kind: str) -> str:
        return f"hist-{self.index}-{kind}{len(self.messages)}"

    def flush_text(self) -> None:
        if self._text:
            self.messages.append({"id": self._id("m"), "role": "assistant", "content": "\n".join(self._text)})
            self._text = []

    def user(self, content: str | list[dict[str, Any]]) -> None:
        self.messages.append({"id": self._id("u"), "role": "user", "content": content})

    def assistant_row(self, blocks: Sequence[Mapping[str, Any]]) -> None:
        for block in blocks:
            kind = block.get("type")
            if kind == "text":
                text = block.get("text")
                if isinstance(text, str) and text:
                    self._text.append(text)
            elif kind == "thinking":
                thinking = block.get("thinking")
                if isinstance(thinking, str) and thinking:
                    self.flush_text()
                    self.messages.append({"id": self._id("r"), "role": "reasoning", "content": thinking})
            elif kind == "tool_use" and isinstance(block.get("id"), str) and block["id"]:
                self.flush_text()
                arguments = _as_text(block.get("input") or {}, sort_keys=True)
                call = {
                    "id": block["id"],
                    "type": "function",
                    "function": {"name": str(block.get("name") or "tool"), "arguments": arguments},
                }
                self.messages.append({"id": block["id"], "role": "assistant", "toolCalls": [call]})
        self.flush_text()

    def tool_results(self, blocks: Sequence[Mapping[str, Any]]) -> None:
        for block in blocks:
            tool_use_id = block.get("tool_use_id")
            if block.get("type") != "tool_result" or not isinstance(tool_use_id, str) or not tool_use_id:
                continue
            content = _as_text(block.get("content") if block.get("content") is not None else "")
            message: Message = {"id": self._id("t"), "role": "tool", "toolCallId": tool_use_id, "content": content}
            if block.get("is_error") is True:
                message["error"] = content
            self.messages.append(message)

    def turn(self) -> Turn:
        self.flush_text()
        size = sum(len(dumps(message)) for message in self.messages) + len(self.messages)
        return Turn(self.index, tuple(self.messages), size)


def project(transcript: Iterable[Mapping[str, Any]]) -> list[Turn]:
    """The transcript's visible messages, in order, grouped into turns
    (a turn starts at a visible user message)."""
    turns: list[Turn] = []
    current: _TurnBuilder | None = None
    for row in transcript:
        if not isinstance(row, Mapping) or is_hidden(row):
            continue
        role = row.get("role")
        blocks = _blocks(row.get("content"))
        if role == "user" and any(block.get("type") == "tool_result" for block in blocks):
            current = current or _TurnBuilder(len(turns))
            current.tool_results(blocks)
        elif role == "user":
            content = _user_content(blocks)
            if content is None:
                continue
            if current is not None and current.messages:
                turns.append(current.turn())
            current = _TurnBuilder(len(turns))
            current.user(content)
        elif role == "assistant":
            current = current or _TurnBuilder(len(turns))
            current.assistant_row(blocks)
    if current is not None and current.messages:
        turns.append(current.turn())
    return turns


# ------------------------------------------------------------------ paging
def cursor_for(index: int) -> str:
    """The opaque cursor naming the turns before turn ``index``."""
    return f"t{index}"


def parse_cursor(cursor: str | None) -> int | None:
    """The turn index of a cursor (``None``: no cursor, the newest turns);
    ``ValueError`` for anything :func:`cursor_for` did not make."""
    if cursor is None:
        return None
    match = _CURSOR.fullmatch(cursor)
    if match is None:
        raise ValueError("not a history cursor")
    return int(match.group(1))


def page(turns: Sequence[Turn], limit: int, before: str | None = None, byte_budget: int | None = None) -> Page:
    """The newest ``limit`` turns before the cursor ``before`` whose messages
    fit ``byte_budget`` (at least one turn, even a bigger one), oldest first.

    The cursor counts turns from the start of the conversation, so it stays
    valid while new turns are appended. ``ValueError`` for a bad cursor or limit.
    """
    if limit < 1:
        raise ValueError("limit must be at least 1")
    end = parse_cursor(before)
    end = len(turns) if end is None else min(end, len(turns))
    start = end
    spent = 0
    while start > 0 and end - start < limit:
        size = turns[start - 1].size
        if start < end and byte_budget is not None and spent + size > byte_budget:
            break
        spent += size
        start -= 1
    messages = [message for turn in turns[start:end] for message in turn.messages]
    return Page(messages, cursor_for(start) if start > 0 else None, end - start)


def tool_calls_with_results(messages: Iterable[Message]) -> Iterator[tuple[str, str | None]]:
    """Every tool call of ``messages`` with the id of the tool message that
    answers it (``None``: no answer yet, e.g. a call waiting for a permission)."""
    answers = {message["toolCallId"]: message["id"] for message in messages if message.get("role") == "tool"}
    for message in messages:
        for call in message.get("toolCalls") or ():
            yield call["id"], answers.get(call["id"])
