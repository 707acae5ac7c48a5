"""A pool of three real ``iac-code a2a`` processes (each its own config
folder, one scripted model stub behind them): placement, pinning, a runtime
killed and restarted with an answer pending, drained and removed through the
runtimes file.

Where a thread runs is judged from the runtimes themselves: the thread's task
exists on the runtime it is pinned to, and on no other.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from aguiadapter.pool.settings import RuntimeSpec
from aguiadapter.store.file.store import FileThreadStore
from aguiadapter.web.keys import POOL
from tests.e2e.test_multi_input_e2e import answer_body, post_events, ran, turn_body
from tests.support.adapter import RunningAdapter, run_body, start_adapter
from tests.support.adapter_process import output_until, spawn_adapter
from tests.support.agui import check_stream, interrupts_of
from tests.support.eventually import eventually
from tests.support.iac_runtime import IacRuntime
from tests.support.model_stub import ModelStub

NAMES = ("r1", "r2", "r3")


class PoolMember(IacRuntime):
    """A runtime of the pool: any of them may be given a thread whose
    workspace was chosen before its placement, so all allow one root."""

    def __init__(self, model_url: str, root: Path, workspaces: Path) -> None:
        super().__init__(model_url, root=root)
        self.shared_workspaces = workspaces

    def _environment(self) -> dict[str, str]:
        allowed = os.pathsep.join((str(self.workspaces_root), str(self.shared_workspaces)))
        return {**super()._environment(), "IACCODE_A2A_ALLOWED_CWDS": allowed}


@pytest.fixture
async def trio(model_stub: ModelStub, tmp_path: Path) -> AsyncIterator[dict[str, IacRuntime]]:
    (tmp_path / "ws").mkdir()
    runtimes: dict[str, IacRuntime] = {
        name: PoolMember(model_stub.url, tmp_path / name, tmp_path / "ws") for name in NAMES}
    try:
        await asyncio.gather(*(runtime.start() for runtime in runtimes.values()))
        yield runtimes
    finally:
        await asyncio.gather(*(runtime.stop() for runtime in runtimes.values()))


def specs(trio: dict[str, IacRuntime], *, leave_out: str | None = None) -> tuple[RuntimeSpec, ...]:
    return tuple(RuntimeSpec(name, runtime.url, token=runtime.token, config_dir=runtime.config_dir)
                 for name, runtime in trio.items() if name != leave_out)


async def serve(tmp_path: Path, **config: Any) -> RunningAdapter:
    return await start_adapter(tmp_path / "state", None, allowed_cwds=(str(tmp_path / "ws"),),
                               runtime_probe_seconds=0.3, **config)


def workspace(tmp_path: Path, thread_id: str) -> Path:
    """The thread's workspace (a thread keeps its first one)."""
    path = tmp_path / "ws" / thread_id
    path.mkdir(exist_ok=True)
    return path


async def task_of(tmp_path: Path, thread_id: str) -> str:
    record = await FileThreadStore(tmp_path / "state").load(thread_id)
    assert record is not None and record.task_id is not None
    return record.task_id


async def holders(trio: dict[str, IacRuntime], task_id: str) -> list[str]:
    """The runtimes that know the task (asked of each one, down ones skipped)."""
    found = []
    for name, runtime in trio.items():
        if runtime.running and "result" in await runtime.rpc("GetTask", {"id": task_id}):
            found.append(name)
    return found


async def turn(adapter: RunningAdapter, thread_id: str, cwd: Path, text: str = "hello") -> list[dict[str, Any]]:
    events = await post_events(adapter, run_body(thread_id=thread_id, text=f"[scenario:normal] {text}", cwd=str(cwd)))
    assert events[-1]["type"] == "RUN_FINISHED", events[-1]
    return events


