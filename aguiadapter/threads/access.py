"""Who may touch a thread: the one access rule of every route.

With verified identity on (``--jwt-jwks-file``, or an embedding's
authenticator), a thread belongs to the principal of its first run, kept in
its record as ``principal``, and lives under that user's own key
(:func:`~.record.thread_key`): another user's thread is never even loaded,
so every route answers for it as for a thread nobody used. Without it nobody
is named, ``principal`` stays ``None`` and all callers share one namespace.

The rule below is the second line: plain equality. It still decides for a
record kept under a bare thread id while the caller's mode differs (a
shared-token thread once JWTs are on is nobody's: the service looks for a
user's thread under their own key; a JWT user's record kept under its bare
id by an earlier version is refused to shared-token callers with
``THREAD_BINDING_CONFLICT``, by the machine's admission before any other
check, and read routes answer as for an unknown thread).
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
