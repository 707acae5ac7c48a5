"""JSON on the relay's hot path: orjson when installed, the standard library otherwise.

Every runtime event is decoded once and every AG-UI event encoded once, so
these two calls are most of the relay's cost. ``orjson`` (the optional
``aguiadapter[speed]`` extra) decodes the runtime's events about three times
and encodes ours about ten times faster than :mod:`json` on this path (see
benchmarks/); without it the standard library does the same job.
"""

from __future__ import annotations

import json
from typing import Any

_stdlib_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

try:
    import orjson
except ImportError:  # pragma: no cover - exercised by the no-orjson test run
    orjson = None  # type: ignore[assignment]


def _stdlib_loads(data: bytes) -> Any:
    # Decoding first is faster than json.loads(bytes), which sniffs the encoding.
    return json.loads(data.decode())


def _stdlib_dumps(value: Any) -> bytes:
    return _stdlib_encode(value).encode()


if orjson is not None:
    _orjson_dumps = orjson.dumps
    _orjson_error = orjson.JSONEncodeError

    def _fast_dumps(value: Any) -> bytes:
        try:
            return _orjson_dumps(value)
        except _orjson_error:
            # e.g. an integer beyond 64 bits relayed from the runtime.
            return _stdlib_dumps(value)

    loads = orjson.loads
    dumps = _fast_dumps
    BACKEND = "orjson"
else:  # pragma: no cover
    loads = _stdlib_loads
    dumps = _stdlib_dumps
    BACKEND = "json"

__all__ = ["BACKEND", "dumps", "loads"]
