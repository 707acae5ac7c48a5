"""The adapter end to end in front of the real `iac-code a2a` runtime."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp

from tests.support.adapter import RunningAdapter, run_body
from tests.support.adapter_process import output_until, spawn_adapter
from tests.support.agui import texts, types
from tests.support.eventually import eventually
from tests.support.iac_runtime import IacRuntime
from tests.support.model_stub import ModelStub
from tests.support.reading import read_until


def session_of(events: list[dict[str, Any]]) -> dict[str, Any]:
    (event,) = [e for e in events if e.get("name") == "iac-code.session.v1"]
    return dict(event["value"])


async def test_a_normal_turn_relays_the_runtime_text_once(
    iac_adapter: RunningAdapter, iac_workspace: Path
) -> None:
    reply = await iac_adapter.run(
        run_body(thread_id="e2e-normal", text="[scenario:normal] Say hello.", cwd=str(iac_workspace))
    )
    events = reply.events()
    text = texts(events)
    assert text and text.count(text[:12]) == 1, "the final full-text repeat must not be shown twice"
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"] == {"type": "success"}
    usage = events[-1]["usage"][0]
    assert usage["inputTokens"] > 0 and isinstance(usage["inputTokens"], int)
    session = session_of(events)
    assert session["sessionId"] and session["taskId"]


async def test_a_second_turn_continues_the_same_session(
    iac_adapter: RunningAdapter, iac_workspace: Path, model_stub: ModelStub
) -> None:
    cwd = str(iac_workspace)
    first = (await iac_adapter.run(run_body(thread_id="e2e-two", text="[scenario:normal] one", cwd=cwd))).events()
    second = (await iac_adapter.run(run_body(thread_id="e2e-two", text="[scenario:normal] two", cwd=cwd))).events()
    one, two = session_of(first), session_of(second)
    assert one["contextId"] == two["contextId"] and one["sessionId"] == two["sessionId"]
    assert one["taskId"] != two["taskId"] and one["executionId"] != two["executionId"]
    # The model saw turn 1 when it answered turn 2: the runtime kept the session.
    last = model_stub.calls_with("two")[-1]
    assert any("one" in str(message.get("content")) for message in last.body["messages"])


async def test_a_tool_turn_reports_call_and_result(iac_adapter: RunningAdapter, iac_workspace: Path) -> None:
    (iac_workspace / "main.tf").write_text("# empty\n")
    events = (
        await iac_adapter.run(
            run_body(thread_id="e2e-tool", text="[scenario:readonly-tool] list", cwd=str(iac_workspace))
        )
    ).events()
    kinds = types(events)
    assert kinds.index("TOOL_CALL_START") < kinds.index("TOOL_CALL_END") < kinds.index("TOOL_CALL_RESULT")
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert "main.tf" in result["content"]


async def test_a_client_that_disconnects_leaves_no_task_running(
    iac_adapter: RunningAdapter, iac_runtime: IacRuntime, iac_workspace: Path
) -> None:
    body = run_body(thread_id="e2e-gone", text="[scenario:slow seconds=20] talk", cwd=str(iac_workspace))
    task_id = None
    async with aiohttp.ClientSession() as session, session.post(iac_adapter.url, json=body) as resp:
        seen = await read_until(resp, b"TEXT_MESSAGE_CONTENT", seconds=30)
    for line in seen.decode().splitlines():
        if "iac-code.session.v1" in line:
            task_id = line.split('"taskId":"')[1].split('"')[0]
    assert task_id is not None

    async def cancelled() -> bool:
        return await iac_runtime.task_state(task_id) == "TASK_STATE_CANCELED"

    await eventually(cancelled, "iac-code cancels the task of the run its client left", interval=0.1)


async def test_spawn_iac_code_starts_and_supervises_a_child(
    tmp_path: Path, iac_runtime: IacRuntime, iac_workspace: Path
) -> None:
    """``--spawn-iac-code``: the adapter runs its own runtime on a free port
    with a random token (the model settings come from the environment), in
    the adapter's ``--config-dir``: that is where the adapter looks for the
    runtime's permission checkpoints and session transcripts."""
    import re
    import signal

    from tests.support.agui import check_stream

    config_dir = tmp_path / "config"
    process = await spawn_adapter(
        "--spawn-iac-code", "--port", "0", "--config-dir", str(config_dir),
        "--state-dir", str(tmp_path / "state"), "--allowed-cwd", str(iac_runtime.workspaces_root),
        env=iac_runtime.spawning_environment(),
    )
    try:
        text = await output_until(process, "state:", 60)
        url = re.search(r"listening on (http://\S+/)", text)
        assert url is not None and "runtime: iac-code a2a child at http://127.0.0.1:" in text
        body = run_body(thread_id="e2e-spawn", text="[scenario:normal] hi", cwd=str(iac_workspace))
        async with aiohttp.ClientSession() as session:
            async with session.post(url.group(1), json=body) as resp:
                events = check_stream(await resp.read())
            async with session.get(url.group(1) + "health") as resp:
                health = await resp.json()
                assert health["a2a"]["reachable"] is True and health["runtime"] == "iac-code"
        assert events[-1]["type"] == "RUN_FINISHED", (events[-1], text)
    finally:
        process.send_signal(signal.SIGINT)
        await asyncio.wait_for(process.wait(), 15)
    assert process.returncode == 0
    assert list(config_dir.glob("projects/*/*/session.jsonl")), "the child keeps its sessions in --config-dir"


