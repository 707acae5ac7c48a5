"""The file store forgets idle and terminal threads after the retention, as Redis does."""

from __future__ import annotations

import os
import time
from pathlib import Path

from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.store.file.store import FileThreadStore
from tests.support.adapter import run_body, start_adapter
from tests.support.eventually import eventually

RETENTION_SECONDS = 2.0


async def test_idle_and_terminal_threads_go_after_the_retention_interrupted_ones_stay(
    tmp_path: Path, demo: DemoRuntime, workspace: Path
) -> None:
    state = tmp_path / "state"
    # A thread file an earlier process left, months old: not read at start, only by a later sweep.
    old = await start_adapter(state, demo.url, state_retention_days=0)
    try:
        assert (await old.run(run_body(thread_id="t-ancient", text="hi", cwd=str(workspace)))).status == 200
    finally:
        await old.close()
    files = FileThreadStore(state)
    ancient = files.path_for("t-ancient")
    months_ago = time.time() - 90 * 86400
    os.utime(ancient, (months_ago, months_ago))

    running = await start_adapter(state, demo.url, state_retention_days=RETENTION_SECONDS / 86400)
    try:
        assert ancient.exists(), "nothing is scanned or deleted at startup"
        done = await running.run(run_body(thread_id="t-idle", text="hi", cwd=str(workspace)))
        assert done.events()[-1]["type"] == "RUN_FINISHED"
        waiting = await running.run(run_body(thread_id="t-waiting", text="permission notes.txt", cwd=str(workspace)))
        assert waiting.events()[-1]["outcome"]["type"] == "interrupt"

        async def idle_gone() -> bool | None:
            return True if not files.path_for("t-idle").exists() else None

        await eventually(idle_gone, "the idle thread is deleted after the retention", timeout=15.0)
        assert not ancient.exists()
        assert files.path_for("t-waiting").exists(), "a thread waiting for an answer stays"
        # Its next request starts a new thread, as on Redis.
        again = await running.run(run_body(thread_id="t-idle", text="hi again", cwd=str(workspace)))
        assert again.events()[-1]["type"] == "RUN_FINISHED"
        assert (await files.load("t-idle")) is not None
    finally:
        await running.close()
