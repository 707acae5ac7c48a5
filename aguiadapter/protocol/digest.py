"""The idempotency digest of a request, with its secrets masked.

A run is recognised by ``(threadId, runId)`` and the digest of its body:
the same body sent again is a duplicate, a different one a conflict. The
credentials of a request are forwarded and nowhere else: they never reach a
digest, a record or a log, so a retry with a refreshed STS token is the same
request.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["SECRET_FIELDS", "canonical_digest"]

SECRET_FIELDS: Final[tuple[tuple[str, ...], ...]] = (
    ("forwardedProps", "iacCode", "llmApiKey"),
    ("forwardedProps", "iacCode", "alibabaCloud", "accessKeyId"),
    ("forwardedProps", "iacCode", "alibabaCloud", "accessKeySecret"),
    ("forwardedProps", "iacCode", "alibabaCloud", "securityToken"),
)
"""Request members whose values never reach a digest, a record or a log."""

_REDACTED: Final = "\u2063redacted\u2063"


def _redacted(node: object, path: tuple[str, ...]) -> object:
    """A copy of ``node`` with the member at ``path`` replaced, if present."""
    if not isinstance(node, dict) or path[0] not in node:
        return node
    head, rest = path[0], path[1:]
    replaced = _REDACTED if not rest else _redacted(node[head], rest)
    return {**node, head: replaced}


def canonical_digest(payload: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the request's canonical JSON, secrets masked.

    Canonical: sorted keys, no whitespace, UTF-8. Two bodies that differ only
    in key order, spacing or secret values digest the same; any other change
    differs.
    """
    redacted: object = dict(payload)
    for path in SECRET_FIELDS:
        redacted = _redacted(redacted, path)
    text = json.dumps(redacted, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
