"""examples/terminal_client.py, run as a subprocess against the adapter and the demo runtime."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import pytest

from aguiadapter.demo.runtime import DemoRuntime
from tests.support.adapter import RunningAdapter, start_adapter

CLIENT = Path(__file__).resolve().parents[1] / "examples" / "terminal_client.py"
TOKEN = "terminal-client-token"


@attrs.frozen
class Transcript:
    status: int
    out: str
    err: str


async def run_client(url: str, *args: str, stdin: str = "", timeout: float = 60.0) -> Transcript:
    """Run the client with ``stdin`` fed at once; what it printed and its exit status."""
    env = {key: value for key, value in os.environ.items() if key != "IAC_CODE_AGUI_AUTH_TOKEN"}
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(CLIENT), "--url", url, *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )
    out, err = await asyncio.wait_for(process.communicate(stdin.encode()), timeout)
    assert process.returncode is not None
    return Transcript(process.returncode, out.decode(), err.decode())


async def test_a_permission_is_approved_and_the_tool_runs_once(
    adapter: RunningAdapter, demo: DemoRuntime, workspace: Path
) -> None:
    result = await run_client(adapter.url, "--cwd", str(workspace), stdin="permission a.txt\ny\n")
    assert result.status == 0, result.err
    out = result.out
    assert "you> permission a.txt" in out
    assert "agent> I will write a.txt now." in out
    assert '[tool] write_file {"path": "a.txt"' in out
    assert "[interrupt] Change a workspace file (a.txt). Allow once?" in out
    assert "Allow once? [y/n, /cancel declines] y" in out
    assert f"[result] Successfully wrote 1 lines to {workspace}/a.txt" in out
    assert "agent> Done: a.txt was written." in out
    assert out.index("[interrupt]") < out.index("[result]") < out.index("Done: a.txt")
    assert demo.state.tool_runs["write_file"] == 1
    assert sum(demo.state.tool_runs_by_use_id.values()) == 1


async def test_a_denied_permission_never_runs_the_tool(
    adapter: RunningAdapter, demo: DemoRuntime, workspace: Path
) -> None:
    result = await run_client(adapter.url, "--cwd", str(workspace), "permission", "b.txt", stdin="n\n")
    assert result.status == 0, result.err
    assert "[result] The user explicitly denied this tool operation." in result.out
    assert "agent> Understood: I did not write the file." in result.out
    assert demo.state.tool_runs["write_file"] == 0


async def test_a_question_is_answered_by_number_then_by_free_text(adapter: RunningAdapter, workspace: Path) -> None:
    result = await run_client(
        adapter.url, "--cwd", str(workspace), "--thread", "tc-question",
        stdin="question\n2\nquestion\neu-central-1\n",
    )
    assert result.status == 0, result.err
    out = result.out
    assert "[interrupt] Which region should the demo deploy to?" in out
    assert "  2) Singapore [ap-southeast-1]" in out
    assert "agent> You chose Singapore. The demo will use it." in out
    assert "agent> You chose eu-central-1. The demo will use it." in out


async def test_reasoning_tool_progress_and_errors_are_shown(adapter: RunningAdapter, workspace: Path) -> None:
    result = await run_client(adapter.url, "--cwd", str(workspace), stdin="think\ntool\n")
    assert result.status == 0, result.err
    assert "(thinking) " in result.out
    assert '[tool] list_files {"path": "."}' in result.out
    assert "[progress] Reading directory . (1/2)" in result.out
    assert "[artifact] file-list.txt iac-code-artifact://" in result.out
    failed = await run_client(adapter.url, "--cwd", str(workspace), "fail")
    assert failed.status == 1
    assert "[error A2A_EXECUTION_FAILED] The agent run failed." in failed.out


async def test_closing_stdin_at_a_prompt_leaves_the_interrupt_pending(
    adapter: RunningAdapter, demo: DemoRuntime, workspace: Path
) -> None:
    result = await run_client(adapter.url, "--cwd", str(workspace), "--thread", "tc-eof", "permission", "c.txt")
    assert result.status == 2
    assert "[pending] no answer given" in result.out
    # The thread still waits: a new message is refused before anything runs.
    again = await run_client(adapter.url, "--cwd", str(workspace), "--thread", "tc-eof", "hello")
    assert again.status == 1
    assert "[error RESUME_REQUIRED]" in again.out and "(HTTP 409)" in again.out
    assert demo.state.tool_runs["write_file"] == 0


async def test_a_pipeline_run_with_a_side_permission_and_a_selection(
    adapter: RunningAdapter, demo: DemoRuntime, workspace: Path
) -> None:
    result = await run_client(adapter.url, "--cwd", str(workspace), "--run-mode", "pipeline", "build", "it",
                              stdin="y\n2\ny\n")
    assert result.status == 0, result.out + result.err
    out = result.out
    assert "[step] intent_parsing started" in out and "[step] deploying finished" in out
    assert "[pipeline] pipeline_completed" in out
    assert "  2) candidate-b [1]" in out
    assert demo.state.tool_runs["write_file"] == 1 and len(demo.state.commands_run) == 1


@pytest.fixture
async def token_adapter(tmp_path: Path, demo: DemoRuntime) -> AsyncIterator[RunningAdapter]:
    running = await start_adapter(
        tmp_path / "secured-state", demo.url, allowed_cwds=(str(tmp_path / "workspaces"),), auth_token=TOKEN
    )
    try:
        yield running
    finally:
        await running.close()


async def test_the_token_option(token_adapter: RunningAdapter, workspace: Path) -> None:
    refused = await run_client(token_adapter.url, "--cwd", str(workspace), "hello")
    assert refused.status == 1
    assert "[error UNAUTHORIZED]" in refused.out and "(HTTP 401)" in refused.out
    accepted = await run_client(token_adapter.url, "--cwd", str(workspace), "--token", TOKEN, "hello")
    assert accepted.status == 0, accepted.err
    assert 'agent> Hello! You said: "hello".' in accepted.out
