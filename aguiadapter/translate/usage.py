"""Token usage in AG-UI 1.0's one accounting (``events/lifecycle.mdx#token-usage``).

``iac-code a2a`` 0.16 reports one ``usage`` object per model call (the
``iac_code.usage`` status metadata, or a pipeline's ``usage`` event):
``inputTokens``, ``outputTokens``, ``totalTokens``, ``cachedInputTokens``,
``provider`` and ``model``. Its counts follow the provider, not 1.0:

- ``inputTokens`` is the provider's raw prompt count. OpenAI-style providers
  already count cache reads in it; the Anthropic wire (``anthropic`` and its
  ``minimax`` subclass) reports them beside a smaller count. 1.0 wants the
  total, so a cache read is added in only where the provider left it out.
- ``totalTokens`` adds the cache counts to the input a second time for the
  OpenAI-style providers, so it is never copied: the total is computed.
- every count defaults to 0 when the provider said nothing, so a zero is no
  data: a call reporting nothing but zeros adds nothing, and a zero cache read
  is left absent rather than claimed (1.0: no zero for a count without data).
- reasoning tokens are not forwarded by the runtime; ``reasoningTokens`` is
  kept only if a runtime ever sends it, never invented.

A run's translator owns one :class:`UsageLedger`, fed per model call (a few
times a turn, never per text delta), so a resumed run reports its own calls
only. Entries are one per (provider, model), in first-seen order.
"""

from __future__ import annotations

from typing import Any

#: Providers (iac-code's telemetry names) whose input count leaves cache reads out.
CACHE_READS_APART = frozenset({"anthropic", "minimax"})

_COUNTS = ("inputTokens", "outputTokens", "reasoningTokens", "cachedInputTokens", "cacheWriteInputTokens")


def _count(report: dict[str, Any], key: str) -> int | None:
    value = report.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < 0:
        return None
    return int(value)


class UsageLedger:
    """Per (provider, model) sums of a run's model calls."""

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: dict[tuple[str | None, str | None], dict[str, int]] = {}

    def add(self, report: dict[str, Any]) -> None:
        """Add one model call's usage report, as the runtime sent it."""
        inputs = _count(report, "inputTokens")
        outputs = _count(report, "outputTokens")
        cached = _count(report, "cachedInputTokens") or None  # a zero is the runtime's default
        written = _count(report, "cacheWriteInputTokens") or None
        reasoning = _count(report, "reasoningTokens")
        if not (inputs or outputs or cached or written or reasoning):
            return  # nothing but zeros: the provider reported nothing
        provider = report.get("provider") if isinstance(report.get("provider"), str) else None
        model = report.get("model") if isinstance(report.get("model"), str) else None
        if inputs is not None and (provider in CACHE_READS_APART or (cached or 0) > inputs):
            # Parts of the total, never additions to it: a provider that left
            # them out of its input count gets them added back once.
            inputs += (cached or 0) + (written or 0)
        entry = self._entries.get((provider or None, model or None))
        if entry is None:
            entry = self._entries[(provider or None, model or None)] = {}
        for key, amount in zip(_COUNTS, (inputs, outputs, reasoning, cached, written), strict=True):
            if amount is not None:
                entry[key] = entry.get(key, 0) + amount

    def entries(self) -> list[dict[str, Any]]:
        """The AG-UI ``TokenUsage`` entries (empty when no call reported usage)."""
        out: list[dict[str, Any]] = []
        for (provider, model), counts in self._entries.items():
            entry: dict[str, Any] = {}
            if provider:
                entry["provider"] = provider
            if model:
                entry["model"] = model
            entry.update(counts)
            if "inputTokens" in counts and "outputTokens" in counts:
                entry["totalTokens"] = counts["inputTokens"] + counts["outputTokens"]
            out.append(entry)
        return out
