"""How tests read a ``POST /connect`` stream: the hydrate run, then maybe a followed run."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from .agui import check_models, check_order
from .reattach import SSE


def connect_body(thread_id: str, **fields: Any) -> dict[str, Any]:
    """What ``@ag-ui/client`` posts to ``{url}/connect``: a RunAgentInput
    (its messages are whatever the page holds; the adapter ignores them)."""
    return {"threadId": thread_id, "runId": "hydrate-1", "state": {}, "messages": [], "tools": [], "context": [],
            "forwardedProps": {}, **fields}


def runs_of(body: bytes) -> list[list[dict[str, Any]]]:
    """The stream's runs, each judged as one run (models, order, spans). The
    hydrate run's events carry no ``id:``; a followed run's all do (cursors
    of its log, growing)."""
    text = body.decode()
    assert "\r" not in text, "SSE must use LF line endings only"
    events: list[dict[str, Any]] = []
    ids: list[str | None] = []
    for block in text.split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        if not lines:
            continue
        data = [line[len("data: "):] for line in lines if line.startswith("data: ")]
        given = [line[len("id: "):] for line in lines if line.startswith("id: ")]
        assert len(data) == 1 and len(data) + len(given) == len(lines), block
        events.append(json.loads(data[0]))
        ids.append(given[0] if given else None)
    check_models(events)
    runs: list[list[dict[str, Any]]] = []
    run_ids: list[list[str | None]] = []
    for event, given in zip(events, ids, strict=True):
        if event["type"] == "RUN_STARTED":
            runs.append([])
            run_ids.append([])
        assert runs, f"{event['type']} before any RUN_STARTED"
        runs[-1].append(event)
        run_ids[-1].append(given)
    for run in runs:
        check_order(run)
        assert run[0]["threadId"] == run[-1].get("threadId", run[0]["threadId"]) and run[0]["runId"] == run[-1].get(
            "runId", run[0]["runId"]), "a run's boundary events name the same run"
    assert all(given is None for given in run_ids[0]), "the hydrate run has no cursor"
    for followed in run_ids[1:]:
        assert None not in followed, "every event of a followed run carries its id"
        numbers = [int(value) for value in followed if value is not None]
        assert numbers == sorted(set(numbers)) and numbers[0] == 1, "from its first event, ids growing"
    assert len({run[0]["threadId"] for run in runs}) == 1, "every run of the stream is the thread's"
    return runs


def message_texts(snapshot: dict[str, Any]) -> list[tuple[str, Any]]:
    """(role, content) of each message of a MESSAGES_SNAPSHOT."""
    return [(item["role"], item.get("content")) for item in snapshot["messages"]]


def applied(snapshot: list[dict[str, Any]], runs: list[list[dict[str, Any]]]) -> list[tuple[Any, ...]]:
    """What a client shows after a connect stream, as the ``@ag-ui/client``
    reducer builds it (the snapshot replaces, later runs add; see
    tests/interop/README.md for its tool call rules), reduced to what a
    person sees: (role, text) and (role, tool call id) pairs, message ids aside."""
    shown: list[tuple[Any, ...]] = [_seen(item) for item in snapshot]
    texts: dict[str, int] = {}
    for run in runs:
        for event in run:
            kind = event["type"]
            if kind in ("TEXT_MESSAGE_START", "REASONING_MESSAGE_START"):
                texts[event["messageId"]] = len(shown)
                shown.append(("assistant" if kind.startswith("TEXT") else "reasoning", ""))
            elif kind in ("TEXT_MESSAGE_CONTENT", "REASONING_MESSAGE_CONTENT"):
                at = texts[event["messageId"]]
                shown[at] = (shown[at][0], shown[at][1] + event["delta"])
            elif kind == "TOOL_CALL_START" and ("assistant", "call", event["toolCallId"]) not in shown:
                # A start for a call the client holds is idempotent (a resumed run re-opens its call).
                shown.append(("assistant", "call", event["toolCallId"]))
            elif kind == "TOOL_CALL_RESULT":
                call = ("assistant", "call", event["toolCallId"])
                # Right after the message holding the call (at the end when none does).
                shown.insert(shown.index(call) + 1 if call in shown else len(shown), ("tool", event["toolCallId"]))
    return shown


def _seen(item: dict[str, Any]) -> tuple[Any, ...]:
    if item["role"] == "tool":
        return ("tool", item["toolCallId"])
    if item.get("toolCalls"):
        (call,) = item["toolCalls"]
        return ("assistant", "call", call["id"])
    return (item["role"], item.get("content"))


def snapshot_of(run: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages of a hydrate run's one MESSAGES_SNAPSHOT."""
    (snapshot,) = [event for event in run if event["type"] == "MESSAGES_SNAPSHOT"]
    messages: list[dict[str, Any]] = snapshot["messages"]
    return messages


async def connect_then_cut(url: str, body: dict[str, Any], *, events: int) -> bytes:
    """POST a connect, read until ``events`` events arrived, then cut the
    socket (no FIN, as a dropped network does); the bytes read."""
    async with aiohttp.ClientSession() as session:
        resp = await session.post(url + "connect", json=body, headers=SSE)
        assert resp.status == 200, await resp.read()
        raw = b""
        while raw.count(b"data: ") < events:
            chunk = await asyncio.wait_for(resp.content.readany(), 10)
            assert chunk, f"the stream ended before {events} events: {raw[-300:]!r}"
            raw += chunk
        assert resp.connection is not None and resp.connection.transport is not None
        resp.connection.transport.abort()
        resp.release()
    return raw
