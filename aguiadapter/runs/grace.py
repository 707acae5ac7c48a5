"""The grace watcher: while a run has no client, whether one comes back.

A run whose client vanished goes on for the disconnect grace: it is parked
(the record says until when), rejoined while a client reads its log again,
and stopped when nobody did for the whole grace. At a shutdown it goes on
until another replica adopts it or the drain ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Final

import attrs

from ..store.contract import LostWrite, PersistenceError
from ..store.run_log import LogBroken
from ..threads import machine as tm
from ..threads.record import RunPhase
from .latch import Latch
from .shell import ThreadShell
from .ticket import RunContext

#: How often a run without a client looks whether one re-attached. A poll:
#: the reader may be on another replica, whose presence key announces nothing.
GRACE_POLL_SECONDS: Final = 1.0

log = logging.getLogger(__name__)


@attrs.define(eq=False)
class GraceWatcher:
    """Watches one run while it has no client: its grace, or its drain."""

    context: RunContext
    shell: ThreadShell
    #: The run's thread and run ids.
    names: tuple[str, str]
    #: Set once the run ended: the watch is over.
    ended: Latch
    #: Called when nobody came back within the grace.
    _gone: Callable[[], None] = attrs.field(kw_only=True)
    #: Called with the transition whose write the grace lost.
    _lost_write: Callable[[str], None] = attrs.field(kw_only=True)
    #: Called when the drain ends without another replica adopting the run.
    _drained: Callable[[], None] = attrs.field(kw_only=True)
    _task: asyncio.Task[None] | None = attrs.field(default=None, init=False)
    #: Wakes the watcher when a client of this process re-attaches
    #: (made with the watcher: most runs never need it).
    _reader_came: asyncio.Event | None = attrs.field(default=None, init=False)

    def watch(self) -> None:
        """The client vanished: park the run for the grace, and watch."""
        self._reader_came = asyncio.Event()
        self._task = asyncio.create_task(self._mind_the_grace())

    def drain(self, until: float) -> None:
        """Shutdown: the run goes on until ``until`` (or its adoption)."""
        self.cancel()
        self._task = asyncio.create_task(self._drain_until(until))

    def cancel(self) -> None:
        """The run ends (or drains): stop watching."""
        if self._task is not None:
            self._task.cancel()

    def reader_came(self) -> None:
        """A client of this process re-attached: the watcher looks at once
        (a reader on another replica is seen at its next look)."""
        if self._reader_came is not None:
            self._reader_came.set()

    async def _drain_until(self, until: float) -> None:
        await asyncio.sleep(max(until - self.context.clock(), 0.0))
        self._drained()

    async def _mind_the_grace(self) -> None:
        """Park the run; rejoin while a client reads its log; stop it when
        nobody did for the whole grace."""
        logs, shell, clock = self.context.logs, self.shell, self.context.clock
        record = shell.record
        thread_id, run_id = self.names
        try:
            while not self.ended.is_set():
                watched = logs is not None and await logs.watched(record.key, run_id)
                if watched:
                    if record.run_phase is RunPhase.PARKED:
                        await self._rejoin()
                    await self._until_next_look(GRACE_POLL_SECONDS)
                    continue
                if record.run_phase is not RunPhase.PARKED:
                    await shell.apply(tm.Park(clock() + self.context.grace_seconds))
                remaining = (record.parked_until or 0.0) - clock()
                if remaining <= 0:
                    log.info("run %s: no client came back within the grace", run_id)
                    self._task = None
                    self._gone()
                    return
                await self._until_next_look(min(GRACE_POLL_SECONDS, remaining))
        except LostWrite as exc:
            # The grace cannot be kept (nor a rejoin told) without its
            # record: the run ends, as a client that left without a grace.
            log.error("thread %s run %s: disconnect grace not kept: %s", thread_id, run_id, exc)
            self._task = None
            self._lost_write(exc.transition)
        except (PersistenceError, tm.TransitionNotAllowed, LogBroken) as exc:
            # The run ended meanwhile, or the store failed: the run reports that itself.
            log.warning("thread %s run %s: disconnect grace not kept: %r", thread_id, run_id, exc)

    async def _until_next_look(self, seconds: float) -> None:
        """``seconds``, or until a client of this process re-attaches."""
        came = self._reader_came
        assert came is not None  # made with the watcher
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(came.wait(), seconds)
        came.clear()

    async def _rejoin(self) -> None:
        """A client reads the parked run again. A lost write of that changes
        nothing the run needs (it goes on, to that client; a process that
        dies meanwhile leaves a dead run, which recovery settles without
        the grace): the record says parked until the store takes the rejoin,
        asked again at the next look."""
        try:
            await self.shell.apply(tm.Rejoin())
        except LostWrite as exc:
            log.warning("thread %s run %s: rejoin not recorded yet: %s", *self.names, exc)
