"""A write of the thread record that fails, for every transition that writes.

The protocol reference: writes that recovery needs fail closed; when the
task, session or interrupt mapping cannot be persisted, the adapter does not
announce a recoverable success, and cancels the A2A task when needed
(``STATE_PERSISTENCE_FAILED``). Each row below makes the store fail from the
save of one transition on (a full disk: every later save fails too, until
the disk is back) and checks what a user would see: the end of the stream
(or the HTTP error before it), the record on disk (what it was before the
lost write), whether the runtime's task was cancelled, and that the thread
works again once the store is back, with no manual step and no answer
applied twice.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import attrs
import pytest

from aguiadapter.a2a.client import A2AClient, StreamEndedEarly
from aguiadapter.a2a.messages import permission_part
from aguiadapter.config import Config
from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.protocol.inputs import ResumeEntry
from aguiadapter.protocol.resume import check_resume
from aguiadapter.runtime.iac_code import Batches
from aguiadapter.threads import machine as tm
from aguiadapter.store.file.store import FileThreadStore
from aguiadapter.threads.record import RunKind, ThreadRecord, ThreadState, record_to_json
from aguiadapter.store.contract import PersistenceError, Saved
from aguiadapter.web.app import create_app
from aguiadapter.web.keys import SERVICE
from aguiadapter.web.server import AdapterRunner
from tests.support.adapter import Reply, RunningAdapter, run_body
from tests.support.agui import check_stream
from tests.support.eventually import eventually
from tests.support.reattach import read_then_cut, reattach
from tests.support.serve import on_loopback
from tests.support.reading import read_until

Trip = Callable[[ThreadRecord | None, ThreadRecord], bool]


class Outage:
    """A store (mixed in before it) that goes down at the save ``trips`` picks
    (by the stored record and the one to write), and stays down, as a full
    disk or a stopped Redis does, until :meth:`heal`."""

    trips: Trip | None = None
    full = False
    #: The stored record when the store went down.
    kept: ThreadRecord | None = None

    async def save(self, record: ThreadRecord, claim: Any = None, *, durable: bool = True) -> Saved:
        if not self.full and self.trips is not None:
            stored = await self.load(record.thread_id)  # type: ignore[attr-defined]
            if self.trips(stored, record):
                self.full, self.kept = True, stored
        if self.full:
            raise PersistenceError("no space left on device (injected)")
        saved: Saved = await super().save(record, claim, durable=durable)  # type: ignore[misc]
        return saved

    async def write_through(self, record: ThreadRecord) -> None:
        """Write as another process would (to set a thread up)."""
        (await super().save(record, None)).stamp(record)  # type: ignore[misc]

    def heal(self) -> None:
        self.full, self.trips = False, None


class FullDisk(Outage, FileThreadStore):
    """The file store on a disk that fills up."""


def moves(source: ThreadState | None, target: ThreadState) -> Trip:
    def trips(stored: ThreadRecord | None, new: ThreadRecord) -> bool:
        return (stored.state if stored else None) is source and new.state is target

    return trips


def binds_task(stored: ThreadRecord | None, new: ThreadRecord) -> bool:
    return stored is not None and stored.task_id is None and new.task_id is not None


def rejoins(stored: ThreadRecord | None, new: ThreadRecord) -> bool:
    return stored is not None and stored.parked_until is not None and new.parked_until is None and (
        new.state is ThreadState.RUNNING
    )


def accepts(stored: ThreadRecord | None, new: ThreadRecord) -> bool:
    return stored is not None and len(new.applied_answers) > len(stored.applied_answers)


def parks(stored: ThreadRecord | None, new: ThreadRecord) -> bool:
    return stored is not None and stored.parked_until is None and new.parked_until is not None


def detaches(stored: ThreadRecord | None, new: ThreadRecord) -> bool:
    return stored is not None and stored.active_run_id is not None and new.active_run_id is None and (
        new.state is ThreadState.RUNNING
    )


def announces(stored: ThreadRecord | None, new: ThreadRecord) -> bool:
    return stored is not None and new.active_run_kind is RunKind.ANNOUNCE and (
        stored.active_run_kind is not RunKind.ANNOUNCE
    )


def reports(stored: ThreadRecord | None, new: ThreadRecord) -> bool:
    """A retried answer's run that only reports how the earlier one ended."""
    return stored is not None and stored.state is new.state and len(new.runs) > len(stored.runs)


