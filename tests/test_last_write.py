"""A turn's end reaches its client in one write (issue 35, item 5): what
the runtime's last chunk brought, the spans the run closes and the terminal
event go out together, right after the end's record write, and the stream
ends with that write. Every event still goes out once, in order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aguiadapter.protocol.digest import canonical_digest
from aguiadapter.protocol.parsing import parse_run_input
from aguiadapter.service.thread_service import ThreadService
from tests.support.adapter import run_body
from tests.support.agui import check_order, parse_sse
# The `service` fixture: a service on the file store in front of the demo runtime.
from tests.test_durable_order import service as durable_order_service  # noqa: F401


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


async def run(service: ThreadService, workspace: Path, text: str) -> Writes:
    body = run_body(thread_id=f"t-{text.split()[0]}", text=text, cwd=str(workspace))
    ticket = await service.admit(parse_run_input(body), canonical_digest(body), "en", str(workspace))
    sink = Writes()
    await service.run(ticket, sink)
    return sink


@pytest.mark.parametrize("text", ["firehose 5", "think about it", "tool"])
async def test_a_turn_s_end_goes_out_in_one_write_that_ends_the_stream(
    service: ThreadService, workspace: Path, text: str
) -> None:
    sink = await run(service, workspace, text)
    *before, (last, ended) = sink.writes
    assert ended and not any(flag for _, flag in before), sink.writes
    assert last[-1] == "RUN_FINISHED"
    # The spans the run closes ride with it, not in a write of their own.
    assert "TEXT_MESSAGE_END" in last, sink.writes
    assert sink.events[0]["type"] == "RUN_STARTED"
    check_order(sink.events)


async def test_an_interrupt_ends_the_stream_with_its_last_write_too(service: ThreadService, workspace: Path) -> None:
    sink = await run(service, workspace, "permission notes.txt")
    *before, (last, ended) = sink.writes
    assert ended and last[-1] == "RUN_FINISHED" and not any(flag for _, flag in before)
