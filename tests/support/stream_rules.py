"""A stream checker built from the producer rules of the released AG-UI 1.0 spec.

Each rule is one function that takes a :class:`Capture` (the SSE body as it
came off the wire, the events in it, and the input that asked for the run)
and returns every :class:`Violation` it finds, never stopping at the first.
Each names the page of ``docs/spec/1.0/`` (ag-ui-protocol/ag-ui) it comes
from. :func:`check` runs them all; :data:`RULES` lists them.

Two profiles (``issue 33``): ``default`` is AG-UI 1.0 to the letter;
``iac-code-agui`` is the ``--compat`` profile, where a run stopped on purpose
ends ``RUN_ERROR`` code ``CANCELLED`` as the protocol reference of
``iac-code agui`` says. Every other rule holds in both.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any, Final

import attrs
from ag_ui.core import Event
from pydantic import BaseModel, TypeAdapter, ValidationError

DEFAULT: Final = "default"
COMPAT: Final = "iac-code-agui"
#: Names a server may advertise for a profile (agui10's ``/health`` says ``ag-ui-1.0``).
PROFILE_NAMES: Final = {DEFAULT: DEFAULT, "ag-ui-1.0": DEFAULT, COMPAT: COMPAT}
#: The version this producer speaks (``RUN_STARTED.protocolVersion``).
OWN_VERSION: Final = "1.0"

_EVENT: TypeAdapter[Any] = TypeAdapter(Event)
_TERMINAL = frozenset({"RUN_FINISHED", "RUN_ERROR"})
_SSE_FIELDS = ("data", "id", "event", "retry")


@attrs.frozen
class Violation:
    """One break of one rule, where it happened."""

    rule: str
    page: str
    message: str
    #: The index of the event in the stream, when one event is at fault.
    index: int | None = None

    def __str__(self) -> str:
        at = f" (event {self.index})" if self.index is not None else ""
        return f"{self.rule} [{self.page}]{at}: {self.message}"


@attrs.frozen
class Capture:
    """A stream as a client received it."""

    events: list[dict[str, Any]]
    #: The raw SSE body (``None`` for a stream given as events).
    body: bytes | None = None
    #: The ``RunAgentInput`` the stream answers, when the capturer knows it.
    input: dict[str, Any] | None = None
    #: ``default`` or ``iac-code-agui``.
    profile: str = DEFAULT
    #: Framing problems found while splitting ``body`` (rule :func:`framing`).
    framing_problems: tuple[str, ...] = ()

    @classmethod
    def from_body(cls, body: bytes, **kwargs: Any) -> Capture:
        """Split an SSE body leniently: what does not parse is a framing finding."""
        events, problems = split_sse(body)
        return cls(events=events, body=body, framing_problems=tuple(problems), **kwargs)


def split_sse(body: bytes) -> tuple[list[dict[str, Any]], list[str]]:
    """The JSON objects of an SSE body, and what breaks the binding's framing."""
    problems: list[str] = []
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return [], [f"not UTF-8: {exc}"]
    if "\r" in text:
        problems.append("a CR in the body: the binding pins LF line endings")
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if text and not text.endswith("\n\n"):
        problems.append("the body does not end with a blank line: its last frame is cut")
    events: list[dict[str, Any]] = []
    for number, block in enumerate(text.split("\n\n")):
        if not block.strip("\n"):
            continue
        data: list[str] = []
        for line in block.split("\n"):
            if line.startswith(":") or not line:
                continue
            name, _, value = line.partition(":")
            if name not in _SSE_FIELDS:
                problems.append(f"frame {number}: line {line[:60]!r} is no SSE field")
            elif name == "data":
                data.append(value[1:] if value.startswith(" ") else value)
        if not data:
            continue
        try:
            event = json.loads("\n".join(data))
        except ValueError as exc:
            problems.append(f"frame {number}: data is not one JSON value: {exc}")
            continue
        if not isinstance(event, dict):
            problems.append(f"frame {number}: data is {type(event).__name__}, not one event object")
            continue
        events.append(event)
    return events, problems


RuleFn = Callable[[Capture], list[Violation]]
RULES: list[tuple[str, str, RuleFn]] = []


