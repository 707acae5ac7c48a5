"""User-visible messages in English and Simplified Chinese.

Messages are keyed by a message id (see :mod:`aguiadapter.errors`) and
formatted with ``{placeholder}`` parameters. The language of a request is
``forwardedProps.iacCode.preferredLanguage`` when it names a supported one,
else the best match of the ``Accept-Language`` header, else English.

May import: errors.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from aguiadapter.errors import AdapterError
from aguiadapter.i18n import en, zh_cn

__all__ = [
    "CATALOGS",
    "DEFAULT_LANGUAGE",
    "SUPPORTED_LANGUAGES",
    "negotiate_language",
    "render",
    "render_error",
]

SUPPORTED_LANGUAGES: Final = ("en", "zh-CN")
"""Languages with a catalog; the first is the default."""

DEFAULT_LANGUAGE: Final = "en"

CATALOGS: Final[Mapping[str, Mapping[str, str]]] = {
    "en": en.MESSAGES,
    "zh-CN": zh_cn.MESSAGES,
}
"""Message catalogs by language; English defines every id."""

# Garbage headers are bounded before they are parsed.
_MAX_HEADER_LENGTH: Final = 4096
_MAX_RANGES: Final = 64
_RANGE: Final = re.compile(r"\*|[a-z]{1,8}(?:-[a-z0-9]{1,8})*")
_QUALITY: Final = re.compile(r"q=(0(?:\.\d{0,3})?|1(?:\.0{0,3})?)")


def _language_of(tag: str) -> str | None:
    """The catalog serving a language tag: by primary subtag.

    Every Chinese tag (``zh``, ``zh-Hans``, ``zh-TW``...) maps to ``zh-CN``:
    it is the only Chinese catalog, and Simplified reads better to a
    Traditional reader than English does.
    """
    primary = tag.strip().lower().replace("_", "-").split("-", 1)[0]
    if primary == "en":
        return "en"
    if primary == "zh":
        return "zh-CN"
    return None


def _parse_range(item: str) -> tuple[str, float] | None:
    """``"zh-CN;q=0.8"`` -> ``("zh-cn", 0.8)``; ``None`` when malformed."""
    tag, *params = (piece.strip() for piece in item.split(";"))
    tag = tag.lower().replace("_", "-")
    if not _RANGE.fullmatch(tag):
        return None
    quality = 1.0
    for param in params:
        compact = param.replace(" ", "").lower()
        if not compact.startswith("q="):
            continue  # other parameters carry nothing for us
        match = _QUALITY.fullmatch(compact)
        if match is None:
            return None  # an unreadable weight: drop the range, not the header
        quality = float(match.group(1))
    return tag, quality


def _parse_accept_language(header: str) -> list[tuple[str, float]]:
    items = header[:_MAX_HEADER_LENGTH].split(",")[:_MAX_RANGES]
    parsed = (_parse_range(item) for item in items if item.strip())
    return [entry for entry in parsed if entry is not None]


def _quality_of(language: str, ranges: list[tuple[str, float]]) -> tuple[float, int]:
    """The weight the header gives a catalog, and where it first says so.

    A range naming the catalog exactly with ``q=0`` excludes it; otherwise
    the best range mapping to it counts, and ``*`` covers catalogs no range
    names. Unmentioned catalogs weigh 0.
    """
    exact = language.lower()
    if any(tag == exact and quality == 0 for tag, quality in ranges):
        return 0.0, 0
    named = [
        (quality, -index)
        for index, (tag, quality) in enumerate(ranges)
        if tag != "*" and _language_of(tag) == language
    ]
    if not named:
        named = [(quality, -index) for index, (tag, quality) in enumerate(ranges) if tag == "*"]
    if not named:
        return 0.0, 0
    quality, position = max(named)
    return quality, position


def negotiate_language(preferred: str | None, accept_language: str | None) -> str:
    """Pick the catalog for a request.

    ``preferred`` (``forwardedProps.iacCode.preferredLanguage``) wins when it
    names a supported language; then the ``Accept-Language`` header (q-weights,
    ``*``, ``q=0`` meaning "not acceptable"); then English. Never raises.
    """
    if isinstance(preferred, str):
        language = _language_of(preferred[:64])
        if language is not None:
            return language
    if not isinstance(accept_language, str):
        return DEFAULT_LANGUAGE
    ranges = _parse_accept_language(accept_language)
    weights = {language: _quality_of(language, ranges) for language in SUPPORTED_LANGUAGES}
    # max() keeps the first of equal weights: SUPPORTED_LANGUAGES order breaks ties.
    best = max(SUPPORTED_LANGUAGES, key=lambda language: weights[language])
    return best if weights[best][0] > 0 else DEFAULT_LANGUAGE


class _KeepMissing(dict[str, object]):
    """Format parameters that leave an unknown ``{placeholder}`` as written."""

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def _lookup(message_id: str, language: str) -> str | None:
    catalog = CATALOGS.get(language, CATALOGS[DEFAULT_LANGUAGE])
    return catalog.get(message_id) or CATALOGS[DEFAULT_LANGUAGE].get(message_id)


def _format(template: str, params: Mapping[str, object]) -> str:
    try:
        return template.format_map(_KeepMissing(params))
    except (ValueError, IndexError, KeyError, AttributeError, TypeError):
        # A catalog typo must not turn an error answer into a crash.
        return template


def render(message_id: str, language: str, **params: object) -> str:
    """The message ``message_id`` in ``language`` (falling back to English).

    Missing parameters stay as ``{name}``; an unknown id renders as itself.
    Never raises.
    """
    template = _lookup(message_id, language)
    return message_id if template is None else _format(template, params)


def render_error(error: AdapterError, language: str) -> str:
    """The user-facing message of ``error``; its code's default if unknown."""
    template = _lookup(error.message_id, language) or _lookup(error.code.message_id, language)
    return error.message_id if template is None else _format(template, error.params)