@attrs.define
class Case:
    """One thread of one row, and what the test talks to."""

    adapter: RunningAdapter
    disk: Any
    demo: DemoRuntime
    workspace: Path
    thread_id: str = attrs.Factory(lambda: f"lost-{uuid.uuid4()}")
    #: The resume the row sends (rows about answers).
    resume: dict[str, Any] | None = None
    #: The waiting permission's tool call, before a row changed it.
    tool_use_id: str | None = None

    def turn(self, text: str) -> dict[str, Any]:
        return run_body(thread_id=self.thread_id, text=text, cwd=str(self.workspace))

    async def tamper(self, tool_use_id: str) -> str:
        """Set the waiting permission's tool call in the store (another one
        than the runtime's: it refuses the answer); the one it had."""
        record = await self.disk.load(self.thread_id)
        assert record is not None
        (item,) = record.pending_interrupts
        was = item.envelope.fields["toolUseId"]
        item.envelope = attrs.evolve(item.envelope, fields={**item.envelope.fields, "toolUseId": tool_use_id})
        await self.disk.write_through(record)
        return str(was)


def last_seen(reply: Reply) -> tuple[str, str]:
    """What the client saw last: the stream's last event, or the HTTP error."""
    if reply.status != 200:
        return f"HTTP {reply.status}", reply.json()["error"]["code"]
    last = check_stream(reply.body)[-1]
    return last["type"], str(last.get("code"))


Step = Callable[[Case], Awaitable[Any]]


async def nothing(case: Case) -> None:
    return None


async def waiting_permission(case: Case) -> None:
    """The thread waits for a permission; ``case.resume`` allows it."""
    events = (await case.adapter.run(case.turn("permission notes.txt"))).events()
    (interrupt,) = events[-1]["outcome"]["interrupts"]
    body = run_body(thread_id=case.thread_id, text=None, cwd=str(case.workspace))
    body["resume"] = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "allow_once"}}]
    case.resume = body


async def answer_sent_elsewhere(case: Case) -> None:
    """The waiting permission's answer reaches the runtime from another
    process that wrote nothing of it (the runtime took it and ran the tool)."""
    record = await case.disk.load(case.thread_id)
    assert record is not None
    (item,) = record.pending_interrupts
    client = A2AClient(case.demo.url)
    try:
        message = {"messageId": f"elsewhere-{uuid.uuid4()}", "contextId": record.context_id,
                   "taskId": record.task_id, "role": "ROLE_USER",
                   "parts": [permission_part(item.envelope.fields, "allow_once")]}
        async for _ in client.stream_message(message):
            pass
    finally:
        await client.close()
    assert sum(case.demo.state.tool_runs.values()) == 1


async def answered_elsewhere(case: Case) -> None:
    """The thread waits for a permission whose answer the runtime took
    already (the record knows nothing of it)."""
    await waiting_permission(case)
    await answer_sent_elsewhere(case)


async def dead_resume(case: Case) -> None:
    """The thread's resume opened and its process died before the answer's
    fate was written (the record says running; nobody holds it)."""
    await waiting_permission(case)
    record = await case.disk.load(case.thread_id)
    assert record is not None and case.resume is not None
    (item,) = record.pending_interrupts
    entry = ResumeEntry(interrupt_id=item.id, status="resolved", payload={"decision": "allow_once"})
    answers = check_resume([entry], [item.interrupt], {})
    tm.apply(record, tm.Resume(tm.RunBinding("run-dead", "digest", "exec-dead", "invocation-1"), answers))
    await case.disk.write_through(record)


async def dead_resume_taken(case: Case) -> None:
    """A dead resume whose answer the runtime took before the process died."""
    await waiting_permission(case)
    await answer_sent_elsewhere(case)
    record = await case.disk.load(case.thread_id)
    assert record is not None
    (item,) = record.pending_interrupts
    entry = ResumeEntry(interrupt_id=item.id, status="resolved", payload={"decision": "allow_once"})
    answers = check_resume([entry], [item.interrupt], {})
    tm.apply(record, tm.Resume(tm.RunBinding("run-dead", "digest", "exec-dead", "invocation-1"), answers))
    await case.disk.write_through(record)


async def recovered_taken(case: Case) -> None:
    """A dead resume whose answer the runtime took, settled (by a reload of
    the thread): the thread is idle, the answer not yet reported."""
    await dead_resume_taken(case)
    reply = await case.adapter.get(f"/threads/{case.thread_id}")
    assert reply.status == 200 and reply.json()["state"] == "idle", reply.json()


