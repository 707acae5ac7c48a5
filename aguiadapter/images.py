"""Images a user message carries, made to fit what the runtime takes.

The protocol reference accepts images up to 8 MiB each (10 MiB per message,
checked by :mod:`aguiadapter.protocol.content`), but ``iac-code a2a`` takes
at most :data:`RUNTIME_INLINE_IMAGE_BYTES` of inline image bytes, and the
model behind it less. So every image of a new turn is looked at with Pillow,
once the run has been admitted (its run limits and the new-thread gate said
yes, see :meth:`~aguiadapter.service.thread_service.ThreadService.admit`):

- one whose header declares more than :data:`MAX_IMAGE_PIXELS` pixels (a
  decompression bomb: a small file that decodes to gigabytes) or that Pillow
  cannot read is refused as ``INVALID_INPUT`` naming its ``source.value``,
  before any stream opens and before any pixel is decoded;
- one larger than :data:`TARGET_IMAGE_BYTES` is scaled to fit within
  :data:`MAX_SIDE` pixels and re-encoded, in its own format where that is
  small enough (PNG, WebP, JPEG), else as JPEG of falling quality. A JPEG is
  decoded reduced (at 1/2, 1/4 or 1/8 of its size, as close to the result as
  it goes); PNG, WebP and GIF decode only whole, so one of those that would
  decode to more than :data:`MAX_DECODED_PIXELS` is refused from its header;
- any other is forwarded byte for byte (the runtime decodes it, not us).

Pixels cost memory, so decoding is bounded by an :class:`ImageWork` per app:
each decode first reserves what it will allocate (known from the header)
from a byte budget, first come first served, and runs in a small pool of
worker threads of its own, never on the event loop. However many requests
carry images, the pixels held at once stay within the budget.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import ctypes
import functools
import io
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Final, TypeVar, cast

import attrs

from .errors import AdapterError, ErrorCode
from .protocol.content import DataSource, ImagePart
from .protocol.inputs import RunAgentInput, UserMessage
from .protocol.refusals import format_path

if TYPE_CHECKING:
    # Pillow is imported by the first image's worker thread, not at startup:
    # a server that never sees an image does not hold its 3 MB.
    from PIL import Image

__all__ = [
    "DECODE_BUDGET_BYTES",
    "MAX_DECODED_PIXELS",
    "MAX_IMAGE_PIXELS",
    "MAX_SIDE",
    "RUNTIME_INLINE_IMAGE_BYTES",
    "TARGET_IMAGE_BYTES",
    "ImageWork",
]

RUNTIME_INLINE_IMAGE_BYTES: Final = 5 * 1024 * 1024
"""The most inline image bytes ``iac-code a2a`` takes in one part."""

TARGET_IMAGE_BYTES: Final = RUNTIME_INLINE_IMAGE_BYTES * 3 // 4
"""What a re-encoded image must fit in: its base64 within the model API's 5 MiB."""

MAX_SIDE: Final = 2000
"""Longest side, in pixels, of a re-encoded image (what the model takes)."""

MAX_IMAGE_PIXELS: Final = 50_000_000
"""The most pixels an image's header may declare (about 8,660 x 5,770)."""

MAX_DECODED_PIXELS: Final = 24_000_000
"""The most pixels decoded for one image (a JPEG after its reduced decode):
about 4,900 x 4,900, 96 MB in memory (Pillow keeps 4 bytes a pixel)."""

DECODE_BUDGET_BYTES: Final = 256 * 1024 * 1024
"""What the image work of one app may allocate at once (pixels and the scaled copies)."""

DECODE_THREADS: Final = 2
"""Worker threads of one app's image work (the budget bounds what they hold)."""

_JPEG_QUALITIES: Final = (85, 70, 55, 40)
_FORMATS: Final = {"image/png": "PNG", "image/jpeg": "JPEG", "image/webp": "WEBP", "image/gif": "GIF"}
#: PNG chunks Pillow inflates while it reads the header (up to 64 MB of text);
#: the adapter needs none of them, so Pillow never sees them.
_PNG_TEXT_CHUNKS: Final = frozenset({b"tEXt", b"zTXt", b"iTXt"})
#: Pillow keeps 4 bytes per pixel of every mode that matters here; WebP's
#: decoder hands over a copy of the whole frame as well.
_BYTES_PER_PIXEL: Final = 4
_WEBP_DECODE_COPIES: Final = 2

_T = TypeVar("_T")


class _Refused(Exception):
    def __init__(self, message_id: str, **params: object) -> None:
        super().__init__(message_id)
        self.message_id = message_id
        self.params = params


@attrs.frozen
class _Plan:
    """What fitting one image will take, read from its header."""

    #: The opened image (nothing decoded yet); ``None``: forward as is.
    image: Image.Image | None
    #: Bytes the decode and the scaling allocate at most.
    cost: int


