"""Where a run may work: the policy for ``forwardedProps.iacCode.cwd``.

A workspace that cannot be one is refused before any stream opens, as
``INVALID_INPUT`` naming ``forwardedProps.iacCode.cwd``, instead of failing
inside the runtime with an operating system error. The text of the path is
checked first (:func:`check_workspace_path`, pure); then the file system is
asked, in a worker thread so that a slow disk never stalls the event loop
(:func:`resolve_workspace`).

The server and the runtime share the file system (``iac-code a2a`` runs on
the same host), so what the server sees is what the runtime will meet. A
directory that does not exist yet is fine: the runtime creates it.
"""

from __future__ import annotations

import asyncio
import errno
import os
import stat
from collections.abc import Callable, Sequence
from typing import Final

from .errors import AdapterError, ErrorCode

__all__ = ["CWD_PATH", "MAX_NAME_BYTES", "MAX_PATH_BYTES", "check_workspace_path", "resolve_workspace"]

CWD_PATH: Final = "forwardedProps.iacCode.cwd"

MAX_PATH_BYTES: Final = 4095
"""Longest path, in UTF-8 bytes: Linux's PATH_MAX (4096) holds the final NUL."""

MAX_NAME_BYTES: Final = 255
"""Longest component of a path, in UTF-8 bytes (NAME_MAX)."""

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


async def resolve_workspace(
    cwd: str, allowed_roots: Sequence[str], alongside: Callable[[], None] | None = None
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
    """
    check_workspace_path(cwd)
    return await asyncio.to_thread(_resolve_on_disk, cwd, tuple(allowed_roots), alongside)


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
