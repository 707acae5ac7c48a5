"""A run's log in memory: what a re-attaching client can be given."""

from __future__ import annotations

import pytest

from aguiadapter.store.run_log import LogBounds, MemoryRunLog, Truncated
from tests.support.agui import parse_sse_ids


def delta(n: int) -> dict[str, object]:
    return {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": str(n)}


def test_a_long_run_keeps_exactly_its_newest_events_one_network_write_at_a_time() -> None:
    log = MemoryRunLog(LogBounds(max_events=100))
    for n in range(1, 1001):
        log.append_now([delta(n)])
    assert (log.first_kept, log.last_id) == (901, 1000)
    events, ids, _ = parse_sse_ids(log.pending_after(900))
    assert [event["delta"] for event in events] == [str(n) for n in range(901, 1001)]
    assert ids == [str(n) for n in range(901, 1001)]
    with pytest.raises(Truncated):
        log.pending_after(899)


def test_an_ended_run_replays_to_its_terminal_event_from_any_kept_cursor() -> None:
    log = MemoryRunLog(LogBounds(max_events=50))
    for n in range(1, 200):
        log.append_now([delta(n)])
    log.append_now([{"type": "RUN_FINISHED", "threadId": "t", "runId": "r"}])
    assert log.ended and log.append_now([delta(0)]) == b""
    events, ids, _ = parse_sse_ids(log.pending_after(180))
    assert [event["type"] for event in events][-1] == "RUN_FINISHED"
    assert ids == [str(n) for n in range(181, 201)]


def test_the_byte_bound_is_kept_as_the_run_goes() -> None:
    log = MemoryRunLog(LogBounds(max_bytes=10_000))
    for n in range(1, 2001):
        log.append_now([delta(n)])
        assert len(log.pending_after(log.first_kept - 1)) <= 10_000


def test_a_replay_is_cut_into_bounded_pieces_of_whole_events() -> None:
    from aguiadapter.store.run_log import frame, offset_after, pieces

    events = [{"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "x" * (i % 300)} for i in range(3000)]
    events.append({"type": "CUSTOM", "name": "big", "value": "y" * 100_000})  # one event over the limit
    chunk = frame(events, 1)
    cut = list(pieces(chunk, 0, limit=4096))
    assert b"".join(cut) == chunk
    assert all(piece.endswith(b"\n\n") and piece.startswith(b"id: ") for piece in cut)
    assert max(len(piece) for piece in cut[:-1]) <= 4096 and len(cut[-1]) > 100_000
    start = offset_after(chunk, 1, 1500)
    assert b"".join(pieces(chunk, start, limit=4096)).startswith(b"id: 1501\n")
