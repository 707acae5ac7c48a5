"""Image work is bounded before it starts: what an attacker's small request
can make the adapter decode, and hold, at once.

A 7000 x 7000 single-colour PNG is 190 kB; zero bytes after its ``IEND``
make it large enough to be re-encoded, and two fit a message. Decoding one
took ~460 MB; a few at once took gigabytes. Now pixels are decoded only once
a run is admitted, from a budget of the app's own, and an image that would
decode beyond the bound is refused from its header.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import struct
import subprocess
import sys
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import PIL.Image
import pytest
from aguiadapter.config import JwtSettings
from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.images import MAX_DECODED_PIXELS, TARGET_IMAGE_BYTES
from aguiadapter.web.keys import IMAGES
from tests.support.adapter import Reply, RunningAdapter, run_body, start_adapter
from tests.support.envelopes import image_part, png_chunk
from tests.support.eventually import eventually
from tests.support.tokens import AUDIENCE, ISSUER, SigningKey, bearer, write_jwks
from tests.test_limits import refused_with, slow, streaming

MIB = 1024 * 1024
ROOT = Path(__file__).resolve().parents[1]
LANGUAGES = {"en": "en-US,en;q=0.8", "zh-CN": "zh-CN,zh;q=0.9"}


def padded(width: int, height: int, size: int = TARGET_IMAGE_BYTES + 512 * 1024) -> bytes:
    """A single-colour RGB PNG with zero bytes after its ``IEND``: small to send, over the
    re-encode size. Written row by row: its pixels are never held here either."""
    squeeze = zlib.compressobj(9)
    row = b"\0" + b"\xc8\x1e\x1e" * width
    idat = b"".join(squeeze.compress(row) for _ in range(height)) + squeeze.flush()
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    png = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", header) + png_chunk(b"IDAT", idat) + png_chunk(b"IEND", b"")
    return png.ljust(size, b"\0")


def body_with(*images: dict[str, object], cwd: str = "/tmp", thread_id: str = "images") -> dict[str, Any]:
    body = run_body(thread_id=thread_id, text=None, cwd=cwd)
    body["messages"] = [{"id": "m1", "role": "user", "content": [{"type": "text", "text": "look"}, *images]}]
    return body


# The adapter's image work in a process of its own: what it allocates shows in ru_maxrss.
_FIT = """
import asyncio, json, sys
from aguiadapter.errors import AdapterError
from aguiadapter.images import ImageWork
from aguiadapter.protocol.parsing import parse_run_input

body, budget, threads, copies = json.load(sys.stdin), int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
inputs = [parse_run_input(body) for _ in range(copies)]
def high_water():  # this process's peak RSS in KiB (ru_maxrss would count the parent's peak too)
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))

before = high_water()

async def main():
    work = ImageWork(budget_bytes=budget, threads=threads)
    try:
        return await asyncio.gather(*(work.fit(one) for one in inputs), return_exceptions=True)
    finally:
        work.close()

outcomes = asyncio.run(main())
growth = (high_water() - before) / 1024
print(json.dumps({"growth_mb": growth, "outcomes": [
    o.message_id if isinstance(o, AdapterError) else type(o).__name__ for o in outcomes]}))
