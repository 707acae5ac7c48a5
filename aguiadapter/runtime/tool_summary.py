"""What a permission prompt the adapter rebuilds says of the tool call it gates (pure).

When the runtime raised a permission while no stream of ours followed it
(:mod:`.checkpoints`), its own words are lost and the adapter describes the
waiting tool call itself. It describes it in the runtime's form, so that a
front end shows a rebuilt approval as it shows any other:

- ``safeSummary`` is ``<tool>: <JSON>``, the JSON a projection of the call's
  input (keys sorted, compact): the fields a person decides on (``command``,
  ``cmd``, ``path``, ``file_path``) as text, a long one as its head and tail
  (``{"type": "str", "length", "prefix", "suffix", "truncated": true}``);
  every other value as its shape only: a string as its length and
  fingerprint (``sha256:`` and 16 hex digits of its SHA-256, so file
  contents never appear as text), a list as its length, a number as its
  type; a field whose name says it holds a secret as ``{"redacted": true}``;
  a field name nobody listed as plain is itself a fingerprint. The work is
  bounded (depth, fields per object, values in all).
- the question (``prompt``, the interrupt's ``message``) names the tool and
  shows the command or path to a person whole up to
  :data:`MESSAGE_EDGE_CHARS` characters at each end, with the length of the
  part left out in between: what a command ends with (``&& ... Delete...``)
  is always shown.

Credential-shaped text in the command or path shown is masked (the log
redactor's patterns, and the current request's secrets).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any, Final

from ..logs import redact

#: Characters of a long decision field kept at each end of ``safeSummary``.
SUMMARY_EDGE_CHARS: Final = 160
#: The longest ``safeSummary``; a longer one keeps its head and its tail.
SUMMARY_LIMIT: Final = 1200
#: Characters of a command or path kept at each end of the question.
MESSAGE_EDGE_CHARS: Final = 480

#: Fields shown as text: what a person decides on.
_DECISION_FIELDS: Final = ("command", "cmd", "path", "file_path")
#: Field names shown as they are (others become fingerprints).
_PLAIN_NAMES: Final = frozenset({
    *_DECISION_FIELDS, "action", "product", "params", "body", "method", "pathname", "region", "region_id",
    "cwd", "timeout", "content", "input", "query", "url", "headers", "payload", "style",
    "type", "length", "fingerprint", "redacted", "truncated", "prefix", "suffix", "fields", "field_count",
    "fields_truncated", "tool_name", "is_read_only", "_truncated",
})
#: A field name holding one of these (lower case, letters and digits only) holds a secret.
_SECRET_NAME_PARTS: Final = (
    "password", "passwd", "pwd", "passphrase", "secret", "token", "ststoken", "apikey", "accesskey",
    "privatekey", "credential", "auth", "cookie", "session", "signature",
)
_MAX_DEPTH: Final = 16
_MAX_FIELDS: Final = 64
_MAX_VALUES: Final = 512
_TRUNCATED: Final = "_truncated"
_FINGERPRINT: Final = re.compile(r"sha256:[0-9a-f]{16}")


def fingerprint(text: str) -> str:
    """``sha256:`` and the first 16 hex digits of the SHA-256 of ``text`` (UTF-8)."""
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def safe_summary(tool_name: str, tool_input: Any) -> str:
    """The runtime's ``safeSummary`` of a call (see the module's docstring)."""
    projected = _projection(tool_input if isinstance(tool_input, Mapping) else {})
    rendered = json.dumps(projected, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    text = redact(f"{tool_name}: {rendered}")
    if len(text) <= SUMMARY_LIMIT:
        return text
    head = SUMMARY_LIMIT * 2 // 3
    return text[:head] + "…" + text[-(SUMMARY_LIMIT - head - 1):]


def question_subject(tool_name: str, tool_input: Any) -> str | None:
    """``<tool>: <command or path>`` for the question, head and tail kept;
    ``None`` when the call names neither."""
    if not isinstance(tool_input, Mapping):
        return None
    for name in _DECISION_FIELDS:
        value = tool_input.get(name)
        if isinstance(value, str) and value.strip() and not _is_secret_name(name):
            return f"{tool_name}: {_head_and_tail(redact(value), MESSAGE_EDGE_CHARS)}"
    return None


def _head_and_tail(text: str, edge: int) -> str:
    if len(text) <= 2 * edge + 40:  # the marker would hide less than it costs
        return text
    return f"{text[:edge]} [… {len(text) - 2 * edge} characters …] {text[-edge:]}"


def _projection(tool_input: Mapping[Any, Any]) -> dict[str, Any]:
    budget = [_MAX_VALUES]
    shapes = _shape_of_mapping(tool_input, 0, budget)
    shown: dict[str, Any] = {}
    for name in _DECISION_FIELDS:
        if name in tool_input and not _is_secret_name(name):
            value = tool_input[name]
            shown[name] = _decision_text(value) if isinstance(value, str) else _shape(name, value, 1, [_MAX_VALUES])
    for name, shape in shapes.items():
        if name in shown:
            continue
        if len(shown) >= _MAX_FIELDS:
            shown.setdefault(_TRUNCATED, {"type": "object", "truncated": True})
            break
        shown[name] = shape
    return shown


def _decision_text(value: str) -> str | dict[str, Any]:
    # Masked before it is cut: no secret is left half shown at an edge.
    masked = redact(value)
    if len(value) <= SUMMARY_EDGE_CHARS:
        return masked
    return {
        "type": "str", "length": len(value), "prefix": masked[:SUMMARY_EDGE_CHARS],
        "suffix": masked[-SUMMARY_EDGE_CHARS:], "truncated": True,
    }


def _shape(name: str, value: Any, depth: int, budget: list[int]) -> Any:
    if budget[0] <= 0:
        return {"type": "object", "truncated": True} if isinstance(value, Mapping) else _scalar_shape(value)
    budget[0] -= 1
    if _is_secret_name(name):
        return {"redacted": True}
    if isinstance(value, Mapping):
        if depth >= _MAX_DEPTH:
            return {"type": "object", "truncated": True}
        return _shape_of_mapping(value, depth, budget)
    return _scalar_shape(value)


def _shape_of_mapping(value: Mapping[Any, Any], depth: int, budget: list[int]) -> dict[str, Any]:
    shapes: dict[str, Any] = {}
    for index, (key, item) in enumerate(value.items()):
        if index >= _MAX_FIELDS or budget[0] <= 0:
            shapes[_TRUNCATED] = {"type": "object", "truncated": True}
            break
        shapes[_field_name(str(key))] = _shape(str(key), item, depth + 1, budget)
    return shapes


def _scalar_shape(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        return {"type": "str", "length": len(value), "fingerprint": fingerprint(value)}
    if isinstance(value, (list, tuple)):
        return {"type": "array", "length": len(value)}
    if value is None:
        return {"type": "null"}
    return {"type": type(value).__name__}


def _field_name(name: str) -> str:
    if _FINGERPRINT.fullmatch(name) or (name in _PLAIN_NAMES and not _is_secret_name(name)):
        return name
    return fingerprint(name)


def _is_secret_name(name: str) -> bool:
    folded = re.sub(r"[^a-z0-9]", "", name.lower())
    return any(part in folded for part in _SECRET_NAME_PARTS)