def rule(page: str) -> Callable[[RuleFn], RuleFn]:
    """Register a rule under the spec page it comes from."""

    def register(fn: RuleFn) -> RuleFn:
        RULES.append((fn.__name__, page, fn))
        fn.page = page  # type: ignore[attr-defined]
        return fn

    return register


def _v(fn_name: str, message: str, index: int | None = None) -> Violation:
    page = next(page for name, page, _ in RULES if name == fn_name)
    return Violation(fn_name, page, message, index)


def _runs(events: list[dict[str, Any]]) -> Iterator[tuple[int, list[tuple[int, dict[str, Any]]]]]:
    """Each run: (index of its RUN_STARTED, its events up to its terminal one)."""
    current: list[tuple[int, dict[str, Any]]] | None = None
    start = -1
    for index, event in enumerate(events):
        kind = event.get("type")
        if kind == "RUN_STARTED":
            if current is not None:
                yield start, current
            current, start = [(index, event)], index
        elif current is not None:
            current.append((index, event))
            if kind in _TERMINAL:
                yield start, current
                current = None
    if current is not None:
        yield start, current


# ----------------------------------------------------------------- framing


@rule("basic/transports/http-sse.mdx#response")
def framing(capture: Capture) -> list[Violation]:
    """LF line endings; each ``data`` payload exactly one JSON event object."""
    return [_v("framing", problem) for problem in capture.framing_problems]


# ---------------------------------------------------------------- the run


@rule("events/lifecycle.mdx#the-run")
def first_event(capture: Capture) -> list[Violation]:
    """A stream begins with ``RUN_STARTED`` or ``RUN_ERROR``."""
    if not capture.events:
        return [_v("first_event", "an empty stream: no event at all")]
    kind = capture.events[0].get("type")
    if kind not in ("RUN_STARTED", "RUN_ERROR"):
        return [_v("first_event", f"the stream begins with {kind}", 0)]
    return []


@rule("events/lifecycle.mdx#after-a-run-closes")
def after_close(capture: Capture) -> list[Violation]:
    """After ``RUN_FINISHED`` only ``RUN_STARTED`` or one late ``RUN_ERROR``;
    after ``RUN_ERROR`` only ``RUN_STARTED``; no ``RUN_STARTED`` in an active run."""
    found = []
    state = "idle"
    for index, event in enumerate(capture.events):
        kind = event.get("type")
        if kind == "RUN_STARTED":
            if state == "active":
                found.append(_v("after_close", "RUN_STARTED inside an active run", index))
            state = "active"
        elif kind == "RUN_FINISHED":
            if state != "active":
                found.append(_v("after_close", f"RUN_FINISHED with no active run (state {state})", index))
            state = "finished"
        elif kind == "RUN_ERROR":
            if state == "errored":
                found.append(_v("after_close", "RUN_ERROR after RUN_ERROR", index))
            state = "errored"
        elif state in ("finished", "errored"):
            found.append(_v("after_close", f"{kind} after the run closed", index))
    return found


@rule("basic/transports/index.mdx#truncation")
def terminated(capture: Capture) -> list[Violation]:
    """The body ends after the last run's terminal event (else the run is truncated)."""
    if capture.events and capture.events[-1].get("type") not in _TERMINAL:
        last = len(capture.events) - 1
        return [_v("terminated", f"the stream ends on {capture.events[-1].get('type')}: a truncated run", last)]
    return []


@rule("basic/run-input.mdx#identity")
def identity(capture: Capture) -> list[Violation]:
    """Boundary events carry the input's ``threadId``; a run's start and finish
    agree on ``runId``; the requested (last) run echoes the input's ``runId``;
    no ``runId`` twice on the stream (``basic/index.mdx#identifiers``)."""
    found = []
    thread = (capture.input or {}).get("threadId")
    seen_runs: set[str] = set()
    last_run: str | None = None
    for start, run in _runs(capture.events):
        first = run[0][1]
        if first.get("type") != "RUN_STARTED":
            continue
        run_id = first.get("runId")
        if thread is None:
            thread = first.get("threadId")
        if run_id in seen_runs:
            found.append(_v("identity", f"runId {run_id!r} reused on the stream", start))
        seen_runs.add(run_id)
        last_run = run_id
        for index, event in run:
            if event.get("type") not in ("RUN_STARTED", "RUN_FINISHED"):
                continue
            if event.get("threadId") != thread:
                found.append(_v("identity", f"{event['type']} threadId {event.get('threadId')!r}, "
                                            f"not {thread!r}", index))
            if event.get("runId") != run_id:
                found.append(_v("identity", f"RUN_FINISHED runId {event.get('runId')!r} closes run "
                                            f"{run_id!r}", index))
    wanted = (capture.input or {}).get("runId")
    if wanted is not None and last_run is not None and last_run != wanted:
        found.append(_v("identity", f"the requested run is {wanted!r}, the stream's last run {last_run!r}"))
    return found


