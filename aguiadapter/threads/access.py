"""Who may touch a thread: the one access rule of every route.

With verified identity on (``--jwt-jwks-file``), a thread belongs to the
principal of its first run, kept in its record as ``principal``. Without it
nobody is named and ``principal`` stays ``None``. The rule is plain
equality, which also settles a change of mode: a thread started under the
shared token (no principal) is nobody's to take over once JWTs are on, and
a JWT user's thread is closed to shared-token callers if the server goes
back to that mode.

Runs and resumes of someone else's thread are refused with
``THREAD_BINDING_CONFLICT``: the thread machine's admission calls
:func:`check_owner` before any other check on the thread, so that nothing
else about it shows. The cancel route, and any route that reads a thread,
answer exactly as for a thread that does not exist when :func:`may_read`
says no.
"""

from __future__ import annotations

from ..errors import AdapterError, ErrorCode
from .record import ThreadRecord


def may_read(record: ThreadRecord, principal: str | None) -> bool:
    """Whether the caller named ``principal`` may see or act on the thread."""
    return record.principal == principal


def check_owner(record: ThreadRecord, principal: str | None) -> None:
    """Refuse a run or resume of a thread that belongs to someone else."""
    if not may_read(record, principal):
        raise AdapterError(ErrorCode.THREAD_BINDING_CONFLICT)
