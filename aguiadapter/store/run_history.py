"""A thread's older runs, kept out of its record.

Idempotency needs every run id a thread ever admitted (the same request
again is ``DUPLICATE_RUN_ID``, another one under a used id
``RUN_ID_CONFLICT``), but a record that carried them all would grow with
every turn, and every save rewrites it whole. So a record keeps the newest
runs only (its *window*); when a save finds more than :data:`SPILL_AT` of
them, the store moves all but the newest :data:`RUN_WINDOW` to the thread's
run history (append-only, never rewritten: a file beside the record on the
file store, fields of the record's hash on Redis) in the same durable step
as the record that no longer holds them. ``record.earlier_runs`` counts the
moved ones: a thread that never moved any costs no look-up.

A run id missing from the window is looked up in the history before the
request is judged (:func:`with_earlier_run`); the record that is judged then
holds the entry, exactly as if it had never left.

Moving in batches keeps both sides cheap: a save rewrites at most
``SPILL_AT`` entries whatever the thread's age, and the history grows by one
append every ``SPILL_AT - RUN_WINDOW`` runs. A record written before the
history existed (up to 1,000 entries in the record) is converted by its
first save: everything beyond the window moves out.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Protocol

import attrs

from ..threads.record import RunEntry, ThreadRecord

#: Runs a saved record keeps (small: every save encodes them, every load parses them).
RUN_WINDOW = 8
#: A record is saved with at most this many runs; beyond, the older ones move
#: out (in batches: one append every ``SPILL_AT - RUN_WINDOW`` runs).
SPILL_AT = 24

Moved = Sequence[tuple[str, RunEntry]]


class EarlierRuns(Protocol):
    """Where a store looks up a run that left the record."""

    async def earlier_run(self, key: str, run_id: str) -> RunEntry | None:
        """The entry of ``run_id`` in the history of the thread ``key`` (``None``: not there)."""


def split_runs(record: ThreadRecord) -> tuple[ThreadRecord, Moved]:
    """The record as it is to be stored, and the runs that move out of it
    (none, and the record itself, while it holds at most ``SPILL_AT``). The
    active run always stays."""
    runs = record.runs
    if len(runs) <= SPILL_AT:
        return record, ()
    items = list(runs.items())
    older, newer = items[: len(items) - RUN_WINDOW], items[len(items) - RUN_WINDOW:]
    active = record.active_run_id
    moved = [(run_id, entry) for run_id, entry in older if run_id != active]
    kept = dict(newer)
    if active is not None and active in runs and active not in kept:
        kept = {active: runs[active], **kept}
    return attrs.evolve(record, runs=kept, earlier_runs=record.earlier_runs + len(moved)), moved


def entry_json(entry: RunEntry) -> str:
    """One history entry's value (digest and outcome)."""
    return json.dumps({"digest": entry.digest, "outcome": entry.outcome}, separators=(",", ":"))


def entry_of(value: bytes | str) -> RunEntry:
    """The entry :func:`entry_json` wrote (``ValueError`` when it is not one)."""
    raw = json.loads(value)
    if not isinstance(raw, dict) or not isinstance(raw.get("digest"), str):
        raise ValueError("not a run history entry")
    outcome = raw.get("outcome")
    return RunEntry(raw["digest"], outcome if isinstance(outcome, str) else None)


def lines_of(moved: Iterable[tuple[str, RunEntry]]) -> bytes:
    """Moved runs as the lines of a history file. The batch starts with a
    newline: an append a crash cut short leaves a torn line that this one
    does not run into (readers skip lines they cannot parse; the runs of a
    torn append were still in the record, and move again)."""
    parts = ["\n"]
    for run_id, entry in moved:
        parts.append(json.dumps({"run": run_id, "digest": entry.digest, "outcome": entry.outcome},
                                separators=(",", ":")))
        parts.append("\n")
    return "".join(parts).encode()


def parse_lines(data: bytes) -> dict[str, RunEntry]:
    """A history file's runs (torn or foreign lines skipped)."""
    found: dict[str, RunEntry] = {}
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
            run_id = raw["run"]
            entry = entry_of(line)
        except (ValueError, TypeError, KeyError):
            continue
        if isinstance(run_id, str):
            found[run_id] = entry
    return found


async def with_earlier_run(store: EarlierRuns, record: ThreadRecord, run_id: str) -> ThreadRecord:
    """``record``, or a copy of it whose window holds ``run_id``'s entry from
    the thread's history (to judge a request with: a used id is refused
    exactly as if its entry had stayed in the record)."""
    if not record.earlier_runs or run_id in record.runs:
        return record
    entry = await store.earlier_run(record.key, run_id)
    if entry is None:
        return record
    return attrs.evolve(record, runs={**record.runs, run_id: entry})
