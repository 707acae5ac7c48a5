"""What the real ``iac-code a2a`` gives a replica that adopts a run whose
stream another replica let go: the evidence the handover's design rests on.

A relay reads part of a reply, lets its stream go (as a stopping replica
does), waits while the model goes on streaming, and subscribes to the task
(as the adopting replica does). The subscription's opening Task holds
every delta of the turn so far, so the adapter's alignment
(:mod:`aguiadapter.translate.alignment`) puts the reply together exactly:
what was relayed, the gap from the snapshot, the live rest, each once.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from aguiadapter.translate.alignment import TailOverlap, missing_text, turn_deltas
from tests.support.iac_runtime import IacRuntime, user_message

REPLY = "".join(f"tick {n} " for n in range(15))


def delta_of(response: dict[str, Any]) -> str | None:
    """The text of a plain delta (``None`` for anything else, the final repeat included)."""
    update = response.get("result", {}).get("statusUpdate")
    if update is None or "assistantFinal" in str(update.get("metadata")):
        return None
    message = update["status"].get("message")
    return "".join(part.get("text", "") for part in message["parts"]) if message else None


async def test_a_subscription_after_a_let_go_stream_opens_with_every_delta_so_far(
    iac_runtime: IacRuntime, iac_workspace: Path
) -> None:
    message = user_message("[scenario:slow seconds=3] handover", str(uuid.uuid4()), iac_workspace)
    relayed: list[str] = []
    task_id = None
    stream = iac_runtime.stream(message)
    async for response in stream:
        result = response.get("result", {})
        task_id = task_id or result.get("task", {}).get("id")
        delta = delta_of(response)
        if delta:
            relayed.append(delta)
        if len(relayed) == 3:
            break
    await stream.aclose()  # the stopping replica lets go
    assert task_id is not None
    await asyncio.sleep(0.7)  # the model streams on (a tick every 0.2 s) with nobody subscribed
    subscription = iac_runtime.subscribe(task_id)
    opening = (await anext(subscription))["result"]["task"]
    snapshot = turn_deltas(opening)
    assert len(snapshot) > len(relayed), "ticks were streamed while nobody was subscribed"
    gap = missing_text("".join(relayed), snapshot)
    assert gap, snapshot
    overlap = TailOverlap(snapshot)
    live: list[str] = []
    async for response in subscription:
        delta = delta_of(response)
        if delta:
            live += overlap.take(delta)
        elif response.get("result", {}).get("statusUpdate", {}).get("status", {}).get("state") != "TASK_STATE_WORKING":
            break
    live += overlap.settle()
    await subscription.aclose()
    assert "".join(relayed) + gap + "".join(live) == REPLY