# ---------------------------------------------------------------- spans


@attrs.define
class _Lanes:
    """What a run has open, per kind of item (spans and messages apart)."""

    #: Open ids per kind, each with the subagent that owns it (``None``: the agent).
    open: dict[str, dict[str, str | None]] = attrs.field(factory=lambda: {kind: {} for kind in _ITEMS.values()})
    #: The item a chunk stream is assembling, per kind: (id, opener fields).
    chunks: dict[str, tuple[str, dict[str, Any]]] = attrs.field(factory=dict)
    done_subagents: set[str] = attrs.field(factory=set)


#: Event-type prefix (or type) → the kind of item it opens and closes.
_ITEMS: Final = {
    "TEXT_MESSAGE": "text message",
    "TOOL_CALL": "tool call",
    "REASONING_MESSAGE": "reasoning message",
    "REASONING": "reasoning span",
    "STEP": "step",
    "SUBAGENT": "subagent",
}
_KEYS: Final = {"text message": "messageId", "tool call": "toolCallId", "reasoning message": "messageId",
                "reasoning span": "messageId", "step": "stepName", "subagent": "subagentRunId"}
_OPENERS: Final = {"TEXT_MESSAGE_START": "text message", "TOOL_CALL_START": "tool call",
                   "REASONING_MESSAGE_START": "reasoning message", "REASONING_START": "reasoning span",
                   "STEP_STARTED": "step", "SUBAGENT_STARTED": "subagent"}
_CONTINUERS: Final = {"TEXT_MESSAGE_CONTENT": "text message", "TOOL_CALL_ARGS": "tool call",
                      "REASONING_MESSAGE_CONTENT": "reasoning message"}
_CLOSERS: Final = {"TEXT_MESSAGE_END": "text message", "TOOL_CALL_END": "tool call",
                   "REASONING_MESSAGE_END": "reasoning message", "REASONING_END": "reasoning span",
                   "STEP_FINISHED": "step", "SUBAGENT_FINISHED": "subagent", "SUBAGENT_ERROR": "subagent"}
_CHUNKS: Final = {"TEXT_MESSAGE_CHUNK": ("text message", ("role", "name")),
                  "TOOL_CALL_CHUNK": ("tool call", ("toolCallName", "parentMessageId")),
                  "REASONING_MESSAGE_CHUNK": ("reasoning message", ())}
#: Standalone events that leave a chunk stream open (``patterns/streaming.mdx#closing-a-chunk-stream``).
_CHUNK_NEUTRAL: Final = frozenset({"RAW", "ACTIVITY_SNAPSHOT", "ACTIVITY_DELTA", "REASONING_ENCRYPTED_VALUE",
                                   "SUBAGENT_STARTED"})


