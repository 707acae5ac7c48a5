"""Who may touch a thread: the one access rule of every route.

With verified identity on (``--jwt-jwks-file``, or an embedding's
authenticator), a thread belongs to the principal of its first run, kept in
its record as ``principal``, and lives under that user's own key
(:func:`~.record.thread_key`): another user's thread is never even loaded,
so every route answers for it as for a thread nobody used, and in the same
time. Without it nobody is named, ``principal`` stays ``None`` and all
callers share one namespace of their own, which no user's key is part of
(a bare id spelling ``u/<hash>/z`` is kept under ``o/u/<hash>/z``).

Records made by earlier versions stay where they were (:func:`legacy_key`):
a verified user's thread under its bare id, a bare id beginning with ``o/``
under itself. They are looked for only where no record of the current
layout is, and taken only when they are the caller's own
(:func:`is_legacy_of`).

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
from .record import OPEN_PREFIX, ThreadRecord, is_user_key


def legacy_key(thread_id: str, principal: str | None) -> str | None:
    """Where an earlier version may have kept the caller's ``thread_id``, when
    that is not :func:`thread_key` (``None``: nowhere else to look).

    Never a key of a user's namespace: an id shaped like one is looked for
    nowhere but under the caller's own key, so that naming another user's
    key reads nothing of theirs.
    """
    if is_user_key(thread_id):
        return None
    if principal is None:
        # An open thread's "o/..." id was its own key before; other ids still are.
        return thread_id if thread_id.startswith(OPEN_PREFIX) else None
    return thread_id


def is_legacy_of(record: ThreadRecord, thread_id: str, principal: str | None) -> bool:
    """Whether a record found at :func:`legacy_key` is the caller's thread of that id."""
    return (
        not record.namespaced
        and record.thread_id == thread_id
        and record.principal == principal
    )


def may_read(record: ThreadRecord, principal: str | None, user_id: str | None = None) -> bool:
    """Whether the caller named ``principal`` may see or act on the thread;
    with a ``userId`` the caller named (shared token, open mode), only a
    thread started with that ``userId``."""
    return record.principal == principal and (user_id is None or record.user_id == user_id)


def check_owner(record: ThreadRecord, principal: str | None) -> None:
    """Refuse a run or resume of a thread that belongs to someone else."""
    if not may_read(record, principal):
        raise AdapterError(ErrorCode.THREAD_BINDING_CONFLICT)