async def test_threads_spread_over_the_runtimes_and_stay_pinned_across_turns_and_a_restart(
    trio: dict[str, IacRuntime], tmp_path: Path
) -> None:
    adapter = await serve(tmp_path, runtimes=specs(trio))
    placed: dict[str, str] = {}
    try:
        for number in range(3):
            thread_id = f"spread-{number}"
            await turn(adapter, thread_id, workspace(tmp_path, thread_id))
            (placed[thread_id],) = await holders(trio, await task_of(tmp_path, thread_id))
        assert sorted(placed.values()) == list(NAMES), "one thread on each idle runtime"
    finally:
        await adapter.close()
    adapter = await serve(tmp_path, runtimes=tuple(reversed(specs(trio))))
    try:
        for thread_id, name in placed.items():
            await turn(adapter, thread_id, workspace(tmp_path, thread_id), "again")
            assert await holders(trio, await task_of(tmp_path, thread_id)) == [name]
            assert (await adapter.get(f"/threads/{thread_id}")).json()["runtime"] == name
    finally:
        await adapter.close()


async def test_a_killed_runtime_refuses_its_thread_retryably_and_applies_the_answer_once_when_back(
    trio: dict[str, IacRuntime], tmp_path: Path
) -> None:
    adapter = await serve(tmp_path, runtimes=specs(trio))
    try:
        cwd = workspace(tmp_path, "pending")
        (interrupt,) = interrupts_of(await post_events(adapter, turn_body("pending", cwd, 1)))
        (name,) = await holders(trio, await task_of(tmp_path, "pending"))
        others = [other for other in NAMES if other != name]
        await trio[name].kill()
        for _ in range(2):
            refused = await adapter.run(answer_body("pending", cwd, str(interrupt["id"])))
            assert refused.status == 503 and refused.json()["error"]["code"] == "A2A_UNAVAILABLE", refused.body
            assert "Retry-After" in refused.headers
            status = (await adapter.get("/threads/pending")).json()
            assert status["state"] == "interrupted"
            assert [item["id"] for item in status["pendingInterrupts"]] == [interrupt["id"]]
        assert ran(cwd) == []
        # New threads go to the runtimes that are up, and run there.
        for number in range(2):
            thread_id = f"elsewhere-{number}"
            await turn(adapter, thread_id, workspace(tmp_path, thread_id))
            assert await holders(trio, await task_of(tmp_path, thread_id)) in ([other] for other in others)
        health = (await adapter.get("/health")).json()
        assert health["status"] == "degraded"
        assert {item["name"]: item["reachable"] for item in health["runtimes"]} == {
            other: other != name for other in NAMES}
        await trio[name].restart()

        async def answered() -> bool:
            reply = await adapter.run(answer_body("pending", cwd, str(interrupt["id"])))
            if reply.status == 503:
                return False
            events = reply.events()
            assert events[-1]["outcome"] == {"type": "success"}, events[-1]
            return True

        await eventually(answered, "the answer is taken once the runtime is back", timeout=20, interval=0.5)
        assert ran(cwd) == ["1"]
        again = await adapter.run(answer_body("pending", cwd, str(interrupt["id"])))
        assert again.status == 409 and again.json()["error"]["code"] == "RESUME_ALREADY_APPLIED"
        assert ran(cwd) == ["1"]
    finally:
        await adapter.close()


def pool_file(path: Path, trio: dict[str, IacRuntime], *, drain: tuple[str, ...] = (),
              leave_out: str | None = None) -> None:
    path.write_text("".join(
        f'[[runtime]]\nname = "{name}"\nurl = "{runtime.url}"\ntoken_env = "POOL_E2E_{name.upper()}"\n'
        f'config_dir = "{runtime.config_dir}"\ndrain = {"true" if name in drain else "false"}\n\n'
        for name, runtime in trio.items() if name != leave_out), encoding="utf-8")


