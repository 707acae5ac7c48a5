"""Per-request cost of checking a ``RunAgentInput``, side by side.

    python -m benchmarks.validation                    # this checkout
    python -m benchmarks.validation --before DIR       # and another checkout of aguiadapter, e.g. a
                                                       # `git worktree add ../before main`

Columns, per body (microseconds per request, best of 5 repetitions in each of
``--rounds`` rounds, this checkout and ``--before`` taking turns):

- ``parse``: ``parse_run_input`` as the server calls it (check, then build the models);
- ``check``: the compiled input schema alone;
- ``jsonschema``: ``jsonschema``'s Draft 2020-12 validator on the same schema
  (the design not taken: the server would pay this instead of ``check``);
- ``before``: ``parse_run_input`` of the ``--before`` checkout, in a child process.

Nothing here is a test; numbers move with the machine.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import struct
import subprocess
import sys
import timeit
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _png(side: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + os.urandom(side * 3) for _ in range(side))
    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows, 1)) + chunk(b"IEND", b"")


def _envelope(history: int, image: bytes | None = None) -> dict[str, Any]:
    """A body as @ag-ui/client sends it: the whole conversation, then the new message."""
    turn = [
        {"id": "u", "role": "user", "content": "List my stacks"},
        {"id": "r", "role": "reasoning", "content": "The user wants a list."},
        {"id": "a", "role": "assistant", "content": "Let me look.", "toolCalls": [
            {"id": "c", "type": "function", "function": {"name": "ros_stack", "arguments": '{"op":"list"}'}}]},
        {"id": "t", "role": "tool", "toolCallId": "c", "content": "[]"},
    ]
    messages = [dict(turn[index % 4], id=f"m-{index}") for index in range(history)]
    content: Any = "Deploy this"
    if image is not None:
        content = [{"type": "text", "text": "Deploy this"},
                   {"type": "image", "source": {"type": "data", "mimeType": "image/png",
                                                "value": base64.b64encode(image).decode()}}]
    messages.append({"id": "new", "role": "user", "content": content})
    return {
        "threadId": "2d1f7c1e-4a07-4a8e-9d5f-0b6f9e0d7a11", "runId": "a9e2c6d0-3b1f-4f7e-8c2a-5d4e3f2a1b00",
        "protocolVersion": "1.0", "tools": [], "context": [], "state": {}, "messages": messages,
        "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "inv-1", "cwd": "/workspace/s-1",
                                       "preferredLanguage": "zh-CN", "userId": "user-7"}},
    }


BODIES: dict[str, Callable[[], dict[str, Any]]] = {
    "one message": lambda: _envelope(0),
    "10 messages": lambda: _envelope(10),
    "100 messages": lambda: _envelope(100),
    "1000 messages": lambda: _envelope(1000),
    "a 6 MiB image": lambda: _envelope(0, _png(1450)),
}


def per_call_microseconds(call: Callable[[], object]) -> float:
    timer = timeit.Timer(call)
    number, _ = timer.autorange()
    return min(timer.repeat(repeat=5, number=number)) / number * 1e6


def measure_here() -> dict[str, dict[str, float]]:
    sys.path.insert(0, str(ROOT))
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    from aguiadapter.protocol.input_schema import INPUT_SCHEMAS, RUN_AGENT_INPUT
    from aguiadapter.protocol.parsing import parse_run_input
    from aguiadapter.protocol.schema_compiler import compile_schemas

    compiled = compile_schemas(INPUT_SCHEMAS)[RUN_AGENT_INPUT]
    resource = Resource(contents={"components": {"schemas": INPUT_SCHEMAS}}, specification=DRAFT202012)
    registry: Registry[Any] = Registry().with_resource("urn:inputs", resource)
    validator = Draft202012Validator({"$ref": f"urn:inputs#/components/schemas/{RUN_AGENT_INPUT}"}, registry=registry)
    results: dict[str, dict[str, float]] = {}
    for name, build in BODIES.items():
        body = build()
        assert compiled.is_valid(body) and validator.is_valid(body)
        results[name] = {
            "parse": per_call_microseconds(lambda body=body: parse_run_input(body)),  # type: ignore[misc]
            "check": per_call_microseconds(lambda body=body: compiled.is_valid(body)),  # type: ignore[misc]
            "jsonschema": per_call_microseconds(lambda body=body: validator.is_valid(body)),  # type: ignore[misc]
        }
    return results


def measure_before(checkout: Path) -> dict[str, float]:
    """``parse_run_input`` of another checkout, timed in a child process."""
    code = (
        "import importlib.util, json, sys\n"
        f"spec = importlib.util.spec_from_file_location('side_by_side', {str(Path(__file__))!r})\n"
        "bench = importlib.util.module_from_spec(spec); spec.loader.exec_module(bench)\n"
        "BODIES, per_call_microseconds = bench.BODIES, bench.per_call_microseconds\n"
        "try:\n    from aguiadapter.protocol.parsing import parse_run_input\n"
        "except ImportError:\n    from aguiadapter.protocol.inputs import parse_run_input\n"
        "print(json.dumps({name: per_call_microseconds(lambda b=build(): parse_run_input(b))"
        " for name, build in BODIES.items()}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                          cwd=checkout)
    before: dict[str, float] = json.loads(done.stdout)
    return before


def _best(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Cell by cell, the best of several rounds."""
    first = rounds[0]
    if isinstance(next(iter(first.values())), dict):
        return {name: _best([one[name] for one in rounds]) for name in first}
    return {name: min(one[name] for one in rounds) for name in first}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.validation", description=__doc__.split("\n")[0])
    parser.add_argument("--before", type=Path, help="another checkout of aguiadapter to time alongside")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, this checkout and --before taking turns")
    args = parser.parse_args(argv)
    # Turns rather than one block each: drift on a shared machine hits both sides.
    rounds_here, rounds_before = [], []
    for _ in range(args.rounds):
        rounds_here.append(measure_here())
        if args.before:
            rounds_before.append(measure_before(args.before))
    here = _best(rounds_here)
    before = _best(rounds_before) if rounds_before else {}
    columns = ["parse", "check", "jsonschema", *(["before"] if before else [])]
    print(f"{'body':<16}" + "".join(f"{column:>14}" for column in columns) + "   (µs per request)")
    for name, row in here.items():
        cells = [row["parse"], row["check"], row["jsonschema"], *([before[name]] if before else [])]
        print(f"{name:<16}" + "".join(f"{cell:>14,.1f}" for cell in cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