PIPELINE = {"runMode": "pipeline", "pipelineName": "selling"}


async def one_candidate_of_two_known(case: Case) -> None:
    """Both candidates of a pipeline ask to write, and the thread knows of
    only the first (the second asked after the pause was announced):
    ``case.resume`` answers the one it knows."""
    body = run_body(thread_id=case.thread_id, text="full: plan a service", cwd=str(case.workspace), **PIPELINE)
    (question,) = (await case.adapter.run(body)).events()[-1]["outcome"]["interrupts"]
    resume = run_body(thread_id=case.thread_id, text=None, cwd=str(case.workspace), **PIPELINE)
    resume["resume"] = [{"interruptId": question["id"], "status": "resolved", "payload": {"freeText": "Test"}}]
    first, _ = (await case.adapter.run(resume)).events()[-1]["outcome"]["interrupts"]
    record = await case.disk.load(case.thread_id)
    assert record is not None
    record.pending_interrupts = [item for item in record.pending_interrupts if item.id == first["id"]]
    await case.disk.write_through(record)
    resume["resume"] = [{"interruptId": first["id"], "status": "resolved", "payload": {"decision": "allow_once"}}]
    case.resume = resume


async def both_announced(case: Case) -> None:
    """The retried answer's run announces both candidates' permissions;
    nothing was written yet."""
    assert case.resume is not None
    reply = await case.adapter.run({**case.resume, "runId": f"run-{uuid.uuid4()}"})
    last = reply.events()[-1]
    assert last["type"] == "RUN_FINISHED" and len(last["outcome"]["interrupts"]) == 2, last
    assert case.demo.state.tool_runs["write_file"] == 0


async def permission_then_task_lost(case: Case) -> None:
    """The thread waits for a permission the runtime no longer knows of."""
    await waiting_permission(case)
    case.demo.state.tasks.clear()


async def cut_after_receipt(case: Case) -> None:
    """The runtime's answer streams break right after its receipt (the
    runtime took the answer; the stream is gone)."""
    await waiting_permission(case)
    service = case.adapter.app.get(SERVICE)
    assert service is not None
    runtime = service.runtime
    stream = runtime.stream

    async def cut(batches: Batches) -> Batches:
        async for batch in batches:
            receipt = next((index for index, result in enumerate(batch) if "inputReceived" in json.dumps(result)),
                           None)
            if receipt is None:
                yield batch
                continue
            yield batch[: receipt + 1]
            await batches.aclose()  # type: ignore[attr-defined]
            raise StreamEndedEarly("the connection broke (injected)")

    def cutting(message: dict[str, Any]) -> Batches:
        return cut(stream(message))

    runtime.stream = cutting  # type: ignore[method-assign]


async def refused_permission(case: Case) -> None:
    await waiting_permission(case)
    case.tool_use_id = await case.tamper("call-tampered")


def run(text: str) -> Step:
    async def act(case: Case) -> tuple[str, str]:
        return last_seen(await case.adapter.run(case.turn(text)))

    return act


async def answer(case: Case) -> tuple[str, str]:
    assert case.resume is not None
    # Each try is a new run of the same answers.
    return last_seen(await case.adapter.run({**case.resume, "runId": f"run-{uuid.uuid4()}"}))


async def cancel_route(case: Case, execution_id: str) -> Reply:
    body = {"threadId": case.thread_id, "rosInvocationId": "invocation-1"}
    return await case.adapter.post(f"/extensions/iac-code/v1/executions/{execution_id}/cancel", body)


async def cancel_while_it_runs(case: Case) -> tuple[str, str]:
    """The cancel route, while a slow turn streams."""
    async with case.adapter.session.post(case.adapter.url, json=case.turn("slow 20")) as resp:
        seen = await read_until(resp, b"iac-code.session.v1", seconds=30)
        execution_id = seen.split(b'"executionId":"')[1].split(b'"')[0].decode()
        await cancel_route(case, execution_id)
        rest = await asyncio.wait_for(resp.read(), 10)
    return last_seen(Reply(200, {}, seen + rest))


async def cancel_the_wait(case: Case) -> tuple[str, str]:
    """The cancel route, on a thread that waits for the user."""
    record = await case.disk.load(case.thread_id)
    assert record is not None and record.execution_id is not None
    reply = await cancel_route(case, record.execution_id)
    return ("HTTP 200", reply.json()["status"]) if reply.status == 200 else last_seen(reply)


