"""Smoke test of the benchmark suite: tiny sizes, no timing assertions.

It runs ``python -m benchmarks --smoke`` as a user would and checks that the
table is printed and that the JSON file has every column for every target:
a number, or an explicit ``n/a: reason``. The iac-code agui target is used
when its virtualenv already exists and is otherwise skipped (the output says
so); nothing here is slow enough to need it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.event_ids import ID_KEYS, ID_LABELS, ID_TARGETS
from benchmarks.report import (
    ADAPTER,
    ADAPTER_PROCESS,
    ADAPTER_REDIS,
    BIG_KEYS,
    COLUMN_KEYS,
    IAC,
    PROCESS_KEYS,
    RELAY,
    RUNTIME,
    STORE_KEYS,
    TARGET_LABELS,
)
from benchmarks.history import KEYS as HISTORY_KEYS
from benchmarks.history import LABELS as HISTORY_LABELS
from benchmarks.history import TARGETS as HISTORY_TARGETS
from benchmarks.image_attack import KEYS as IMAGE_KEYS
from benchmarks.image_attack import TARGETS as IMAGE_TARGETS
from benchmarks.replay_memory import KEYS as REPLAY_KEYS
from benchmarks.replay_memory import LABELS as REPLAY_LABELS
from benchmarks.shutdown import CASE_LABELS, CASES
from benchmarks.telemetry import (
    METRICS,
    PLAIN,
    TELEMETRY_KEYS,
    TELEMETRY_LABELS,
    TELEMETRY_TARGETS,
    TRACING,
    otel_missing,
)
from benchmarks.thread_list import LABELS as LIST_LABELS
from benchmarks.thread_list import TARGETS as LIST_TARGETS

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict]:  # type: ignore[type-arg]
    """One smoke run of the whole suite (its output and its JSON)."""
    out_dir = tmp_path_factory.mktemp("bench")
    out = out_dir / "smoke.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--smoke", "--out", str(out), "--work-dir", str(out_dir / "work")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    print(output)  # shown with -s, and on failure
    return output, json.loads(out.read_text())


def test_every_column_for_every_target(smoke_run: tuple[str, dict]) -> None:  # type: ignore[type-arg]
    _, document = smoke_run
    assert [c["key"] for c in document["columns"]] == list(COLUMN_KEYS)
    for target in (ADAPTER, ADAPTER_PROCESS, ADAPTER_REDIS, IAC, RELAY, RUNTIME):
        row = document["results"][target]
        assert set(row) == set(COLUMN_KEYS), target
        for key, cell in row.items():
            if "na" in cell:
                assert cell["na"].startswith("n/a: ") and len(cell["na"]) > 5, (target, key, cell)
            else:
                assert {"median", "min", "max", "n", "samples"} <= set(cell), (target, key, cell)
                assert cell["min"] <= cell["median"] <= cell["max"], (target, key, cell)
                assert cell["n"] == len(cell["samples"]) > 0


def test_adapter_and_relay_are_measured(smoke_run: tuple[str, dict]) -> None:  # type: ignore[type-arg]
    _, document = smoke_run
    always = ("throughput_eps", "cpu_s_per_10k", "ttfe_ms", "ttft_ms", "short_run_ms", "short_cpu_ms",
              "conc_low_eps", "conc_low_p99_s", "conc_high_eps", "conc_high_p99_s", "conc_high_peak_rss_mb",
              "rss_idle_mb", "rss_streams_mb", "rss_per_stream_kb", "startup_empty_ms",
              "cap_streaming_frac", "cap_open_s", "cap_rss_per_stream_kb", "cap_idle_cores", "cap_heartbeats_min")
    for target in (ADAPTER, RELAY):
        for key in always:
            assert "median" in document["results"][target][key], (target, key, document["results"][target][key])
    for key in ("startup_mid_ms", "startup_large_ms", *BIG_KEYS):
        assert "median" in document["results"][ADAPTER][key], (key, document["results"][ADAPTER][key])
    for key in BIG_KEYS:
        assert document["results"][RELAY][key]["na"].startswith("n/a: adapter only")
    # Heartbeats still go out while streams wait on a silent runtime (1 s apart in the smoke run).
    assert document["results"][ADAPTER]["cap_heartbeats_min"]["median"] >= 1
    assert document["results"][ADAPTER]["cap_streaming_frac"]["median"] == 1.0
    assert "median" in document["results"][RUNTIME]["throughput_eps"]
    assert "median" in document["results"][RUNTIME]["interrupt_rt_ms"]
    # The interrupt column holds a round trip, or says plainly why not.
    cell = document["results"][ADAPTER]["interrupt_rt_ms"]
    assert "median" in cell or "resume" in cell["na"], cell


def test_durability_process_is_measured_where_writes_are_on_the_path(smoke_run: tuple[str, dict]) -> None:  # type: ignore[type-arg]
    output, document = smoke_run
    row = document["results"][ADAPTER_PROCESS]
    for key in ("ttfe_ms", "ttft_ms", "short_run_ms", "short_cpu_ms", "rss_idle_mb", "conc_high_p99_s",
                "conc_high_peak_rss_mb"):
        assert "median" in row[key], (key, row[key])
    for key in set(row) - set(PROCESS_KEYS):
        assert row[key]["na"].startswith("n/a: default durability only"), (key, row[key])
    assert "process / iac-code agui" in output and "process / adapter (fsync)" in output
    goals = [goal["goal"] for goal in document["goals"]]
    assert "--durability process: first text of a short run <= 0.35x iac-code agui" in goals
    assert "--durability process: server CPU per short run <= 0.3x iac-code agui" in goals
    assert sum("no worse than the issue's" in goal for goal in goals) == 4
    # At smoke sizes nothing is judged: a verdict says why, never MET or MISSED.
    assert all(goal["met"] is None and goal["verdict"].startswith("not judged") for goal in document["goals"])


def test_table_ratios_and_targets_are_printed(smoke_run: tuple[str, dict]) -> None:  # type: ignore[type-arg]
    output, document = smoke_run
    for column in document["columns"]:
        assert column["label"] in output, column["label"]
    for target in (ADAPTER, ADAPTER_PROCESS, ADAPTER_REDIS, IAC, RELAY, RUNTIME):  # the floors: benchmarks.floor
        assert TARGET_LABELS[target] in output
    assert "adapter / iac-code agui" in output and "adapter / minimal relay" in output
    assert len(document["goals"]) >= 7
    for goal in document["goals"]:
        assert goal["goal"] in output


def test_a_missing_iac_code_venv_is_said_out_loud(smoke_run: tuple[str, dict]) -> None:  # type: ignore[type-arg]
    output, document = smoke_run
    skipped = document["meta"]["iac_code_skipped"]
    if skipped is None:
        assert "median" in document["results"][IAC]["throughput_eps"]
    else:
        assert "iac-code agui target SKIPPED" in output
        assert all("SKIPPED" in cell["na"] for cell in document["results"][IAC].values())


def test_the_redis_store_column_has_a_value_or_says_why_not(smoke_run: tuple[str, dict]) -> None:  # type: ignore[type-arg]
    output, document = smoke_run
    assert TARGET_LABELS[ADAPTER_REDIS] in output and "redis store / file store" in output
    for key in STORE_KEYS:
        assert key in COLUMN_KEYS
        # The file store is the baseline: always measured.
        assert "median" in document["results"][ADAPTER][key], document["results"][ADAPTER][key]
        cell = document["results"][ADAPTER_REDIS][key]
        assert "median" in cell or (cell["na"].startswith("n/a: ") and len(cell["na"]) > 5), cell
        ratio = document["store_ratios"]["redis/file"][key]
        assert (ratio is None) == ("na" in cell), (ratio, cell)
    assert any(g["goal"].startswith("cost per run with the Redis store <= 1.3x") for g in document["goals"])
    meta = document["meta"]["redis_store"]
    assert meta["measured"] == ("median" in document["results"][ADAPTER_REDIS]["per_run_wall_ms"])
    if not meta["measured"]:
        assert "Redis store not measured" in output


def test_the_telemetry_costs_are_measured_and_printed(smoke_run: tuple[str, dict]) -> None:  # type: ignore[type-arg]
    output, document = smoke_run
    section = document["telemetry"]
    assert set(section["results"]) == set(TELEMETRY_TARGETS)
    for target, row in section["results"].items():
        assert set(row) == set(TELEMETRY_KEYS), target
        for key, cell in row.items():
            assert "median" in cell or cell["na"].startswith("n/a: "), (target, key, cell)
    # Neither on is the baseline; metrics need nothing but the package itself.
    for target in (PLAIN, METRICS):
        assert all("median" in cell for cell in section["results"][target].values()), target
    if otel_missing() is None:
        assert all("median" in cell for cell in section["results"][TRACING].values())
        assert section["details"][TRACING]["collector"][0]["requests"] > 0, "no span reached the collector"
    for label in TELEMETRY_LABELS.values():
        assert label in output
    assert "tracing (OTLP) / no telemetry" in output


def test_the_cost_of_event_ids_and_run_logs_is_measured_and_printed(smoke_run: tuple[str, dict]) -> None:  # type: ignore[type-arg]
    output, document = smoke_run
    section = document["event_ids"]
    assert set(section["results"]) == set(ID_TARGETS)
    for target, row in section["results"].items():
        assert set(row) == set(ID_KEYS), target
        for key, cell in row.items():
            assert "median" in cell or cell["na"].startswith("n/a: "), (target, key, cell)
    # The file store is always measured, ids on and off; the replay exists only with ids.
    for target in ("ids_off", "ids_on"):
        measured = [key for key in ID_KEYS if "median" in section["results"][target][key]]
        assert measured == [key for key in ID_KEYS if not (target == "ids_off" and key == "replay_eps")], target
    redis = section["results"]["ids_on_redis"]["throughput_eps"]
    assert "median" in redis or redis["na"].startswith("n/a: ")
    for label in ID_LABELS.values():
        assert label in output
    assert "ids on (default), file store / ids off, file store" in output


def test_the_exit_times_after_a_signal_are_measured_and_printed(smoke_run: tuple[str, dict]) -> None:  # type: ignore[type-arg]
    output, document = smoke_run
    section = document["shutdown"]
    assert set(section["results"]) == set(CASES)
    for case in ("sigterm_idle", "sigterm_stream", "sigint_stream"):
        assert "median" in section["results"][case]["exit_s"], case
    handoff = section["results"]["handoff"]["exit_s"]
    assert "median" in handoff or handoff["na"].startswith("n/a: ")
    assert all(not details.get("errors") for details in section["details"].values()), section["details"]
    for label in CASE_LABELS.values():
        assert label in output


def test_the_memory_of_slow_re_attaches_is_measured_and_printed(smoke_run: tuple[str, dict]) -> None:  # type: ignore[type-arg]
    output, document = smoke_run
    section = document["replay_memory"]
    assert set(section["results"]) == set(REPLAY_KEYS)
    for key, cell in section["results"].items():
        assert "median" in cell, (key, cell, section["details"])
    assert section["results"]["rss_held_mb"]["n"] == section["results"]["rss_after_mb"]["n"] >= 2
    for label in REPLAY_LABELS.values():
        assert label in output


def test_the_cost_of_a_threads_history_is_measured_and_printed(smoke_run: tuple[str, dict]) -> None:  # type: ignore[type-arg]
    output, document = smoke_run
    section = document["history"]
    assert set(section["results"]) == set(HISTORY_TARGETS)
    for target, row in section["results"].items():
        assert set(row) == set(HISTORY_KEYS), target
        assert all("median" in cell for cell in row.values()), (target, row, section["details"])
        # Paging back reached the first turn: 50 turns, 20 a page.
        assert row["calls"]["median"] == 3, (target, row["calls"])
    for label in HISTORY_LABELS.values():
        assert label in output


def test_the_thread_list_of_a_user_with_many_threads_is_measured_and_printed(smoke_run: tuple[str, dict]) -> None:  # type: ignore[type-arg]
    output, document = smoke_run
    section = document["thread_list"]
    assert set(section["results"]) == set(LIST_TARGETS)
    assert all("median" in cell for cell in section["results"]["list_file"].values()), section["results"]
    redis = section["results"]["list_redis"]
    assert all("median" in cell or cell["na"].startswith("n/a: ") for cell in redis.values()), redis
    assert all(not details.get("errors") for details in section["details"].values()), section["details"]
    for label in LIST_LABELS.values():
        assert label in output


def test_the_image_bomb_attack_is_measured_and_printed(smoke_run: tuple[str, dict]) -> None:  # type: ignore[type-arg]
    output, document = smoke_run
    section = document["image_attack"]
    assert set(section["results"]) == set(IMAGE_TARGETS)
    for target, row in section["results"].items():
        assert set(row) == set(IMAGE_KEYS), target
        assert all("median" in cell for cell in row.values()), (target, row, section["details"])
    # The issue's images are refused from their header, the largest decoded ones run.
    assert set(section["details"]["bomb_refused"]["statuses_large"][0]) == {"400"}
    assert set(section["details"]["bomb_decoded"]["statuses_large"][0]) == {"200"}
    for label in section["labels"].values():
        assert label in output


# The verdicts and the profile's parts, without running anything (fast).


def _verdicts(samples: dict[tuple[str, str], float]) -> dict[str, dict]:  # type: ignore[type-arg]
    from benchmarks.report import Results, goals

    results = Results([ADAPTER, ADAPTER_PROCESS, ADAPTER_REDIS, IAC, RELAY, RUNTIME])
    for (target, key), value in samples.items():
        results.add(target, key, value)
    return {goal["goal"]: goal for goal in goals(results)}


def test_a_cpu_ratio_over_blocks_shorter_than_a_clock_tick_is_not_judged() -> None:
    goals = _verdicts({(ADAPTER, "short_cpu_ms"): 4.0, (ADAPTER_PROCESS, "short_cpu_ms"): 0.0,
                       (IAC, "short_cpu_ms"): 7.0})
    process = goals["--durability process: server CPU per short run <= 0.3x iac-code agui"]
    assert process["met"] is None and "clock tick" in process["verdict"], process
    assert goals["fsync (default): server CPU per short run <= 0.35x iac-code agui"]["met"] is False


def test_no_figure_worse_than_the_issues_by_more_than_5_percent() -> None:
    def judged(key: str, ratio: float) -> bool | None:
        goals = _verdicts({(ADAPTER, key): ratio, (IAC, key): 1.0})
        return next(g["met"] for name, g in goals.items() if "no worse than the issue's" in name
                    and g["value"] is not None)

    assert judged("throughput_eps", 13.4) is True and judged("throughput_eps", 13.2) is False  # 14x - 5 %
    assert judged("cpu_s_per_10k", 0.073) is True and judged("cpu_s_per_10k", 0.074) is False  # 0.07x + 5 %
    assert judged("conc_high_p99_s", 0.115) is True and judged("conc_high_p99_s", 0.116) is False
    assert judged("conc_high_peak_rss_mb", 0.75) is True and judged("conc_high_peak_rss_mb", 0.76) is False


def test_the_profile_counts_a_sample_for_the_innermost_part_of_its_stack() -> None:
    from benchmarks.profile import OTHER, part_of

    root = ["_run_module_as_main (<frozen runpy>:198)", "main (aguiadapter/cli.py:389)",
            "run (asyncio/runners.py:190)", "_run_once (asyncio/base_events.py:1922)"]
    run = [*root, "_run (asyncio/events.py:80)", "run (aguiadapter/web/handlers.py:257)"]
    assert part_of([*run, "parse_run_input (aguiadapter/protocol/parsing.py:40)",
                    "loads (json/__init__.py:346)"])[0] == "request parse and digest"
    assert part_of([*run, "write (aguiadapter/web/sse.py:90)",
                    "_writelines (aiohttp/http_writer.py:120)"])[0] == "aiohttp (HTTP server and client)"
    assert part_of([*run, "emit (aguiadapter/web/sse.py:90)"])[0] == "the relay's per-event path"
    assert part_of(["_bootstrap (threading.py:1002)", "_run (aguiadapter/store/file/durable.py:118)",
                    "_fsync_folder (aguiadapter/store/file/durable.py:200)"])[0] == "store writes and the writer thread"
    assert part_of([*root, "select (selectors.py:468)"])[0] == "the event loop waiting (select)"
    # The CLI's main at the root is not "other adapter code": the loop's own work is "other".
    assert part_of([*root, "_run (asyncio/events.py:80)"])[0] == OTHER


def test_the_floor_measures_relays_that_keep_a_record_beside_the_adapter(tmp_path: Path) -> None:
    from benchmarks.report import FLOOR_FSYNC, FLOOR_PROCESS

    out = tmp_path / "floor.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", "benchmarks.floor", "--smoke", "--skip-iac", "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    document = json.loads(out.read_text())
    for target in (ADAPTER, ADAPTER_PROCESS, RELAY, FLOOR_PROCESS, FLOOR_FSYNC):
        for column in ("ttfe_ms", "ttft_ms", "short_run_ms", "short_cpu_ms"):
            assert "median" in document[target][column], (target, column, document[target][column])
    assert "relay + record, fsync" in output and "issue 35's limits" in output


@pytest.mark.parametrize("sync", [False, True])
def test_the_floor_relay_replaces_a_thread_s_record_whole(tmp_path: Path, sync: bool) -> None:
    from benchmarks.relay import Records

    records = Records(str(tmp_path / "state"), sync=sync)
    records.save("thread/1", "run-1", "running", [{"role": "user", "content": "hi"}])
    records.save("thread/1", "run-1", "idle", [{"role": "user", "content": "hi"}])
    files = list((tmp_path / "state").iterdir())
    assert len(files) == 1 and files[0].suffix == ".json"  # no temporary file left, one record per thread
    assert json.loads(files[0].read_text())["state"] == "idle"
