"""The content of a user message: text and inline images, checked strictly.

A user message carries either a string or a list of parts. This adapter
accepts ``{"type": "text", "text"}`` and ``{"type": "image", "source":
{"type": "data", "value": <base64>, "mimeType"}}`` only; every other part and
every remote or provider-held source is refused with a message that says why.

Images are decoded and checked once, here, when the part is built: a
:class:`DataSource` always holds bytes that are valid base64, within the size
limit and of the declared image type, so whoever forwards them never decodes
again.

Refusals are :class:`InputRefusal` exceptions that carry a catalog message id
and the JSON path *below* the value being structured; :mod:`.inputs` prefixes
the path of that value when it turns the refusal into an ``AdapterError``.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal, NewType

import attrs
from cattrs.errors import CattrsError, IterableValidationError, IterableValidationNote

__all__ = [
    "ALLOWED_IMAGE_TYPES",
    "MAX_IMAGE_BYTES",
    "MAX_MESSAGE_IMAGE_BYTES",
    "STRUCTURE_ERRORS",
    "STRUCTURE_WITH",
    "ContentPart",
    "DataSource",
    "ImagePart",
    "InputRefusal",
    "JsonObject",
    "PathStep",
    "Structure",
    "TextPart",
    "UserContent",
    "structure_user_content",
]

MAX_IMAGE_BYTES: Final = 8 * 1024 * 1024
"""Largest decoded image accepted in one part."""

MAX_MESSAGE_IMAGE_BYTES: Final = 10 * 1024 * 1024
"""Largest total of decoded images accepted in one message."""

MIB: Final = 1024 * 1024

# Each accepted type with the signature its bytes must start with. WebP is a
# RIFF container, so its tag sits at offset 8, after the chunk size.
_SIGNATURES: Final[Mapping[str, Callable[[bytes], bool]]] = {
    "image/png": lambda data: data.startswith(b"\x89PNG\r\n\x1a\n"),
    "image/jpeg": lambda data: data.startswith(b"\xff\xd8\xff"),
    "image/gif": lambda data: data.startswith((b"GIF87a", b"GIF89a")),
    "image/webp": lambda data: data[:4] == b"RIFF" and data[8:12] == b"WEBP",
}

ALLOWED_IMAGE_TYPES: Final = frozenset(_SIGNATURES)
"""The image media types a user message may carry."""

# Part types AG-UI defines that this adapter refuses by name, so the user
# learns the kind is unsupported rather than that the value is a typo.
_REFUSED_PART_TYPES: Final = frozenset({"audio", "video", "document", "binary"})
_REFUSED_SOURCE_TYPES: Final = frozenset({"url", "file"})

PathStep = str | int
"""One step of a JSON path: an object key or an array index."""

JsonObject = NewType("JsonObject", dict[str, Any])
"""A JSON object whose members are carried without interpretation."""

Structure = Callable[[object, Any], Any]
"""The converter's ``structure(value, type)``, handed to custom field hooks."""

STRUCTURE_WITH: Final = "aguiadapter.structure_with"
"""``attrs`` field metadata key naming a custom ``hook(value, structure)``."""

STRUCTURE_ERRORS: Final = (CattrsError, ValueError, KeyError)
"""What structuring raises for bad input: cattrs' validation errors, an
:class:`InputRefusal` (a ``ValueError``), a missing key. Anything else is a
bug and is left to propagate."""


class InputRefusal(ValueError):
    """A value refused while structuring, with the path below that value.

    ``where`` is relative to the value the failing hook was given; the caller
    that knows the absolute path prefixes it.
    """

    def __init__(self, message_id: str, where: tuple[PathStep, ...] = (), **params: object) -> None:
        self.message_id = message_id
        self.where = where
        self.params = params
        super().__init__(message_id, where)


@attrs.frozen(kw_only=True)
class TextPart:
    """A text part of a user message."""

    type: Literal["text"] = "text"
    text: str
    id: str | None = None
    metadata: JsonObject | None = None


@attrs.frozen(kw_only=True)
class DataSource:
    """Image bytes carried inline, already decoded and checked.

    ``value`` is the base64 text as received (kept for forwarding as is);
    ``data`` the decoded bytes; ``media_type`` the declared type in canonical
    lower case. Building one with bad data raises :class:`InputRefusal`.
    """

    type: Literal["data"] = "data"
    value: str = attrs.field(repr=False)
    mime_type: str
    data: bytes = attrs.field(init=False, repr=False, eq=False)
    media_type: str = attrs.field(init=False, eq=False)

    def __attrs_post_init__(self) -> None:
        media_type = self.mime_type.lower()
        if media_type not in ALLOWED_IMAGE_TYPES:
            raise InputRefusal(
                "input_image_type_unsupported", ("mimeType",), mime_type=self.mime_type
            )
        data = _decode_image(self.value, media_type)
        # The class is frozen: computed fields are set once, here.
        object.__setattr__(self, "data", data)
        object.__setattr__(self, "media_type", media_type)