class _Budget:
    """A byte budget handed out first come, first served (a later small
    request does not overtake an earlier large one that waits)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.free = total
        self._waiting: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    async def take(self, amount: int) -> int:
        """Wait for ``amount`` (at most the whole budget); returns what was taken."""
        amount = min(amount, self.total)
        if not self._waiting and amount <= self.free:
            self.free -= amount
            return amount
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (amount, granted)
        self._waiting.append(entry)
        try:
            await granted
        except BaseException:
            if granted.done() and not granted.cancelled():
                self.give(amount)  # granted as the wait was cancelled
            else:
                try:
                    self._waiting.remove(entry)
                except ValueError:
                    pass
                self._grant()
            raise
        return amount

    def give(self, amount: int) -> None:
        self.free += amount
        self._grant()

    def _grant(self) -> None:
        while self._waiting and self._waiting[0][0] <= self.free:
            amount, granted = self._waiting.popleft()
            if granted.done():
                continue
            self.free -= amount
            granted.set_result(None)


class ImageWork:
    """One app's image fitting, its memory bounded by a byte budget.

    Each app has its own (several can live in one process); :meth:`close`
    ends its worker threads.
    """

    def __init__(self, budget_bytes: int = DECODE_BUDGET_BYTES, threads: int = DECODE_THREADS) -> None:
        self._budget = _Budget(budget_bytes)
        self._threads = threads
        self._pool: ThreadPoolExecutor | None = None

    @property
    def budget_bytes(self) -> int:
        """The budget's size."""
        return self._budget.total

    @property
    def reserved_bytes(self) -> int:
        """What decodes in flight hold of the budget now."""
        return self._budget.total - self._budget.free

    def close(self) -> None:
        """End the worker threads (work already queued still finishes)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None

    async def fit(self, run_input: RunAgentInput) -> RunAgentInput:
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
                source = await self._fit(part.source)
            except _Refused as refused:
                where = ("messages", _index_of(run_input, message.id), "content", position, "source", "value")
                raise AdapterError(
                    ErrorCode.INVALID_INPUT, refused.message_id, path=format_path(where), **refused.params
                ) from None
            if source is not part.source:
                parts[position] = attrs.evolve(part, source=source)
        fitted = attrs.evolve(message, content=tuple(parts))
        return attrs.evolve(run_input, new_user_message=fitted)

    async def _fit(self, source: DataSource) -> DataSource:
        plan = await self._in_pool(_plan, source)
        if plan.image is None:
            return source
        image = plan.image
        try:
            taken = await self._budget.take(plan.cost)
        except BaseException:
            image.close()
            raise
        try:
            work = asyncio.get_running_loop().run_in_executor(self._executor(), _reencode, image, source.media_type)
        except BaseException:
            self._budget.give(taken)
            image.close()
            raise
        # The budget is given back when the thread is done with the pixels,
        # even if this request stopped waiting for it.
        def done(_: object) -> None:
            image.close()
            self._budget.give(taken)

        work.add_done_callback(done)
        data, media_type = await asyncio.shield(work)
        return DataSource(value=base64.b64encode(data).decode("ascii"), mime_type=media_type)

    async def _in_pool(self, function: Callable[[DataSource], _T], source: DataSource) -> _T:
        return await asyncio.get_running_loop().run_in_executor(self._executor(), function, source)

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self._threads, thread_name_prefix="aguiadapter-images")
        return self._pool


def _index_of(run_input: RunAgentInput, message_id: str) -> int:
    for index in range(len(run_input.messages) - 1, -1, -1):
        message = run_input.messages[index]
        if isinstance(message, UserMessage) and message.id == message_id:
            return index
    return len(run_input.messages) - 1


def _plan(source: DataSource) -> _Plan:
    """Read the header, refuse what may not be decoded; in a worker thread.

    Nothing is decoded here: ``Image.open`` reads the size and the mode, and
    a JPEG's ``draft`` only picks the scale its decode will use.
    """
    from PIL import Image, UnidentifiedImageError

    data = _without_png_text(source.data) if source.media_type == "image/png" else source.data
    with warnings.catch_warnings():
        # Pillow warns (and past twice its own bound raises) about large images; the bound here is ours.
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            image = Image.open(io.BytesIO(data))
        except Image.DecompressionBombError:
            raise _Refused("input_image_too_many_pixels", limit_mpx=MAX_IMAGE_PIXELS // 1_000_000) from None
        except (UnidentifiedImageError, OSError, ValueError, SyntaxError):
            raise _Refused("input_image_unreadable", mime_type=source.media_type) from None
    try:
        width, height = image.size
        if width * height > MAX_IMAGE_PIXELS:
            raise _Refused("input_image_too_many_pixels", limit_mpx=MAX_IMAGE_PIXELS // 1_000_000)
        if len(source.data) <= TARGET_IMAGE_BYTES:
            image.close()
            return _Plan(None, 0)
        if image.format == "JPEG":
            # Decode at 1/2, 1/4 or 1/8 where that still covers the result.
            image.draft("RGB", _fitted(image.size))
        width, height = image.size
        if width * height > MAX_DECODED_PIXELS:
            raise _Refused("input_image_too_many_pixels", limit_mpx=MAX_DECODED_PIXELS // 1_000_000)
    except BaseException:
        image.close()
        raise
    return _Plan(image, _cost(image))


def _without_png_text(data: bytes) -> bytes:
    """The PNG up to its ``IEND``, without its text chunks (its chunks were checked whole already)."""
    view = memoryview(data)
    kept = [view[:8]]
    offset = 8
    while offset + 12 <= len(data):
        kind = data[offset + 4 : offset + 8]
        end = offset + 12 + int.from_bytes(data[offset : offset + 4], "big")
        if kind not in _PNG_TEXT_CHUNKS:
            kept.append(view[offset:end])
        if kind == b"IEND":
            break
        offset = end
    return b"".join(kept)


def _fitted(size: tuple[int, int]) -> tuple[int, int]:
    """``size`` scaled within MAX_SIDE x MAX_SIDE, its aspect kept (as ``thumbnail`` does)."""
    width, height = size
    if max(width, height) <= MAX_SIDE:
        return size
    if width >= height:
        return MAX_SIDE, max(1, round(height * MAX_SIDE / width))
    return max(1, round(width * MAX_SIDE / height)), MAX_SIDE


def _cost(image: Image.Image) -> int:
    """Bytes that decoding ``image`` (as drafted) and fitting it allocate at most."""
    width, height = image.size
    copies = _WEBP_DECODE_COPIES if image.format == "WEBP" else 1
    cost = width * height * _BYTES_PER_PIXEL * copies
    fitted_width, fitted_height = _fitted(image.size)
    if (fitted_width, fitted_height) != (width, height):
        # A resize is two passes: the first keeps the whole height.
        cost += fitted_width * (height + fitted_height) * _BYTES_PER_PIXEL
    # Flattening to RGB (through RGBA where there is transparency).
    return cost + 2 * fitted_width * fitted_height * _BYTES_PER_PIXEL


def _reencode(image: Image.Image, media_type: str) -> tuple[bytes, str]:
    """Scaled within MAX_SIDE, in its own format if that fits, else JPEG; in a worker thread."""
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image.load()
            # In place: the decoded image is this request's own.
            image.thumbnail((MAX_SIDE, MAX_SIDE), Image.Resampling.LANCZOS)
            return _encode(image, media_type)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
        raise _Refused("input_image_unreadable", mime_type=media_type) from None
    finally:
        _give_back_memory()


def _give_back_memory() -> None:
    """Return the freed pixels to the system: glibc keeps what a worker
    thread's arena freed (hundreds of MB after a few large decodes)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


