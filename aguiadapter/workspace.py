"""Where a run may work: the policy for ``forwardedProps.iacCode.cwd``.

A workspace that cannot be one is refused before any stream opens, as
``INVALID_INPUT`` naming ``forwardedProps.iacCode.cwd``, instead of failing
inside the runtime with an operating system error. The text of the path is
checked first (:func:`check_workspace_path`, pure); then the file system is
asked, in a worker thread so that a slow disk never stalls the event loop
(:func:`resolve_workspace`).

A folder that passed is remembered for a moment (:class:`CheckedWorkspaces`,
:data:`CHECKED_SECONDS`), per user: the next turns of a conversation, a
pipeline's steps and a burst of runs in it skip the trip to the worker
thread, which costs a short run more CPU than the check itself. Only a pass
is remembered, never a refusal, and what is remembered is the resolved path
that passed, inside the allowed roots: a symlink pointed elsewhere meanwhile
changes nothing of what the runtime is sent. What a folder that turned into
a file, or lost the server's permission, within that moment gets is the
runtime's own error instead of ``INVALID_INPUT``.

The server and the runtime share the file system (``iac-code a2a`` runs on
the same host), so what the server sees is what the runtime will meet. A
directory that does not exist yet is fine: the runtime creates it.
"""

from __future__ import annotations

import asyncio
import errno
import os
import stat
import time
from collections.abc import Callable, Sequence
from typing import Final

from .errors import AdapterError, ErrorCode

__all__ = [
    "CHECKED_SECONDS", "CHECKED_SIZE", "CWD_PATH", "MAX_NAME_BYTES", "MAX_PATH_BYTES", "CheckedWorkspaces",
    "check_workspace_path", "resolve_workspace",
]

CWD_PATH: Final = "forwardedProps.iacCode.cwd"

MAX_PATH_BYTES: Final = 4095
"""Longest path, in UTF-8 bytes: Linux's PATH_MAX (4096) holds the final NUL."""

MAX_NAME_BYTES: Final = 255
"""Longest component of a path, in UTF-8 bytes (NAME_MAX)."""

CHECKED_SECONDS: Final = 2.0
"""How long a folder that passed the disk check is taken as passed again without a look."""

CHECKED_SIZE: Final = 256
"""Most folders remembered at once (the oldest go first): a client naming a
new folder each request costs a bounded memory, and a look each time."""

# What the operating system says about a path, and what the client is told.
_OS_REFUSALS: Final = {
    errno.ENOTDIR: "input_cwd_below_file",
    errno.ELOOP: "input_cwd_symlink_loop",
    errno.ENAMETOOLONG: "input_cwd_too_long",
    errno.EACCES: "input_cwd_inaccessible",
    errno.EPERM: "input_cwd_inaccessible",
}


def _refuse(message_id: str, **params: object) -> AdapterError:
    return AdapterError(ErrorCode.INVALID_INPUT, message_id, path=CWD_PATH, **params)


def check_workspace_path(cwd: str) -> None:
    """Refuse a path that no file system would take, without touching one.

    It must be absolute, free of NUL and of ``..`` segments, at most
    :data:`MAX_PATH_BYTES` long and each component at most
    :data:`MAX_NAME_BYTES` (both in UTF-8).
    """
    if not cwd or "\x00" in cwd or not os.path.isabs(cwd) or ".." in cwd.split(os.sep):
        raise _refuse("input_cwd_not_absolute")
    if len(cwd.encode("utf-8")) > MAX_PATH_BYTES:
        raise _refuse("input_cwd_too_long", limit=MAX_PATH_BYTES)
    if any(len(name.encode("utf-8")) > MAX_NAME_BYTES for name in cwd.split(os.sep)):
        raise _refuse("input_cwd_name_too_long", limit=MAX_NAME_BYTES)