def _span_walk(capture: Capture) -> Iterator[tuple[str, int, str]]:
    """(``discipline`` | ``closed``, index, message) for every span finding."""
    lanes = _Lanes()
    for index, event in enumerate(capture.events):
        kind = event.get("type")
        if kind == "RUN_STARTED":
            lanes = _Lanes()
            continue
        if kind in _TERMINAL:
            lanes.chunks.clear()  # a run-level event ends every chunk stream
            if kind == "RUN_FINISHED":
                for item, ids in lanes.open.items():
                    for ident in sorted(ids):
                        yield "closed", index, f"{item} {ident!r} still open at RUN_FINISHED"
            lanes = _Lanes()
            continue
        if kind in _CHUNKS:
            item = _CHUNKS[kind][0]
            for other in [o for o in lanes.chunks if o != item]:
                del lanes.chunks[other]  # an event of another lane's kind ends its chunk stream
            yield from _chunk(lanes, index, event, *_CHUNKS[kind])
            continue
        if kind not in _CHUNK_NEUTRAL:
            lanes.chunks.clear()  # any other event ends the shorthand; what follows is judged as a triad
        item = _OPENERS.get(kind) or _CONTINUERS.get(kind) or _CLOSERS.get(kind)
        if item is None:
            continue
        ident = event.get(_KEYS[item])
        ids = lanes.open[item]
        owner = event.get("subagentRunId") if item != "subagent" else None
        if kind in _OPENERS:
            if ident in ids:
                yield "discipline", index, f"{kind} for {item} {ident!r}, already open"
            elif item == "subagent" and ident in lanes.done_subagents:
                yield "discipline", index, f"subagent {ident!r} reused after it finished"
            ids[ident] = owner
            continue
        if ident not in ids:
            yield "discipline", index, f"{kind} for {item} {ident!r}, which is not open"
            continue
        if owner is not None and owner != ids[ident]:
            # events/subagents.mdx#ownership: an untagged continuation is fine, a different tag is not.
            yield "discipline", index, f"{kind} for {item} {ident!r} names subagent {owner!r}, " \
                                       f"its opener {ids[ident]!r}"
        if kind in _CLOSERS:
            del ids[ident]
            if item == "subagent":
                lanes.done_subagents.add(ident)


def _chunk(lanes: _Lanes, index: int, event: dict[str, Any], item: str,
           opener_fields: tuple[str, ...]) -> Iterator[tuple[str, int, str]]:
    ident = event.get(_KEYS[item])
    current = lanes.chunks.get(item)
    if current is not None and (ident is None or ident == current[0]):
        for name in opener_fields:
            if name in event and event[name] != current[1].get(name, "assistant" if name == "role" else None):
                yield "discipline", index, f"a {item} chunk repeats {name} as {event[name]!r}, " \
                                           f"its opener said {current[1].get(name)!r}"
        return
    if ident is None:
        yield "discipline", index, f"the first {event['type']} of a {item} carries no {_KEYS[item]}"
        return
    if item == "tool call" and not event.get("toolCallName"):
        yield "discipline", index, f"the first TOOL_CALL_CHUNK of {ident!r} carries no toolCallName"
    if ident in lanes.open[item]:
        yield "discipline", index, f"a chunk opens {item} {ident!r}, already open"
    lanes.chunks[item] = (ident, {name: event[name] for name in opener_fields if name in event})


@rule("basic/patterns/streaming.mdx#open-content-close")
def streaming_discipline(capture: Capture) -> list[Violation]:
    """No second open of an open id; no content or end for an id that is not
    open; chunks carry what opening needs and never contradict their opener
    (also ``events/reasoning.mdx``, ``events/lifecycle.mdx#steps``,
    ``events/subagents.mdx#lifecycle``); a continuation never names another
    owner than its opener (``events/subagents.mdx#ownership``)."""
    return [_v("streaming_discipline", message, index)
            for kind, index, message in _span_walk(capture) if kind == "discipline"]


@rule("events/lifecycle.mdx#several-runs-on-one-stream")
def closed_before_finish(capture: Capture) -> list[Violation]:
    """Everything a run opened (messages, tool calls, reasoning spans and
    messages, steps, subagents) is closed before its ``RUN_FINISHED``."""
    return [_v("closed_before_finish", message, index)
            for kind, index, message in _span_walk(capture) if kind == "closed"]


# ---------------------------------------------------------------- shapes


def _undescribed(model: BaseModel, path: str) -> Iterator[str]:
    for key in model.model_extra or {}:
        yield f"{path}.{key}"
    for name in type(model).model_fields:
        yield from _undescribed_in(getattr(model, name), f"{path}.{name}")


def _undescribed_in(value: Any, path: str) -> Iterator[str]:
    if isinstance(value, BaseModel):
        yield from _undescribed(value, path)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            if isinstance(item, BaseModel):
                yield from _undescribed(item, f"{path}[{index}]")


