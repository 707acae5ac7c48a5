"""Wait for something that happens elsewhere: a server coming up, a task settling.

Every test that waits for a condition it cannot be told about uses
:func:`eventually`, so a slow machine gets one deadline to tune and a failure
always says what was awaited and what was last seen.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import TypeVar, cast

T = TypeVar("T")


async def eventually(
    condition: Callable[[], T | Awaitable[T]],
    what: str,
    *,
    timeout: float = 10.0,
    interval: float = 0.02,
    ignoring: tuple[type[BaseException], ...] = (),
) -> T:
    """Call ``condition`` until it returns something truthy, and return that.

    ``condition`` is a plain function or a coroutine function; it is called at
    once and then every ``interval`` seconds until ``timeout`` seconds have
    passed, and then the test fails with ``what`` (the thing awaited, e.g.
    ``"the task is cancelled"``) and the last value seen. An exception of a
    type in ``ignoring`` counts as "not yet" (a connection refused while a
    server starts); any other exception ends the wait at once, so a condition
    can give up early by raising (a child process that died).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: object = None
    while True:
        try:
            value = condition()
            if inspect.isawaitable(value):
                value = await value
        except ignoring as exc:
            last = exc
        else:
            if value:
                return cast(T, value)
            last = value
        if loop.time() >= deadline:
            raise AssertionError(f"not within {timeout:g} s: {what} (last seen: {last!r})")
        await asyncio.sleep(interval)
