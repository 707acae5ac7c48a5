"""17. What small requests carrying image bombs cost the adapter, and another user.

The attack of issue 34: a 7000 x 7000 single-colour PNG is 190 kB; zero
bytes after its ``IEND`` make it 4.6 MB, over the size at which the adapter
re-encodes images; two of them fit a message's 10 MiB; gzipped, the whole
request is a few kB on the wire (``Content-Encoding: gzip``). Before the
fix each such image was decoded (~460 MB, 2 s of CPU) before any limit
looked at the run; 4 requests at once took the adapter from 51 MB to 2.7 GB.

A fresh adapter process (default settings, demo runtime) gets, at once,
4 and then 16 such requests (2 and 4 in the smoke run). Two attacks are measured:

- **refused**: the issue's images, 49 megapixels each (more than the
  adapter decodes: refused from the header);
- **decoded**: the largest the adapter does decode, 4,890 x 4,890 (23.9
  megapixels) padded the same way: each is decoded and scaled, from the
  adapter's decode budget (see aguiadapter/images.py).

Reported per attack: the adapter's RSS when idle, its peak above idle during
4 and 16 requests at once (sampled every 5 ms, and the kernel's high-water
mark where it can be reset), what it still holds above idle once they are
answered, how long the 16 took, and the time of another user's short run
(``firehose 5``, a new thread) sent while the 16 are in flight, against the
same run with nothing else going on.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gzip
import json
import shutil
import statistics
import struct
import time
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

from .client import new_id, run_body, stream
from .procs import Server, free_port, wait_quiet
from .report import Results, _table

if TYPE_CHECKING:
    from .harness import Bench

MB = 1024 * 1024
REFUSED, DECODED = "bomb_refused", "bomb_decoded"
TARGETS = (REFUSED, DECODED)
TARGET_NAMES = {REFUSED: "7000 x 7000 (refused)", DECODED: "4890 x 4890 (decoded)"}
SIDES = {REFUSED: 7000, DECODED: 4890}
KEYS = ("rss_idle_mb", "peak_small_mb", "peak_large_mb", "held_mb", "answered_s", "other_alone_ms", "other_during_ms",
        "wire_kb")
LABELS = {
    "rss_idle_mb": "adapter RSS, idle (MB)",
    "peak_small_mb": "peak RSS above idle, {small} requests at once (MB)",
    "peak_large_mb": "peak RSS above idle, {large} requests at once (MB)",
    "held_mb": "RSS above idle once the {large} are answered (MB)",
    "answered_s": "all {large} answered after (s)",
    "other_alone_ms": "another user's short run, nothing else going on (ms)",
    "other_during_ms": "the same run during the {large} (ms)",
    "wire_kb": "one attack request on the wire, gzipped (kB)",
}
#: Bytes of each padded image: over the re-encode size (3.75 MiB), two within a message's 10 MiB.
PADDED = 4_600_000
ALONE_RUNS = 3


def attack_png(side: int) -> bytes:
    """A single-colour ``side`` x ``side`` RGB PNG, zero bytes after its IEND up to PADDED.

    Written row by row, so that the benchmark never holds its pixels."""
    squeeze = zlib.compressobj(9)
    row = b"\0" + b"\xc8\x1e\x1e" * side
    idat = b"".join(squeeze.compress(row) for _ in range(side)) + squeeze.flush()

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")
    return png.ljust(PADDED, b"\0")


def attack_bodies(image: bytes, cwd: str, count: int) -> list[bytes]:
    """``count`` runs, each on a thread of its own, whose message carries ``image`` twice; gzipped."""
    value = base64.b64encode(image).decode()
    part = {"type": "image", "source": {"type": "data", "value": value, "mimeType": "image/png"}}
    body = run_body("look", cwd=cwd, thread_id="THREAD-ID")
    body["messages"][0]["content"] = [{"type": "text", "text": "look"}, part, part]
    template = json.dumps(body)
    return [gzip.compress(template.replace("THREAD-ID", new_id("attack"), 1).encode(), 6) for _ in range(count)]


def levels(bench: Bench) -> tuple[int, int]:
    """(small, large): requests at once."""
    return (2, 4) if bench.sizes.name == "smoke" else (4, 16)


async def measure_image_attack(bench: Bench) -> Results:
    """Run 17. and return its results (one target per attack)."""
    results = Results(TARGETS)
    small, large = levels(bench)
    results.note(REFUSED, "levels", (small, large))
    for target in TARGETS:
        # The smoke run checks the path, not the size.
        side = 2400 if bench.sizes.name == "smoke" and target == DECODED else SIDES[target]
        await _one_attack(bench, results, target, side, small, large)
    return results


async def _one_attack(bench: Bench, results: Results, target: str, side: int, small: int, large: int) -> None:
    state = bench.work / f"state-image-attack-{target}"
    shutil.rmtree(state, ignore_errors=True)
    server = bench._adapter_server(state, free_port(), name=f"image-attack-{target}")
    bench.extra.append(server)
    server.start()
    try:
        await server.wait_ready(timeout=60)
        image = attack_png(side)
        results.add(target, "wire_kb", len(attack_bodies(image, bench.cwd, 1)[0]) / 1024)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=bench.sizes.run_timeout * 4)) as session:
            alone = [await _other_run(server, bench.cwd) for _ in range(ALONE_RUNS)]
            results.add(target, "other_alone_ms", statistics.median(alone) * 1000)
            await wait_quiet([server], timeout=5.0)
            idle = server.rss() / MB
            results.add(target, "rss_idle_mb", idle)
            peak, _, _, statuses = await _attack(server, session, attack_bodies(image, bench.cwd, small), None)
            results.add(target, "peak_small_mb", peak - idle)
            results.note(target, "statuses_small", statuses)
            bodies = attack_bodies(image, bench.cwd, large)
            peak, answered, other, statuses = await _attack(server, session, bodies, bench.cwd)
            results.add(target, "peak_large_mb", peak - idle)
            results.add(target, "answered_s", answered)
            results.note(target, "statuses_large", statuses)
            if other is not None:
                results.add(target, "other_during_ms", other * 1000)
            await wait_quiet([server], timeout=10.0)
            results.add(target, "held_mb", server.rss() / MB - idle)
    finally:
        server.stop()
        bench.extra.remove(server)


async def _attack(
    server: Server, session: aiohttp.ClientSession, bodies: list[bytes], with_other: str | None
) -> tuple[float, float, float | None, dict[str, int]]:
    """The ``bodies`` sent at once: (peak RSS MB, seconds until all answered,
    another user's run in seconds or None, statuses)."""
    watching = asyncio.Event()
    high_water = _reset_high_water(server.pid)
    sampled = asyncio.create_task(_sample_peak(server, watching))
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip", "Accept": "text/event-stream"}

    async def one(payload: bytes) -> int:
        async with session.post(server.url, data=payload, headers=headers) as response:
            await response.read()
            return response.status

    began = time.perf_counter()
    attacks = [asyncio.create_task(one(payload)) for payload in bodies]
    other: float | None = None
    if with_other is not None:
        await asyncio.sleep(0.2)  # the attack's bodies are in
        other = await _other_run(server, with_other)
    codes = await asyncio.gather(*attacks, return_exceptions=True)
    answered = time.perf_counter() - began
    watching.set()
    peak = await sampled
    if high_water:
        peak = max(peak, _high_water_mb(server.pid))
    statuses: dict[str, int] = {}
    for code in codes:
        key = str(code) if isinstance(code, int) else type(code).__name__
        statuses[key] = statuses.get(key, 0) + 1
    return peak, answered, other, statuses


async def _other_run(server: Server, cwd: str) -> float:
    """Another user's short run on a new thread: seconds to its end."""
    body = run_body("firehose 5", cwd=cwd, thread_id=new_id("other-user"))
    body["forwardedProps"]["iacCode"]["userId"] = "someone-else"
    result = await stream(server.url, body)
    return result.seconds


async def _sample_peak(server: Server, done: asyncio.Event) -> float:
    peak = 0.0
    while not done.is_set():
        peak = max(peak, server.rss() / MB)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(done.wait(), 0.005)
    return peak


def _reset_high_water(pid: int) -> bool:
    """Reset the kernel's peak RSS of ``pid`` (``clear_refs`` 5); False where that is not allowed."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _high_water_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _labels(results: Results) -> dict[str, str]:
    small, large = results.details.get(REFUSED, {}).get("levels", [(4, 16)])[0]
    return {key: label.format(small=small, large=large) for key, label in LABELS.items()}


def render_image_attack(results: Results) -> str:
    """The table of 17."""
    labels = _labels(results)
    header = ["17. image bombs, gzipped", *(TARGET_NAMES[target] for target in TARGETS)]
    rows = [[labels[key], *(_cell(results.cell(target, key)) for target in TARGETS)] for key in KEYS]
    for which in ("statuses_small", "statuses_large"):
        rows.append([f"answers ({which.removeprefix('statuses_')})",
                     *(str(results.details.get(target, {}).get(which, ["-"])[0]) for target in TARGETS)])
    return _table(header, rows, max_width=56)


def _cell(cell: dict[str, Any]) -> str:
    if "na" in cell:
        return str(cell["na"])
    return f"{cell['median']:.1f}"


def image_attack_json(results: Results) -> dict[str, Any]:
    """17. in the JSON file."""
    return {
        "labels": _labels(results),
        "results": {target: {key: results.cell(target, key) for key in KEYS} for target in TARGETS},
        "details": results.details,
    }
