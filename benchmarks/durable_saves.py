"""What a durable save costs: the store's writer thread against a trip through aiofiles.

``python -m benchmarks.durable_saves [--rounds 10] [--saves 200] [--groups 10] [--durability process]``

One process, one scratch folder, the two ways in alternating rounds (the
order turns each round, so drift on a shared machine falls on both):

- **writer thread**: :class:`aguiadapter.store.file.durable.GroupWriter`, as the
  file store uses it (a group's temp files fsynced side by side on the
  store's four-thread executor);
- **aiofiles on the executor**: the same work (temp file 0600, fsync,
  rename, folder fsync) as one :func:`aiofiles.os.wrap` trip per group to a
  four-thread ``ThreadPoolExecutor``, groups formed on the event loop the
  same way (while one is on its way, the writes that arrive wait for the
  next); a group's fsyncs one after the other in that trip.

Per round: ``--saves`` lone saves one after the other (what a short run
does three times), then ``--groups`` bursts of 50 saves at once (a burst of
runs). Printed: per way, the median [min-max] over the rounds of the wall
time and the process CPU (all threads) per lone save and per burst, and the
median of the round-by-round ratios aiofiles / writer thread. Also the
event loop's thread CPU per lone save (``time.thread_time`` on the loop:
what the save keeps the loop from other work).

With ``--durability process`` (no fsync, as the store writes then) the two
ways are the writer thread (``GroupWriter(sync=False).replace``, the trip
the store made before) and **on the loop**
(:meth:`~aguiadapter.store.file.durable.GroupWriter.replace_now`, what the
store does now); the same figures, and how long each write made on the
loop blocks it (wall time of the call: median, 99th percentile and
longest over every lone save of every round).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor

import aiofiles.os

from aguiadapter.store.file.durable import GroupWriter

BURST = 50
Replace = Callable[[str, str, bytes], Awaitable[object]]


def _replace_all_sync(group: Sequence[tuple[str, str, bytes]]) -> list[OSError | None]:
    errors: list[OSError | None] = []
    folders: set[str] = set()
    for tmp, path, data in group:
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
            folders.add(os.path.dirname(path))
            errors.append(None)
        except OSError as exc:
            errors.append(exc)
    for folder in folders:
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return errors


_replace_all = aiofiles.os.wrap(_replace_all_sync)


class ExecutorWriter:
    """Group commit on the event loop, one aiofiles trip per group."""

    def __init__(self, executor: Executor) -> None:
        self._executor = executor
        self._waiting: list[tuple[tuple[str, str, bytes], asyncio.Future[None]]] = []
        self._flushing: asyncio.Task[None] | None = None

    async def replace(self, tmp: str, path: str, data: bytes) -> None:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._waiting.append(((tmp, path, data), future))
        if self._flushing is None:
            self._flushing = loop.create_task(self._flush())
        await future

    async def _flush(self) -> None:
        try:
            while self._waiting:
                group, self._waiting = self._waiting, []
                errors = await _replace_all([write for write, _ in group], executor=self._executor)
                for (_, future), error in zip(group, errors, strict=True):
                    if error is None:
                        future.set_result(None)
                    else:
                        future.set_exception(error)
        finally:
            self._flushing = None


async def _measure(replace: Replace, folder: str, saves: int, groups: int) -> tuple[float, ...]:
    data = b"x" * 900
    counter = iter(range(10**9))

    async def one(name: str) -> None:
        path = os.path.join(folder, name)
        await replace(f"{path}.{next(counter)}.tmp", path, data)

    await one("warm.json")
    wall, cpu, loop_cpu = time.perf_counter(), time.process_time(), time.thread_time()
    for _ in range(saves):
        await one("lone.json")
    lone = ((time.perf_counter() - wall) / saves, (time.process_time() - cpu) / saves,
            (time.thread_time() - loop_cpu) / saves)
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(groups):
        await asyncio.gather(*(one(f"burst-{n}.json") for n in range(BURST)))
    burst = ((time.perf_counter() - wall) / groups, (time.process_time() - cpu) / groups)
    return (*lone, *burst)


class OnTheLoop:
    """:meth:`GroupWriter.replace_now` as the store calls it (from a coroutine), each call's wall time kept."""

    def __init__(self, writer: GroupWriter) -> None:
        self._writer = writer
        self.blocks: list[float] = []

    async def replace(self, tmp: str, path: str, data: bytes) -> None:
        start = time.perf_counter()
        self._writer.replace_now(tmp, path, data)
        self.blocks.append(time.perf_counter() - start)


