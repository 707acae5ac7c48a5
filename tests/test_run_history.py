"""A thread's older runs leave its record for the run history (file store),
and every earlier run id stays used (issue 35, item 1)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

import aguiadapter.store.file.history as history_module
from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.store.contract import PersistenceError
from aguiadapter.store.file.store import FileThreadStore
from aguiadapter.store.run_history import RUN_WINDOW, SPILL_AT, lines_of, parse_lines
from aguiadapter.threads.record import RunEntry, ThreadRecord
from tests.support.adapter import run_body, started
from tests.support.run_history import every_earlier_run_id_is_used, expect_http_error


@pytest.mark.parametrize("durability", ["fsync", "process"])
async def test_run_1_after_1000_runs_across_a_restart(tmp_path: Path, demo: DemoRuntime, durability: str) -> None:
    await every_earlier_run_id_is_used(tmp_path, demo.url, durability=durability)
    threads = tmp_path / "state" / "threads"
    (record_file,) = threads.glob("long-*.json")
    (history_file,) = threads.glob("long-*.runs")
    assert record_file.stat().st_size < 16 * 1024  # 133 KB at run 1,000 when the record kept them all
    assert len(parse_lines(history_file.read_bytes())) >= 1001 - SPILL_AT


async def test_runs_through_the_adapter_move_out_and_stay_used(tmp_path: Path, demo: DemoRuntime) -> None:
    cwd = tmp_path / "workspaces" / "ws"
    cwd.mkdir(parents=True)
    bodies = [run_body(thread_id="t", text=f"turn {n}", cwd=str(cwd), run_id=f"r-{n}") for n in range(SPILL_AT + 2)]
    async with started(tmp_path, demo.url) as adapter:
        for body in bodies:
            assert (await adapter.run(body)).status == 200
        expect_http_error(await adapter.run(bodies[0]), 409, "DUPLICATE_RUN_ID", "en")
        changed = run_body(thread_id="t", text="other", cwd=str(cwd), run_id="r-0")
        expect_http_error(await adapter.run(changed), 409, "RUN_ID_CONFLICT", "en")
        # Its log is still kept (replay retention): a re-attach replays it.
        replay = await adapter.get("threads/t/runs/r-0/events?after=0")
        assert replay.status == 200 and b"RUN_FINISHED" in replay.body
    (record_file,) = (tmp_path / "state" / "threads").glob("t-*.json")
    stored = json.loads(record_file.read_bytes())
    assert "r-0" not in stored["runs"] and len(stored["runs"]) <= SPILL_AT
    assert stored["earlier_runs"] + len(stored["runs"]) == SPILL_AT + 2


async def test_a_record_in_todays_form_is_converted_on_its_first_save(tmp_path: Path, demo: DemoRuntime) -> None:
    """A record of the version before the history kept up to 1,000 runs in
    itself: it is read as it is, and its first save moves them out."""
    cwd = tmp_path / "workspaces" / "ws"
    cwd.mkdir(parents=True)
    first = run_body(thread_id="old", text="turn 0", cwd=str(cwd), run_id="run-0")
    async with started(tmp_path, demo.url) as adapter:
        assert (await adapter.run(first)).status == 200
    (record_file,) = (tmp_path / "state" / "threads").glob("old-*.json")
    raw = json.loads(record_file.read_bytes())
    del raw["earlier_runs"]  # today's form has no such field
    older = {f"run-old-{n}": {"digest": f"d-{n}", "outcome": "success"} for n in range(999)}
    raw["runs"] = {**older, **raw["runs"]}
    record_file.write_text(json.dumps(raw, indent=2))
    async with started(tmp_path, demo.url) as adapter:
        # Read as it is: every run of it is used before anything moved.
        expect_http_error(await adapter.run(first), 409, "DUPLICATE_RUN_ID", "en")
        turn = run_body(thread_id="old", text="turn 1000", cwd=str(cwd), run_id="run-1000")
        assert (await adapter.run(turn)).status == 200
        converted = json.loads(record_file.read_bytes())
        assert len(converted["runs"]) <= RUN_WINDOW + 1 and converted["earlier_runs"] >= 999 - RUN_WINDOW
        expect_http_error(await adapter.run(first), 409, "DUPLICATE_RUN_ID", "en")
        reused = run_body(thread_id="old", text="x", cwd=str(cwd), run_id="run-old-0")
        expect_http_error(await adapter.run(reused), 409, "RUN_ID_CONFLICT", "en")


def record_with(runs: int) -> ThreadRecord:
    record = ThreadRecord(thread_id="t", context_id="c", cwd="/w")
    for number in range(runs):
        record.runs[f"r-{number}"] = RunEntry(f"d-{number}", "success")
    return record


async def test_a_failed_append_fails_the_save_and_moves_nothing(tmp_path: Path) -> None:
    """The history is written in the save's own step: when it cannot be,
    the save fails and the record (in memory and on disk) keeps its runs."""
    store = FileThreadStore(tmp_path)
    await store.start()
    try:
        record = record_with(SPILL_AT)
        (await store.save(record)).stamp(record)
        Path(store.history.path_of("t")).mkdir()  # the history cannot be appended to
        record.runs["r-new"] = RunEntry("d-new")
        with pytest.raises(PersistenceError):
            (await store.save(record)).stamp(record)
        assert len(record.runs) == SPILL_AT + 1 and record.earlier_runs == 0
        on_disk = await store.load("t")
        assert on_disk is not None and len(on_disk.runs) == SPILL_AT
    finally:
        await store.close()


async def test_the_active_run_stays_in_the_record(tmp_path: Path) -> None:
    store = FileThreadStore(tmp_path)
    await store.start()
    try:
        record = record_with(SPILL_AT + 1)
        record.active_run_id = "r-0"
        (await store.save(record)).stamp(record)
        assert "r-0" in record.runs and len(record.runs) == RUN_WINDOW + 1
        assert await store.earlier_run("t", "r-1") == RunEntry("d-1", "success")
        assert await store.earlier_run("t", "r-0") is None
    finally:
        await store.close()


def test_a_torn_append_loses_no_later_run() -> None:
    """A crash may cut an append short; the next one starts on a line of its own."""
    torn = lines_of([("a", RunEntry("d-a", "success"))])[:-7]
    data = torn + lines_of([("b", RunEntry("d-b", None))])
    assert parse_lines(data) == {"b": RunEntry("d-b", None)}


async def test_deleting_a_thread_deletes_its_history(tmp_path: Path) -> None:
    store = FileThreadStore(tmp_path)
    await store.start()
    try:
        record = record_with(SPILL_AT + 1)
        (await store.save(record)).stamp(record)
        history = Path(store.history.path_of("t"))
        assert history.exists()
        claim = await store.claim("t", "delete")
        assert claim is not None and await store.delete_thread(record, claim)
        assert not history.exists() and await store.earlier_run("t", "r-1") is None
    finally:
        await store.close()


async def test_a_look_up_that_races_an_append_is_not_kept(tmp_path: Path) -> None:
    """A thread's file read while a save appends to it may miss the new
    runs: that copy is used once, never kept, so the runs are found later."""
    store = FileThreadStore(tmp_path)
    await store.start()
    try:
        record = record_with(SPILL_AT + 1)
        (await store.save(record)).stamp(record)
        original = history_module.read_bytes
        gate = asyncio.Event()

        async def slow_read(path: str, *, executor: object) -> bytes:
            data = await original(path, executor=executor)
            await gate.wait()  # an append lands meanwhile
            return data

        history_module.read_bytes = slow_read  # type: ignore[assignment]
        try:
            looking = asyncio.ensure_future(store.earlier_run("t", "r-0"))
            await asyncio.sleep(0.05)
            for number in range(SPILL_AT + 1, 2 * SPILL_AT):
                record.runs[f"r-{number}"] = RunEntry(f"d-{number}", "success")
            (await store.save(record)).stamp(record)  # moves more runs out
            gate.set()
            assert await looking == RunEntry("d-0", "success")
        finally:
            history_module.read_bytes = original  # type: ignore[assignment]
        first_moved_later = SPILL_AT + 1 - RUN_WINDOW  # the oldest run the second save moved
        assert await store.earlier_run("t", f"r-{first_moved_later}") == RunEntry(f"d-{first_moved_later}", "success")
    finally:
        await store.close()