"""


def fit_elsewhere(body: dict[str, Any], *, budget: int = 256 * MIB, threads: int = 2, copies: int = 1) -> dict[str, Any]:
    """Fit ``copies`` of ``body`` at once in a fresh process: outcomes and its peak RSS growth (MB)."""
    done = subprocess.run(
        [sys.executable, "-c", _FIT, str(budget), str(threads), str(copies)],
        input=json.dumps(body), capture_output=True, text=True, timeout=300, cwd=ROOT, check=False,
        # One malloc arena: what the peak shows is pixels held at once, not which thread's arena kept what.
        env={**os.environ, "MALLOC_ARENA_MAX": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(json.loads(done.stdout))


def test_the_attack_png_is_refused_from_its_header_without_decoding_its_pixels() -> None:
    attack = padded(7000, 7000)
    assert len(attack) < 5 * MIB  # (190 kB of PNG; the rest is zeros after IEND)
    measured = fit_elsewhere(body_with(image_part(attack), image_part(attack)))
    assert measured["outcomes"] == ["input_image_too_many_pixels"]
    # Decoding it (what happened before) took ~200 MB for its pixels alone.
    assert measured["growth_mb"] < 40, measured


@pytest.mark.parametrize("language", sorted(LANGUAGES))
async def test_over_http_the_refusal_names_the_image_and_the_bound(
    tmp_path: Path, demo: DemoRuntime, language: str
) -> None:
    running = await start_adapter(tmp_path / "s", demo.url, allowed_cwds=(str(tmp_path),))
    try:
        body = body_with(image_part(padded(7000, 7000)), cwd=str(tmp_path))
        reply = await running.run(body, {"Accept-Language": LANGUAGES[language]})
        assert reply.status == 400 and reply.json()["error"]["code"] == "INVALID_INPUT"
        message = reply.json()["error"]["message"]
        assert "messages[0].content[1].source.value" in message
        assert str(MAX_DECODED_PIXELS // 1_000_000) in message
        assert ("百万像素" in message) is (language == "zh-CN")
    finally:
        await running.close()


def test_decodes_at_once_stay_within_the_budget() -> None:
    # 16 megapixels each: about 140 MB to decode and scale; four at once, on four threads.
    body = body_with(image_part(padded(4000, 4000)))
    unbounded = fit_elsewhere(body, budget=4096 * MIB, threads=4, copies=4)
    bounded = fit_elsewhere(body, budget=150 * MIB, threads=4, copies=4)
    assert bounded["outcomes"] == unbounded["outcomes"] == ["RunAgentInput"] * 4
    # The budget and what the process needs besides (the bodies, the scaled copies, the allocator's slack).
    assert bounded["growth_mb"] < 150 + 64, bounded
    assert bounded["growth_mb"] < 0.6 * unbounded["growth_mb"], (bounded, unbounded)


class OpenSpy:
    """Counts the images Pillow is asked to open for the adapter."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        # Pillow's own module: the adapter imports it with its first image.
        real = PIL.Image.open

        def counting(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(PIL.Image, "open", counting)


async def test_a_run_the_server_limit_refuses_decodes_nothing(
    tmp_path: Path, demo: DemoRuntime, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = OpenSpy(monkeypatch)
    running = await start_adapter(
        tmp_path / "state", demo.url, allowed_cwds=(str(tmp_path / "workspaces"),), max_active_runs=1
    )
    try:
        async with streaming(running) as open_run:
            await open_run(slow("s-1", workspace, userId="u1"))
            attack = body_with(image_part(padded(4000, 4000)), cwd=str(workspace), thread_id="s-2")
            refused_with(await running.run(attack), 503, "SERVER_BUSY")
            assert spy.calls == 0
        # Admitted (once the slot is free again), an image is fitted and runs.
        fitted = body_with(image_part(padded(300, 300)), cwd=str(workspace), thread_id="s-3")

        async def admitted() -> Reply | None:
            reply = await running.run(fitted)
            return None if reply.status == 503 else reply

        reply = await eventually(admitted, "the freed slot admits the run", interval=0.05)
        assert reply.events()[-1]["type"] == "RUN_FINISHED" and spy.calls == 1
    finally:
        await running.close()


async def test_a_new_thread_the_gate_refuses_decodes_nothing(
    tmp_path: Path, demo: DemoRuntime, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = OpenSpy(monkeypatch)
    key = SigningKey("HS256", kid="images")
    write_jwks(tmp_path / "jwks.json", key)
    running = await start_adapter(
        tmp_path / "state", demo.url, allowed_cwds=(str(tmp_path / "workspaces"),),
        jwt=JwtSettings(jwks_file=tmp_path / "jwks.json", issuer=ISSUER, audience=AUDIENCE),
        max_new_threads_per_user=1,
    )
    alice = bearer(key.token("alice"))
    try:
        first = await running.run(run_body(thread_id="t-1", text="hi", cwd=str(workspace)), alice)
        assert first.events()[-1]["type"] == "RUN_FINISHED"
        attack = body_with(image_part(padded(4000, 4000)), cwd=str(workspace), thread_id="t-2")
        refused = await running.run(attack, alice)
        assert refused.status == 429 and refused.json()["error"]["code"] == "TOO_MANY_THREADS"
        assert spy.calls == 0
    finally:
        await running.close()


# --- the body's byte limit holds for what a Content-Encoding inflates to ------------------------


def compressed(encoding: str, size: int, prefix: bytes = b"") -> bytes:
    """``prefix`` then spaces, ``size`` bytes in all, compressed as ``encoding`` says."""
    raw = prefix + b" " * (size - len(prefix))
    return gzip.compress(raw, 9) if encoding == "gzip" else zlib.compress(raw, 9)


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
@pytest.mark.parametrize("language", sorted(LANGUAGES))
async def test_a_compressed_body_past_the_limit_is_refused_while_it_inflates(
    adapter: RunningAdapter, encoding: str, language: str
) -> None:
    # 256 MiB once inflated, 250 kB on the wire.
    bomb = compressed(encoding, 256 * MIB, b'{"threadId": "t", "state": {}, "x": "')
    headers = {"Content-Encoding": encoding, "Accept-Language": LANGUAGES[language]}
    tracemalloc.start()
    try:
        reply = await adapter.post("/", bomb, headers)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert reply.status == 413 and reply.json()["error"]["code"] == "REQUEST_TOO_LARGE", reply.body[:300]
    plain = await adapter.post("/", b" " * (12 * MIB + 1), {"Accept-Language": LANGUAGES[language]})
    assert plain.status == 413 and plain.json() == reply.json()
    # Inflated past 12 MiB, never whole: the body's chunks and little else.
    assert peak < 32 * MIB, peak


async def test_a_compressed_body_within_the_limit_runs(adapter: RunningAdapter, workspace: Path) -> None:
    body = json.dumps(run_body(thread_id="gz", text="hello", cwd=str(workspace))).encode()
    reply = await adapter.post("/", gzip.compress(body), {"Content-Encoding": "gzip"})
    assert reply.events()[-1]["type"] == "RUN_FINISHED"


# --- large bodies take turns between being read and being admitted ----------------------------


async def test_large_bodies_are_prepared_one_at_a_time_and_small_ones_do_not_wait(
    tmp_path: Path, demo: DemoRuntime, workspace: Path
) -> None:
    running = await start_adapter(tmp_path / "state", demo.url, allowed_cwds=(str(tmp_path / "workspaces"),))
    work = running.app[IMAGES]
    real_fit = work.fit
    active, most = 0, 0
    release = asyncio.Event()

    async def fit(run_input: Any) -> Any:
        nonlocal active, most
        if not run_input.thread_id.startswith("large-"):
            return await real_fit(run_input)
        active += 1
        most = max(most, active)
        try:
            await release.wait()
            return await real_fit(run_input)
        finally:
            active -= 1

    work.fit = fit  # type: ignore[method-assign]
    try:
        large = [
            asyncio.create_task(running.run(body_with(image_part(padded(300, 300)), cwd=str(workspace), thread_id=f"large-{n}")))
            for n in range(3)
        ]
        await eventually(lambda: active >= 1, "a large body is being prepared")
        # While it holds its turn, another user's ordinary run goes through; the other large ones wait.
        small = await running.run(run_body(thread_id="small", text="hi", cwd=str(workspace)))
        assert small.events()[-1]["type"] == "RUN_FINISHED"
        assert active == 1
        release.set()
        for reply in await asyncio.gather(*large):
            assert reply.events()[-1]["type"] == "RUN_FINISHED"
        assert most == 1
    finally:
        await running.close()
