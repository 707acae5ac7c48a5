"""A look for a thread's record file, taken on a trip to a worker thread
that the run request makes anyway (its workspace check), so that a new
thread's admission needs no trip of its own to learn that it has no record.

The look is taken before the thread is claimed, so it is trusted only on
positive evidence that nothing could have made the file since: the store
hands a probe out only while none of its writes is under way, stamped with
the count of writes begun, and takes the probe's "no file" only while that
count is unchanged (:meth:`~.file.store.FileThreadStore.still_absent`). A file
that exists, or any other answer of the file system, proves nothing: the
record is read under the claim, as without a probe.
"""

from __future__ import annotations

import os
from typing import Protocol, runtime_checkable

import attrs


@attrs.define(eq=False)
class AbsenceProbe:
    """Whether a thread's record file was missing when :meth:`look` ran."""

    #: The thread's key in the store (:func:`~aguiadapter.threads.record.thread_key`).
    key: str
    path: str
    #: The store's count of writes begun when the probe was made.
    mark: int
    absent: bool = False

    def look(self) -> None:
        """Stat the file (in a worker thread: a slow disk never stalls the loop)."""
        try:
            os.stat(self.path)
        except FileNotFoundError:
            self.absent = True
        except OSError:
            pass  # not evidence of anything: the read under the claim decides


@runtime_checkable
class ProbingStore(Protocol):
    """A store that can hand out :class:`AbsenceProbe` looks (the file store;
    a Redis store cannot: another replica may write the thread any time)."""

    def absence_probe(self, key: str) -> AbsenceProbe | None: ...

    def still_absent(self, probe: AbsenceProbe) -> bool: ...