def _decode_image(value: str, media_type: str) -> bytes:
    # Standard base64 length tells the decoded size before any work is done,
    # so an oversized image is refused without allocating it.
    padding = len(value) - len(value.rstrip("="))
    if len(value) // 4 * 3 - min(padding, 2) > MAX_IMAGE_BYTES:
        raise InputRefusal("input_image_too_large", ("value",), limit_mib=MAX_IMAGE_BYTES // MIB)
    try:
        data = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise InputRefusal("input_image_bad_base64", ("value",)) from None
    if len(data) > MAX_IMAGE_BYTES:
        raise InputRefusal("input_image_too_large", ("value",), limit_mib=MAX_IMAGE_BYTES // MIB)
    if not _SIGNATURES[media_type](data):
        raise InputRefusal("input_image_content_mismatch", ("value",), mime_type=media_type)
    return data


def _structure_image_source(value: object, structure: Structure) -> DataSource:
    """Refuse URL and provider-file sources by name; structure inline data."""
    if not isinstance(value, dict):
        raise InputRefusal("input_expected_object")
    kind = _discriminator(value, "type")
    if kind in _REFUSED_SOURCE_TYPES:
        raise InputRefusal("input_image_source_unsupported", ("type",), kind=kind)
    if kind != "data":
        raise InputRefusal("input_bad_value", ("type",), allowed='"data"')
    source: DataSource = structure(value, DataSource)
    return source


@attrs.frozen(kw_only=True)
class ImagePart:
    """An inline image part of a user message."""

    type: Literal["image"] = "image"
    source: DataSource = attrs.field(metadata={STRUCTURE_WITH: _structure_image_source})
    id: str | None = None
    metadata: JsonObject | None = None

    @property
    def data(self) -> bytes:
        """The decoded image bytes."""
        return self.source.data

    @property
    def media_type(self) -> str:
        """The image media type, in lower case (``image/png``, ...)."""
        return self.source.media_type


ContentPart = TextPart | ImagePart
"""A part of a user message this adapter accepts."""

UserContent = str | tuple[ContentPart, ...]
"""What a user message says: plain text, or an ordered tuple of parts."""

_PART_TYPES: Final[Mapping[str, type[TextPart | ImagePart]]] = {
    "text": TextPart,
    "image": ImagePart,
}


def _discriminator(value: dict[str, Any], key: str) -> str:
    """Read the string that selects the shape of ``value``."""
    if key not in value:
        raise InputRefusal("input_field_missing", (key,))
    kind = value[key]
    if not isinstance(kind, str):
        raise InputRefusal("input_expected_string", (key,))
    return kind


def _structure_part(value: object, structure: Structure) -> ContentPart:
    if not isinstance(value, dict):
        raise InputRefusal("input_expected_object")
    kind = _discriminator(value, "type")
    if kind in _REFUSED_PART_TYPES:
        raise InputRefusal("input_content_part_unsupported", ("type",), kind=kind)
    part_type = _PART_TYPES.get(kind)
    if part_type is None:
        raise InputRefusal("input_bad_value", ("type",), allowed='"text", "image"')
    part: ContentPart = structure(value, part_type)
    return part


def _check_image_total(parts: tuple[ContentPart, ...]) -> None:
    total = 0
    for index, part in enumerate(parts):
        if isinstance(part, ImagePart):
            total += len(part.data)
            if total > MAX_MESSAGE_IMAGE_BYTES:
                raise InputRefusal(
                    "input_images_total_too_large",
                    (index,),
                    limit_mib=MAX_MESSAGE_IMAGE_BYTES // MIB,
                )


def _is_empty(parts: tuple[ContentPart, ...]) -> bool:
    return all(isinstance(part, TextPart) and not part.text.strip() for part in parts)


def structure_user_content(value: object, structure: Structure) -> UserContent:
    """Structure and check the ``content`` of a user message.

    Raises :class:`InputRefusal` (or the converter's validation errors, whose
    notes carry the part index) on the first kind of problem found.
    """
    if isinstance(value, str):
        if not value.strip():
            raise InputRefusal("input_user_content_empty")
        return value
    if not isinstance(value, list):
        raise InputRefusal("input_user_content_type")
    parts: list[ContentPart] = []
    for index, item in enumerate(value):
        try:
            parts.append(_structure_part(item, structure))
        except InputRefusal as refusal:
            raise InputRefusal(
                refusal.message_id, (index, *refusal.where), **refusal.params
            ) from None
        except STRUCTURE_ERRORS as exc:
            raise _at_index(exc, index) from None
    result = tuple(parts)
    if _is_empty(result):
        raise InputRefusal("input_user_content_empty")
    _check_image_total(result)
    return result


def _at_index(exc: Exception, index: int) -> IterableValidationError:
    """Wrap a part's failure the way cattrs reports a failing list element."""
    note = IterableValidationNote(f"Structuring user content @ index {index}", index, ContentPart)
    exc.__notes__ = [*getattr(exc, "__notes__", []), note]
    return IterableValidationError("While structuring user content", [exc], tuple)
