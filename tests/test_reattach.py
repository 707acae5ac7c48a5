"""Streams that survive a dropped connection (file store, one process).

Real sockets on loopback: a client reads part of a run, its TCP connection
is aborted, and it re-attaches with ``Last-Event-ID`` (or ``?after=``). The
two halves joined must be one valid AG-UI stream with every event once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from ag_ui.core.capabilities import AgentCapabilities

from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.protocol.profile import Profile
from aguiadapter.runs import grace as grace_module
from aguiadapter.store.file.store import FileThreadStore
from tests.support.adapter import RunningAdapter, run_body, started
from tests.support.agui import check_stream, parse_sse_ids, texts
from tests.support.eventually import eventually
from tests.support.reattach import joined, read_then_cut, reattach
from tests.support.stops import PROFILES, assert_stopped
from tests.support.reading import read_until


def task_states(demo: DemoRuntime) -> list[str]:
    return [task.state for task in demo.state.tasks.values()]


async def get_json(adapter: RunningAdapter, path: str) -> tuple[int, Any]:
    async with adapter.session.get(adapter.url + path) as resp:
        return resp.status, await resp.json()


async def test_a_cut_connection_re_attaches_and_misses_nothing(
    tmp_path: Path, demo: DemoRuntime, workspace: Path
) -> None:
    async with started(tmp_path, demo.url, disconnect_grace_seconds=10.0) as adapter:
        body = run_body(thread_id="t-cut", text="slow 2", cwd=str(workspace))
        first = await read_then_cut(adapter.url, body, events=6)
        assert first.last_id is not None
        await asyncio.sleep(0.6)  # the run goes on meanwhile, into its log
        status, rest = await reattach(adapter.url, "t-cut", body["runId"], first.last_id)
        assert status == 200
        events = joined(first, rest)
        assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"] == {"type": "success"}
        assert texts(events) == "".join(f"tick {n}. " for n in range(1, 11)), "every delta, once, in order"
        (state,) = task_states(demo)
        assert state != "TASK_STATE_CANCELED", "the runtime's task ran once, to its end"
        # The same cursor through ?after= (clients that cannot set headers) gives the same rest.
        status, again = await reattach(adapter.url, "t-cut", body["runId"], first.last_id, query=True)
        assert (status, again) == (200, rest)


async def test_a_run_that_ended_replays_to_its_terminal_event_and_closes(
    adapter: RunningAdapter, workspace: Path
) -> None:
    body = run_body(thread_id="t-ended", text="tool", cwd=str(workspace))
    whole = (await adapter.run(body)).body
    status, replay = await reattach(adapter.url, "t-ended", body["runId"], None)
    assert (status, replay) == (200, whole), "from the start: the very same bytes"
    events, ids, _ = parse_sse_ids(whole)
    status, tail = await reattach(adapter.url, "t-ended", body["runId"], ids[2])
    assert status == 200 and parse_sse_ids(tail)[0] == events[3:]
    status, nothing = await reattach(adapter.url, "t-ended", body["runId"], ids[-1])
    assert (status, nothing) == (200, b"")


@pytest.mark.parametrize("profile", PROFILES)
async def test_without_a_grace_a_cut_still_cancels_the_task_and_the_log_says_so(
    tmp_path: Path, demo: DemoRuntime, workspace: Path, profile: Profile
) -> None:
    async with started(tmp_path, demo.url, profile=profile) as adapter:
        body = run_body(thread_id="t-nograce", text="slow 20", cwd=str(workspace))
        first = await read_then_cut(adapter.url, body, events=4)
        await eventually(lambda: task_states(demo) == ["TASK_STATE_CANCELED"], "the task is cancelled at once")
        status, rest = await reattach(adapter.url, "t-nograce", body["runId"], first.last_id)
        events = joined(first, rest)
        assert status == 200
        # The replay closes what the run opened, then ends as the profile ends a stop.
        assert_stopped(events, profile)


@pytest.mark.parametrize("profile", PROFILES)
async def test_with_a_grace_and_no_re_attach_the_task_is_cancelled_after_the_grace(
    tmp_path: Path, demo: DemoRuntime, workspace: Path, profile: Profile
) -> None:
    async with started(tmp_path, demo.url, disconnect_grace_seconds=1.5, profile=profile) as adapter:
        body = run_body(thread_id="t-grace", text="slow 30", cwd=str(workspace))
        first = await read_then_cut(adapter.url, body, events=4)
        status, view = await get_json(adapter, "threads/t-grace")
        assert status == 200 and view["state"] == "running" and view["activeRunId"] == body["runId"]
        await eventually(lambda: task_states(demo) == ["TASK_STATE_CANCELED"], "cancelled after the grace")

        async def settled() -> Any:
            view = (await get_json(adapter, "threads/t-grace"))[1]
            return view if view["state"] == "terminal" else None

        assert (await eventually(settled, "the thread ends"))["lastError"] == {"code": "CANCELLED"}
        # The run went on without its client (its log has what the client
        # missed), then ended as a client that left ends it.
        status, rest = await reattach(adapter.url, "t-grace", body["runId"], first.last_id)
        events = joined(first, rest)
        assert status == 200
        assert_stopped(events, profile)
        assert len(texts(events)) > len(texts(parse_sse_ids(first.raw)[0])), "deltas streamed after the cut"


async def test_a_re_attached_client_keeps_the_run_and_leaving_again_gives_a_new_grace(
    tmp_path: Path, demo: DemoRuntime, workspace: Path
) -> None:
    async with started(tmp_path, demo.url, disconnect_grace_seconds=2.0) as adapter:
        body = run_body(thread_id="t-twice", text="slow 30", cwd=str(workspace))
        first = await read_then_cut(adapter.url, body, events=4)
        url = f"{adapter.url}threads/t-twice/runs/{body['runId']}/events"
        async with aiohttp.ClientSession() as session:
            resp = await session.get(url, headers={"Last-Event-ID": first.last_id or ""})
            # 20 deltas, 0.2 s apart: twice the grace, read by the re-attached client.
            await read_until(resp, b"TEXT_MESSAGE_CONTENT", 20, seconds=5)
            assert task_states(demo) == ["TASK_STATE_WORKING"], "a client that reads keeps the run"
            resp.connection.transport.abort()  # type: ignore[union-attr]
            resp.release()
        await eventually(lambda: task_states(demo) == ["TASK_STATE_CANCELED"], "cancelled a grace after it left")


async def test_a_client_that_re_attaches_to_this_process_is_seen_at_once_not_at_the_next_look(
    tmp_path: Path, demo: DemoRuntime, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its looks an hour apart: only the re-attach itself can tell the run.
    monkeypatch.setattr(grace_module, "GRACE_POLL_SECONDS", 3600.0)
    async with started(tmp_path, demo.url, disconnect_grace_seconds=3600.0) as adapter:
        body = run_body(thread_id="t-seen", text="slow 30", cwd=str(workspace))
        first = await read_then_cut(adapter.url, body, events=4)
        store = FileThreadStore(adapter.config.state_dir)

        async def parked(wanted: bool) -> bool:
            record = await store.load("t-seen")
            return record is not None and (record.parked_until is not None) is wanted

        await eventually(lambda: parked(True), "the run is parked")
        url = f"{adapter.url}threads/t-seen/runs/{body['runId']}/events"
        async with aiohttp.ClientSession() as session:
            resp = await session.get(url, headers={"Last-Event-ID": first.last_id or ""})
            await resp.content.readany()
            await eventually(lambda: parked(False), "the run is rejoined")
            resp.release()


async def test_unknown_threads_runs_and_cursors_are_refused_with_documented_codes(
    adapter: RunningAdapter, workspace: Path
) -> None:
    body = run_body(thread_id="t-known", text="hello", cwd=str(workspace))
    assert (await adapter.run(body)).status == 200
    cases = [
        ("threads/nobody/runs/run-1/events", {}, 404, "THREAD_NOT_FOUND"),
        ("threads/t-known/runs/run-unknown/events", {}, 404, "RUN_NOT_FOUND"),
        (f"threads/t-known/runs/{body['runId']}/events", {"Last-Event-ID": "x1"}, 400, "INVALID_INPUT"),
        # Past the end of the ended run: not one of its ids either (not an empty 200).
        (f"threads/t-known/runs/{body['runId']}/events", {"Last-Event-ID": "999"}, 400, "INVALID_INPUT"),
        (f"threads/t-known/runs/{body['runId']}/events?after=999", {}, 400, "INVALID_INPUT"),
        ("threads/nobody", {}, 404, "THREAD_NOT_FOUND"),
    ]
    for path, headers, status, code in cases:
        async with adapter.session.get(adapter.url + path, headers=headers) as resp:
            assert resp.status == status, (path, headers)
            assert (await resp.json())["error"]["code"] == code
    async with adapter.session.get(adapter.url + f"threads/t-known/runs/{body['runId']}/events") as resp:
        last = [line for line in (await resp.text()).splitlines() if line.startswith("id: ")][-1].split()[1]
    # The last id itself is a cursor of the run: nothing after it, an empty 200.
    async with adapter.session.get(adapter.url + f"threads/t-known/runs/{body['runId']}/events",
                                   headers={"Last-Event-ID": last}) as resp:
        assert resp.status == 200 and await resp.read() == b""


async def test_an_ended_run_past_its_retention_is_not_found(
    tmp_path: Path, demo: DemoRuntime, workspace: Path
) -> None:
    async with started(tmp_path, demo.url, replay_retention_seconds=2.0) as adapter:
        body = run_body(thread_id="t-old", text="hello", cwd=str(workspace))
        assert (await adapter.run(body)).status == 200
        assert (await reattach(adapter.url, "t-old", body["runId"], None))[0] == 200

        async def forgotten() -> bytes | None:
            status, reply = await reattach(adapter.url, "t-old", body["runId"], None)
            return reply if status == 404 else None

        assert b"RUN_NOT_FOUND" in await eventually(forgotten, "the run is forgotten after its retention",
                                                    interval=0.2)


async def test_a_full_log_keeps_its_newest_events_and_refuses_a_cursor_it_dropped(
    tmp_path: Path, demo: DemoRuntime, workspace: Path
) -> None:
    async with started(tmp_path, demo.url, run_log_max_events=40) as adapter:
        body = run_body(thread_id="t-full", text="firehose 200", cwd=str(workspace))
        whole = (await adapter.run(body)).events()
        # The log keeps whole writes: the newest (the deltas, the end and RUN_FINISHED) is over
        # the bound, and RUN_STARTED, written before, is dropped.
        status, reply = await reattach(adapter.url, "t-full", body["runId"], "0")
        assert status == 410 and b"EVENTS_TRUNCATED" in reply, "never a replay with a hole"
        status, tail = await reattach(adapter.url, "t-full", body["runId"], str(len(whole) - 1))
        assert status == 200 and parse_sse_ids(tail)[0] == whole[-1:]


async def test_with_ids_off_streams_are_plain_and_re_attach_is_not_offered(
    tmp_path: Path, demo: DemoRuntime, workspace: Path
) -> None:
    async with started(tmp_path, demo.url, replay_retention_seconds=0.0) as adapter:
        body = run_body(thread_id="t-plain", text="hello", cwd=str(workspace))
        reply = await adapter.run(body)
        check_stream(reply.body)
        assert b"\nid: " not in reply.body and not reply.body.startswith(b"id: ")
        status, capabilities = await get_json(adapter, "capabilities")
        assert status == 200 and capabilities["transport"]["resumable"] is False
        assert (await reattach(adapter.url, "t-plain", body["runId"], None))[0] == 404


async def test_the_thread_route_shows_a_pending_interrupt_again_even_after_a_restart(
    tmp_path: Path, demo: DemoRuntime, workspace: Path
) -> None:
    async with started(tmp_path, demo.url) as adapter:
        reply = await adapter.run(run_body(thread_id="t-ask", text="permission notes.txt", cwd=str(workspace)))
        events = reply.events()
        (interrupt,) = events[-1]["outcome"]["interrupts"]
        session = next(e["value"] for e in events if e.get("name") == "iac-code.session.v1")
        status, view = await get_json(adapter, "threads/t-ask")
    assert status == 200
    assert view == {
        "threadId": "t-ask",
        "state": "interrupted",
        "executionId": session["executionId"],
        "rosInvocationId": "invocation-1",
        "pendingInterrupts": [interrupt],
        "runtime": "default",
    }
    assert "expiresAt" in interrupt
    async with started(tmp_path, demo.url) as restarted:
        assert await get_json(restarted, "threads/t-ask") == (200, view), "the record alone answers"
        # The page resumes from what the route showed, and the run goes on.
        resume = run_body(thread_id="t-ask", text=None, cwd=str(workspace))
        resume["resume"] = [{"interruptId": view["pendingInterrupts"][0]["id"], "status": "resolved",
                             "payload": {"decision": "allow_once"}}]
        assert (await restarted.run(resume)).events()[-1]["outcome"] == {"type": "success"}
        status, after = await get_json(restarted, "threads/t-ask")
        assert after["state"] == "idle" and after["pendingInterrupts"] == []


async def test_the_capabilities_document_is_agui_agent_capabilities(adapter: RunningAdapter) -> None:
    status, document = await get_json(adapter, "capabilities")
    assert status == 200
    parsed = AgentCapabilities.model_validate(document)
    assert parsed.model_extra == {} and parsed.transport is not None and parsed.transport.model_extra == {}
    assert document["transport"] == {"streaming": True, "websocket": False, "httpBinary": False,
                                     "pushNotifications": False, "resumable": True}
    assert document["humanInTheLoop"]["interrupts"] is True
    assert "iac-code.pipeline.v1" in document["custom"]["iacCode"]["customEvents"]


async def test_a_large_ended_run_replays_whole_and_in_bounded_pieces(
    tmp_path: Path, demo: DemoRuntime, workspace: Path
) -> None:
    """The replay hands the socket at most 64 KiB at a time, cut between events: every byte, once, in order."""
    from aguiadapter.store.run_log import REPLAY_PIECE_BYTES

    async with started(tmp_path, demo.url) as adapter:
        body = run_body(thread_id="t-big", text="firehose 4000", cwd=str(workspace))
        original = (await adapter.run(body)).body
        assert len(original) > 4 * REPLAY_PIECE_BYTES
        _, ids, _ = parse_sse_ids(original)
        for cursor in (None, ids[len(ids) // 3], ids[-2]):
            status, again = await reattach(adapter.url, "t-big", body["runId"], cursor)
            assert status == 200
            expected = original if cursor is None else original[original.index(b"id: %s\n" % cursor.encode()):]
            if cursor is not None:
                expected = expected[expected.index(b"\n\n") + 2:]
            assert again == expected, cursor
        path = f"{adapter.url}threads/t-big/runs/{body['runId']}/events"
        async with aiohttp.ClientSession() as session, session.get(path) as resp:
            sizes = [len(piece) async for piece, _ in resp.content.iter_chunks()]
        assert sum(sizes) == len(original)
