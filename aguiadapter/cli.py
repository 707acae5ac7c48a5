"""Command line: ``aguiadapter [serve] [options]`` and ``aguiadapter diagram``."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
from aiohttp import web

from .version import __version__
from . import config as cfg
from .cli_help import EPILOG as _EPILOG
from .cli_help import REFERENCE_ONLY
from .cli_help import Parser as _Parser
from .cli_help import ReferenceOnly as _ReferenceOnly
from .cli_help import document as _document
from .cli_help import json_wanted, usage_error, write_json_lines
from .images import tune_allocator
from .logs import configure_logging, json_line, lean_records, mask_url
from .pool.settings import parse_runtime
from .protocol.profile import COMPAT_CHOICES
from .telemetry import shutdown_within, tracer_provider_from_env

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from .iac_process import IacCodeProcess
    from .pool.pool import RuntimePool

log = logging.getLogger("aguiadapter")

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOG_FORMATS = ("text", "json")
_T = TypeVar("_T")
_D = TypeVar("_D")


def build_parser(env: Mapping[str, str] = os.environ) -> argparse.ArgumentParser:
    """The argument parser; defaults come from the environment."""
    parser = _Parser(
        prog="aguiadapter",
        description="AG-UI server in front of an A2A 1.0 agent runtime. Choose the runtime: "
        "--a2a-url URL, --spawn-iac-code or --demo.",
        allow_abbrev=False,  # `--config x` must not be taken for --config-dir
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", nargs="?", choices=("serve", "diagram"), default="serve",
                        help="serve (default) or print the thread state diagrams (```mermaid blocks)")
    parser.add_argument("--host", default=env.get(cfg.ENV_HOST) or "127.0.0.1")
    parser.add_argument("--port", type=_port, default=_from_env(cfg.env_port, env, cfg.ENV_PORT, 8000))
    parser.add_argument("--a2a-url", default=env.get(cfg.ENV_A2A_URL) or None,
                        help="the A2A runtime's URL")
    parser.add_argument("--a2a-token", default=env.get(cfg.ENV_A2A_TOKEN) or None,
                        help="bearer token for the runtime (every runtime of a pool, unless its token_env says)")
    parser.add_argument("--runtime", action="append", default=None, metavar="NAME=URL", type=_option(parse_runtime),
                        help="one runtime of a pool (repeatable; NAME: a-z, 0-9, -, up to 32): each new thread is "
                        "pinned to the reachable, non-draining runtime with the fewest active runs (excludes "
                        "--a2a-url, which is a pool of one named default)")
    parser.add_argument("--runtimes-file", type=Path, default=env.get(cfg.ENV_RUNTIMES_FILE) or None, metavar="PATH",
                        help="the pool as [[runtime]] tables of a TOML file (name, url, and optional token_env, "
                        "config_dir, capacity, drain); read again on SIGHUP (excludes --a2a-url and --runtime)")
    parser.add_argument("--config-dir", type=Path, default=None,
                        help="iac-code config folder (default $IAC_CODE_CONFIG_DIR or ~/.iac-code)")
    parser.add_argument("--state-dir", type=Path, default=None,
                        help="thread state folder (default <config-dir>/agui)")
    parser.add_argument("--store", default=env.get(cfg.ENV_STORE) or None, metavar="URL",
                        help="redis://HOST:PORT/DB to share thread state between replicas, or "
                        "redis+sentinel://HOST:PORT[,HOST:PORT...]/SERVICE[/DB] behind Sentinel, or "
                        "redis+cluster://HOST:PORT[,HOST:PORT...]/ "
                        "(needs aguiadapter[redis]; default: files in --state-dir)")
    parser.add_argument("--allowed-cwd", action="append", default=None, metavar="DIR",
                        help="allowed workspace root (repeatable; default: the working directory and the "
                        "temporary directory, as iac-code agui; with --demo any absolute path)")
    parser.add_argument("--allowed-host", action="append", default=None, metavar="NAME",
                        help="Host name accepted besides loopback names on every listener of a server without "
                        "auth (repeatable; the variable takes a comma-separated list; default: loopback names only)")
    parser.add_argument("--allowed-origin", action="append", default=None, metavar="ORIGIN",
                        type=_option(cfg.normalise_origin),
                        help="scheme://host[:port] of a web page allowed to call the server (CORS; repeatable; "
                        "the variable takes a comma-separated list; default: the server's own origin only)")
    parser.add_argument("--jwt-jwks-file", type=Path, default=env.get(cfg.ENV_JWT_JWKS_FILE) or None, metavar="PATH",
                        help="verify bearer JWTs against this JWKS file (re-read when it changes; needs "
                        "aguiadapter[jwt]; excludes the shared token)")
    parser.add_argument("--jwt-jwks-url", default=env.get(cfg.ENV_JWT_JWKS_URL) or None, metavar="URL",
                        help="verify bearer JWTs against the JWKS at this https:// URL (http:// on loopback only): "
                        "cached per its Cache-Control, fetched again for an unknown kid; the last good set is kept "
                        "while the URL fails (needs aguiadapter[jwt]; excludes --jwt-jwks-file)")
    parser.add_argument("--jwt-jwks-refresh-seconds", type=_interval, metavar="N",
                        default=_env_option(_interval, env, cfg.ENV_JWT_JWKS_REFRESH, 10.0),
                        help="with --jwt-jwks-url: tokens naming an unknown kid fetch the URL at most every N "
                        "seconds (default 10)")
    parser.add_argument("--jwt-issuer", default=env.get(cfg.ENV_JWT_ISSUER) or None,
                        help="required iss claim")
    parser.add_argument("--jwt-audience", default=env.get(cfg.ENV_JWT_AUDIENCE) or None,
                        help="the aud claim a token must hold (required with --jwt-jwks-file)")
    parser.add_argument("--jwt-principal-claim", default=env.get(cfg.ENV_JWT_PRINCIPAL_CLAIM) or "sub",
                        metavar="CLAIM", help="the claim that names the user (default sub)")
    parser.add_argument("--max-active-runs", type=_positive_int, metavar="N",
                        default=_env_option(_positive_int, env, cfg.ENV_MAX_ACTIVE_RUNS, None),
                        help="runs streaming at once, whole server (all replicas on Redis); then 503 SERVER_BUSY")
    parser.add_argument("--max-active-runs-per-user", type=_positive_int, metavar="M",
                        default=_env_option(_positive_int, env, cfg.ENV_MAX_ACTIVE_RUNS_PER_USER, None),
                        help="runs streaming at once per user; then 429 TOO_MANY_RUNS")
    parser.add_argument("--max-new-threads-per-user", type=_count, metavar="K",
                        default=_from_env(cfg.env_count, env, cfg.ENV_MAX_NEW_THREADS, 60),
                        help="new threads a verified user may start per minute (default 60, 0: no limit); then "
                        "429 TOO_MANY_THREADS")
    parser.add_argument("--state-retention-days", type=_seconds, metavar="D",
                        default=_from_env(cfg.env_seconds, env, cfg.ENV_STATE_RETENTION, 30.0),
                        help="file store: delete idle and terminal threads untouched for D days (default 30; "
                        "0: never). Redis: ?retention_days= in --store")
    parser.add_argument("--durability", choices=cfg.DURABILITY_CHOICES,
                        default=env.get(cfg.ENV_DURABILITY) or "fsync",
                        help="file store: fsync (default: every write recovery needs is on disk before what "
                        "depends on it; survives a power cut) or process (page cache only: survives a crash "
                        "or kill -9 of this server, not of the machine)")
    parser.add_argument("--header-timeout-seconds", type=_seconds, metavar="S",
                        default=_from_env(cfg.env_seconds, env, cfg.ENV_HEADER_TIMEOUT, 10.0),
                        help="close a connection that has not sent a request's headers within S seconds "
                        "(default 10; 0: no limit)")
    parser.add_argument("--heartbeat-seconds", type=_interval, metavar="S",
                        default=_env_option(_interval, env, cfg.ENV_HEARTBEAT, 15.0),
                        help="a comment line on an idle stream this often")
    parser.add_argument("--interrupt-ttl-seconds", type=_interval, metavar="S",
                        default=_env_option(_interval, env, cfg.ENV_INTERRUPT_TTL, 3600.0),
                        help="how long a pending interrupt may wait for its answer (default 1 h)")
    parser.add_argument("--disconnect-grace-seconds", type=_seconds, metavar="S",
                        default=_from_env(cfg.env_seconds, env, cfg.ENV_DISCONNECT_GRACE, 0.0),
                        help="how long a run whose client vanished goes on, waiting for a re-attach "
                        "(default 0: cancel at once)")
    parser.add_argument("--replay-retention-seconds", type=_seconds, metavar="S",
                        default=_from_env(cfg.env_seconds, env, cfg.ENV_REPLAY_RETENTION, 600.0),
                        help="how long an ended run can be replayed by a re-attach (default 600; "
                        "0 with no grace turns event ids off)")
    parser.add_argument("--run-log-max-events", type=_positive_int, metavar="N",
                        default=_env_option(_positive_int, env, cfg.ENV_RUN_LOG_MAX_EVENTS, 10_000),
                        help="events one run's log keeps at most (default 10000)")
    parser.add_argument("--run-log-max-bytes", type=_positive_int, metavar="B",
                        default=_env_option(_positive_int, env, cfg.ENV_RUN_LOG_MAX_BYTES, 8 * 1024 * 1024),
                        help="bytes one run's log keeps at most (default 8 MiB, at least 1024)")
    parser.add_argument("--history-cache-seconds", type=_seconds, metavar="S",
                        default=_env_option(_seconds, env, cfg.ENV_HISTORY_CACHE, 5.0),
                        help="how long a thread's conversation read from the runtime is kept in memory "
                        "(GET /threads/{id}/messages; default 5, 0: read on every request)")
    parser.add_argument("--max-history-reads", type=_positive_int, metavar="N",
                        default=_env_option(_positive_int, env, cfg.ENV_MAX_HISTORY_READS, 4),
                        help="transcript reads in flight at once in this process, one user's at most half "
                        "(default 4; more wait, then 503 HISTORY_UNAVAILABLE)")
    parser.add_argument("--history-page-bytes", type=_positive_int, metavar="B",
                        default=_env_option(_positive_int, env, cfg.ENV_HISTORY_PAGE_BYTES, 512 * 1024),
                        help="JSON bytes of messages one history page holds at most (default 512 KiB; "
                        "at least one turn is always sent)")
    parser.add_argument("--history-max-bytes", type=_positive_int, metavar="B",
                        default=_env_option(_positive_int, env, cfg.ENV_HISTORY_MAX_BYTES, 32 * 1024 * 1024),
                        help="the longest transcript read from the runtime for one thread's history "
                        "(default 32 MiB; longer: 503 HISTORY_UNAVAILABLE)")
    parser.add_argument("--log-level", default=_from_env(cfg.env_choice, env, cfg.ENV_LOG_LEVEL, LOG_LEVELS, "INFO"),
                        choices=LOG_LEVELS, type=str.upper)
    parser.add_argument("--log-format", default=_from_env(cfg.env_choice, env, cfg.ENV_LOG_FORMAT, LOG_FORMATS, "text"),
                        choices=LOG_FORMATS, help="text (key=value) or one JSON object per line")
    parser.add_argument("--quiet-health", action="store_true",
                        default=_from_env(cfg.env_flag, env, cfg.ENV_QUIET_HEALTH),
                        help="leave GET /health out of the access log (it never makes a span)")
    parser.add_argument("--metrics", action="store_true", default=_from_env(cfg.env_flag, env, cfg.ENV_METRICS),
                        help="serve Prometheus metrics at GET /metrics (no auth)")
    parser.add_argument("--metrics-port", type=_port, metavar="N",
                        default=_from_env(cfg.env_port, env, cfg.ENV_METRICS_PORT, None),
                        help="serve GET /metrics on a listener of its own, port N (not on the main one "
                        "unless --metrics is given too)")
    parser.add_argument("--metrics-host", default=env.get(cfg.ENV_METRICS_HOST) or None, metavar="HOST",
                        help="address of the --metrics-port listener (default: --host)")
    parser.add_argument("--spawn-iac-code", nargs="?", const=1, default=0, type=_positive_int, metavar="N",
                        help="start and supervise a local `iac-code a2a` child (what iac-code agui does without a "
                        "URL); with N above 1, a pool of N children local-1..N, each with its own config folder "
                        "<config-dir>/runtimes/local-I")
    parser.add_argument("--spawn-env", action="append", default=None, metavar="NAME",
                        help="with --spawn-iac-code: one more environment variable the child gets (repeatable; "
                        "the variable takes a comma-separated list; default: only what iac-code reads, never "
                        "IAC_CODE_AGUI_*)")
    parser.add_argument("--demo", action="store_true",
                        help="serve the embedded scripted demo agent (canned answers; to try the server)")
    parser.add_argument("--compat", metavar="PROFILE", choices=COMPAT_CHOICES,
                        default=_from_env(cfg.env_profile, env, cfg.ENV_COMPAT).value,
                        help="iac-code-agui: the wire forms of the iac-code agui protocol reference where AG-UI 1.0 "
                        "differs (a stopped run ends RUN_ERROR CANCELLED, content parts the runtime cannot use are "
                        "refused with INVALID_INPUT); ag-ui-1.0: AG-UI 1.0 to the letter")
    parser.add_argument("--write", metavar="FILE", default=None,
                        help="diagram: update the mermaid block of FILE instead of printing")
    parser.add_argument("--which", choices=("machine", "client"), default=None,
                        help="diagram: print only this one (the thread machine, or what a front end sees)")
    parser.add_argument("--version", action="version", version=f"aguiadapter {__version__}")
    for flags, pointer in REFERENCE_ONLY.items():
        parser.add_argument(*flags, nargs="?", action=_ReferenceOnly, help=argparse.SUPPRESS, pointer=pointer)
    _document(parser, env)
    return parser


def _from_env(read: Callable[..., _T], env: Mapping[str, str], *args: Any) -> _T:
    """A default from the environment; a bad value is a usage error (one line, exit 2)."""
    try:
        return read(env, *args)
    except ValueError as exc:
        raise SystemExit(f"aguiadapter: {exc}") from None


def _env_option(convert: Callable[[str], _T], env: Mapping[str, str], name: str, default: _D) -> _T | _D:
    """A default from the variable ``name``, checked as the option's own value
    would be; a bad value is a usage error naming the variable."""
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    try:
        return convert(raw)
    except argparse.ArgumentTypeError as exc:
        raise SystemExit(f"aguiadapter: {name}: {exc}") from None


def _option(parse: Callable[[str], _T]) -> Callable[[str], _T]:
    """An option's type from a parser of ``config`` (its ``ValueError`` as argparse's)."""

    def convert(text: str) -> _T:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


_port = _option(cfg.parse_port)
_seconds = _option(cfg.parse_seconds)
_count = _option(cfg.parse_count)


def _interval(text: str) -> float:
    value = _seconds(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def config_from_args(args: argparse.Namespace, env: Mapping[str, str] = os.environ) -> cfg.Config:
    """Turn parsed options (and the environment) into a :class:`Config`."""
    config_dir = args.config_dir or cfg.default_config_dir(env)
    state_dir = args.state_dir or cfg.default_state_dir(config_dir, env)
    allowed = tuple(args.allowed_cwd or cfg.allowed_cwds_from(env))
    jwt = None
    if args.jwt_jwks_file is not None or args.jwt_jwks_url is not None:
        jwt = cfg.JwtSettings(
            jwks_file=None if args.jwt_jwks_file is None else args.jwt_jwks_file.expanduser(),
            jwks_url=args.jwt_jwks_url,
            jwks_refresh_seconds=args.jwt_jwks_refresh_seconds,
            issuer=args.jwt_issuer,
            audience=args.jwt_audience,
            principal_claim=args.jwt_principal_claim,
        )
    return cfg.Config(
        runtimes=tuple(args.runtime or cfg.env_runtimes(env, cfg.ENV_RUNTIMES)),
        runtimes_file=None if args.runtimes_file is None else args.runtimes_file.expanduser(),
        state_dir=state_dir,
        runtime_config_dir=config_dir,
        a2a_url=args.a2a_url,
        a2a_token=args.a2a_token,
        auth_token=env.get(cfg.ENV_AUTH_TOKEN) or None,
        allowed_cwds=allowed,
        heartbeat_seconds=args.heartbeat_seconds,
        interrupt_ttl_seconds=args.interrupt_ttl_seconds,
        metrics=args.metrics,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host or args.host,
        store_url=args.store,
        jwt=jwt,
        max_active_runs=args.max_active_runs,
        max_active_runs_per_user=args.max_active_runs_per_user,
        disconnect_grace_seconds=args.disconnect_grace_seconds,
        replay_retention_seconds=args.replay_retention_seconds,
        run_log_max_events=args.run_log_max_events,
        run_log_max_bytes=args.run_log_max_bytes,
        history_cache_seconds=args.history_cache_seconds,
        max_history_reads=args.max_history_reads,
        history_page_bytes=args.history_page_bytes,
        history_max_bytes=args.history_max_bytes,
        max_new_threads_per_user=args.max_new_threads_per_user,
        header_timeout_seconds=args.header_timeout_seconds,
        state_retention_days=args.state_retention_days,
        durability=args.durability,
        allowed_hosts=tuple(args.allowed_host or cfg.split_list(env.get(cfg.ENV_ALLOWED_HOSTS))),
        allowed_origins=tuple(args.allowed_origin or cfg.env_origins(env, cfg.ENV_ALLOWED_ORIGINS)),
        demo=args.demo,
        profile=args.compat,
    )


#: Options the file store alone reads: refused next to ``--store`` rather than ignored.
FILE_STORE_ONLY: dict[str, str] = {
    "--state-retention-days": cfg.ENV_STATE_RETENTION,
    "--durability": cfg.ENV_DURABILITY,
}


def _check_store(config: cfg.Config, argv: Sequence[str], env: Mapping[str, str]) -> None:
    """Refuse a ``--store`` URL that cannot work, or one beside file-store options
    (``ValueError``: a usage error), before anything starts."""
    if not config.store_url:
        return
    for option, variable in FILE_STORE_ONLY.items():
        given = option if any(arg == option or arg.startswith(option + "=") for arg in argv) else (
            variable if env.get(variable) else None)
        if given:
            raise ValueError(f"{given} applies to the file store only and --store names a Redis store: "
                             "drop it (the Redis store takes ?retention_days= in its URL; its durability "
                             "is the Redis server's appendfsync)")
    try:
        from .store.redis.store import check_store_url
    except ImportError:
        raise ValueError("--store redis://... needs the redis extra: pip install 'aguiadapter[redis]'") from None
    try:
        check_store_url(config.store_url)  # redis-py's own options: their values too
    except RuntimeError as exc:
        raise ValueError(f"--store: {exc}") from None
    except ValueError as exc:
        raise ValueError(f"--store: {mask_url(config.store_url)}: {exc}") from None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m aguiadapter`` and ``aguiadapter``."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["threads"]:
        from .admin.command import main as threads_main

        return threads_main(argv[1:], build_parser, config_from_args)
    write_json_lines(json_wanted(argv, os.environ))
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        if isinstance(exc.code, str):  # a bad environment variable
            return usage_error(exc.code.removeprefix("aguiadapter: "))
        raise
    if args.command == "diagram":
        from .threads.diagram import DIAGRAMS, fenced, render_all, update_document

        if args.write:
            if args.which:
                return usage_error("--which prints one diagram; --write updates every diagram of FILE")
            changed = update_document(args.write)
            print(f"{args.write}: {'updated' if changed else 'already current'}")
        else:
            sys.stdout.write(fenced([DIAGRAMS[args.which]()] if args.which else render_all()))
        return 0
    pooled = args.runtime or os.environ.get(cfg.ENV_RUNTIMES)
    chosen = [name for name, given in (("--a2a-url", args.a2a_url), ("--runtime", pooled),
                                       ("--runtimes-file", args.runtimes_file),
                                       ("--spawn-iac-code", args.spawn_iac_code), ("--demo", args.demo)) if given]
    if len(chosen) != 1:
        both = f"{' and '.join(chosen)} exclude each other: choose one runtime"
        return usage_error(both if chosen else cfg.NO_RUNTIME)
    try:
        config = config_from_args(args)
        _check_store(config, argv if argv is not None else sys.argv[1:], os.environ)
    except ValueError as exc:
        return usage_error(str(exc))
    spawn_env = tuple(args.spawn_env or cfg.split_list(os.environ.get(cfg.ENV_SPAWN_ENV)))
    provider = None
    try:
        # Tracing as the OTEL_* variables say (see aguiadapter.telemetry.tracing_wanted).
        provider = tracer_provider_from_env(os.environ)
        configure_logging(args.log_level, args.log_format, trace_ids=provider is not None)
        lean_records()
        tune_allocator()  # before any thread: large blocks and worker threads' memory go back (images.py)
        asyncio.run(serve(config, args.host, args.port, spawn_iac_code=args.spawn_iac_code,
                          tracer_provider=provider, spawn_env=spawn_env, log_format=args.log_format,
                          quiet_health=args.quiet_health))
    except KeyboardInterrupt:
        pass
    except (OSError, RuntimeError) as exc:
        # Startup problems a user can fix (port taken, state folder in use,
        # iac-code missing, tracing asked for without the otel extra): one
        # clear line, no traceback.
        return usage_error(f"cannot start: {exc}")
    finally:
        if provider is not None:
            # Sends the spans still queued, within a bound: a dead collector
            # must not hold a rolling restart (TRACE_SHUTDOWN_SECONDS).
            shutdown_within(provider)
    return 0


async def serve(
    config: cfg.Config,
    host: str,
    port: int,
    *,
    spawn_iac_code: int = 0,
    tracer_provider: TracerProvider | None = None,
    spawn_env: tuple[str, ...] = (),
    log_format: str = "text",
    quiet_health: bool = False,
) -> None:
    """Run the server until SIGINT or SIGTERM; the banner and the drain and
    shutdown lines go to standard output in ``log_format``."""
    from .web.app import create_app
    from .web.keys import POOL, SERVICE
    from .web.server import AdapterRunner

    console = _Console(log_format == "json")
    children: list[IacCodeProcess] = []
    try:
        if spawn_iac_code:
            config = await _spawn_children(config, spawn_iac_code, children, spawn_env, console)
    except BaseException:
        await asyncio.gather(*(child.stop() for child in children))
        raise
    app = create_app(config, tracer_provider=tracer_provider)
    from .admin.control import control_listener

    # The operator command's way in while this server holds a file store (admin/control.py).
    app.cleanup_ctx.append(control_listener(config))
    from .web.server import AccessLogWithoutHealth

    quiet: dict[str, Any] = {"access_log_class": AccessLogWithoutHealth} if quiet_health else {}
    runner = AdapterRunner(app, shutdown_timeout=1.0, header_timeout=config.header_timeout_seconds, **quiet)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        # What startup made (modules, the app, the SDKs of the extras) lives as
        # long as the process: out of the collector's sight, it is not scanned
        # again by every full collection a stream's allocations cause (about a
        # tenth of the CPU per relayed event, more with OpenTelemetry loaded).
        gc.freeze()
        _print_banner(app, runner, site, config, console)
        _warn_open_beyond_loopback(runner, config)
        signals = _Signals()
        pool = app.get(POOL)
        if config.runtimes_file is not None and pool is not None:
            _reread_on_sighup(pool, config.runtimes_file)
        try:
            await signals.next()
            service = app.get(SERVICE)
            if service is not None and service.can_hand_off and service.active:
                # Rolling restart: let other replicas adopt the runs in flight.
                console.say(f"aguiadapter: draining {len(service.active)} run(s) for up to "
                            f"{config.disconnect_grace_seconds:g} s (signal again to cancel them)",
                            "draining", runs=len(service.active), grace_seconds=config.disconnect_grace_seconds)
                await service.drain(signals.second)
        finally:
            signals.close()
        console.say("aguiadapter: shutting down", "shutting down")
    finally:
        await runner.cleanup()
        await asyncio.gather(*(child.stop() for child in children))


async def _spawn_children(
    config: cfg.Config, count: int, children: list[IacCodeProcess], spawn_env: tuple[str, ...], console: _Console
) -> cfg.Config:
    """Start ``count`` supervised ``iac-code a2a`` children (added to ``children`` as
    they are made) and the config that names them: one is the runtime at
    ``a2a_url``, as before pools; more are a pool ``local-1..N``, each child
    with a config folder of its own under ``<config-dir>/runtimes/``."""
    from .iac_process import IacCodeProcess
    from .pool.settings import RuntimeSpec

    base = config.runtime_config_dir or cfg.default_config_dir()
    folders = [config.runtime_config_dir] if count == 1 else [base / "runtimes" / f"local-{i}" for i in
                                                               range(1, count + 1)]
    for folder in folders:
        refusals, warnings = _child_separation(attrs.evolve(config, runtime_config_dir=folder))
        if refusals:
            raise RuntimeError(refusals[0])
        for warning in warnings:
            log.warning("%s", warning)
    for folder in folders:
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
        children.append(IacCodeProcess(allowed_cwds=config.allowed_cwds, config_dir=folder, extra_env=spawn_env,
                                       relay_output=console.json_lines))
    started = await asyncio.gather(*(child.start() for child in children))
    if count == 1:
        ((url, token),) = started
        return attrs.evolve(config, a2a_url=url, a2a_token=token, spawned_runtime=True)
    pool = tuple(RuntimeSpec(f"local-{i}", url, token=token, config_dir=folder)
                 for i, ((url, token), folder) in enumerate(zip(started, folders, strict=True), start=1))
    return attrs.evolve(config, runtimes=pool, spawned_runtime=True)


class _Console:
    """What the command line itself writes to standard output: text, or the
    JSON lines of the logs (``--log-format json``)."""

    def __init__(self, json_lines: bool) -> None:
        self.json_lines = json_lines

    def say(self, text: str, event: str, **fields: Any) -> None:
        print(json_line(event, fields) if self.json_lines else text, flush=True)


def _print_banner(
    app: web.Application, runner: web.BaseRunner, site: web.TCPSite, config: cfg.Config, console: _Console
) -> None:
    from .web.keys import CLIENT, METRICS_URLS, POOL, SERVICE

    client, service, pool = app.get(CLIENT), app.get(SERVICE), app.get(POOL)
    listeners: tuple[str, ...] = app.get(METRICS_URLS) or ()
    runtime = mask_url(client.url) if client is not None else "?"
    kind = {
        "demo": "embedded demo runtime (a scripted agent with canned answers, not a model)",
        "iac-code": "iac-code a2a child",
    }.get(config.runtime_kind, "A2A runtime")
    if config.runtimes and pool is not None:  # named runtimes: each by name
        what = "iac-code a2a children" if config.spawned_runtime else "A2A runtimes"
        kind = f"pool of {len(pool.members)} {what}"
        runtime = ", ".join(f"{member.name}={mask_url(member.spec.url)}" for member in pool.members.values())
    roots = ", ".join(config.allowed_cwds) or "any absolute path"
    where = [f"http://{host}:{port}/" for host, port, *_ in runner.addresses]
    if console.json_lines:  # one object, the same facts
        store = service.store if service is not None else None
        fields: dict[str, Any] = {
            "version": __version__, "urls": where or [site.name], "runtime": kind, "runtime_url": runtime,
            "state": store.location() if store is not None else str(config.state_dir / "threads"),
            "auth": _auth_summary(config), "workspaces": list(config.allowed_cwds),
            "max_active_runs": config.max_active_runs, "max_active_runs_per_user": config.max_active_runs_per_user,
            "new_threads_per_user_per_minute": config.max_new_threads_per_user if config.jwt is not None else None,
            "metrics": ([f"{where[0]}metrics"] if config.metrics and where else []) + list(listeners) or None,
        }
        console.say("", "listening", **fields)
        return
    print(f"aguiadapter {__version__} listening on {', '.join(where) or site.name}", flush=True)
    print(f"  runtime: {kind} at {runtime}", flush=True)
    print(f"  profile: {_profile_summary(config)}", flush=True)
    store = service.store if service is not None else None
    print(f"  state:   {store.location() if store is not None else config.state_dir / 'threads'}", flush=True)
    print(f"  auth:    {_auth_summary(config)}; workspaces: {roots}", flush=True)
    if config.max_active_runs or config.max_active_runs_per_user:
        print(f"  limits:  {config.max_active_runs or 'no limit'} active runs, "
              f"{config.max_active_runs_per_user or 'no limit'} per user", flush=True)
    if config.jwt is not None and config.max_new_threads_per_user:
        print(f"  threads: {config.max_new_threads_per_user} new per user per minute", flush=True)
    metrics = [f"{where[0]}metrics"] if config.metrics and where else []
    metrics += listeners
    if metrics:
        print(f"  metrics: {', '.join(metrics)}", flush=True)


def _child_separation(config: cfg.Config) -> tuple[list[str], list[str]]:
    """What of the adapter's lies in the spawned child's config folder (see iac_process)."""
    from .iac_process import separation_problems

    return separation_problems(
        config.runtime_config_dir or cfg.default_config_dir(),
        state_dir=config.state_dir if config.store_url is None else None,
        jwks_file=None if config.jwt is None else config.jwt.jwks_file,
    )


def _warn_open_beyond_loopback(runner: web.BaseRunner, config: cfg.Config) -> None:
    """One warning when open mode listens where more than local processes reach it.

    Such a server still serves only loopback ``Host`` names and
    ``--allowed-host`` (a rebound page is refused), but anyone who reaches the
    address and sends one of those names runs the agent.
    """
    from .web.guard import is_loopback_host

    if config.auth_token or config.jwt is not None:
        return
    names = runner.addresses
    exposed = sorted({str(name[0]) for name in names if isinstance(name, tuple) and not is_loopback_host(str(name[0]))})
    if exposed:
        log.warning(
            "open mode (no token, no JWKS file) listens on %s, beyond loopback: anyone who reaches it runs the "
            "agent; only Host names localhost, 127.x.x.x, [::1] and --allowed-host are served. Set "
            "IAC_CODE_AGUI_AUTH_TOKEN or --jwt-jwks-file, or listen on 127.0.0.1", ", ".join(exposed),
        )


def _profile_summary(config: cfg.Config) -> str:
    if config.profile.stops_as_errors:
        return "iac-code-agui (--compat: the protocol reference's forms; stops end RUN_ERROR CANCELLED)"
    return "ag-ui-1.0 (stops end RUN_FINISHED cancelled; --compat iac-code-agui for the reference's forms)"


def _auth_summary(config: cfg.Config) -> str:
    if config.jwt is not None:
        return f"JWT ({config.jwt.principal_claim} names the user; keys from {config.jwt.key_source})"
    return "bearer token required" if config.auth_token else "none"


def _reread_on_sighup(pool: RuntimePool, path: Path) -> None:
    """SIGHUP reads the runtimes file again (a bad one keeps the pool; one log line)."""
    loop = asyncio.get_running_loop()
    rereads: set[asyncio.Task[bool]] = set()

    def reread() -> None:
        task = loop.create_task(pool.reread(path))
        rereads.add(task)
        task.add_done_callback(rereads.discard)

    loop.add_signal_handler(signal.SIGHUP, reread)


class _Signals:
    """SIGINT and SIGTERM: the first one stops (or drains), a second one
    ends the drain."""

    def __init__(self) -> None:
        self.first = asyncio.Event()
        self.second = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._loop.add_signal_handler(sig, self._got)

    def _got(self) -> None:
        (self.second if self.first.is_set() else self.first).set()

    async def next(self) -> None:
        await self.first.wait()

    def close(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._loop.remove_signal_handler(sig)