async def leave_it(case: Case) -> tuple[str, str]:
    """The client's connection breaks; the run goes on for the grace, into
    its log, where a client that comes back reads how it ended."""
    body = case.turn("slow 20")
    first = await read_then_cut(case.adapter.url, body, events=4)
    await eventually(lambda: case.disk.full, "the park was written")
    status, rest = await reattach(case.adapter.url, case.thread_id, body["runId"], first.last_id)
    return last_seen(Reply(status, {}, first.raw + rest))


async def come_back(case: Case) -> tuple[str, str]:
    """The client's connection breaks, the run is parked; the client comes
    back (its re-attach rejoins the run) and reads to the end."""
    body = case.turn("slow 5")
    trips, case.disk.trips = case.disk.trips, None
    first = await read_then_cut(case.adapter.url, body, events=4)

    async def parked() -> bool:
        record = await case.disk.load(case.thread_id)
        return record is not None and record.parked_until is not None

    await eventually(parked, "the run is parked")
    case.disk.trips = trips
    status, rest = await reattach(case.adapter.url, case.thread_id, body["runId"], first.last_id)
    return last_seen(Reply(status, {}, first.raw + rest))


async def finishes(case: Case) -> None:
    """A new turn on the thread ends normally."""
    assert await run("hello again")(case) == ("RUN_FINISHED", "None")


async def finishes_once_free(case: Case) -> None:
    """A new turn ends normally once the re-attach (its check of the dead
    run, in the background) gave the thread back: it answers THREAD_BUSY,
    which a client retries, until then."""

    async def turn() -> tuple[str, str] | None:
        seen = await run("hello again")(case)
        return None if seen == ("HTTP 409", "THREAD_BUSY") else seen

    assert await eventually(turn, "the thread is free") == ("RUN_FINISHED", "None")


async def answered_once(case: Case) -> None:
    """The same answer, retried, ends normally and its tool ran once."""
    assert await answer(case) == ("RUN_FINISHED", "None")
    assert sum(case.demo.state.tool_runs.values()) == 1, "the answer was lost or applied twice"
    await finishes(case)


async def answered_once_as_it_was(case: Case) -> None:
    """Once the permission's tool call on disk is the runtime's again."""
    assert case.tool_use_id is not None
    await case.tamper(case.tool_use_id)
    await answered_once(case)


async def lost_then_new_turn(case: Case) -> None:
    """The retried answer hears that the task is lost; a new turn proceeds."""
    assert await answer(case) == ("HTTP 409", "EXECUTION_LOST")
    await finishes(case)


async def cancelled_again(case: Case) -> None:
    assert await cancel_the_wait(case) == ("HTTP 200", "cancelled")
    await finishes(case)


@attrs.frozen
class Row:
    """One writing transition whose save fails."""

    transition: str
    #: What the thread does before the fault.
    prepare: Step
    #: What the client does when the fault hits (returns what it saw last).
    act: Step
    #: The save that fills the disk.
    trips: Trip
    #: What the client sees last.
    seen: tuple[str, str] = ("RUN_ERROR", "STATE_PERSISTENCE_FAILED")
    #: Whether the runtime's task was cancelled.
    cancelled: bool = False
    #: What works once the disk is back.
    after: Step = finishes
    config: dict[str, Any] = attrs.Factory(dict)


