"""Background tasks a part of the process starts and stops with itself."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` (if any) and wait until it is over, so that nothing it
    does outlives the ``close`` that stops it; its cancellation is not an
    error of the caller's."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
