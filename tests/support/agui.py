"""How tests read and judge an AG-UI stream, the way real clients do.

Every stream a test receives goes through :func:`check_stream`: the SSE
framing rules, the ``ag-ui-protocol`` 1.0 models for every event, the
ordering rules of ``verifyEvents`` in ``@ag-ui/client``, and no ``null`` in
any optional field; then :func:`judge`, the one place where every capture
(unit, e2e, interop) meets the AG-UI 1.0 stream checker of
:mod:`tests.support.stream_rules`, in the profile the adapter serves.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import attrs
from ag_ui.core import Event
from pydantic import TypeAdapter

from aguiadapter.protocol.profile import DEFAULT_PROFILE

from . import stream_rules

_EVENT = TypeAdapter(Event)


def product_profile() -> str:
    """The profile an adapter serves unless told otherwise (``--compat``)."""
    return DEFAULT_PROFILE.value


def _judged(capture: stream_rules.Capture, advertised: str | None) -> None:
    named = advertised if advertised is not None else product_profile()
    profile = stream_rules.profile_named(named) or stream_rules.DEFAULT
    capture = attrs.evolve(capture, profile=profile)
    violations = stream_rules.check(capture)
    assert not violations, f"{len(violations)} AG-UI 1.0 violation(s) ({profile} profile):\n" + "\n".join(
        map(str, violations))


def judge(body: bytes, *, advertised: str | None = None, request: dict[str, Any] | None = None) -> None:
    """The AG-UI 1.0 stream checker over one complete capture; fails listing
    every violation.

    ``advertised`` is the profile the adapter that sent it says it serves (the
    ``profile`` it reports in ``/capabilities`` and ``/health``), or, when the
    capturer does not know it, :func:`product_profile`; every rule is strict
    in that profile.
    """
    _judged(stream_rules.Capture.from_body(body, input=request), advertised)


def judge_events(events: list[dict[str, Any]], *, advertised: str | None = None) -> None:
    """:func:`judge` for a stream built as events (a translator's output)."""
    _judged(stream_rules.Capture(events=events), advertised)


def parse_sse_ids(body: bytes) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """Split an SSE body into its JSON events, their ``id:`` values (one per
    event: a run's events all carry one, growing) and its comment lines."""
    text = body.decode()
    assert "\r" not in text, "SSE must use LF line endings only"
    events: list[dict[str, Any]] = []
    ids: list[str] = []
    comments: list[str] = []
    for block in text.split("\n\n"):
        if not block:
            continue
        lines = block.split("\n")
        data = [line[len("data: ") :] for line in lines if line.startswith("data: ")]
        given = [line[len("id: ") :] for line in lines if line.startswith("id: ")]
        comments.extend(line for line in lines if line.startswith(":"))
        assert len(data) + len(given) + sum(line.startswith(":") for line in lines) == len(lines), block
        if data:
            events.append(json.loads("\n".join(data)))
            ids.extend(given)
        else:
            assert not given, "an id on a comment (heartbeats carry none)"
    if ids:
        assert len(ids) == len(events), "every event of a run carries an id"
        numbers = [int(value) for value in ids]
        assert numbers == sorted(set(numbers)), f"ids must grow: {ids}"
    return events, ids, comments


def parse_sse(body: bytes) -> tuple[list[dict[str, Any]], list[str]]:
    """Split an SSE body into its JSON events and its comment lines."""
    events, _, comments = parse_sse_ids(body)
    return events, comments


def _assert_no_null(value: Any, path: str) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            assert item is not None, f"null at {path}.{key}"
            _assert_no_null(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _assert_no_null(item, f"{path}[{index}]")


def check_models(events: list[dict[str, Any]]) -> None:
    """Each event parses with the AG-UI 1.0 models and carries no null."""
    for event in events:
        _EVENT.validate_python(event)
        if event["type"] != "CUSTOM":
            _assert_no_null(event, event["type"])


class _Order:
    def __init__(self) -> None:
        self.in_run = False
        self.texts: set[str] = set()
        self.reasoning: set[str] = set()
        self.reasoning_messages: set[str] = set()
        self.tools: set[str] = set()
        self.steps: set[str] = set()
        self.terminals = 0

    def open_spans(self) -> list[str]:
        return sorted(
            self.texts | self.reasoning | self.reasoning_messages | self.tools | self.steps
        )

    def feed(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind == "RUN_STARTED":
            assert not self.in_run, "RUN_STARTED inside an open run"
            self.in_run = True
            return
        assert self.in_run, f"{kind} outside a run"
        if kind in ("RUN_FINISHED", "RUN_ERROR"):
            if kind == "RUN_FINISHED":
                assert not self.open_spans(), f"open at RUN_FINISHED: {self.open_spans()}"
            self.in_run = False
            self.terminals += 1
            return
        self._span(kind, event)

    def _span(self, kind: str, event: dict[str, Any]) -> None:
        table = {
            "TEXT_MESSAGE": (self.texts, "messageId"),
            "REASONING_MESSAGE": (self.reasoning_messages, "messageId"),
            "TOOL_CALL": (self.tools, "toolCallId"),
        }
        for prefix, (open_set, key) in table.items():
            if kind.startswith(prefix + "_") and kind != "TOOL_CALL_RESULT":
                ident = event[key]
                if kind.endswith("_START"):
                    assert ident not in open_set, f"second {kind} for {ident}"
                    open_set.add(ident)
                else:
                    assert ident in open_set, f"{kind} for {ident} that is not open"
                    if kind.endswith("_END"):
                        open_set.remove(ident)
                return
        if kind == "REASONING_START":
            assert event["messageId"] not in self.reasoning
            self.reasoning.add(event["messageId"])
        elif kind == "REASONING_END":
            self.reasoning.remove(event["messageId"])
        elif kind == "STEP_STARTED":
            assert event["stepName"] not in self.steps, "duplicate open step"
            self.steps.add(event["stepName"])
        elif kind == "STEP_FINISHED":
            self.steps.remove(event["stepName"])


def check_order(events: list[dict[str, Any]]) -> None:
    """The ordering rules: one run, balanced spans, exactly one terminal event."""
    assert events, "empty stream"
    order = _Order()
    for event in events:
        order.feed(event)
    assert order.terminals == 1, f"{order.terminals} terminal events"
    assert not order.in_run, "the run was never ended"
    assert events[-1]["type"] in ("RUN_FINISHED", "RUN_ERROR"), "events after the terminal event"


def check_stream(
    body: bytes, *, advertised: str | None = None, request: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Parse and judge one run's SSE body (:func:`judge` says how the profile
    is chosen; ``request`` is the ``RunAgentInput`` it answers); returns its events."""
    events, _ = parse_sse(body)
    check_models(events)
    check_order(events)
    judge(body, advertised=advertised, request=request)
    return events


def texts(events: list[dict[str, Any]]) -> str:
    """All assistant text of a stream, concatenated."""
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


def types(events: list[dict[str, Any]]) -> list[str]:
    """The event types, in order."""
    return [e["type"] for e in events]


#: What a pipeline step's work shows as: its text, its reasoning, its tool calls.
STEP_WORK = frozenset({"TEXT_MESSAGE_CONTENT", "REASONING_MESSAGE_CONTENT", "TOOL_CALL_START", "TOOL_CALL_RESULT"})


def assert_content_inside_steps(
    events: list[dict[str, Any]], kinds: frozenset[str] = frozenset({"TEXT_MESSAGE_CONTENT"})
) -> None:
    """Pipeline text (or any of ``kinds``) is work of a step: it never streams outside one."""
    open_steps: set[str] = set()
    for event in events:
        if event["type"] == "STEP_STARTED":
            open_steps.add(event["stepName"])
        elif event["type"] == "STEP_FINISHED":
            open_steps.discard(event["stepName"])
        elif event["type"] in kinds:
            assert open_steps, f"{event['type']} outside any step: {event}"


def assert_no_empty_step(events: list[dict[str, Any]]) -> None:
    """A step announced only to close at once did no visible work."""
    for before, after in itertools.pairwise(events):
        if before["type"] == "STEP_STARTED" and after["type"] == "STEP_FINISHED":
            assert before["stepName"] != after["stepName"], f"empty step {before['stepName']}"


def interrupts_of(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The interrupts a run ended with (none when it did not end interrupted)."""
    last = events[-1]
    assert last["type"] == "RUN_FINISHED", last
    outcome = last["outcome"]
    return list(outcome["interrupts"]) if outcome["type"] == "interrupt" else []
