"""Images over what the runtime takes are scaled and re-encoded; bombs and
unreadable images are refused before the stream; the rest pass untouched."""

from __future__ import annotations

import base64
import io
import os
import struct
import zlib
from pathlib import Path

import pytest
from PIL import Image

from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.errors import AdapterError
from aguiadapter.images import MAX_SIDE, RUNTIME_INLINE_IMAGE_BYTES, TARGET_IMAGE_BYTES, ImageWork
from aguiadapter.protocol.content import ImagePart
from aguiadapter.protocol.parsing import parse_run_input
from tests.support.adapter import run_body, start_adapter
from tests.support.agui import check_stream
from tests.support.envelopes import JPEG, MIB, PNG, image_part, png_chunk


def noisy_png(width: int, height: int) -> bytes:
    """A PNG that does not compress: about width * height * 3 bytes."""
    out = io.BytesIO()
    Image.frombytes("RGB", (width, height), os.urandom(width * height * 3)).save(out, "PNG", compress_level=1)
    return out.getvalue()


def bomb_png(width: int, height: int) -> bytes:
    """A whole, tiny PNG file whose header claims width x height pixels."""
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", header) + png_chunk(b"IDAT", zlib.compress(b"\x00" * 1024))
            + png_chunk(b"IEND", b""))


def body_with(*images: dict[str, object], cwd: str = "/tmp") -> dict[str, object]:
    body = run_body(thread_id="images", text=None, cwd=cwd)
    body["messages"] = [{"id": "m1", "role": "user", "content": [{"type": "text", "text": "look"}, *images]}]
    return body


def fitted_images(body: dict[str, object]) -> list[ImagePart]:
    import asyncio

    work = ImageWork()
    try:
        run_input = asyncio.run(work.fit(parse_run_input(body)))
    finally:
        work.close()
    assert run_input.new_user_message is not None and not isinstance(run_input.new_user_message.content, str)
    return [part for part in run_input.new_user_message.content if isinstance(part, ImagePart)]


def test_an_8_mib_png_is_scaled_and_re_encoded_to_what_the_runtime_takes() -> None:
    original = noisy_png(1600, 1740)
    assert 7.9 * MIB < len(original) <= 8 * MIB
    (image,) = fitted_images(body_with(image_part(original)))
    assert len(image.data) <= TARGET_IMAGE_BYTES < RUNTIME_INLINE_IMAGE_BYTES
    decoded = Image.open(io.BytesIO(image.data))
    assert max(decoded.size) <= MAX_SIDE and decoded.format == image.media_type.split("/")[1].upper()
    # What the runtime gets is the re-encoded image.
    assert base64.b64decode(image.source.value) == image.data


def test_a_large_png_that_compresses_keeps_its_type() -> None:
    out = io.BytesIO()
    Image.new("RGB", (2400, 1100), (10, 200, 30)).save(out, "PNG", compress_level=0)
    assert TARGET_IMAGE_BYTES < len(out.getvalue()) <= 8 * MIB
    (image,) = fitted_images(body_with(image_part(out.getvalue())))
    assert image.media_type == "image/png" and Image.open(io.BytesIO(image.data)).size == (MAX_SIDE, 917)


def test_small_images_travel_byte_for_byte() -> None:
    images = fitted_images(body_with(image_part(PNG), image_part(JPEG, "image/jpeg")))
    assert [image.data for image in images] == [PNG, JPEG]


@pytest.mark.parametrize("language", ["en", "zh-CN"])
def test_a_decompression_bomb_is_refused_as_invalid_input_naming_the_image(language: str) -> None:
    from aguiadapter.i18n import render_error

    body = body_with(image_part(PNG), image_part(bomb_png(30000, 30000)))
    with pytest.raises(AdapterError) as caught:
        fitted_images(body)
    assert caught.value.code.name == "INVALID_INPUT"
    assert caught.value.params["path"] == "messages[0].content[2].source.value"
    assert "50" in render_error(caught.value, language)


def test_an_image_pillow_cannot_read_is_refused() -> None:
    header = struct.pack(">IIBBBBB", 4, 4, 3, 2, 0, 0, 0)  # bit depth 3: no such RGB PNG
    broken = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", header) + png_chunk(b"IDAT", zlib.compress(b"\x00")) + png_chunk(b"IEND", b"")
    with pytest.raises(AdapterError) as caught:
        fitted_images(body_with(image_part(broken)))
    assert caught.value.message_id == "input_image_unreadable"


async def test_over_http_a_bomb_is_refused_before_the_stream_and_an_image_runs(
    tmp_path: Path, demo: DemoRuntime
) -> None:
    running = await start_adapter(tmp_path / "s", demo.url, allowed_cwds=(str(tmp_path),))
    try:
        refused = await running.run(body_with(image_part(bomb_png(30000, 30000)), cwd=str(tmp_path)))
        assert refused.status == 400 and refused.json()["error"]["code"] == "INVALID_INPUT"
        assert "messages[0].content[1].source.value" in refused.json()["error"]["message"]
        # (The demo runtime takes bodies up to 1 MiB; tests/e2e sends 8 MiB to the real one.)
        accepted = await running.run(body_with(image_part(noisy_png(300, 300)), cwd=str(tmp_path)))
        assert accepted.status == 200 and check_stream(accepted.body)[-1]["type"] == "RUN_FINISHED"
    finally:
        await running.close()


def test_pillow_is_loaded_by_the_first_image_not_by_the_server() -> None:
    # Pillow holds about 3 MB of a process that may never see an image; the
    # first image of a fresh process still has its bomb refused and its image fitted.
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import asyncio, sys
        import aguiadapter.cli, aguiadapter.web.app
        from aguiadapter.errors import AdapterError
        from aguiadapter.images import ImageWork
        from aguiadapter.protocol.parsing import parse_run_input
        print("at start:", "PIL" in sys.modules)
        from tests.test_images import body_with, bomb_png, image_part, noisy_png  # (Pillow makes the images)
        work = ImageWork()
        try:
            asyncio.run(work.fit(parse_run_input(body_with(image_part(bomb_png(30000, 30000))))))
        except AdapterError as exc:
            print("bomb:", exc.message_id)
        fitted = asyncio.run(work.fit(parse_run_input(body_with(image_part(noisy_png(1200, 1200))))))
        work.close()
        print("fitted:", len(fitted.new_user_message.content[1].data) < 1200 * 1200)
    """)
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == ["at start: False", "bomb: input_image_too_many_pixels", "fitted: True"]