SAVE_FAILED = ("HTTP 503", "STATE_PERSISTENCE_FAILED")
RUNNING, IDLE, INTERRUPTED, TERMINAL = ThreadState.RUNNING, ThreadState.IDLE, ThreadState.INTERRUPTED, ThreadState.TERMINAL
ROWS = [
    # Opening a run: the HTTP error, before anything was announced.
    Row("start_turn", nothing, run("hello"), moves(None, RUNNING), SAVE_FAILED),
    Row("resume", waiting_permission, answer, moves(INTERRUPTED, RUNNING), SAVE_FAILED, after=answered_once),
    # While it streams: a turn that still runs a moment after it named its
    # task has the binding written on its own; a short turn's end carries it
    # (and a finished task is not cancelled).
    Row("bind_task", nothing, run("slow 2"), binds_task, cancelled=True),
    Row("bind_task with the end", nothing, run("hello"), binds_task),
    # The runtime took the person's answer: never cancelled, never applied twice.
    Row("accept", waiting_permission, answer, accepts, after=answered_once),
    Row("park", nothing, leave_it, parks, cancelled=True, after=finishes_once_free,
        config={"disconnect_grace_seconds": 30.0}),
    # A client reads the run again: it goes on (its rejoin asked again); its end cannot be stored either.
    Row("rejoin", nothing, come_back, rejoins, after=finishes_once_free, config={"disconnect_grace_seconds": 30.0}),
    # A run ends.
    Row("finish", nothing, run("firehose 3"), moves(RUNNING, IDLE)),
    Row("finish after an answer", waiting_permission, answer, moves(RUNNING, IDLE), after=answered_once),
    Row("interrupt", nothing, run("permission notes.txt"), moves(RUNNING, INTERRUPTED), cancelled=True),
    Row("reject", refused_permission, answer, moves(RUNNING, INTERRUPTED), after=answered_once_as_it_was),
    Row("fail", nothing, run("fail"), moves(RUNNING, TERMINAL)),
    Row("cancel", nothing, cancel_while_it_runs, moves(RUNNING, TERMINAL), cancelled=True),
    # No run: the cancel route on a waiting thread.
    Row("cancel (waiting)", waiting_permission, cancel_the_wait, moves(INTERRUPTED, TERMINAL), SAVE_FAILED,
        cancelled=True, after=cancelled_again),
    # The stream of an answer the runtime took breaks: the run cannot say it
    # detached, and the task, which carries the answer, goes on.
    Row("detach", cut_after_receipt, answer, detaches, after=answered_once),
    # A retried answer's run opens: the HTTP error, before the stream.
    Row("follow", answered_elsewhere, answer, moves(INTERRUPTED, RUNNING), SAVE_FAILED, after=answered_once),
    Row("report", recovered_taken, answer, reports, SAVE_FAILED, after=answered_once),
    Row("announce", one_candidate_of_two_known, answer, announces, SAVE_FAILED, after=both_announced),
    # No run: the runtime lost the waiting task; a dead run is settled.
    Row("lose", permission_then_task_lost, answer, moves(INTERRUPTED, TERMINAL), SAVE_FAILED,
        after=lost_then_new_turn),
    Row("recover (answer never arrived)", dead_resume, answer, moves(RUNNING, INTERRUPTED), SAVE_FAILED,
        after=answered_once),
    Row("recover (answer taken)", dead_resume_taken, answer, moves(RUNNING, IDLE), SAVE_FAILED, after=answered_once),
]


@pytest.fixture
async def disk(tmp_path: Path) -> FullDisk:
    return FullDisk(tmp_path / "state")


async def serve(store: Any, state_dir: Path, a2a_url: str, **options: Any) -> RunningAdapter:
    """The adapter on ``store``, in front of the runtime at ``a2a_url``."""
    config = Config(state_dir=state_dir, a2a_url=a2a_url, **options)
    app = create_app(config, store=store)
    runner = AdapterRunner(app, shutdown_timeout=1.0)
    await on_loopback(runner)
    port = runner.addresses[0][1]
    return RunningAdapter(f"http://127.0.0.1:{port}/", app, runner, aiohttp.ClientSession(), config)


def as_stored(record: ThreadRecord | None) -> dict[str, Any] | None:
    return None if record is None else json.loads(record_to_json(record))


async def check_row(row: Row, store: Any, state_dir: Path, demo: DemoRuntime, workspace: Path) -> None:
    """Fail the row's save on ``store`` (an :class:`Outage`), check what the
    user sees, heal the store, check the thread works."""
    adapter = await serve(store, state_dir, demo.url, **row.config)
    try:
        case = Case(adapter, store, demo, workspace)
        await row.prepare(case)
        store.trips = row.trips
        seen = await row.act(case)
        assert store.full, f"the save of {row.transition} was never attempted"
        assert seen == row.seen
        stored = as_stored(await store.load(case.thread_id))
        assert stored == as_stored(store.kept), "the stored record changed after a lost write"
        assert (sum(demo.state.cancel_calls.values()) > 0) is row.cancelled, demo.state.cancel_calls
        store.heal()
        await row.after(case)
    finally:
        await adapter.close()


@pytest.mark.parametrize("row", ROWS, ids=[row.transition for row in ROWS])
async def test_a_lost_write_ends_the_stream_keeps_the_record_and_heals(
    row: Row, disk: FullDisk, demo: DemoRuntime, workspace: Path
) -> None:
    await check_row(row, disk, disk.state_dir, demo, workspace)
