"""What the real ``iac-code a2a`` gives a replica that adopts a run whose
stream another replica let go: the evidence the handover rests on.

Two run translators play the two replicas on the real runtime's own
results: the first relays part of a reply and hands it over (as a stopping
replica lets its stream go), the model streams on while nobody is
subscribed, then the second subscribes to the task (as the adopting replica
does) and lines the subscription's opening Task up with the text relayed
(:mod:`aguiadapter.translate.alignment`). The reply comes out whole, each
word once, in one message.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from aguiadapter.runs.handover import handed_off_streamed
from aguiadapter.translate.alignment import turn_deltas
from aguiadapter.translate.mapper import RunIdentity, RunTranslator
from tests.support.iac_runtime import IacRuntime, user_message

REPLY = "".join(f"tick {n} " for n in range(15))


def texts(events: list[dict[str, Any]]) -> str:
    return "".join(event["delta"] for event in events if event["type"] == "TEXT_MESSAGE_CONTENT")


async def test_an_adopter_puts_the_real_runtimes_reply_together_from_its_subscription(
    iac_runtime: IacRuntime, iac_workspace: Path
) -> None:
    context_id = str(uuid.uuid4())
    identity = RunIdentity(thread_id="t-handover", run_id="run-1", execution_id="exec-1", context_id=context_id,
                           ros_invocation_id=None, task_id=None, session_id=None)
    first = RunTranslator(identity)
    relayed: list[dict[str, Any]] = []
    stream = iac_runtime.stream(user_message("[scenario:slow seconds=3] handover", context_id, iac_workspace))
    async for response in stream:
        relayed += first.feed(response["result"])
        if texts(relayed).count("tick") == 3:
            break
    await stream.aclose()  # the stopping replica lets go
    handed, open_text = first.hand_over()
    assert open_text is not None and not handed, "the reply stays open for the adopter"
    streamed = handed_off_streamed(first, open_text)
    assert streamed == texts(relayed)
    await asyncio.sleep(0.7)  # the model streams on (a tick every 0.2 s) with nobody subscribed

    # The identity the adopter reads from the thread's record: task and session bound.
    task_id = first.identity.task_id
    assert task_id is not None and first.identity.session_id is not None
    adopter = RunTranslator(first.identity, known_session=True, span_prefix="run-1.2")
    adopter.resume_text(open_text, streamed)
    subscription = iac_runtime.subscribe(task_id)
    opening = (await anext(subscription))["result"]
    assert len(turn_deltas(opening["task"])) > 3, "ticks were streamed while nobody was subscribed"
    events = adopter.align(opening["task"]) + adopter.feed(opening)
    async for response in subscription:
        events += adopter.feed(response["result"])
        if adopter.outcome is not None:
            break
    await subscription.aclose()
    events += adopter.finish()
    assert adopter.outcome is not None and adopter.outcome.kind == "success"
    assert texts(relayed) + texts(events) == REPLY, "every tick once"
    kinds = [event["type"] for event in events if event["type"].startswith("TEXT_MESSAGE")]
    assert "TEXT_MESSAGE_START" not in kinds and kinds[-1] == "TEXT_MESSAGE_END"
    assert {event["messageId"] for event in events if event["type"].startswith("TEXT_MESSAGE")} == {open_text}

