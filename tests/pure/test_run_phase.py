"""The run's phase is one typed field of the record, named the same by the
machine, its diagram and the driver; records stored before the field existed
still load, and the next save writes the field."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from aguiadapter.threads import machine as tm
from aguiadapter.threads.diagram import edges, render_mermaid
from aguiadapter.threads.record import RunPhase, ThreadState, record_from_json, record_to_json

RECORDS = Path(__file__).resolve().parents[1] / "fixtures" / "records"
NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("name", "phase"),
    [("relayed", RunPhase.RELAYED), ("parked", RunPhase.PARKED), ("handed_off", RunPhase.HANDED_OFF),
     ("carried", RunPhase.CARRIED), ("idle", None)],
)
def test_a_record_in_the_form_before_the_phase_loads_with_its_phase_and_saves_the_new_form(
    name: str, phase: RunPhase | None
) -> None:
    stored = (RECORDS / f"{name}.json").read_bytes()
    assert "run_phase" not in json.loads(stored), "the fixture is in the old form"
    record = record_from_json(stored)
    assert record.run_phase is phase
    assert (record.state is ThreadState.RUNNING) is (phase is not None)
    saved = json.loads(record_to_json(record))
    assert saved["run_phase"] == (None if phase is None else phase.value) and "handed_off" not in saved
    assert record_from_json(record_to_json(record)) == record


def test_what_an_old_record_may_do_next_is_what_its_phase_allows() -> None:
    handed_off = record_from_json((RECORDS / "handed_off.json").read_bytes())
    assert tm.recovery(handed_off, NOW) is tm.Recovery.ADOPTABLE
    assert tm.recovery(handed_off, NOW + 60) is tm.Recovery.NOT_ADOPTED
    assert handed_off.deadline == NOW + 60
    tm.apply(handed_off, tm.Adopt(NOW))
    assert handed_off.run_phase is RunPhase.RELAYED and handed_off.handed_off_text is None
    parked = record_from_json((RECORDS / "parked.json").read_bytes())
    tm.apply(parked, tm.Rejoin())
    assert parked.run_phase is RunPhase.RELAYED and parked.parked_until is None
    carried = record_from_json((RECORDS / "carried.json").read_bytes())
    assert carried.active_run_id is None and tm.allowed(carried, tm.Recover)
    assert not tm.may(carried, tm.Follow), "nothing taken to follow"


def test_an_illegal_phase_move_raises_and_changes_nothing() -> None:
    record = record_from_json((RECORDS / "parked.json").read_bytes())
    with pytest.raises(tm.TransitionNotAllowed, match="park is not allowed in parked"):
        tm.apply(record, tm.Park(NOW + 90))
    assert record.parked_until == NOW + 30


def test_the_driver_refuses_a_phase_move_its_table_does_not_list() -> None:
    from aguiadapter.runs.driver import PHASES, Phase, RunDriver

    driver = object.__new__(RunDriver)
    driver.phase = Phase.ENDED
    # The run's ids live in its translator (the one copy of them).
    driver.translator = type("Translator", (), {"identity": type("Identity", (), {"run_id": "run-1"})()})()
    assert not PHASES[Phase.ENDED]
    with pytest.raises(RuntimeError, match="no move from ended to relayed"):
        driver._enter(Phase.RELAYED)
    assert driver.phase is Phase.ENDED
    # The driver's phases that are the record's say it with the record's names.
    assert {Phase.RELAYED.value, Phase.PARKED.value} <= {phase.value for phase in RunPhase}


# ----------------------------------------------------------------- the diagram
def _drawn_edges(diagram: str) -> dict[tuple[str, str], list[str]]:
    drawn: dict[tuple[str, str], list[str]] = {}
    for line in diagram.splitlines():
        line = line.strip()
        if "-->" not in line or line.startswith("[*]"):
            continue
        pair, _, label = line.partition(" : ")
        source, _, target = pair.partition(" --> ")
        assert (source, target) not in drawn, f"two edges from {source} to {target}"
        drawn[(source, target)] = label.split(" / ")
    return drawn


def test_the_drawn_edges_are_the_declared_transitions_one_per_pair() -> None:
    assert _drawn_edges(render_mermaid()) == edges()
    # Built from the rows themselves: every row is on its pair's edge, with its guard.
    for row in tm.TRANSITIONS:
        if row.event is tm.Report:
            continue
        guard = "" if row.guard is None else f" [{row.guard.__name__.replace('_', ' ')}]"
        label = row.event.name.replace("_", " ") + guard
        assert label in edges()[(row.source.value, row.target.value)]


def test_running_is_a_compound_of_the_phases_and_report_a_note() -> None:
    diagram = render_mermaid()
    assert 'state "Running" as running {' in diagram
    inner = diagram.split("running {", 1)[1].split("\n    }", 1)[0]
    for phase in RunPhase:
        assert phase.value in inner
    assert "report" not in "".join(label for labels in _drawn_edges(diagram).values() for label in labels)
    assert {f"note right of {state}" for state in ("idle", "interrupted", "terminal")} <= {
        line.strip().split(" :")[0] for line in diagram.splitlines() if "note right of" in line
    }
    # recover leaves only from the phases of a run no process relays any more (never a handed-off one).
    assert not [pair for pair, labels in edges().items() if pair[0] == "handed_off" and "recover" in str(labels)]


# ------------------------------------------------------- the types hold the names
SNIPPET = """
from aguiadapter.threads import machine as tm
from aguiadapter.threads.record import ThreadRecord

def misspelt(record: ThreadRecord) -> None:
    tm.apply(record, tm.Prak(1.0))
    tm.apply(record, tm.Park(untill=1.0))
    tm.allowed(record, "strat_turn")
    tm.apply(record, tm.Park(1.0)).append(1)
"""


def test_a_misspelt_event_or_argument_is_a_mypy_strict_error(tmp_path: Path) -> None:
    source = tmp_path / "misspelt.py"
    source.write_text(textwrap.dedent(SNIPPET))
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        # The lint run's cache (mypy --strict aguiadapter) makes this a few seconds instead of twenty.
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--cache-dir", str(root / ".mypy_cache"),
         str(source)],
        capture_output=True, text=True, cwd=root, env={"MYPYPATH": str(root), "PATH": ""}, timeout=300,
    )
    out = done.stdout
    assert done.returncode == 1, out + done.stderr  # stderr says so when mypy itself is missing
    assert ':6: error: Module has no attribute "Prak"' in out
    assert ':7: error: Unexpected keyword argument "untill" for "Park"' in out
    assert ':8: error: Argument 2 to "allowed" has incompatible type "str"' in out
    assert ':9: error: "None" has no attribute "append"' in out
