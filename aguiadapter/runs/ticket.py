"""What a run is given: the server around it (:class:`RunContext`) and the
admitted request it carries out (:class:`Ticket`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import attrs

from ..errors import ErrorCode
from ..i18n import render
from ..protocol.events import Event
from ..protocol.inputs import RunAgentInput
from ..protocol.profile import DEFAULT_PROFILE, Profile
from ..runtime.evidence import TaskView
from ..runtime.iac_code import IacCodeRuntime
from ..store.run_log import RunLogs
from ..telemetry import QUIET, Telemetry
from ..threads import admission
from ..threads.record import ThreadRecord
from .shell import ThreadShell


@attrs.define
class RunContext:
    """What a run needs from the server around it."""

    runtime: IacCodeRuntime
    interrupt_ttl_seconds: float
    clock: Callable[[], float] = time.time
    #: Where runs report their metrics and spans (nothing by default).
    telemetry: Telemetry = QUIET
    #: Where runs write their events (``None``: no re-attach, no ids).
    logs: RunLogs | None = None
    #: How long a run whose client vanished goes on (0: cancel at once).
    grace_seconds: float = 0.0
    #: The wire profile: how a run stopped on purpose ends.
    profile: Profile = DEFAULT_PROFILE


@attrs.define
class Ticket:
    """An admitted request: the claimed thread and what the run will do."""

    run_input: RunAgentInput
    digest: str
    language: str
    shell: ThreadShell
    plan: admission.Plan
    #: The execution a new turn starts (a resume continues the thread's).
    new_execution_id: str
    #: The A2A user message of a new turn.
    message: dict[str, Any] | None = None
    #: What the runtime said about the task when the request was admitted.
    view: TaskView | None = None
    #: Told right after ``RUN_STARTED`` of a new turn (the pool's notice of a new runtime).
    notices: list[Event] = attrs.Factory(list)

    @property
    def record(self) -> ThreadRecord:
        """The claimed thread's record."""
        return self.shell.record

    @property
    def execution_id(self) -> str:
        """The execution this run belongs to."""
        if self.plan.kind is admission.PlanKind.TURN or self.record.execution_id is None:
            return self.new_execution_id
        return self.record.execution_id

    def words(self, code: ErrorCode, message_id: str | None = None) -> str:
        """The caller-language message of an error code (or of a more precise id)."""
        return render(message_id or code.message_id, self.language)