def _children_environ(pid: int) -> list[dict[str, str]]:
    """The environments of the processes ``pid`` started, as the kernel keeps them."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            raw = Path(f"/proc/{child}/environ").read_bytes()
            pairs = (item.decode(errors="replace").partition("=") for item in raw.split(b"\0") if item)
            found.append({name: value for name, _, value in pairs})
    return found


async def test_the_spawned_child_gets_none_of_the_adapters_secrets(
    tmp_path: Path, iac_runtime: IacRuntime, iac_workspace: Path
) -> None:
    """``--spawn-iac-code``: the child runs what users approve (``env`` included), so
    the adapter's shared token, A2A token and other variables never reach it;
    its model settings, ``PATH``, ``HOME`` and locale do. The state folder in
    the child's config folder (the reference's default) is warned about."""
    import re
    import signal

    from tests.support.agui import check_stream

    env = iac_runtime.spawning_environment()
    env.update({
        "IAC_CODE_AGUI_AUTH_TOKEN": "adapter-shared-token",
        "IAC_CODE_AGUI_A2A_TOKEN": "adapter-a2a-token",
        "DATABASE_PASSWORD": "unrelated-secret",
        "TEAM_CA_NAME": "passed-by-name",
    })
    config_dir = tmp_path / "config"
    process = await spawn_adapter(
        "--spawn-iac-code", "--port", "0", "--config-dir", str(config_dir),
        "--allowed-cwd", str(iac_runtime.workspaces_root), "--spawn-env", "TEAM_CA_NAME", env=env,
    )
    try:
        text = await output_until(process, "state:", 60)
        url = re.search(r"listening on (http://\S+/)", text)
        assert url is not None
        (child,) = [found for found in _children_environ(process.pid) if "IACCODE_A2A_HTTP_TOKEN" in found]
        body = run_body(thread_id="e2e-env", text="[scenario:normal] hi", cwd=str(iac_workspace))
        async with aiohttp.ClientSession() as session:
            headers = {"Authorization": "Bearer adapter-shared-token"}
            async with session.post(url.group(1), json=body, headers=headers) as resp:
                events = check_stream(await resp.read())
        assert events[-1]["type"] == "RUN_FINISHED", (events[-1], text)
    finally:
        process.send_signal(signal.SIGINT)
        rest, _ = await asyncio.wait_for(process.communicate(), 15)
        text += rest.decode()
    secrets = ("adapter-shared-token", "adapter-a2a-token", "unrelated-secret")
    assert not [name for name, value in child.items() if any(secret in value for secret in secrets)], child
    assert not [name for name in child if name.startswith("IAC_CODE_AGUI_")]
    for name in ("PATH", "HOME", "LANG", "IAC_CODE_MODEL", "IAC_CODE_BASE_URL", "IAC_CODE_API_KEY"):
        assert child[name] == env[name], name
    assert child["IAC_CODE_CONFIG_DIR"] == str(config_dir) and child["TEAM_CA_NAME"] == "passed-by-name"
    assert text.count("inside the iac-code child's config folder") == 1, text


async def test_a_wrong_token_for_the_real_runtime_reads_as_unauthorized_not_as_an_outage(
    tmp_path: Path, iac_runtime: IacRuntime, iac_workspace: Path
) -> None:
    """iac-code a2a answers 401 on every route, /health included, to a token it does not know."""
    from tests.support.adapter import start_adapter

    wrong = await start_adapter(tmp_path / "state", iac_runtime.url, a2a_token="not-the-runtime-token",
                                allowed_cwds=(str(iac_runtime.workspaces_root),))
    try:
        async with wrong.session.get(wrong.url + "health") as resp:
            health = await resp.json()
        assert health["a2a"]["status"] == "unauthorized" and health["a2a"]["reachable"] is False
        reply = await wrong.run(run_body(thread_id="e2e-401", text="[scenario:normal] hi", cwd=str(iac_workspace)))
        error = reply.events()[-1]
        assert error["type"] == "RUN_ERROR" and error["code"] == "A2A_UNAVAILABLE"
        assert "credentials" in error["message"], error
    finally:
        await wrong.close()


async def test_under_log_format_json_the_spawned_runtimes_lines_are_json_too(
    tmp_path: Path, iac_runtime: IacRuntime, iac_workspace: Path
) -> None:
    """iac-code a2a writes uvicorn's lines to stderr: relayed as log records, so
    that every line the process writes parses."""
    import json
    import signal

    process = await spawn_adapter(
        "--spawn-iac-code", "--port", "0", "--config-dir", str(tmp_path / "c"),
        "--state-dir", str(tmp_path / "state"), "--allowed-cwd", str(iac_runtime.workspaces_root),
        "--log-format", "json", env=iac_runtime.spawning_environment(),
    )
    assert process.stdout is not None
    lines: list[dict[str, Any]] = []
    try:
        while not lines or lines[-1]["message"] != "listening":
            raw = await asyncio.wait_for(process.stdout.readline(), 60)
            assert raw, lines
            lines.append(json.loads(raw))
        body = run_body(thread_id="e2e-json", text="[scenario:normal] hi", cwd=str(iac_workspace))
        async with aiohttp.ClientSession() as session:
            async with session.post(lines[-1]["urls"][0], json=body) as resp:
                assert b"RUN_FINISHED" in await resp.read()
    finally:
        process.send_signal(signal.SIGINT)
        rest = (await asyncio.wait_for(process.communicate(), 15))[0].decode().splitlines()
    lines += [json.loads(line) for line in rest]
    assert process.returncode == 0
    child = [line for line in lines if line["logger"] == "aguiadapter.iac_code"]
    assert any("Uvicorn running on" in line["message"] and line["stream"] == "stderr" for line in child), lines
    assert lines[-1]["message"] != "" and any(line["message"] == "shutting down" for line in lines)
