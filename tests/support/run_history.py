"""A thread with 1,000 earlier runs, for the run history's tests on both stores.

The first run (and the last ones) go through the adapter; the runs between
are written as the adapter writes a run's ending (an entry with its digest
and outcome, one save per run) straight into the store, with the adapter
stopped: a thousand real runs would take minutes of the shared machine and
test nothing more of the history.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aguiadapter.store.factory import open_store
from aguiadapter.store.run_history import SPILL_AT
from aguiadapter.threads.record import RunEntry

from .adapter import Reply, run_body, started
from .connect import connect_body, runs_of


def expect_http_error(reply: Reply, status: int, code: str, language: str) -> None:
    """The reply is a JSON error with ``code`` (the catalog's language is tested elsewhere)."""
    assert reply.status == status, reply.body
    assert reply.json()["error"]["code"] == code, reply.body


async def add_runs(state_dir: Path, store_url: str | None, key: str, count: int) -> None:
    """``count`` ended runs ``run-2`` ... on the thread ``key``, saved one by one."""
    store = open_store(store_url, state_dir=state_dir, retention_days=0, durability="process")
    await store.start()
    try:
        for number in range(2, count + 2):
            record = await store.load(key)
            assert record is not None
            record.runs[f"run-{number}"] = RunEntry(f"digest-{number}", "success")
            await store.save(record)
    finally:
        await store.close()


async def every_earlier_run_id_is_used(root: Path, a2a_url: str, **config: Any) -> None:
    """Run 1 of a thread with 1,000 runs is refused as a repeat (same request)
    or a conflict (another request) after a restart; so is a run from the
    middle; a new run still runs."""
    cwd = root / "workspaces" / "ws"
    cwd.mkdir(parents=True, exist_ok=True)
    first = run_body(thread_id="long", text="turn 1", cwd=str(cwd), run_id="run-1")
    async with started(root, a2a_url, **config) as adapter:
        assert (await adapter.run(first)).status == 200
    await add_runs(root / "state", config.get("store_url"), "long", 999)
    async with started(root, a2a_url, **config) as adapter:
        expect_http_error(await adapter.run(first), 409, "DUPLICATE_RUN_ID", "en")
        other = run_body(thread_id="long", text="another turn", cwd=str(cwd), run_id="run-1")
        expect_http_error(await adapter.run(other), 409, "RUN_ID_CONFLICT", "en")
        middle = run_body(thread_id="long", text="turn 500", cwd=str(cwd), run_id="run-500")
        expect_http_error(await adapter.run(middle), 409, "RUN_ID_CONFLICT", "en")
        # A page that reconnects naming run 1 gets its hydrate run under another id.
        (hydrate,) = runs_of((await adapter.post("/connect", connect_body("long", runId="run-1"))).body)
        assert hydrate[0]["type"] == "RUN_STARTED" and hydrate[0]["runId"] not in ("run-1", ""), hydrate[0]
        (hydrate,) = runs_of((await adapter.post("/connect", connect_body("long", runId="page-7"))).body)
        assert hydrate[0]["runId"] == "page-7", "an id the thread never used is the client's to keep"
        fresh = run_body(thread_id="long", text="turn 1001", cwd=str(cwd), run_id="run-1001")
        assert (await adapter.run(fresh)).status == 200
        expect_http_error(await adapter.run(fresh), 409, "DUPLICATE_RUN_ID", "en")
    store = open_store(config.get("store_url"), state_dir=root / "state", retention_days=0)
    await store.start()
    try:
        record = await store.load("long")
        assert record is not None
        assert len(record.runs) <= SPILL_AT and record.earlier_runs + len(record.runs) == 1001
        assert await store.earlier_run("long", "run-1") is not None
    finally:
        await store.close()
