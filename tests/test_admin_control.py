"""The operator command cancels and deletes on the file store while the server runs (issue 36).

The file store's claims live in the server process, so the command cannot take
them from outside: it asks the running server over its control socket
(``<state-dir>/admin.sock``, 0600, its own OS user only). Here both are real
processes: ``python -m aguiadapter --demo`` and ``python -m aguiadapter threads``.
A cancel ends a pending interrupt as the cancel route does (never silently
dropped: the thread ends ``terminal``, the runtime's task is cancelled) and a
streaming run with its terminal event; a delete of a live run is refused, and
of a settled thread erases it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import signal
import stat
import sys
import tempfile
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from aguiadapter.admin.control import control_listener
from aguiadapter.config import Config
from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.web.app import create_app

from tests.support.adapter import run_body
from tests.support.agui import check_stream
from tests.support.stops import assert_stopped
from tests.test_admin_command import threads
from tests.test_cli import start_cli
from tests.test_limits import OpenRun


async def test_cancel_and_delete_through_the_running_servers_control_socket(tmp_path: Path) -> None:
    # A deep folder: the socket's path is longer than a socket address may be.
    home = tmp_path / ("deep-" * 14)
    home.mkdir()
    state = home / "state"
    process, url, _ = await start_cli(home)
    settings = ("--state-dir", str(state))
    socket_file = state / "admin.sock"
    try:
        assert len(str(socket_file)) > 107
        mode = socket_file.stat().st_mode
        assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600, oct(mode)
        async with aiohttp.ClientSession() as session:
            async with session.post(url, json=run_body(thread_id="t-wait", text="permission notes.txt",
                                                       cwd=str(tmp_path))) as resp:
                asked = check_stream(await resp.read())
            assert asked[-1]["outcome"]["type"] == "interrupt"

            # A pending interrupt: cancelled as the route does, the runtime's task too.
            cancelled = await threads("cancel", "t-wait", *settings, "--json")
            assert cancelled.code == 0, cancelled.err
            document = cancelled.json()
            assert document["outcome"] == "cancelled" and document["state"] == "terminal", document
            assert document["runtimeTask"]["state"] == "TASK_STATE_CANCELED", document
            async with session.get(url + "threads/t-wait") as resp:
                seen = await resp.json()
            assert seen["state"] == "terminal" and seen["pendingInterrupts"] == [], seen

            # A streaming run: a delete is refused, a cancel ends its stream with the terminal event.
            async with session.post(url, json=run_body(thread_id="t-live", text="slow 30", cwd=str(tmp_path)),
                                    headers={"Accept": "text/event-stream"}) as resp:
                live = await OpenRun(resp).until_admitted()
                busy = await threads("delete", "t-live", *settings)
                assert busy.code == 1 and "has a live run" in busy.err, busy.err
                stopped = await threads("cancel", "t-live", *settings)
                assert stopped.code == 0 and "cancelled thread t-live" in stopped.out, stopped.err
                assert_stopped(await live.finish())

            deleted = await threads("delete", "t-live", *settings, "--json")
            assert deleted.code == 0, deleted.err
            assert deleted.json()["deleted"]["threadId"] == "t-live"
            async with session.get(url + "threads/t-live") as resp:
                assert resp.status == 404
            unknown = await threads("cancel", "nobody", *settings)
            assert unknown.code == 1 and "no thread 'nobody'" in unknown.err, unknown.err
            # list and show still read the records themselves.
            listed = await threads("list", *settings, "--json")
            assert [row["threadId"] for row in listed.json()["threads"]] == ["t-wait"], listed.out
    finally:
        process.send_signal(signal.SIGINT)
        await process.wait()
    assert not socket_file.exists(), "the socket goes with the server"
    # With the server gone the command changes the folder itself, as before.
    gone = await threads("delete", "t-wait", *settings, "--json")
    assert gone.code == 0 and json.loads(gone.out)["deleted"]["threadId"] == "t-wait", gone.err


_KNOCK = """
import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
except PermissionError:
    print("EACCES")
    raise SystemExit
s.sendall(b"POST /threads/cancel HTTP/1.1\\r\\nHost: x\\r\\nContent-Type: application/json\\r\\n"
          b"Content-Length: 2\\r\\nConnection: close\\r\\n\\r\\n{}")
print(s.recv(65536).decode().splitlines()[0])
"""


#: An interpreter another OS user may run (the test's own may sit in a private folder).
_SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/bin")


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0, reason="acting as another OS user needs root")
@pytest.mark.skipif(_SYSTEM_PYTHON is None, reason="no system python3 another user may run")
async def test_only_the_servers_own_os_user_is_served_on_the_control_socket(
    demo: DemoRuntime, caplog: pytest.LogCaptureFixture
) -> None:
    home = Path(tempfile.mkdtemp(prefix="control-"))
    home.chmod(0o755)  # another user may reach the folder: only the socket's own mode and check keep them out
    try:
        config = Config(state_dir=home / "state", a2a_url=demo.url)
        app = create_app(config)
        app.cleanup_ctx.append(control_listener(config))
        runner = web.AppRunner(app)
        await runner.setup()
        try:
            path = str(home / "state" / "admin.sock")
            (home / "state").chmod(0o755)

            async def knock(uid: int | None) -> str:
                process = await asyncio.create_subprocess_exec(
                    _SYSTEM_PYTHON or sys.executable, "-I", "-c", _KNOCK, path, stdout=asyncio.subprocess.PIPE,
                    user=uid, cwd="/",
                )
                out, _ = await asyncio.wait_for(process.communicate(), 20)
                return out.decode().strip()

            assert await knock(65534) == "EACCES", "the socket is 0600"
            os.chmod(path, 0o666)  # as if the mode were lost: the peer's user is still checked
            with caplog.at_level(logging.WARNING, "aguiadapter.admin.control"):
                assert (await knock(65534)).startswith("HTTP/1.1 403")
            assert "from OS user 65534" in caplog.text
            assert (await knock(None)).startswith("HTTP/1.1 400"), "its own user is served"
        finally:
            await runner.cleanup()
    finally:
        shutil.rmtree(home, ignore_errors=True)
