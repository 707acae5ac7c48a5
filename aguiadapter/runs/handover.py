"""What a run handed over at shutdown carries to the replica that adopts it.

The stopping replica leaves the reply in flight open (one message across
the handover) and notes the reply's text it relayed; the adopter goes on
with that message and lines its subscription's opening Task up with that
text, sending what the runtime streamed while no replica relayed the run
(:mod:`..translate.alignment` says on what evidence).

Only a turn the user started is lined up: the real runtime's Task history
keeps the deltas of such a turn, not those of a turn resumed by an answer
(recorded in ``tests/fixtures/a2a-multi-input``: after the answered turn
the history still ends with the text from before the interrupt), where the
snapshot is not of the text relayed.
"""

from __future__ import annotations

from ..threads.record import RunKind, ThreadRecord
from ..translate.mapper import RunTranslator


def handed_off_streamed(translator: RunTranslator, open_text: str | None) -> str | None:
    """The reply's text relayed so far, when a text message stays open for the adopter."""
    if open_text is None:
        return None
    return translator.relayed_text() or None


def continue_reply(translator: RunTranslator, record: ThreadRecord) -> None:
    """Go on with the message a handed-off run left open; line up with the
    text relayed before when the run is a turn the user started. The text
    leaves the record with the adoption's write (``Adopt``)."""
    message_id, streamed = record.handed_off_text, record.handed_off_streamed
    assert message_id is not None
    if streamed and record.active_run_kind in (RunKind.TURN, None):
        translator.resume_text(message_id, streamed)
    else:
        translator.continue_text(message_id)
