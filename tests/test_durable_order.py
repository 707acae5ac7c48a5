"""What crash recovery relies on: every event goes out after the record it depends on.

A sink reads the thread's file from disk at every emit (what a process
started after a crash would find) and checks, for a turn, an interrupt and
its resume against the demo runtime:

- ``RUN_STARTED`` only once the stored record names the run;
- after a resume's answer was taken, nothing before the stored record
  has it applied;
- ``RUN_FINISHED`` only once the stored record says how the run ended
  and names the turn's task (a turn's binding may go out with the run's
  end instead of on its own: runs/shell.py ``needs_sync``; a process that
  dies before finds the task on the runtime);
- a turn whose task id cannot be stored never finishes: it ends in
  ``STATE_PERSISTENCE_FAILED``, with every span it opened closed;
- a turn's end reaches its client in one write (issue 35, item 5): the
  spans the run closes and the terminal event go out together, right after
  the end's record write, and the stream ends with that write. What the
  runtime's last chunk brought goes with them where that write is cheap
  (``--durability process``), and before it where the write waits for the
  disk (``fsync``): the text does not wait for the syncs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from aguiadapter.a2a.client import A2AClient
from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.protocol.digest import canonical_digest
from aguiadapter.protocol.parsing import parse_run_input
from aguiadapter.store.file.store import FileThreadStore
from aguiadapter.threads.record import ThreadRecord, ThreadState, record_from_json
from aguiadapter.service.thread_service import ThreadService
from aguiadapter.store.contract import PersistenceError, Saved
from tests.support.adapter import run_body
from tests.support.agui import check_order, parse_sse
from tests.support.serve import thread_service


class StoredRecordSink:
    """Records, for each emit, the events and the record on disk at that moment."""

    def __init__(self, store: FileThreadStore, thread_id: str) -> None:
        self.path = store.path_for(thread_id)
        self.emits: list[tuple[list[dict[str, Any]], ThreadRecord]] = []

    async def send(self, chunk: bytes, count: int, *, last: bool = False) -> None:
        events, _ = parse_sse(chunk)
        assert len(events) == count
        self.emits.append((events, record_from_json(self.path.read_bytes())))

    @property
    def events(self) -> list[dict[str, Any]]:
        return [event for events, _ in self.emits for event in events]


@pytest.fixture
async def service(tmp_path: Path, demo: DemoRuntime) -> AsyncIterator[ThreadService]:
    async with thread_service(FileThreadStore(tmp_path / "state"), demo.url) as running:
        yield running


async def run(service: ThreadService, body: dict[str, Any]) -> StoredRecordSink:
    run_input = parse_run_input(body)
    ticket = await service.admit(run_input, canonical_digest(body), "en", body["forwardedProps"]["iacCode"]["cwd"])
    assert isinstance(service.store, FileThreadStore)
    sink = StoredRecordSink(service.store, run_input.thread_id)
    await service.run(ticket, sink)
    return sink


def check_turn_order(sink: StoredRecordSink, run_id: str) -> None:
    for events, stored in sink.emits:
        for event in events:
            if event["type"] == "RUN_STARTED":
                assert stored.runs.get(run_id) is not None and stored.state is ThreadState.RUNNING, event
            elif event["type"] == "RUN_FINISHED":
                assert stored.state is not ThreadState.RUNNING and stored.runs[run_id].outcome, event
                assert stored.task_id is not None, "the run finished before its task id was stored"


@pytest.mark.parametrize("text", ["firehose 5", "tool", "think about it", "permission notes.txt"])
async def test_a_turn_sends_nothing_before_the_record_it_depends_on(
    service: ThreadService, workspace: Path, text: str
) -> None:
    body = run_body(thread_id=f"t-{text.split()[0]}", text=text, cwd=str(workspace))
    sink = await run(service, body)
    assert sink.events[0]["type"] == "RUN_STARTED" and sink.events[-1]["type"] == "RUN_FINISHED"
    check_turn_order(sink, body["runId"])


async def test_a_resume_sends_nothing_after_its_answer_was_taken_before_that_is_stored(
    service: ThreadService, workspace: Path
) -> None:
    first = run_body(thread_id="t-resume", text="permission notes.txt", cwd=str(workspace))
    asked = await run(service, first)
    interrupt = asked.events[-1]["outcome"]["interrupts"][0]
    resume = {**first, "runId": "run-resume", "messages": [],
              "resume": [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "allow_once"}}]}
    answered = await run(service, resume)
    assert answered.events[-1]["type"] == "RUN_FINISHED"
    check_turn_order(answered, "run-resume")
    # The opening (RUN_STARTED and what the thread already knew) comes before the answer is sent.
    for events, stored in answered.emits[1:]:
        assert interrupt["id"] in stored.applied_answers, f"{[e['type'] for e in events]} before the answer was stored"


class FailsAfterStart(FileThreadStore):
    """A disk that fills up once the turn is stored: the task id cannot be
    (whether it is written on its own or with the turn's end)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.saves = 0

    async def save(self, record: ThreadRecord, claim: Any = None, *, durable: bool = True) -> Saved:
        self.saves += 1
        if self.saves == 2:
            raise PersistenceError("disk full")
        return await super().save(record, claim, durable=durable)


@pytest.mark.parametrize("text", ["firehose 5", "think about it", "tool"])
async def test_a_turn_whose_task_cannot_be_stored_never_finishes_and_closes_what_it_opened(
    tmp_path: Path, demo: DemoRuntime, workspace: Path, text: str
) -> None:
    client = A2AClient(demo.url)
    service = ThreadService(FailsAfterStart(tmp_path / "failing"), client)
    await service.start()
    try:
        body = run_body(thread_id="t-full", text=text, cwd=str(workspace))
        sink = await run(service, body)
    finally:
        await service.shutdown()
        await client.close()
    types = [event["type"] for event in sink.events]
    assert types[0] == "RUN_STARTED" and types[-1] == "RUN_ERROR" and "RUN_FINISHED" not in types, types
    assert sink.events[-1]["code"] == "STATE_PERSISTENCE_FAILED"
    check_order(sink.events)
    stored = record_from_json(sink.path.read_bytes())
    assert stored.task_id is None and stored.state is ThreadState.RUNNING, "the lost write changed the record"


class Writes:
    """A client that keeps each write: its events, and whether it was the last."""

    def __init__(self) -> None:
        self.writes: list[tuple[list[str], bool]] = []
        self.events: list[dict[str, Any]] = []

    async def send(self, chunk: bytes, count: int, *, last: bool = False) -> None:
        events, _ = parse_sse(chunk)
        assert len(events) == count
        assert not any(ended for _, ended in self.writes), "a write after the stream ended"
        self.writes.append(([event["type"] for event in events], last))
        self.events += events


async def run_writes(service: ThreadService, workspace: Path, text: str) -> Writes:
    body = run_body(thread_id=f"t-{text.split()[0]}", text=text, cwd=str(workspace))
    ticket = await service.admit(parse_run_input(body), canonical_digest(body), "en", str(workspace))
    sink = Writes()
    await service.run(ticket, sink)
    return sink


class EndWatchingStore(FileThreadStore):
    """A file store that notes what the client had been sent when a run's
    end began to be written (a record no longer running)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sink: Writes | None = None
        self.sent_at_end: list[str] | None = None

    async def save(self, record: ThreadRecord, *args: Any, **kwargs: Any) -> Saved:
        if record.state is not ThreadState.RUNNING and self.sink is not None and self.sent_at_end is None:
            self.sent_at_end = [event["type"] for event in self.sink.events]
        return await super().save(record, *args, **kwargs)


@pytest.fixture(params=["fsync", "process"])
async def watched(request: pytest.FixtureRequest, tmp_path: Path, demo: DemoRuntime) -> AsyncIterator[ThreadService]:
    async with thread_service(EndWatchingStore(tmp_path / "state", durability=request.param), demo.url) as running:
        yield running


async def watched_run(service: ThreadService, workspace: Path, text: str) -> tuple[Writes, list[str]]:
    store = service.store
    assert isinstance(store, EndWatchingStore)
    body = run_body(thread_id=f"t-{text.split()[0]}", text=text, cwd=str(workspace))
    ticket = await service.admit(parse_run_input(body), canonical_digest(body), "en", str(workspace))
    store.sink = sink = Writes()
    await service.run(ticket, sink)
    assert store.sent_at_end is not None, "the run's end was never written"
    return sink, store.sent_at_end


@pytest.mark.parametrize("text", ["firehose 5", "think about it", "tool"])
async def test_a_turn_s_end_goes_out_in_one_write_that_ends_the_stream(
    watched: ThreadService, workspace: Path, text: str
) -> None:
    sink, _ = await watched_run(watched, workspace, text)
    *before, (last, ended) = sink.writes
    assert ended and not any(flag for _, flag in before), sink.writes
    assert last[-1] == "RUN_FINISHED"
    assert sink.events[0]["type"] == "RUN_STARTED"
    check_order(sink.events)


async def test_the_last_chunk_s_text_waits_for_the_end_s_write_only_where_it_is_cheap(
    watched: ThreadService, workspace: Path
) -> None:
    sink, sent_at_end = await watched_run(watched, workspace, "firehose 5")
    *_, (last, _) = sink.writes
    if watched.store.durability == "fsync":
        # The end's write waits for the disk: the text was on its way before it began.
        assert "TEXT_MESSAGE_CONTENT" in sent_at_end, sent_at_end
        assert "TEXT_MESSAGE_CONTENT" not in last
    else:
        # Page cache only: the text, the spans the run closes and RUN_FINISHED go out in one write.
        assert "TEXT_MESSAGE_CONTENT" not in sent_at_end, sent_at_end
        assert "TEXT_MESSAGE_CONTENT" in last and "TEXT_MESSAGE_END" in last, sink.writes


async def test_an_interrupt_ends_the_stream_with_its_last_write_too(service: ThreadService, workspace: Path) -> None:
    sink = await run_writes(service, workspace, "permission notes.txt")
    *before, (last, ended) = sink.writes
    assert ended and last[-1] == "RUN_FINISHED" and not any(flag for _, flag in before)