@rule("basic/versioning.mdx#what-a-producer-owes")
def schema(capture: Capture) -> list[Violation]:
    """Every event validates, strictly (no coercion), against the
    ``ag-ui-protocol`` 1.0.0 models, and carries no member they do not describe
    (``basic/index.mdx#schema``: the schema is the source of truth)."""
    found = []
    for index, event in enumerate(capture.events):
        try:
            model = _EVENT.validate_json(json.dumps(event), strict=True)
        except ValidationError as exc:
            errors = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:3])
            found.append(_v("schema", f"{event.get('type')}: {errors}", index))
            continue
        for path in _undescribed(model, str(event.get("type"))):
            found.append(_v("schema", f"undescribed member {path}", index))
    return found


def _nulls(model: BaseModel, raw: dict[str, Any], path: str) -> Iterator[str]:
    for name, field in type(model).model_fields.items():
        key = field.alias if field.alias in raw else name
        if key not in raw:
            continue
        value = raw[key]
        if value is None:
            if not field.is_required():
                yield f"{path}.{key}"
            continue
        parsed = getattr(model, name)
        if isinstance(parsed, BaseModel) and isinstance(value, dict):
            yield from _nulls(parsed, value, f"{path}.{key}")
        elif isinstance(parsed, list) and isinstance(value, list):
            for i, (item, raw_item) in enumerate(zip(parsed, value, strict=False)):
                if isinstance(item, BaseModel) and isinstance(raw_item, dict):
                    yield from _nulls(item, raw_item, f"{path}.{key}[{i}]")


@rule("basic/index.mdx#absent-means-absent")
def no_null(capture: Capture) -> list[Violation]:
    """An optional field without a value is omitted, never ``null``, at any
    depth; a ``null`` inside open-by-key data (``CUSTOM.value``, metadata,
    state) is data and stays."""
    found = []
    for index, event in enumerate(capture.events):
        try:
            model = _EVENT.validate_python(event)
        except ValidationError:
            continue  # the schema rule reports it
        for path in _nulls(model, event, str(event.get("type"))):
            found.append(_v("no_null", f"null for the optional field {path}", index))
    return found


