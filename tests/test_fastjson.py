"""The hot-path JSON: orjson and the standard library say the same thing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from aguiadapter import fastjson
from aguiadapter.protocol.events import encode_sse

EVENTS: list[dict[str, Any]] = [
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "run-1-m1", "delta": "héllo \"wörld\"\n\u2028 😀"},
    {"type": "RUN_FINISHED", "threadId": "t", "runId": "r", "outcome": {"type": "success"},
     "usage": [{"inputTokens": 100, "outputTokens": 17}]},
    {"type": "CUSTOM", "name": "iac-code.artifact.v1", "value": {"nested": [1, 2.5, None, True, {"k": "v"}]}},
]


@pytest.mark.parametrize("event", EVENTS)
def test_both_encoders_write_the_same_bytes(event: dict[str, Any]) -> None:
    assert fastjson.dumps(event) == fastjson._stdlib_dumps(event)
    assert json.loads(fastjson.dumps(event)) == event


def test_orjson_is_the_backend_here() -> None:
    # The test extra installs orjson, so the fast path is what these tests run.
    assert fastjson.BACKEND == "orjson"


def test_an_integer_beyond_64_bits_still_encodes() -> None:
    value = {"type": "CUSTOM", "name": "x", "value": 2**70}
    assert json.loads(fastjson.dumps(value)) == value


@pytest.mark.parametrize("data", [b'{"result": {"task": {"id": "t"}}}', '{"a": "é😀"}'.encode()])
def test_both_decoders_read_the_same_values(data: bytes) -> None:
    assert fastjson.loads(data) == fastjson._stdlib_loads(data)


def test_sse_blocks_are_data_lines_separated_by_blank_lines() -> None:
    body = encode_sse(EVENTS)
    blocks = body.decode().split("\n\n")
    assert blocks[-1] == "" and len(blocks) == len(EVENTS) + 1
    assert [json.loads(block[len("data: "):]) for block in blocks[:-1]] == EVENTS
