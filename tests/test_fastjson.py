"""The hot-path JSON: orjson and the standard library say the same thing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aguiadapter import fastjson
from aguiadapter.protocol.events import encode_sse

ROOT = Path(__file__).resolve().parents[1]

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


@pytest.mark.parametrize("value", [*EVENTS, {"big": 2**70, "nested": EVENTS}])
def test_indented_records_read_the_same_whichever_encoder_wrote_them(value: dict[str, Any]) -> None:
    assert json.loads(fastjson.dumps_indented(value)) == json.loads(fastjson._stdlib_dumps_indented(value)) == value
    if "big" not in value:
        assert fastjson.dumps_indented(value) == fastjson._stdlib_dumps_indented(value)


def test_without_orjson_the_standard_library_writes_the_same_bytes() -> None:
    # orjson is an optional extra: where it cannot be imported, the adapter
    # still starts and its streams do not change by a byte.
    script = (
        "import json, sys\n"
        "sys.modules['orjson'] = None  # import orjson now raises ImportError\n"
        "from aguiadapter import fastjson\n"
        "events = json.loads(sys.stdin.read())\n"
        "assert fastjson.BACKEND == 'json' and fastjson.loads(fastjson.dumps(events)) == events\n"
        "sys.stdout.buffer.write(b''.join(fastjson.dumps(event) + b'\\n' for event in events))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], input=json.dumps(EVENTS).encode(), capture_output=True, cwd=ROOT, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout == b"".join(fastjson.dumps(event) + b"\n" for event in EVENTS)


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


def test_an_indented_record_holds_only_its_own_bytes() -> None:
    # A record waits in the writer's queue while its write is pending: orjson's
    # working buffer (16 KiB behind this 1.2 KiB record) must not wait with it.
    import tracemalloc

    record = {"thread_id": "t" * 40, "runs": {f"run-{n}": {"digest": "0" * 64, "outcome": "success"} for n in range(8)}}
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        data = fastjson.dumps_indented(record)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(data) > 1000 and held < 2 * len(data)
