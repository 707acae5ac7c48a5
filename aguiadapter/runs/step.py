"""What each step of one run (opening it, closing it) works with."""

from __future__ import annotations

from ..translate.mapper import RunTranslator
from .relaying import RunOutput
from .ticket import RunContext, Ticket


class RunStep:
    """A step of one run: the process's context, the run's ticket and the
    shell of its thread, its translator and where its events go."""

    def __init__(self, context: RunContext, ticket: Ticket, translator: RunTranslator, output: RunOutput) -> None:
        self.context = context
        self.ticket = ticket
        self.shell = ticket.shell
        self.translator = translator
        self.output = output