#: glibc's ``mallopt`` parameters: allocation arenas, and the size from which
#: a block is mapped on its own (and given back to the system when freed).
_M_ARENA_MAX: Final = -8
_M_MMAP_THRESHOLD: Final = -3
#: Arenas a server process keeps (see :func:`tune_allocator`).
SERVER_ARENAS: Final = 2
#: Blocks of this size or more are mapped on their own, always.
SERVER_MMAP_THRESHOLD: Final = 1024 * 1024


def tune_allocator() -> bool:
    """Have glibc give large blocks and worker threads' memory back to the
    system: at most :data:`SERVER_ARENAS` allocation arenas (as
    ``MALLOC_ARENA_MAX`` would) and every block of
    :data:`SERVER_MMAP_THRESHOLD` or more mapped on its own (as
    ``MALLOC_MMAP_THRESHOLD_`` would), each unless the environment says.

    By default glibc gives each thread that allocates an arena of its own,
    up to eight per core, and raises its mapping threshold up to 32 MiB as
    soon as one large block is freed: from then on request bodies, their
    decoded JSON and image buffers (up to 12 MiB each) were carved out of
    the arenas, which keep what was freed. Measured (benchmark 17, 16 image
    bombs at once, peak above idle): 414 MB by default, 309 MB with two
    arenas, 224 MB with the fixed threshold as well. The adapter's threads
    mostly wait (the GIL serializes Python), and blocks of a MiB are rare:
    both cost little. Called once by ``python -m aguiadapter`` before any
    thread starts; an application that embeds the adapter decides for its
    own process. ``False`` where glibc is not there."""
    import os

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False  # not glibc
    if "MALLOC_ARENA_MAX" not in os.environ:
        mallopt(_M_ARENA_MAX, SERVER_ARENAS)
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        mallopt(_M_MMAP_THRESHOLD, SERVER_MMAP_THRESHOLD)
    return True


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return cast("Callable[[int], int]", ctypes.CDLL(None).malloc_trim)
    except (OSError, AttributeError):
        return None  # not glibc


def _encode(scaled: Image.Image, media_type: str) -> tuple[bytes, str]:
    from PIL import Image

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
    from PIL import Image

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