async def test_a_drained_then_removed_runtime_keeps_its_threads_then_hands_them_on(
    trio: dict[str, IacRuntime], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, runtime in trio.items():
        monkeypatch.setenv(f"POOL_E2E_{name.upper()}", runtime.token)
    path = tmp_path / "runtimes.toml"
    pool_file(path, trio)
    adapter = await serve(tmp_path, runtimes_file=path)
    pool = adapter.app[POOL]
    assert pool is not None
    try:
        placed: dict[str, str] = {}
        for number in range(3):
            thread_id = f"t-{number}"
            await turn(adapter, thread_id, workspace(tmp_path, thread_id))
            (placed[thread_id],) = await holders(trio, await task_of(tmp_path, thread_id))
        idle = next(thread_id for thread_id, name in placed.items() if name == "r1")
        cwd = workspace(tmp_path, "waiting")
        # r1 drains (what SIGHUP does): it takes no new thread; its threads keep working there.
        pool_file(path, trio, drain=("r1",))
        assert await pool.reread(path)
        for number in range(3):
            thread_id = f"new-{number}"
            await turn(adapter, thread_id, workspace(tmp_path, thread_id))
            assert await holders(trio, await task_of(tmp_path, thread_id)) != ["r1"]
        await turn(adapter, idle, workspace(tmp_path, idle), "still here")
        assert await holders(trio, await task_of(tmp_path, idle)) == ["r1"]
        # Only r1 takes new threads: one is left waiting for an answer there.
        pool_file(path, trio, drain=("r2", "r3"))
        assert await pool.reread(path)
        (interrupt,) = interrupts_of(await post_events(adapter, turn_body("waiting", cwd, 1)))
        assert await holders(trio, await task_of(tmp_path, "waiting")) == ["r1"]
        health = (await adapter.get("/health")).json()
        assert {item["name"]: item["activeRuns"] for item in health["runtimes"]}["r1"] == 0
        # r1 leaves the pool; the others take new threads again.
        pool_file(path, trio, leave_out="r1")
        assert await pool.reread(path)
        events = await turn(adapter, idle, workspace(tmp_path, idle), "moved")
        (notice,) = [event for event in events if event.get("name") == "iac-code.runtime.changed.v1"]
        (now,) = await holders(trio, await task_of(tmp_path, idle))
        assert now != "r1" and notice["value"] == {"schemaVersion": 1, "from": "r1", "to": now,
                                                   "history": "unavailable"}
        lost = await adapter.run(answer_body("waiting", cwd, str(interrupt["id"])))
        assert lost.status == 409 and lost.json()["error"]["code"] == "EXECUTION_LOST", lost.body
        assert ran(cwd) == []
    finally:
        await adapter.close()


async def test_spawn_iac_code_with_a_count_starts_a_pool_of_children_each_with_its_own_config_folder(
    tmp_path: Path, iac_runtime: IacRuntime, iac_workspace: Path
) -> None:
    import re
    import signal

    env = {**iac_runtime.spawning_environment(), "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    config_dir = tmp_path / "config"
    process = await spawn_adapter(
        "--spawn-iac-code", "2", "--port", "0", "--config-dir", str(config_dir),
        "--state-dir", str(tmp_path / "state"), "--allowed-cwd", str(iac_runtime.workspaces_root), env=env,
    )
    try:
        text = await output_until(process, "state:", 90)
        url = re.search(r"listening on (http://\S+/)", text)
        assert url is not None and "pool of 2 iac-code a2a children" in text, text
        async with aiohttp.ClientSession() as session:
            for number in range(2):
                body = run_body(thread_id=f"spawned-{number}", text="[scenario:normal] hi",
                                cwd=str(iac_runtime.workspace(f"spawned-{number}")))
                async with session.post(url.group(1), json=body) as resp:
                    assert check_stream(await resp.read())[-1]["type"] == "RUN_FINISHED"
            async with session.get(url.group(1) + "health") as resp:
                health = await resp.json()
        assert health["runtime"] == "iac-code"
        assert [(item["name"], item["reachable"]) for item in health["runtimes"]] == [
            ("local-1", True), ("local-2", True)]
    finally:
        process.send_signal(signal.SIGINT)
        await asyncio.wait_for(process.wait(), 30)
    assert process.returncode == 0
    # One thread on each child, each child's sessions in its own folder.
    for name in ("local-1", "local-2"):
        assert list((config_dir / "runtimes" / name).glob("projects/*/*/session.jsonl")), name
