"""The A2A exchanges recorded from the real ``iac-code a2a`` 0.16.0 (tests/fixtures/a2a).

Read from the checkout only: a recording that is missing fails the tests that
use it (at collection, for ``INDEX``), it never skips them. The folder's
README says what each recording is and how it was made.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

A2A_RECORDINGS = Path(__file__).resolve().parents[1] / "fixtures" / "a2a"

#: Per response file: ``method``, ``httpStatus``, ``contentType``, ``objects``,
#: ``sseComments``, ``finalState``, ``jsonrpcError`` (see the README).
INDEX: dict[str, dict[str, Any]] = json.loads((A2A_RECORDINGS / "index.json").read_text())


def names_with(content_type: str) -> list[str]:
    """The recordings whose reply had this ``Content-Type``, sorted."""
    return sorted(name for name, meta in INDEX.items() if meta["contentType"] == content_type)


def recorded_objects(name: str) -> list[dict[str, Any]]:
    """The JSON-RPC response objects of one reply, in arrival order."""
    lines = (A2A_RECORDINGS / f"{name}.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def recorded_request_text(name: str) -> str:
    """The JSON-RPC request body that was POSTed, as text."""
    return (A2A_RECORDINGS / f"{name}.request.json").read_text()


def recorded_request(name: str) -> dict[str, Any]:
    """The JSON-RPC request body that was POSTed."""
    request: dict[str, Any] = json.loads(recorded_request_text(name))
    return request
