"""The content of the user message a new turn sends: text and inline images.

A part the runtime cannot take (an image by URL or provider file handle, an
inline image of another type, audio, video, a document, a part of a kind
AG-UI 1.0 does not describe) is skipped under AG-UI 1.0
(``basic/run-input.mdx#messages``) and named in a :class:`SkippedPart`; the
``iac-code-agui`` profile refuses it instead, as the protocol reference does.

What a part may look like is the input schema's (:mod:`.input_schema`); what
its bytes must be is said here. Images are decoded and checked once, when
the part is built: a :class:`DataSource` always holds bytes that are valid
base64, within the size limit, of the declared image type and, as far as a
cheap test can tell without an image library, whole (not cut short, no
damaged PNG chunk): the runtime decodes every image and fails the run on
one it cannot read.

Refusals are :class:`~.refusals.InputRefusal` exceptions carrying the path
below the content; :mod:`.parsing` adds the path of the message.
"""

from __future__ import annotations

import base64
import binascii
import struct
import zlib
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal, NewType

import attrs

from .refusals import InputRefusal

__all__ = [
    "ALLOWED_IMAGE_TYPES",
    "MAX_IMAGE_BYTES",
    "MAX_MESSAGE_IMAGE_BYTES",
    "ContentPart",
    "DataSource",
    "ImagePart",
    "JsonObject",
    "SkippedPart",
    "TextPart",
    "UserContent",
    "build_user_content",
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


def _png_is_whole(data: bytes) -> bool:
    """Every chunk is complete and its CRC right, up to IEND or the end.

    A decoder reads chunks the same way; one cut short or damaged fails it.
    """
    view = memoryview(data)  # slices of it copy nothing
    offset = 8
    while offset < len(data):
        if offset + 12 > len(data):
            return False
        (length,) = struct.unpack_from(">I", data, offset)
        end = offset + 12 + length
        if end > len(data):
            return False
        if zlib.crc32(view[offset + 4 : end - 4]) != struct.unpack_from(">I", data, end - 4)[0]:
            return False
        if data[offset + 4 : offset + 8] == b"IEND":
            return True
        offset = end
    return True


# What a decoder needs beyond the signature, where a cheap test tells a
# truncated or damaged image. GIF has none that decoders insist on.
_WHOLE: Final[Mapping[str, Callable[[bytes], bool]]] = {
    "image/png": _png_is_whole,
    # Entropy-coded data escapes 0xFF, so 0xFFD9 is always the end-of-image marker.
    "image/jpeg": lambda data: b"\xff\xd9" in data,
    # The RIFF header gives the length of the file after its first 8 bytes.
    "image/webp": lambda data: struct.unpack_from("<I", data, 4)[0] + 8 <= len(data),
    "image/gif": lambda data: True,
}

JsonObject = NewType("JsonObject", dict[str, Any])
"""A JSON object whose members are carried without interpretation."""


@attrs.frozen(kw_only=True)
class _Part:
    """What every part of a user message may carry besides its content
    (all keyword fields: their order is no one's concern)."""

    id: str | None = None
    metadata: JsonObject | None = None


@attrs.frozen(kw_only=True)
class TextPart(_Part):
    """A text part of a user message."""

    type: Literal["text"] = "text"
    text: str


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
        # Media types are case-insensitive (RFC 2045), so this is not an enum of the schema.
        media_type = self.mime_type.lower()
        if media_type not in ALLOWED_IMAGE_TYPES:
            raise InputRefusal("input_image_type_unsupported", ("mimeType",), mime_type=self.mime_type[:64])
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
    if not _WHOLE[media_type](data):
        raise InputRefusal("input_image_damaged", ("value",), mime_type=media_type)
    return data


@attrs.frozen(kw_only=True)
class ImagePart(_Part):
    """An inline image part of a user message."""

    type: Literal["image"] = "image"
    source: DataSource

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


SkipReason = Literal["image_url", "provider_file", "unsupported_source", "unsupported_image_type", "unsupported_part"]
"""Why a part was skipped (the ``reason`` of ``iac-code.input.skipped.v1``)."""


@attrs.frozen(kw_only=True)
class SkippedPart:
    """A content part of the new user message the run left out, and why."""

    #: Its position in the message's ``content``.
    index: int
    #: Its ``type`` as the client sent it (``image``, ``document``...).
    type: str
    reason: SkipReason
    #: The ``source.type`` of a media part (``url``, ``file``...).
    source: str | None = None
    #: The declared media type, when the client gave one (at most 64 characters).
    mime_type: str | None = None
    #: The part's own ``id``, when it has one.
    id: str | None = None

    def describe(self) -> dict[str, Any]:
        """The part as ``iac-code.input.skipped.v1`` names it (no ``null``)."""
        named = {"index": self.index, "type": self.type, "reason": self.reason, "source": self.source,
                 "mimeType": self.mime_type, "id": self.id}
        return {key: value for key, value in named.items() if value is not None}


def _unusable(index: int, part: dict[str, Any]) -> SkippedPart | None:
    """Why the runtime cannot take a schema-checked part (``None``: it can)."""
    kind = part["type"]
    if kind == "text":
        return None
    raw_source = part.get("source")
    source: dict[str, Any] = raw_source if isinstance(raw_source, dict) else {}
    source_type = source.get("type") if isinstance(source.get("type"), str) else None
    mime = source.get("mimeType")
    mime_type = mime[:64] if isinstance(mime, str) else None
    part_id = part.get("id") if isinstance(part.get("id"), str) else None
    reason: SkipReason | None = None
    if kind != "image":
        reason = "unsupported_part"
    elif source_type == "url":
        reason = "image_url"
    elif source_type == "file":
        reason = "provider_file"
    elif source_type != "data":
        reason = "unsupported_source"
    elif (mime_type or "").lower() not in ALLOWED_IMAGE_TYPES:
        reason = "unsupported_image_type"
    if reason is None:
        return None
    return SkippedPart(index=index, type=kind[:64], reason=reason, source=source_type and source_type[:64],
                       mime_type=mime_type, id=part_id)


def _build_part(part: dict[str, Any]) -> ContentPart:
    # AG-UI 1.0 leaves a part's metadata unconstrained; only an object is kept.
    raw = part.get("metadata")
    metadata = JsonObject(raw) if isinstance(raw, dict) else None
    if part["type"] == "text":
        return TextPart(text=part["text"], id=part.get("id"), metadata=metadata)
    source = part["source"]
    try:
        data = DataSource(value=source["value"], mime_type=source["mimeType"])
    except InputRefusal as refusal:
        raise refusal.within("source") from None
    return ImagePart(source=data, id=part.get("id"), metadata=metadata)


def build_user_content(
    content: str | list[dict[str, Any]], *, skip_unusable: bool = False
) -> tuple[UserContent, tuple[SkippedPart, ...]]:
    """The content of a new user message, from its schema-checked JSON, and
    the parts left out (``skip_unusable``: AG-UI 1.0; else none is, and the
    schema of the ``iac-code-agui`` profile has refused them already).

    Decodes and checks every image it keeps; raises :class:`InputRefusal`
    with the path below the content (``[1].source.value``), and when nothing
    usable is left.
    """
    if isinstance(content, str):
        return content, ()
    parts: list[ContentPart] = []
    skipped: list[SkippedPart] = []
    total = 0
    for index, raw in enumerate(content):
        left_out = _unusable(index, raw) if skip_unusable else None
        if left_out is not None:
            skipped.append(left_out)
            continue
        try:
            part = _build_part(raw)
        except InputRefusal as refusal:
            raise refusal.within(index) from None
        if isinstance(part, ImagePart):
            total += len(part.data)
            if total > MAX_MESSAGE_IMAGE_BYTES:
                raise InputRefusal(
                    "input_images_total_too_large", (index,), limit_mib=MAX_MESSAGE_IMAGE_BYTES // MIB
                )
        parts.append(part)
    if skipped and not any(isinstance(part, ImagePart) or part.text.strip() for part in parts):
        # What is left would be an empty message: refused as one, saying why.
        kinds = ", ".join(sorted({f"{item.type} ({item.reason})" for item in skipped}))
        raise InputRefusal("input_user_content_unusable", (), skipped=kinds)
    return tuple(parts), tuple(skipped)
