"""Several demo runtimes at once, as members of a pool (the unit and replica pool tests)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable

from aguiadapter.demo.runtime import DemoRuntime


@contextlib.asynccontextmanager
async def demo_runtimes(names: Iterable[str]) -> AsyncIterator[dict[str, DemoRuntime]]:
    """One started demo runtime per name, each closed on the way out."""
    runtimes: dict[str, DemoRuntime] = {}
    try:
        for name in names:
            runtimes[name] = DemoRuntime()
            await runtimes[name].start()
        yield runtimes
    finally:
        for runtime in runtimes.values():
            await runtime.close()
