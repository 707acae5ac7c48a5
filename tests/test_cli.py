"""`python -m aguiadapter` as a newcomer runs it: start, serve, Ctrl-C."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from aguiadapter.cli import build_parser, config_from_args
from aguiadapter.config import Config
from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.protocol.profile import Profile, parse_profile
from aguiadapter.threads.diagram import render_all
from tests.support.adapter import run_body
from tests.support.agui import check_stream, texts
from tests.support.stops import assert_stopped
from tests.support.reading import read_until


async def start_cli(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[asyncio.subprocess.Process, str, list[str]]:
    """The server on a free port; on the demo runtime unless ``args`` name one."""
    runtime = () if "--a2a-url" in args else ("--demo",)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aguiadapter", "--port", "0", "--state-dir", str(tmp_path / "state"), *runtime, *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, **(env or {})},
    )
    assert process.stdout is not None
    banner: list[str] = []
    while True:
        line = (await asyncio.wait_for(process.stdout.readline(), 20)).decode()
        assert line, "the server exited during startup:\n" + "".join(banner)
        banner.append(line)
        if "state:" in line:
            break
        if line.startswith("{") and json.loads(line)["message"] == "listening":  # --log-format json
            return process, json.loads(line)["urls"][0], banner
    match = re.search(r"listening on (http://\S+/)", "".join(banner))
    assert match, banner
    return process, match.group(1), banner


async def test_the_server_starts_on_the_embedded_runtime_and_answers_a_run(tmp_path: Path) -> None:
    process, url, banner = await start_cli(tmp_path)
    try:
        text = "".join(banner)
        assert "embedded demo runtime" in text and str(tmp_path / "state" / "threads") in text
        async with aiohttp.ClientSession() as session:
            async with session.post(url, json=run_body(thread_id="cli", text="hello cli", cwd=str(tmp_path))) as resp:
                events = check_stream(await resp.read())
        assert "hello cli" in texts(events)
    finally:
        process.send_signal(signal.SIGINT)
        await process.wait()


async def test_the_server_answers_every_error_as_json_even_the_http_parsers(tmp_path: Path) -> None:
    process, url, _ = await start_cli(tmp_path)
    try:
        async with aiohttp.ClientSession() as session:
            for path, headers, status, code in [
                ("health", {"X-Big": "v" * 9000}, 431, "HEADERS_TOO_LARGE"),
                ("x" * 9000, {}, 414, "URI_TOO_LONG"),
                ("nowhere", {}, 404, "NOT_FOUND"),
            ]:
                async with session.get(url + path, headers=headers) as resp:
                    assert (resp.status, resp.content_type) == (status, "application/json")
                    assert (await resp.json())["error"]["code"] == code
    finally:
        process.send_signal(signal.SIGINT)
        await process.wait()


@pytest.mark.parametrize("compat", [None, "iac-code-agui"])
async def test_ctrl_c_closes_open_streams_and_exits_within_a_second(tmp_path: Path, compat: str | None) -> None:
    process, url, banner = await start_cli(tmp_path, *(("--compat", compat) if compat else ()))
    assert f"profile: {compat or 'ag-ui-1.0'} " in "".join(banner), banner
    async with aiohttp.ClientSession() as session:
        async with session.post(url, json=run_body(thread_id="cli-slow", text="slow 30", cwd=str(tmp_path))) as resp:
            seen = await read_until(resp, b"TEXT_MESSAGE_CONTENT", seconds=30)
            started = time.monotonic()
            process.send_signal(signal.SIGINT)
            rest = await asyncio.wait_for(resp.read(), 5)
            stream_closed = time.monotonic() - started
    await asyncio.wait_for(process.wait(), 5)
    exited = time.monotonic() - started
    assert process.returncode == 0
    assert stream_closed < 1.5 and exited < 2.5, (stream_closed, exited)
    # The client is told why its stream ends: a stop, in the profile's form.
    events = check_stream(seen + rest, advertised=parse_profile(compat).value)
    assert_stopped(events, parse_profile(compat))


def test_environment_variables_use_the_reference_names(tmp_path: Path) -> None:
    env = {
        "IAC_CODE_AGUI_HOST": "0.0.0.0", "IAC_CODE_AGUI_PORT": "9999",
        "IAC_CODE_AGUI_A2A_URL": "http://127.0.0.1:1234/", "IAC_CODE_AGUI_A2A_TOKEN": "a2a-t",
        "IAC_CODE_AGUI_AUTH_TOKEN": "agui-t", "IAC_CODE_AGUI_STATE_DIR": str(tmp_path / "s"),
        "IAC_CODE_AGUI_ALLOWED_CWDS": os.pathsep.join(["/w1", "/w2"]),
    }
    args = build_parser(env).parse_args([])
    config = config_from_args(args, env)
    assert (args.host, args.port) == ("0.0.0.0", 9999)
    assert config.a2a_url == "http://127.0.0.1:1234/" and config.a2a_token == "a2a-t"
    assert config.auth_token == "agui-t" and config.state_dir == tmp_path / "s"
    assert config.allowed_cwds == ("/w1", "/w2")
    assert "a2a-t" not in repr(config) and "agui-t" not in repr(config)


def test_the_profile_comes_from_compat_or_its_variable(tmp_path: Path) -> None:
    assert config_from_args(build_parser({}).parse_args([]), {}).profile is Profile.AGUI_1_0
    env = {"IAC_CODE_AGUI_COMPAT": "iac-code-agui"}
    assert config_from_args(build_parser(env).parse_args([]), env).profile is Profile.IAC_CODE_AGUI
    args = build_parser(env).parse_args(["--compat", "ag-ui-1.0"])
    assert config_from_args(args, env).profile is Profile.AGUI_1_0, "the option wins over the variable"
    assert Config.from_env({"IAC_CODE_AGUI_COMPAT": "iac-code-agui"}, demo=True).profile is Profile.IAC_CODE_AGUI
    assert Config(state_dir=tmp_path, demo=True, profile="iac-code-agui").profile is Profile.IAC_CODE_AGUI
    with pytest.raises(SystemExit):
        build_parser({"IAC_CODE_AGUI_COMPAT": "iac-code"})
    with pytest.raises(ValueError, match="IAC_CODE_AGUI_COMPAT"):
        Config.from_env({"IAC_CODE_AGUI_COMPAT": "0.1"}, demo=True)


def test_options_beat_the_environment(tmp_path: Path) -> None:
    env = {"IAC_CODE_AGUI_PORT": "9999", "IAC_CODE_AGUI_ALLOWED_CWDS": "/env"}
    args = build_parser(env).parse_args(["--port", "8001", "--allowed-cwd", "/a", "--allowed-cwd", "/b",
                                         "--config-dir", str(tmp_path)])
    config = config_from_args(args, env)
    assert args.port == 8001 and config.allowed_cwds == ("/a", "/b")
    assert config.state_dir == tmp_path / "agui"


def test_diagram_command_prints_the_generated_diagrams_as_fenced_blocks() -> None:
    out = subprocess.run([sys.executable, "-m", "aguiadapter", "diagram"], capture_output=True, text=True, check=True)
    machine, client = render_all()
    # Markdown a renderer takes: each diagram in a ```mermaid block of its own.
    assert out.stdout == f"```mermaid\n{machine}```\n\n```mermaid\n{client}```\n"
    for which, diagram in (("machine", machine), ("client", client)):
        one = subprocess.run([sys.executable, "-m", "aguiadapter", "diagram", "--which", which],
                             capture_output=True, text=True, check=True)
        assert one.stdout == f"```mermaid\n{diagram}```\n"
    wrong = subprocess.run([sys.executable, "-m", "aguiadapter", "diagram", "--which", "both"],
                           capture_output=True, text=True, check=False)
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1


async def test_a_run_lost_with_a_killed_adapter_has_its_task_cancelled_on_next_use(
    tmp_path: Path, demo: DemoRuntime
) -> None:
    process, url, _ = await start_cli(tmp_path, "--a2a-url", demo.url)
    body = run_body(thread_id="cli-kill", text="slow 30", cwd=str(tmp_path))
    async with aiohttp.ClientSession() as session:
        async with session.post(url, json=body) as resp:
            await read_until(resp, b"TEXT_MESSAGE_CONTENT", seconds=30)
            process.send_signal(signal.SIGKILL)
            await process.wait()
    (task_id,) = list(demo.state.tasks)
    assert demo.state.tasks[task_id].state == "TASK_STATE_WORKING", "the runtime goes on without the adapter"
    process, url, _ = await start_cli(tmp_path, "--a2a-url", demo.url)
    try:
        async with aiohttp.ClientSession() as session:
            async with session.post(url, json=run_body(thread_id="cli-kill", text="again", cwd=str(tmp_path))) as resp:
                events = check_stream(await resp.read())
    finally:
        process.send_signal(signal.SIGINT)
        await process.wait()
    assert events[-1]["type"] == "RUN_FINISHED"
    assert demo.state.tasks[task_id].state == "TASK_STATE_CANCELED", "the lost run's task must not run on"


async def test_metrics_port_serves_metrics_on_a_listener_of_their_own(tmp_path: Path) -> None:
    process, url, _ = await start_cli(tmp_path, "--metrics-port", "0")
    try:
        assert process.stdout is not None
        lines = [(await asyncio.wait_for(process.stdout.readline(), 20)).decode() for _ in range(2)]
        match = re.search(r"metrics: (http://127\.0\.0\.1:\d+/metrics)", "".join(lines))
        assert match, lines
        async with aiohttp.ClientSession() as session:
            async with session.get(match.group(1)) as resp:
                assert resp.status == 200 and "aguiadapter_runs_total" in await resp.text()
            async with session.get(url + "metrics") as resp:
                assert resp.status == 404
    finally:
        process.send_signal(signal.SIGINT)
        await process.wait()


async def test_credentials_in_the_runtime_url_are_masked_in_the_banner_health_and_logs(tmp_path: Path) -> None:
    secret_url = "http://svc-user:pa55w0rd-x@127.0.0.1:9/a2a/?api_key=k3y-value&region=eu"
    process, url, banner = await start_cli(tmp_path, "--a2a-url", secret_url, "--log-level", "DEBUG")
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(url + "health") as resp:
                health = await resp.json()
        assert health["a2a"]["url"] == "http://***@127.0.0.1:9/a2a/?api_key=***&region=eu"
    finally:
        process.send_signal(signal.SIGINT)
        output = "".join(banner) + (await process.communicate())[0].decode()
    assert "runtime: A2A runtime at http://***@127.0.0.1:9/a2a/?api_key=***&region=eu" in output
    for secret in ("svc-user", "pa55w0rd-x", "k3y-value"):
        assert secret not in output


async def test_anonymous_health_callers_of_a_server_with_a_token_do_not_see_the_runtime_url(tmp_path: Path) -> None:
    process, url, _ = await start_cli(tmp_path, env={"IAC_CODE_AGUI_AUTH_TOKEN": "t0ken-h"})
    try:
        async with aiohttp.ClientSession() as session:
            for headers, shown in [({}, False), ({"Authorization": "Bearer wrong"}, False),
                                   ({"Authorization": "Bearer t0ken-h"}, True)]:
                async with session.get(url + "health", headers=headers) as resp:
                    assert resp.status == 200
                    runtime = (await resp.json())["a2a"]
                assert runtime["reachable"] is True and ("url" in runtime) == shown, headers
    finally:
        process.send_signal(signal.SIGINT)
        await process.wait()


def test_an_empty_or_relative_workspace_root_stops_the_start(tmp_path: Path) -> None:
    """``--allowed-cwd ''`` would make the working directory the only root while the banner said otherwise."""
    for root in ("", "  ", "workspaces", "~/workspaces"):
        done = subprocess.run(
            [sys.executable, "-m", "aguiadapter", "--demo", "--port", "0", "--state-dir", str(tmp_path / "state"),
             "--allowed-cwd", str(tmp_path), "--allowed-cwd", root],
            capture_output=True, text=True, timeout=60, check=False,
        )
        assert done.returncode == 2, root
        assert "--allowed-cwd" in done.stderr and "absolute path" in done.stderr, done.stderr
    assert not (tmp_path / "state").exists(), "nothing was started"


# ------------------------------------------------------------ the runtime is a choice; usage errors are one line
def run_cli_now(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("IAC_CODE_AGUI_")}
    return subprocess.run([sys.executable, "-m", "aguiadapter", *args], env={**clean, **(env or {})},
                          capture_output=True, text=True, timeout=60, check=False)


def test_a_redis_store_without_the_redis_extra_is_one_line_before_anything_starts(tmp_path: Path) -> None:
    # A stand-in ``redis`` package that cannot be imported, first on the path: as if the extra were missing.
    (tmp_path / "redis").mkdir()
    (tmp_path / "redis" / "__init__.py").write_text("raise ImportError('no redis here')\n")
    root = str(Path(__file__).resolve().parents[1])
    done = run_cli_now("--demo", "--port", "0", "--store", "redis://127.0.0.1:9/0",
                       env={"PYTHONPATH": os.pathsep.join((str(tmp_path), root))})
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "needs the redis extra: pip install 'aguiadapter[redis]'" in done.stderr
    assert "demo runtime" not in done.stderr, "nothing started"


def test_without_a_runtime_the_server_does_not_start_and_names_the_three_ways() -> None:
    # A misspelt variable leaves no URL: no demo answers users by accident.
    done = run_cli_now("--port", "0", env={"IAC_CODE_AGUI_A2A_ULR": "http://127.0.0.1:9/"})
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert all(way in done.stderr for way in ("--a2a-url", "--spawn-iac-code", "--demo"))
    both = run_cli_now("--demo", "--a2a-url", "http://127.0.0.1:9/")
    assert both.returncode == 2 and "exclude each other" in both.stderr


def test_a_jwks_file_in_the_spawned_childs_config_folder_stops_the_start(tmp_path: Path) -> None:
    """The child runs what users approve: a JWKS file it can read (its oct keys mint anyone's tokens) is refused."""
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    (config_dir / "jwks.json").write_text('{"keys": []}')
    done = run_cli_now("--spawn-iac-code", "--port", "0", "--config-dir", str(config_dir),
                       "--state-dir", str(tmp_path / "state"), "--jwt-jwks-file", str(config_dir / "jwks.json"),
                       "--jwt-audience", "aguiadapter")
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "JWKS file" in done.stderr and "config folder" in done.stderr
    assert "listening" not in done.stdout


def test_every_bad_setting_exits_2_with_one_line() -> None:
    cases = [
        (("--demo", "--port", "99999"), {}, "--port"),
        (("--demo", "--metrics-port", "-1"), {}, "--metrics-port"),
        (("--demo", "--heartbeat-seconds", "0"), {}, "--heartbeat-seconds"),
        (("--demo", "--log-level", "LOUD"), {}, "--log-level"),
        (("--demo",), {"IAC_CODE_AGUI_PORT": "99999"}, "IAC_CODE_AGUI_PORT"),
        (("--demo",), {"IAC_CODE_AGUI_LOG_LEVEL": "chatty"}, "IAC_CODE_AGUI_LOG_LEVEL"),
        (("--demo",), {"IAC_CODE_AGUI_METRICS": "maybe"}, "IAC_CODE_AGUI_METRICS"),
        (("--demo", "--nonsense"), {}, "--nonsense"),
        (("--a2a-url", "localhost:9000"), {}, "http://"),
        (("--demo", "--max-new-threads-per-user", "-1"), {}, "--max-new-threads-per-user"),
        (("--demo", "--header-timeout-seconds", "soon"), {}, "--header-timeout-seconds"),
        (("--demo", "--allowed-origin", "example.com"), {}, "--allowed-origin"),
        (("--demo",), {"IAC_CODE_AGUI_MAX_NEW_THREADS_PER_USER": "many"}, "IAC_CODE_AGUI_MAX_NEW_THREADS_PER_USER"),
        (("--demo",), {"IAC_CODE_AGUI_STATE_RETENTION_DAYS": "-3"}, "IAC_CODE_AGUI_STATE_RETENTION_DAYS"),
        (("--demo",), {"IAC_CODE_AGUI_HEADER_TIMEOUT_SECONDS": "x"}, "IAC_CODE_AGUI_HEADER_TIMEOUT_SECONDS"),
        (("--demo",), {"IAC_CODE_AGUI_ALLOWED_ORIGINS": "https://ok.example,ftp://no"}, "IAC_CODE_AGUI_ALLOWED_ORIGINS"),
        (("--demo", "--jwt-jwks-file", "missing-jwks.json"), {}, "--jwt-audience"),
        (("--demo", "--jwt-jwks-url", "http://idp.example.test/jwks", "--jwt-audience", "a"), {}, "--jwt-jwks-url"),
        (("--demo", "--jwt-jwks-url", "https://idp.example.test/jwks", "--jwt-jwks-file", "x.json",
          "--jwt-audience", "a"), {}, "not both"),
        (("--demo", "--jwt-jwks-refresh-seconds", "0"), {}, "--jwt-jwks-refresh-seconds"),
        # A store option misspelt: refused before anything starts, with the close name.
        (("--demo", "--store", "redis://127.0.0.1:9/0?lease_second=10"), {}, "did you mean lease_seconds?"),
        (("--demo", "--store", "redis://127.0.0.1:9/0?socket_timout=1"), {}, "socket_timeout"),
        (("--demo", "--store", "redis://:pw-secret@127.0.0.1:9/0?socket_timeout=soon"), {}, "socket_timeout"),
        # An option of the file store next to a Redis store is refused, not ignored.
        (("--demo", "--store", "redis://127.0.0.1:9/0", "--state-retention-days", "3"), {}, "--state-retention-days"),
        (("--demo", "--state-retention-days=3"), {"IAC_CODE_AGUI_STORE": "redis://127.0.0.1:9/0"},
         "--state-retention-days"),
        (("--demo", "--store", "redis://127.0.0.1:9/0"), {"IAC_CODE_AGUI_STATE_RETENTION_DAYS": "3"},
         "IAC_CODE_AGUI_STATE_RETENTION_DAYS"),
    ]
    for args, env, named in cases:
        done = run_cli_now(*args, env=env)
        assert done.returncode == 2, (args, env, done.stderr)
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
        assert named in done.stderr, (named, done.stderr)
        assert "pw-secret" not in done.stderr, done.stderr


def test_options_are_never_abbreviated_and_the_references_own_fail_with_a_pointer() -> None:
    config = run_cli_now("--demo", "--config", "x.yaml")
    assert config.returncode == 2 and "--config is an option of iac-code agui" in config.stderr
    assert "IAC_CODE_AGUI_" in config.stderr
    debug = run_cli_now("--demo", "--debug")
    assert debug.returncode == 2 and "--log-level DEBUG" in debug.stderr
    short = run_cli_now("--demo", "--state=/tmp/x")  # not --state-dir
    assert short.returncode == 2 and "--state" in short.stderr


def test_help_groups_the_options_with_their_defaults_and_variables() -> None:
    done = run_cli_now("--help", env={"IAC_CODE_AGUI_A2A_TOKEN": "do-not-print"})
    text = done.stdout
    assert done.returncode == 0
    for section in ("runtime (choose exactly one):", "listening:", "state and workspaces:", "logs and metrics:"):
        assert section in text, section
    for variable in ("IAC_CODE_AGUI_HOST", "IAC_CODE_AGUI_LOG_LEVEL", "IAC_CODE_AGUI_LOG_FORMAT",
                     "IAC_CODE_AGUI_METRICS", "IAC_CODE_AGUI_AUTH_TOKEN", "IAC_CODE_AGUI_A2A_TOKEN",
                     "IAC_CODE_AGUI_ALLOWED_HOSTS", "IAC_CODE_AGUI_ALLOWED_ORIGINS",
                     "IAC_CODE_AGUI_MAX_NEW_THREADS_PER_USER", "IAC_CODE_AGUI_STATE_RETENTION_DAYS",
                     "IAC_CODE_AGUI_HEADER_TIMEOUT_SECONDS", "IAC_CODE_AGUI_JWT_AUDIENCE"):
        assert variable in text, variable
    # Each option under its heading, not left in the catch-all "options:" section.
    sections = re.split(r"\n(?=\S[^\n]*:\n)", text)
    where = {option: next(part.split(":", 1)[0] for part in sections if f"  {option} " in part)
             for option in ("--allowed-host", "--allowed-origin", "--header-timeout-seconds",
                            "--state-retention-days", "--max-new-threads-per-user", "--jwt-audience")}
    assert where == {
        "--allowed-host": "listening", "--allowed-origin": "listening", "--header-timeout-seconds": "listening",
        "--state-retention-days": "state and workspaces", "--max-new-threads-per-user": "runs, streams and limits",
        "--jwt-audience": "authentication (or the shared token, environment only)",
    }, where
    assert "default: 8000" in text and "do-not-print" not in text
    assert text.index("settings read only from the environment") > text.index("logs and metrics:")


def test_log_and_metrics_settings_come_from_the_environment() -> None:
    env = {"IAC_CODE_AGUI_LOG_LEVEL": "debug", "IAC_CODE_AGUI_LOG_FORMAT": "json",
           "IAC_CODE_AGUI_METRICS": "1", "IAC_CODE_AGUI_METRICS_PORT": "9464"}
    args = build_parser(env).parse_args(["--demo"])
    assert (args.log_level, args.log_format, args.metrics, args.metrics_port) == ("DEBUG", "json", True, 9464)


async def test_the_banner_and_health_name_the_runtime(tmp_path: Path, demo: DemoRuntime) -> None:
    for args, kind, said in [((), "demo", "embedded demo runtime"), (("--a2a-url", demo.url), "a2a", "A2A runtime at")]:
        process, url, banner = await start_cli(tmp_path, *args)
        try:
            assert said in "".join(banner)
            async with aiohttp.ClientSession() as session:
                async with session.get(url + "health") as resp:
                    assert (await resp.json())["runtime"] == kind
        finally:
            process.send_signal(signal.SIGINT)
            await process.wait()


async def test_a_runtime_that_does_not_answer_is_warned_about_at_startup(tmp_path: Path) -> None:
    process, url, banner = await start_cli(tmp_path, "--a2a-url", "http://127.0.0.1:9/")
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(url + "health") as resp:
                assert (await resp.json())["status"] == "degraded"
    finally:
        process.send_signal(signal.SIGINT)
        output, _ = await process.communicate()
    said = "".join(banner) + output.decode()
    assert "WARNING" in said and "does not answer at http://127.0.0.1:9/" in said


def test_the_workspace_default_is_the_references_unless_demo(tmp_path: Path) -> None:
    import tempfile

    served = config_from_args(build_parser({}).parse_args(["--a2a-url", "http://127.0.0.1:9/"]), {})
    assert served.allowed_cwds == (os.getcwd(), tempfile.gettempdir())
    demo = config_from_args(build_parser({}).parse_args(["--demo"]), {})
    assert demo.allowed_cwds == ()


def test_config_from_env_reads_what_the_command_line_reads(tmp_path: Path) -> None:
    from aguiadapter import Config

    env = {
        "IAC_CODE_AGUI_A2A_URL": "http://127.0.0.1:1234/", "IAC_CODE_AGUI_A2A_TOKEN": "a2a-t",
        "IAC_CODE_AGUI_AUTH_TOKEN": "agui-t", "IAC_CODE_CONFIG_DIR": str(tmp_path / "conf"),
        "IAC_CODE_AGUI_ALLOWED_CWDS": os.pathsep.join(["/w1", "/w2"]), "IAC_CODE_AGUI_STORE": "redis://r:6379/0",
        "IAC_CODE_AGUI_DISCONNECT_GRACE_SECONDS": "30", "IAC_CODE_AGUI_REPLAY_RETENTION_SECONDS": "60",
        "IAC_CODE_AGUI_METRICS": "yes", "IAC_CODE_AGUI_METRICS_PORT": "9464", "IAC_CODE_AGUI_HOST": "0.0.0.0",
        "IAC_CODE_AGUI_MAX_NEW_THREADS_PER_USER": "5", "IAC_CODE_AGUI_STATE_RETENTION_DAYS": "7",
        "IAC_CODE_AGUI_HEADER_TIMEOUT_SECONDS": "3", "IAC_CODE_AGUI_ALLOWED_HOSTS": "Box.lan, other.lan",
        "IAC_CODE_AGUI_ALLOWED_ORIGINS": "https://App.example:8443/,http://localhost:5173",
    }
    from_env = Config.from_env(env)
    assert (from_env.max_new_threads_per_user, from_env.state_retention_days, from_env.header_timeout_seconds) == (5, 7, 3)
    assert from_env.allowed_hosts == ("box.lan", "other.lan")
    assert from_env.allowed_origins == ("https://app.example:8443", "http://localhost:5173")
    assert Config.from_env(env) == config_from_args(build_parser(env).parse_args([]), env)
    assert Config.from_env({}, demo=True) == config_from_args(build_parser({}).parse_args(["--demo"]), {})
    try:
        Config.from_env({"IAC_CODE_AGUI_METRICS_PORT": "99999"})
    except ValueError as exc:
        assert "IAC_CODE_AGUI_METRICS_PORT" in str(exc)
    else:
        raise AssertionError("a bad variable must be refused")


def test_the_runtimes_workspace_variable_is_read_when_ours_is_unset() -> None:
    env = {"IACCODE_A2A_ALLOWED_CWDS": "/srv/w"}
    assert config_from_args(build_parser(env).parse_args(["--demo"]), env).allowed_cwds == ("/srv/w",)
    both = {**env, "IAC_CODE_AGUI_ALLOWED_CWDS": "/ours"}
    assert config_from_args(build_parser(both).parse_args(["--demo"]), both).allowed_cwds == ("/ours",)


def test_under_log_format_json_a_usage_error_is_one_json_line_too() -> None:
    for args, env in ((("--demo", "--log-format", "json", "--nonsense"), {}),
                      (("--demo", "--port", "99999"), {"IAC_CODE_AGUI_LOG_FORMAT": "json"}),
                      (("--demo", "--log-format=json", "--store", "redis://127.0.0.1:9/0?lease_second=1"), {})):
        done = run_cli_now(*args, env=env)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        line = json.loads(done.stderr)
        assert line["level"] == "ERROR" and line["logger"] == "aguiadapter" and line["message"], line


async def test_under_log_format_json_every_line_the_server_writes_is_json(tmp_path: Path) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aguiadapter", "--demo", "--port", "0", "--state-dir", str(tmp_path / "state"),
        "--log-format", "json", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    assert process.stdout is not None
    banner = json.loads(await asyncio.wait_for(process.stdout.readline(), 20))
    while banner["message"] != "listening":
        banner = json.loads(await asyncio.wait_for(process.stdout.readline(), 20))
    (url,) = banner["urls"]
    assert banner["state"] == str(tmp_path / "state" / "threads") and banner["auth"] == "none"
    async with aiohttp.ClientSession() as session:
        async with session.post(url, json=run_body(thread_id="json", text="hello", cwd=str(tmp_path))) as resp:
            check_stream(await resp.read())
    process.send_signal(signal.SIGTERM)
    rest = (await asyncio.wait_for(process.stdout.read(), 20)).decode().splitlines()
    assert await process.wait() == 0
    lines = [json.loads(line) for line in rest]
    assert lines[-1]["message"] == "shutting down", lines


def test_every_serve_option_has_an_environment_variable_but_the_runtime_choices() -> None:
    from aguiadapter.cli_help import ENVIRONMENT

    parser = build_parser({})
    options = {action.dest for action in parser._actions if action.option_strings and action.help != "==SUPPRESS=="}
    without = options - set(ENVIRONMENT) - {"help", "version"}
    assert without == {"demo", "spawn_iac_code", "write", "which"}, without  # why: docs/operations.md


def test_the_tuning_options_read_their_variables_and_refuse_bad_values(tmp_path: Path) -> None:
    env = {"IAC_CODE_AGUI_HEARTBEAT_SECONDS": "4", "IAC_CODE_AGUI_INTERRUPT_TTL_SECONDS": "60",
           "IAC_CODE_AGUI_MAX_ACTIVE_RUNS": "8", "IAC_CODE_AGUI_MAX_ACTIVE_RUNS_PER_USER": "2",
           "IAC_CODE_AGUI_RUN_LOG_MAX_EVENTS": "100", "IAC_CODE_AGUI_RUN_LOG_MAX_BYTES": "4096",
           "IAC_CODE_AGUI_HISTORY_CACHE_SECONDS": "0", "IAC_CODE_AGUI_MAX_HISTORY_READS": "2",
           "IAC_CODE_AGUI_HISTORY_PAGE_BYTES": "2048", "IAC_CODE_AGUI_METRICS_HOST": "127.0.0.2",
           "IAC_CODE_AGUI_STATE_DIR": str(tmp_path)}
    from aguiadapter.config import Config

    for config in (config_from_args(build_parser(env).parse_args(["--demo"]), env), Config.from_env(env, demo=True)):
        assert (config.heartbeat_seconds, config.interrupt_ttl_seconds, config.max_active_runs,
                config.max_active_runs_per_user, config.run_log_max_events, config.run_log_max_bytes,
                config.history_cache_seconds, config.max_history_reads, config.history_page_bytes,
                config.metrics_host) == (4, 60, 8, 2, 100, 4096, 0, 2, 2048, "127.0.0.2")
    done = run_cli_now("--demo", env={"IAC_CODE_AGUI_MAX_ACTIVE_RUNS": "0"})
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "IAC_CODE_AGUI_MAX_ACTIVE_RUNS" in done.stderr
