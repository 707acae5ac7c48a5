"""Where a run may work: the policy for ``forwardedProps.iacCode.cwd``."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Final

from .errors import AdapterError, ErrorCode

__all__ = ["CWD_PATH", "check_cwd"]

CWD_PATH: Final = "forwardedProps.iacCode.cwd"


def _is_within(path: str, root: str) -> bool:
    """Component-aware containment: ``/a/bc`` is not inside ``/a/b``."""
    if path == root:
        return True
    prefix = root if root.endswith(os.sep) else root + os.sep
    return path.startswith(prefix)


def _refuse_cwd(message_id: str) -> AdapterError:
    return AdapterError(ErrorCode.INVALID_INPUT, message_id, path=CWD_PATH)


def check_cwd(cwd: str, allowed_roots: Sequence[str]) -> str:
    """Resolve ``forwardedProps.iacCode.cwd`` and check it may be used.

    It must be absolute and free of ``..`` segments; symlinks are resolved;
    with ``allowed_roots`` (each resolved too) it must lie inside one of them;
    if it exists it must be a directory. Returns the resolved path. Roots are
    checked before existence so nothing is revealed about paths outside them.
    """
    if not cwd or "\x00" in cwd or not os.path.isabs(cwd):
        raise _refuse_cwd("input_cwd_not_absolute")
    if ".." in cwd.split(os.sep):
        raise _refuse_cwd("input_cwd_not_absolute")
    resolved = os.path.realpath(cwd)
    roots = [os.path.realpath(root) for root in allowed_roots]
    if roots and not any(_is_within(resolved, root) for root in roots):
        raise _refuse_cwd("input_cwd_outside_roots")
    if os.path.exists(resolved) and not os.path.isdir(resolved):
        raise _refuse_cwd("input_cwd_not_directory")
    return resolved
