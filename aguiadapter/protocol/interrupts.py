"""AG-UI interrupts built from the runtime's input envelopes (pure).

A permission asks for ``{"decision": "allow_once" | "deny"}``; a question or
a candidate selection for ``{"selectedId": <option id>}`` (one branch per
option) or, where the runtime allows it, ``{"freeText": "..."}``. The same
payload keys as the reference adapter, so clients work with either.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

PERMISSION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"decision": {"type": "string", "enum": ["allow_once", "deny"]}},
    "required": ["decision"],
    "additionalProperties": False,
}

#: Envelope keys copied into ``metadata`` when the runtime sends them.
_METADATA_KEYS = (
    "toolName", "title", "purpose", "effect", "target", "isReadOnly", "safeSummary",
    "deploymentSummary", "scope", "subPipelineId", "operation", "displayParameters",
    "allowFreeText", "freeTextPrompt", "language", "requestTaskId", "toolUseId", "rebuilt",
)


def iso_utc(timestamp: float) -> str:
    """An RFC 3339 UTC timestamp with second precision (``...Z``)."""
    moment = datetime.fromtimestamp(timestamp, tz=timezone.utc).replace(microsecond=0)
    return moment.isoformat().replace("+00:00", "Z")


def standard_options(envelope: dict[str, Any]) -> list[dict[str, Any]]:
    """The envelope's options as ``{id, label, ...}`` with unique string ids."""
    options: list[dict[str, Any]] = []
    seen: set[str] = set()
    for index, raw in enumerate(envelope.get("options") or ()):
        item = dict(raw) if isinstance(raw, dict) else {"label": str(raw)}
        base = str(item.get("id") if item.get("id") is not None else f"option-{index + 1}")
        option_id, suffix = base, 2
        while option_id in seen:
            option_id, suffix = f"{base}-{suffix}", suffix + 1
        seen.add(option_id)
        item["id"] = option_id
        item["label"] = str(item.get("label") or item.get("name") or item.get("title") or option_id)
        options.append(item)
    return options


def selection_schema(options: list[dict[str, Any]], *, allow_free_text: bool) -> dict[str, Any]:
    """One ``oneOf`` branch per option, plus free text where allowed."""
    branches: list[dict[str, Any]] = [
        {
            "type": "object",
            "properties": {"selectedId": {"type": "string", "const": option["id"], "title": option["label"]}},
            "required": ["selectedId"],
            "additionalProperties": False,
        }
        for option in options
    ]
    if allow_free_text or not branches:
        branches.append(
            {
                "type": "object",
                "properties": {"freeText": {"type": "string", "minLength": 1}},
                "required": ["freeText"],
                "additionalProperties": False,
            }
        )
    return {"oneOf": branches}


def build_interrupt(envelope: dict[str, Any], *, expires_at: float) -> dict[str, Any]:
    """The AG-UI ``Interrupt`` for one required input envelope."""
    kind = str(envelope.get("kind") or "input_required")
    options = standard_options(envelope)
    interrupt: dict[str, Any] = {"id": str(envelope.get("inputId") or "")}
    tool_call_id = envelope.get("toolUseId")
    if kind == "permission":
        interrupt["reason"] = "tool_call" if isinstance(tool_call_id, str) and tool_call_id else "confirmation"
        interrupt["message"] = str(envelope.get("prompt") or envelope.get("title") or "Permission required")
        schema = PERMISSION_SCHEMA
    else:
        interrupt["reason"] = "input_required"
        interrupt["message"] = str(envelope.get("prompt") or "Input required")
        schema = selection_schema(options, allow_free_text=bool(envelope.get("allowFreeText")))
    if isinstance(tool_call_id, str) and tool_call_id:
        interrupt["toolCallId"] = tool_call_id
    interrupt["responseSchema"] = schema
    interrupt["expiresAt"] = iso_utc(expires_at)
    metadata: dict[str, Any] = {"schemaVersion": 1, "kind": kind}
    for key in _METADATA_KEYS:
        value = envelope.get(key)
        if value is not None:
            metadata[key] = value
    if options:
        metadata["options"] = options
    interrupt["metadata"] = metadata
    return interrupt