class CheckedWorkspaces:
    """The folders that passed :func:`resolve_workspace`'s disk check in the
    last :data:`CHECKED_SECONDS`, each for the user who named it (one user's
    pass tells nothing of another's: not even by how fast it is answered)."""

    __slots__ = ("_clock", "_passed", "_seconds", "_size")

    def __init__(self, seconds: float = CHECKED_SECONDS, size: int = CHECKED_SIZE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._seconds = seconds
        self._size = size
        self._clock = clock
        #: (user, cwd, roots) -> (the resolved path, when it stops counting); oldest first.
        self._passed: dict[tuple[str, str, tuple[str, ...]], tuple[str, float]] = {}

    def get(self, user: str, cwd: str, roots: tuple[str, ...]) -> str | None:
        """The resolved path of ``cwd`` if it passed for ``user`` lately."""
        key = (user, cwd, roots)
        found = self._passed.get(key)
        if found is None:
            return None
        if found[1] <= self._clock():
            del self._passed[key]
            return None
        return found[0]

    def put(self, user: str, cwd: str, roots: tuple[str, ...], resolved: str) -> None:
        """Remember that ``cwd`` passed for ``user`` now (the oldest goes when full)."""
        key = (user, cwd, roots)
        passed = self._passed
        passed.pop(key, None)
        if len(passed) >= self._size:
            del passed[next(iter(passed))]
        passed[key] = (resolved, self._clock() + self._seconds)

    def __len__(self) -> int:
        return len(self._passed)


async def resolve_workspace(
    cwd: str, allowed_roots: Sequence[str], alongside: Callable[[], None] | None = None,
    *, checked: CheckedWorkspaces | None = None, user: str = "",
) -> str:
    """Check ``cwd`` and return it with its symlinks resolved.

    Raises ``AdapterError(INVALID_INPUT)`` for a path refused by
    :func:`check_workspace_path`, outside every allowed root (each resolved
    too; checked before anything is said about the path itself, so nothing
    is revealed about paths outside them), or that the file system refuses:
    not a directory, below a regular file, in a symlink loop, too long once
    resolved, or not searchable by the server.

    ``alongside``: other file system work of the request (it must not
    raise), done on the same trip to the worker thread once ``cwd`` passed:
    one thread wake-up and one event-loop wake-up fewer.

    ``checked``: where passes are remembered, for ``user``. A folder that
    passed for ``user`` lately is answered without a trip (``alongside``
    then runs here, on the caller's thread: it must be cheap, as a stat of
    the server's own state folder is).
    """
    check_workspace_path(cwd)
    roots = tuple(allowed_roots)
    if checked is None:
        return await asyncio.to_thread(_resolve_on_disk, cwd, roots, alongside)
    resolved = checked.get(user, cwd, roots)
    if resolved is None:
        resolved = await asyncio.to_thread(_resolve_on_disk, cwd, roots, alongside)
        checked.put(user, cwd, roots, resolved)
    elif alongside is not None:
        alongside()
    return resolved


def _resolve_on_disk(cwd: str, allowed_roots: tuple[str, ...], alongside: Callable[[], None] | None = None) -> str:
    resolved = _resolved(cwd, allowed_roots)
    if alongside is not None:
        alongside()
    return resolved


def _resolved(cwd: str, allowed_roots: tuple[str, ...]) -> str:
    resolved = os.path.realpath(cwd)
    roots = [os.path.realpath(root) for root in allowed_roots]
    if roots and not any(_is_within(resolved, root) for root in roots):
        raise _refuse("input_cwd_outside_roots")
    try:
        mode = os.stat(resolved).st_mode
    except FileNotFoundError:
        return resolved
    except OSError as exc:
        # from None: the OS text names the path, which the client sent anyway,
        # but not in a form the catalogs translate.
        raise _refuse(_OS_REFUSALS.get(exc.errno or 0, "input_cwd_inaccessible"), limit=MAX_PATH_BYTES) from None
    if not stat.S_ISDIR(mode):
        raise _refuse("input_cwd_not_directory")
    return resolved


def _is_within(path: str, root: str) -> bool:
    """Component-aware containment: ``/a/bc`` is not inside ``/a/b``."""
    if path == root:
        return True
    prefix = root if root.endswith(os.sep) else root + os.sep
    return path.startswith(prefix)
