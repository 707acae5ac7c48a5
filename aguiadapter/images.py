"""Images a user message carries, made to fit what the runtime takes.

The protocol reference accepts images up to 8 MiB each (10 MiB per message,
checked by :mod:`aguiadapter.protocol.content`), but ``iac-code a2a`` takes
at most :data:`RUNTIME_INLINE_IMAGE_BYTES` of inline image bytes, and the
model behind it less. So, before a run is admitted, every image is looked at
with Pillow:

- one of more than :data:`MAX_IMAGE_PIXELS` pixels (a decompression bomb: a
  small file that decodes to gigabytes) or one Pillow cannot read is refused
  as ``INVALID_INPUT`` naming its ``source.value``, before any stream opens;
- one larger than :data:`TARGET_IMAGE_BYTES` is scaled to fit within
  :data:`MAX_SIDE` pixels and re-encoded, in its own format where that is
  small enough (PNG, WebP, JPEG), else as JPEG of falling quality;
- any other is forwarded byte for byte.

Pillow's work runs in a worker thread: a large image never stalls the event
loop. Reading the header (the size) decodes nothing.
"""

from __future__ import annotations

import asyncio
import base64
import io
import warnings
from typing import Final

import attrs
from PIL import Image, UnidentifiedImageError

from .errors import AdapterError, ErrorCode
from .protocol.content import DataSource, ImagePart
from .protocol.inputs import RunAgentInput, UserMessage
from .protocol.refusals import format_path

__all__ = ["MAX_IMAGE_PIXELS", "MAX_SIDE", "RUNTIME_INLINE_IMAGE_BYTES", "TARGET_IMAGE_BYTES", "fit_images"]

RUNTIME_INLINE_IMAGE_BYTES: Final = 5 * 1024 * 1024
"""The most inline image bytes ``iac-code a2a`` takes in one part."""

TARGET_IMAGE_BYTES: Final = RUNTIME_INLINE_IMAGE_BYTES * 3 // 4
"""What a re-encoded image must fit in: its base64 within the model API's 5 MiB."""

MAX_SIDE: Final = 2000
"""Longest side, in pixels, of a re-encoded image (what the model takes)."""

MAX_IMAGE_PIXELS: Final = 50_000_000
"""The most pixels an image may have (about 8,660 x 5,770; 150 MB decoded as RGB)."""

_JPEG_QUALITIES: Final = (85, 70, 55, 40)
_FORMATS: Final = {"image/png": "PNG", "image/jpeg": "JPEG", "image/webp": "WEBP", "image/gif": "GIF"}


class _Refused(Exception):
    def __init__(self, message_id: str, **params: object) -> None:
        super().__init__(message_id)
        self.message_id = message_id
        self.params = params


async def fit_images(run_input: RunAgentInput) -> RunAgentInput:
    """``run_input`` with the images of its new message fitted (see the module).

    Raises ``AdapterError(INVALID_INPUT)`` for an image that is a
    decompression bomb or that Pillow cannot read.
    """
    message = run_input.new_user_message
    if message is None or isinstance(message.content, str):
        return run_input
    if not any(isinstance(part, ImagePart) for part in message.content):
        return run_input
    parts = list(message.content)
    for position, part in enumerate(parts):
        if not isinstance(part, ImagePart):
            continue
        try:
            source = await asyncio.to_thread(_fit, part.source)
        except _Refused as refused:
            where = ("messages", _index_of(run_input, message.id), "content", position, "source", "value")
            raise AdapterError(
                ErrorCode.INVALID_INPUT, refused.message_id, path=format_path(where), **refused.params
            ) from None
        if source is not part.source:
            parts[position] = attrs.evolve(part, source=source)
    fitted = attrs.evolve(message, content=tuple(parts))
    return attrs.evolve(run_input, new_user_message=fitted)


def _index_of(run_input: RunAgentInput, message_id: str) -> int:
    for index in range(len(run_input.messages) - 1, -1, -1):
        message = run_input.messages[index]
        if isinstance(message, UserMessage) and message.id == message_id:
            return index
    return len(run_input.messages) - 1


def _fit(source: DataSource) -> DataSource:
    """The source as is, or re-encoded to fit; in a worker thread."""
    with warnings.catch_warnings():
        # Pillow warns (and past twice its own bound raises) about large images; the bound here is ours.
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            image = Image.open(io.BytesIO(source.data))
        except Image.DecompressionBombError:
            raise _Refused("input_image_too_many_pixels", limit_mpx=MAX_IMAGE_PIXELS // 1_000_000) from None
        except (UnidentifiedImageError, OSError, ValueError):
            raise _Refused("input_image_unreadable", mime_type=source.media_type) from None
        with image:
            width, height = image.size
            if width * height > MAX_IMAGE_PIXELS:
                raise _Refused("input_image_too_many_pixels", limit_mpx=MAX_IMAGE_PIXELS // 1_000_000)
            if len(source.data) <= TARGET_IMAGE_BYTES:
                return source
            try:
                data, media_type = _reencode(image, source.media_type)
            except (OSError, ValueError, Image.DecompressionBombError):
                raise _Refused("input_image_unreadable", mime_type=source.media_type) from None
    return DataSource(value=base64.b64encode(data).decode("ascii"), mime_type=media_type)


def _reencode(image: Image.Image, media_type: str) -> tuple[bytes, str]:
    """Scaled within MAX_SIDE, in its own format if that fits, else JPEG."""
    if image.format == "JPEG":
        image.draft("RGB", (MAX_SIDE, MAX_SIDE))  # decode at a fraction of the size where it can
    image.load()
    scaled = image.copy()
    scaled.thumbnail((MAX_SIDE, MAX_SIDE), Image.Resampling.LANCZOS)
    own = _FORMATS.get(media_type)
    if own in ("PNG", "WEBP"):
        data = _save(scaled, own)
        if len(data) <= TARGET_IMAGE_BYTES:
            return data, media_type
    flat = _flatten(scaled)
    side = MAX_SIDE
    while True:
        for quality in _JPEG_QUALITIES:
            data = _save(flat, "JPEG", quality=quality)
            if len(data) <= TARGET_IMAGE_BYTES:
                return data, "image/jpeg"
        side //= 2
        flat = flat.copy()
        flat.thumbnail((side, side), Image.Resampling.LANCZOS)


def _flatten(image: Image.Image) -> Image.Image:
    """RGB, transparency laid on white (JPEG has no alpha)."""
    if image.mode in ("RGBA", "LA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        ground = Image.new("RGB", rgba.size, (255, 255, 255))
        ground.paste(rgba, mask=rgba.getchannel("A"))
        return ground
    return image.convert("RGB")


def _save(image: Image.Image, fmt: str, **options: int) -> bytes:
    out = io.BytesIO()
    image.save(out, format=fmt, optimize=True, **options)
    return out.getvalue()
