"""Span bookkeeping: what is open in the current run, and how to close it.

AG-UI requires that no text message, reasoning span, tool call or step is open
when a run ends. :class:`SpanTracker` opens spans on demand and hands out the
closing events, so the translator never has to remember what it left open.
"""

from __future__ import annotations

from ..protocol.events import Event


class SpanTracker:
    """Open AG-UI spans of one run, with id allocation for new messages."""

    __slots__ = (
        "_counter", "_prefix", "keyed_texts", "open_steps", "open_tools", "reasoning_id", "started_tools", "text_id",
    )

    def __init__(self, id_prefix: str) -> None:
        self._prefix = id_prefix
        self._counter = 0
        self.text_id: str | None = None
        #: Parallel text streams (pipeline candidates), by stream key.
        self.keyed_texts: dict[str, str] = {}
        self.reasoning_id: str | None = None
        self.open_tools: dict[str, str] = {}
        #: Every tool call started in this run (open or ended).
        self.started_tools: set[str] = set()
        self.open_steps: list[str] = []

    def snapshot(self) -> tuple[object, ...]:
        """The open spans as they are now, for :meth:`restore`."""
        return (self.text_id, dict(self.keyed_texts), self.reasoning_id, dict(self.open_tools),
                set(self.started_tools), list(self.open_steps))

    def restore(self, snapshot: tuple[object, ...]) -> None:
        """Back to a :meth:`snapshot`: spans opened by events that were
        never sent are forgotten (ids already given out stay used)."""
        text_id, keyed, reasoning_id, tools, started, steps = snapshot
        self.text_id = text_id  # type: ignore[assignment]
        self.keyed_texts = keyed  # type: ignore[assignment]
        self.reasoning_id = reasoning_id  # type: ignore[assignment]
        self.open_tools = tools  # type: ignore[assignment]
        self.started_tools = started  # type: ignore[assignment]
        self.open_steps = steps  # type: ignore[assignment]

    def new_id(self, kind: str) -> str:
        """A message id unique within the thread (the prefix holds the run id)."""
        self._counter += 1
        return f"{self._prefix}-{kind}{self._counter}"

    def open_text(self, out: list[Event]) -> str:
        """Return the open assistant message id, opening one if needed."""
        if self.text_id is None:
            self.close_reasoning(out)
            self.text_id = self.new_id("m")
            out.append({"type": "TEXT_MESSAGE_START", "messageId": self.text_id, "role": "assistant"})
        return self.text_id

    def lone_text(self) -> str | None:
        """The open assistant message when nothing else is open (no
        reasoning, tool call, step or parallel stream), else ``None``."""
        if self.keyed_texts or self.reasoning_id is not None or self.open_tools or self.open_steps:
            return None
        return self.text_id

    def close_text(self, out: list[Event]) -> None:
        """Close the open assistant message, if any."""
        if self.text_id is not None:
            out.append({"type": "TEXT_MESSAGE_END", "messageId": self.text_id})
            self.text_id = None

    def open_keyed_text(self, out: list[Event], key: str) -> str:
        """The open message of one parallel text stream, opened if needed."""
        message_id = self.keyed_texts.get(key)
        if message_id is None:
            self.close_reasoning(out)
            message_id = self.keyed_texts[key] = self.new_id("m")
            out.append({"type": "TEXT_MESSAGE_START", "messageId": message_id, "role": "assistant"})
        return message_id

    def close_keyed_texts(self, out: list[Event]) -> None:
        """Close every parallel text stream."""
        for message_id in self.keyed_texts.values():
            out.append({"type": "TEXT_MESSAGE_END", "messageId": message_id})
        self.keyed_texts.clear()

    def open_reasoning(self, out: list[Event]) -> str:
        """Return the open reasoning message id, opening span and message if needed."""
        if self.reasoning_id is None:
            self.close_text(out)
            self.close_keyed_texts(out)
            rid = self.reasoning_id = self.new_id("r")
            out.append({"type": "REASONING_START", "messageId": rid})
            out.append({"type": "REASONING_MESSAGE_START", "messageId": rid, "role": "reasoning"})
        return self.reasoning_id

    def close_reasoning(self, out: list[Event]) -> None:
        """Close the open reasoning message and its span, if any."""
        rid = self.reasoning_id
        if rid is not None:
            out.append({"type": "REASONING_MESSAGE_END", "messageId": rid})
            out.append({"type": "REASONING_END", "messageId": rid})
            self.reasoning_id = None

    def close_messages(self, out: list[Event]) -> None:
        """Close text and reasoning (a tool call or a step boundary follows)."""
        self.close_text(out)
        if self.keyed_texts:
            self.close_keyed_texts(out)
        self.close_reasoning(out)

    def open_tool(self, out: list[Event], tool_call_id: str, name: str) -> None:
        """Start a tool call unless it is already open."""
        if tool_call_id in self.open_tools:
            return
        self.close_messages(out)
        self.open_tools[tool_call_id] = name
        self.started_tools.add(tool_call_id)
        out.append({"type": "TOOL_CALL_START", "toolCallId": tool_call_id, "toolCallName": name})

    def close_tool(self, out: list[Event], tool_call_id: str) -> None:
        """End a tool call's argument phase, if it is open."""
        if self.open_tools.pop(tool_call_id, None) is not None:
            out.append({"type": "TOOL_CALL_END", "toolCallId": tool_call_id})

    def open_step(self, out: list[Event], name: str, *, close_messages: bool = True) -> None:
        """Start a step unless a step of that name is open (by default the
        open messages end first: they belong to what came before)."""
        if name not in self.open_steps:
            if close_messages:
                self.close_messages(out)
            self.open_steps.append(name)
            out.append({"type": "STEP_STARTED", "stepName": name})

    def close_step(self, out: list[Event], name: str) -> None:
        """Finish an open step."""
        if name not in self.open_steps:
            return
        self.close_messages(out)
        self.open_steps.remove(name)
        out.append({"type": "STEP_FINISHED", "stepName": name})

    def close_all(self, out: list[Event]) -> None:
        """Close everything, innermost first, before a terminal event."""
        self.close_messages(out)
        for tool_call_id in list(self.open_tools):
            self.close_tool(out, tool_call_id)
        for name in reversed(self.open_steps):
            out.append({"type": "STEP_FINISHED", "stepName": name})
        self.open_steps.clear()
