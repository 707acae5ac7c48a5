"""Where a subscription to a task picks up a reply another relay left, pure.

A replica that shuts down lets go of its run's stream; the replica that
adopts the run subscribes to the task (A2A ``SubscribeToTask``) a moment
later. What the runtime streamed in between reached no relay, and text
deltas carry no ids or indexes to find it by. What there is, on the real
runtime (iac-code 0.16.0 on a2a-sdk 1.2.0): the subscription opens with the
Task, whose ``history`` keeps every text delta of the turn as its own agent
message (all with the one id of the runtime's deltas), the newest in
``status.message``; a turn's other messages (the user's, the final repeat
of the reply, a cancellation notice) carry other ids. So the text the turn
streamed so far is the trailing run of those delta messages, and the text
relayed before the handover is its prefix: the adopter sends only the rest
(:func:`missing_text`).

a2a-sdk taps the task's event queue before it reads the Task, and applies
an event to the Task before it fans the event out: the first live events of
a subscription may repeat the snapshot's last deltas (its own code says a
new tap "may receive some old events"). :class:`TailOverlap` drops that
repeat: the longest run of leading live deltas equal to the snapshot's
last ones. Deltas carry nothing else to tell a repeat from new text that
happens to be the same, so new text that repeats, delta for delta, the
snapshot's tail at the exact moment of the subscription is taken for the
repeat.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

#: How many of the snapshot's last deltas a live repeat is looked for in
#: (a2a-sdk's fan-out lags by a few events, never by a whole reply).
OVERLAP_WINDOW: Final = 256


def turn_deltas(task: Any) -> list[str]:
    """The text deltas the turn streamed so far, from a Task snapshot:
    the trailing run of agent messages that share the id of the newest
    one (``history`` then ``status.message``). Empty when the newest
    message is not an agent's."""
    if not isinstance(task, dict):
        return []
    history = task.get("history")
    messages = list(history) if isinstance(history, list) else []
    status = task.get("status")
    if isinstance(status, dict) and isinstance(status.get("message"), dict):
        messages.append(status["message"])
    run: list[str] = []
    delta_id: object = None
    for message in reversed(messages):
        if not isinstance(message, dict) or message.get("role") != "ROLE_AGENT":
            break
        message_id = message.get("messageId")
        if delta_id is None:
            delta_id = message_id
        if message_id != delta_id or not isinstance(message_id, str):
            break
        run.append("".join(part.get("text") or "" for part in message.get("parts") or () if isinstance(part, dict)))
    run.reverse()
    return run


def missing_text(relayed: str, deltas: Sequence[str]) -> str | None:
    """What the turn streamed that the relay before did not send: the rest
    of the snapshot's text after ``relayed``; ``None`` when the two do not
    line up (the snapshot is not of the text relayed: nothing is sent)."""
    whole = "".join(deltas)
    if not relayed or not whole.startswith(relayed):
        return None
    return whole[len(relayed):]


class TailOverlap:
    """Drops the head of a live delta stream that repeats the tail of the
    snapshot it follows. Deltas are held while they could still be such a
    repeat, then released (:meth:`take`, :meth:`settle`)."""

    __slots__ = ("_held", "_tail", "done")

    def __init__(self, snapshot_deltas: Sequence[str]) -> None:
        self._tail = tuple(snapshot_deltas[-OVERLAP_WINDOW:])
        self._held: list[str] = []
        #: Settled: every further delta passes as it comes.
        self.done = not self._tail

    def take(self, delta: str) -> list[str]:
        """The deltas to send now that ``delta`` came (none while it may be a repeat)."""
        if self.done:
            return [delta]
        self._held.append(delta)
        if self._could_grow():
            return []
        return self.settle()

    def settle(self) -> list[str]:
        """Something other than a delta came (or the repeat cannot go on):
        drop the longest held head that is the snapshot's tail, release the rest."""
        held, self._held = self._held, []
        self.done = True
        tail = self._tail
        for length in range(min(len(held), len(tail)), 0, -1):
            if tuple(held[:length]) == tail[len(tail) - length:]:
                return held[length:]
        return held

    def _could_grow(self) -> bool:
        """Whether a longer stretch of the tail begins with what is held."""
        held, tail = tuple(self._held), self._tail
        size = len(held)
        return any(tail[start:start + size] == held for start in range(len(tail) - size))
