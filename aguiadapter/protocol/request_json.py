"""A request body as JSON text: RFC 8259, in UTF-8, and nothing looser.

Python's :func:`json.loads` reads more than JSON: ``NaN`` and ``Infinity``,
numbers too large for a float (read as infinity), and UTF-16 or UTF-32
bodies (sniffed from bytes). Each would be relayed as something no other
JSON reader accepts, or fail later inside a run. Here they are refused,
before anything else reads the body, as ``INVALID_JSON``. A UTF-8 byte order
mark is tolerated; an escaped lone surrogate (``"\\ud800"``) is refused, as
it is not text that could be stored or forwarded.
"""

from __future__ import annotations

import json
import math
from typing import Any, NoReturn

from ..errors import AdapterError, ErrorCode

__all__ = ["decode_request_json"]


def _refuse_constant(name: str) -> NoReturn:
    raise AdapterError(ErrorCode.INVALID_JSON, "invalid_json_number")


def _finite_float(text: str) -> float:
    number = float(text)
    if math.isinf(number):
        raise AdapterError(ErrorCode.INVALID_JSON, "invalid_json_number")
    return number


def decode_request_json(body: bytes) -> Any:
    """The value of a JSON request body, or ``AdapterError(INVALID_JSON)``."""
    # A NUL never occurs in JSON text; in a body it means UTF-16 or UTF-32.
    if b"\x00" in body:
        raise AdapterError(ErrorCode.INVALID_JSON, "invalid_json_encoding")
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise AdapterError(ErrorCode.INVALID_JSON, "invalid_json_encoding") from None
    try:
        payload = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except (ValueError, RecursionError) as exc:
        raise AdapterError(ErrorCode.INVALID_JSON) from exc
    if "\\ud" in text or "\\uD" in text:
        _refuse_lone_surrogates(payload)
    return payload


def _refuse_lone_surrogates(payload: Any) -> None:
    """JSON may escape half a surrogate pair; such text is not Unicode."""
    try:
        json.dumps(payload, ensure_ascii=False).encode()
    except UnicodeEncodeError as exc:
        raise AdapterError(ErrorCode.INVALID_JSON, "invalid_json_unicode") from exc
