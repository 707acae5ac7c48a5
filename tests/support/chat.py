"""Reading the OpenAI chat messages a model stub receives."""

from __future__ import annotations

from typing import Any


def message_text(message: dict[str, Any]) -> str:
    """Plain text of an OpenAI message whose content is a string or a part list."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""
