"""``--durability fsync|process`` (issue 35, item 3): what the file store's
writes go through in each mode, how it is set, and where it shows."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from aguiadapter.cli import build_parser, config_from_args
from aguiadapter.config import Config
from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.runs import shell
from aguiadapter.store.file.store import FileThreadStore
from aguiadapter.store.run_history import SPILL_AT
from aguiadapter.threads.record import RunEntry, ThreadRecord
from tests.support.adapter import run_body, started

from tests.test_cli import run_cli_now


def count_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every fsync the process makes from now on (their file descriptors)."""
    calls: list[int] = []
    real = os.fsync

    def counted(fd: Any) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counted)
    return calls


@pytest.mark.parametrize(("durability", "synced"), [("fsync", True), ("process", False)])
async def test_a_save_is_synced_only_under_fsync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 durability: str, synced: bool) -> None:
    store = FileThreadStore(tmp_path, durability=durability)
    await store.start()
    try:
        fsyncs = count_fsyncs(monkeypatch)
        record = ThreadRecord(thread_id="t", context_id="c", cwd="/w")
        for number in range(SPILL_AT + 1):  # one save that appends to the run history too
            record.runs[f"r-{number}"] = RunEntry(f"d-{number}", "success")
        (await store.save(record)).stamp(record)
        # The record's temp file and folder, the new history file and its folder.
        assert len(fsyncs) == (4 if synced else 0)
        loaded = await store.load("t")
        assert loaded == record and await store.earlier_run("t", "r-0") == RunEntry("d-0", "success")
    finally:
        await store.close()


def test_durability_comes_from_the_option_or_its_variable() -> None:
    assert config_from_args(build_parser({}).parse_args(["--demo"]), {}).durability == "fsync"
    env = {"IAC_CODE_AGUI_DURABILITY": "process"}
    assert config_from_args(build_parser(env).parse_args(["--demo"]), env).durability == "process"
    args = build_parser(env).parse_args(["--demo", "--durability", "fsync"])
    assert config_from_args(args, env).durability == "fsync", "the option wins over the variable"
    assert Config.from_env(env, demo=True).durability == "process"
    with pytest.raises(ValueError, match="IAC_CODE_AGUI_DURABILITY"):
        Config.from_env({"IAC_CODE_AGUI_DURABILITY": "none"}, demo=True)


def test_a_bad_durability_or_one_beside_a_redis_store_is_a_usage_error() -> None:
    cases = [
        (("--demo", "--durability", "sometimes"), {}, "--durability"),
        (("--demo",), {"IAC_CODE_AGUI_DURABILITY": "never"}, "IAC_CODE_AGUI_DURABILITY"),
        (("--demo", "--store", "redis://127.0.0.1:9/0", "--durability", "process"), {}, "--durability"),
    ]
    for args, env, named in cases:
        done = run_cli_now(*args, env=env)
        assert done.returncode == 2, (args, env, done.stderr)
        assert done.stderr.count("\n") == 1 and named in done.stderr, done.stderr


@pytest.mark.parametrize("durability", ["fsync", "process"])
async def test_health_shows_the_mode_and_runs_run_in_it(tmp_path: Path, demo: DemoRuntime, durability: str) -> None:
    cwd = tmp_path / "workspaces" / "ws"
    cwd.mkdir(parents=True)
    async with started(tmp_path, demo.url, durability=durability) as adapter:
        health = (await adapter.get("/health")).json()
        assert health["store"]["durability"] == durability
        assert (await adapter.run(run_body(thread_id="t", text="hi", cwd=str(cwd)))).status == 200


@pytest.mark.parametrize(("durability", "synced"), [("fsync", 4), ("process", 0)])
async def test_a_short_run_syncs_its_start_and_its_end_which_carries_its_binding(
    tmp_path: Path, demo: DemoRuntime, monkeypatch: pytest.MonkeyPatch, durability: str, synced: int
) -> None:
    """Issue 35, item 4: the turn's write (temp file and folder) and the
    end's (temp file and folder), which carries the task binding: a turn
    that ends before the binding's own write is due makes no write of it."""
    # However slow the machine, the turn ends before the binding is due.
    monkeypatch.setattr(shell, "DEFERRED_WRITE_SECONDS", 60.0)
    cwd = tmp_path / "workspaces" / "ws"
    cwd.mkdir(parents=True)
    async with started(tmp_path, demo.url, durability=durability) as adapter:
        fsyncs = count_fsyncs(monkeypatch)
        response = await adapter.run(run_body(thread_id="t-short", text="firehose 5", cwd=str(cwd)))
        assert response.status == 200 and response.events()[-1]["type"] == "RUN_FINISHED"
        assert len(fsyncs) == synced