_VERSION = re.compile(r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$")


@rule("basic/versioning.mdx#version-negotiation")
def protocol_version(capture: Capture) -> list[Violation]:
    """Every ``RUN_STARTED`` declares the producer's own ``MAJOR.MINOR``, never an echo."""
    found = []
    for index, event in enumerate(capture.events):
        if event.get("type") != "RUN_STARTED":
            continue
        version = event.get("protocolVersion")
        if version is None:
            found.append(_v("protocol_version", "RUN_STARTED declares no protocolVersion", index))
        elif not isinstance(version, str) or not _VERSION.match(version):
            found.append(_v("protocol_version", f"protocolVersion {version!r} is not MAJOR.MINOR", index))
        elif version != OWN_VERSION:
            found.append(_v("protocol_version", f"protocolVersion {version!r}, this producer speaks "
                                                f"{OWN_VERSION}", index))
    return found


# ---------------------------------------------------------------- outcomes


@rule("basic/patterns/interrupt-resume.mdx#interrupting")
def interrupt_outcome(capture: Capture) -> list[Violation]:
    """An interrupt outcome carries at least one interrupt, ids unique in the run;
    a cancelled run carries no ``result`` (``events/lifecycle.mdx#cancelled-runs``)."""
    found = []
    for index, event in enumerate(capture.events):
        if event.get("type") != "RUN_FINISHED" or not isinstance(event.get("outcome"), dict):
            continue
        outcome = event["outcome"]
        if outcome.get("type") == "interrupt":
            ids = [i.get("id") for i in outcome.get("interrupts") or [] if isinstance(i, dict)]
            if not ids:
                found.append(_v("interrupt_outcome", "an interrupt outcome with no interrupt", index))
            for dup in sorted({i for i in ids if ids.count(i) > 1}, key=str):
                found.append(_v("interrupt_outcome", f"interrupt id {dup!r} twice in the run", index))
        elif outcome.get("type") == "cancelled" and "result" in event:
            found.append(_v("interrupt_outcome", "a cancelled run carries a result", index))
    return found


def _is_cancel_error(event: dict[str, Any]) -> bool:
    return event.get("type") == "RUN_ERROR" and event.get("code") == "CANCELLED"


@rule("events/lifecycle.mdx#cancelled-runs")
def cancelled_runs(capture: Capture) -> list[Violation]:
    """Default: a run stopped on purpose ends ``RUN_FINISHED`` with
    ``outcome: {"type": "cancelled"}``, never ``RUN_ERROR`` ``CANCELLED``.
    ``iac-code-agui``: the reference's form, ``RUN_ERROR`` code ``CANCELLED``,
    and never the 1.0 outcome."""
    found = []
    for index, event in enumerate(capture.events):
        if capture.profile == COMPAT:
            outcome = event.get("outcome")
            if event.get("type") == "RUN_FINISHED" and isinstance(outcome, dict) and outcome.get("type") == "cancelled":
                found.append(_v("cancelled_runs", "the iac-code-agui profile ends a stop RUN_ERROR CANCELLED, "
                                                  "not a cancelled outcome", index))
        elif _is_cancel_error(event):
            found.append(_v("cancelled_runs", "a run stopped on purpose ends RUN_FINISHED with the cancelled "
                                              "outcome, not RUN_ERROR CANCELLED", index))
    return found


# ---------------------------------------------------------------- usage


_PARTS = (("cachedInputTokens", "inputTokens"), ("cacheWriteInputTokens", "inputTokens"),
          ("reasoningTokens", "outputTokens"))


def check_usage_entries(events: list[dict[str, Any]]) -> list[Violation]:
    """:func:`usage` on a list of events (for tests that build streams)."""
    return usage(Capture(events=events))


@rule("events/lifecycle.mdx#token-usage")
def usage(capture: Capture) -> list[Violation]:
    """One entry per provider and model; cached and reasoning counts are parts
    of the totals (never larger than them, cache reads and writes disjoint);
    ``totalTokens`` is ``inputTokens`` + ``outputTokens``; an entry says something."""
    found = []
    for index, event in enumerate(capture.events):
        entries = event.get("usage")
        if event.get("type") not in _TERMINAL or not isinstance(entries, list):
            continue
        if not entries:
            found.append(_v("usage", "an empty usage list: omit the field", index))
        labels = [(e.get("provider"), e.get("model")) for e in entries if isinstance(e, dict)]
        for label in sorted({label for label in labels if labels.count(label) > 1}, key=str):
            found.append(_v("usage", f"two entries for provider/model {label}", index))
        for raw in entries:
            if not isinstance(raw, dict):
                continue
            entry = {k: v for k, v in raw.items() if isinstance(v, int) and not isinstance(v, bool)}
            counts = {k: v for k, v in raw.items() if k not in ("provider", "model")}
            if not counts:
                found.append(_v("usage", f"an entry with no count: {raw}", index))
            for part, whole in _PARTS:
                if part in entry and whole in entry and entry[part] > entry[whole]:
                    found.append(_v("usage", f"{part} {entry[part]} exceeds {whole} {entry[whole]}: "
                                             "a part added beside its total", index))
            reads, writes = entry.get("cachedInputTokens", 0), entry.get("cacheWriteInputTokens", 0)
            if "inputTokens" in entry and reads + writes > entry["inputTokens"]:
                found.append(_v("usage", "cache reads and writes exceed the input they are parts of", index))
            summed = {"totalTokens", "inputTokens", "outputTokens"} <= entry.keys()
            if summed and entry["totalTokens"] != entry["inputTokens"] + entry["outputTokens"]:
                found.append(_v("usage", f"totalTokens {entry['totalTokens']} is not inputTokens + "
                                         "outputTokens", index))
    return found


# ---------------------------------------------------------------- entry points


def check(capture: Capture) -> list[Violation]:
    """Every rule over one capture: all violations, in rule order."""
    found: list[Violation] = []
    for _, _, fn in RULES:
        found.extend(fn(capture))
    return found


def check_events(events: list[dict[str, Any]], **kwargs: Any) -> list[Violation]:
    """:func:`check` on a stream given as events (no SSE body to judge)."""
    return check(Capture(events=events, **kwargs))


def check_body(body: bytes, **kwargs: Any) -> list[Violation]:
    """:func:`check` on a raw SSE body."""
    return check(Capture.from_body(body, **kwargs))


def profile_named(name: str | None) -> str | None:
    """The checker's profile for a name a server advertises (``None``: none advertised)."""
    if name is None:
        return None
    if name not in PROFILE_NAMES:
        raise ValueError(f"unknown profile {name!r}")
    return PROFILE_NAMES[name]