async def _round(way: str, root: str, saves: int, groups: int, blocks: list[float]) -> tuple[float, ...]:
    folder = tempfile.mkdtemp(dir=root)
    executor = ThreadPoolExecutor(4, thread_name_prefix="bench-store")
    writer = GroupWriter(executor, sync=way not in PROCESS_WAYS)
    try:
        if way == ON_THE_LOOP:
            inline = OnTheLoop(writer)
            figures = await _measure(inline.replace, folder, saves, groups)
            blocks.extend(inline.blocks[1:saves + 1])  # the lone saves, not the warm-up's
            return figures
        if way in ("writer thread", "writer thread, no fsync"):
            return await _measure(writer.replace, folder, saves, groups)
        return await _measure(ExecutorWriter(executor).replace, folder, saves, groups)
    finally:
        writer.close()
        executor.shutdown()
        shutil.rmtree(folder, ignore_errors=True)


FIGURES = ("lone save: wall (ms)", "lone save: CPU (ms)", "lone save: loop's CPU (ms)",
           f"{BURST} at once: wall (ms)", f"{BURST} at once: CPU (ms)")
WAYS = ("writer thread", "aiofiles on the executor")
ON_THE_LOOP = "on the loop"
PROCESS_WAYS = ("writer thread, no fsync", ON_THE_LOOP)


async def run(rounds: int, saves: int, groups: int, root: str, durability: str = "fsync") -> None:
    ways = PROCESS_WAYS if durability == "process" else WAYS
    samples: dict[str, list[tuple[float, ...]]] = {way: [] for way in ways}
    blocks: list[float] = []
    load = os.getloadavg()[0]
    for index in range(rounds):
        for way in ways if index % 2 == 0 else ways[::-1]:
            samples[way].append(await _round(way, root, saves, groups, blocks))
    print(f"--durability {durability}: {rounds} rounds of {saves} lone saves and {groups} bursts of {BURST}; "
          f"medians [min-max]; load average {load:.2f} before, {os.getloadavg()[0]:.2f} after")
    for column, figure in enumerate(FIGURES):
        cells = []
        for way in ways:
            values = [sample[column] * 1000 for sample in samples[way]]
            cells.append(f"{way} {statistics.median(values):.3f} [{min(values):.3f}-{max(values):.3f}]")
        ratios = [new[column] / old[column] for new, old in zip(samples[ways[1]], samples[ways[0]], strict=True)]
        print(f"{figure:28} | " + " | ".join(cells) + f" | ratio {statistics.median(ratios):.2f}x "
              f"[{min(ratios):.2f}-{max(ratios):.2f}]")
    if blocks:
        blocks.sort()
        micro = [blocks[len(blocks) // 2] * 1e6, blocks[int(len(blocks) * 0.99)] * 1e6, blocks[-1] * 1e6]
        print(f"the loop blocked by a lone save made on it (us): median {micro[0]:.1f}, p99 {micro[1]:.1f}, "
              f"longest {micro[2]:.1f} ({len(blocks)} saves)")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.durable_saves", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--saves", type=int, default=200, help="lone saves per round")
    parser.add_argument("--groups", type=int, default=10, help=f"bursts of {BURST} saves per round")
    parser.add_argument("--dir", default=None, help="scratch folder (default: a new temp dir, on the state disk)")
    parser.add_argument("--durability", choices=("fsync", "process"), default="fsync",
                        help="process: no fsync, the writer thread against writes made on the loop")
    args = parser.parse_args(argv)
    root = tempfile.mkdtemp(dir=args.dir)
    try:
        asyncio.run(run(args.rounds, args.saves, args.groups, root, args.durability))
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(root)


if __name__ == "__main__":
    main()
