"""How the command line explains itself and refuses: groups, defaults,
environment variables, one-line usage errors, and pointers for the options
of ``iac-code agui`` that this server does not take."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from . import config as cfg

#: ``dest`` of an option -> the environment variable it defaults from.
ENVIRONMENT: dict[str, str] = {
    "host": cfg.ENV_HOST,
    "port": cfg.ENV_PORT,
    "a2a_url": cfg.ENV_A2A_URL,
    "a2a_token": cfg.ENV_A2A_TOKEN,
    "config_dir": cfg.ENV_CONFIG_DIR,
    "state_dir": cfg.ENV_STATE_DIR,
    "store": cfg.ENV_STORE,
    "allowed_cwd": cfg.ENV_ALLOWED_CWDS,
    "allowed_host": cfg.ENV_ALLOWED_HOSTS,
    "spawn_env": cfg.ENV_SPAWN_ENV,
    "allowed_origin": cfg.ENV_ALLOWED_ORIGINS,
    "state_retention_days": cfg.ENV_STATE_RETENTION,
    "durability": cfg.ENV_DURABILITY,
    "max_new_threads_per_user": cfg.ENV_MAX_NEW_THREADS,
    "header_timeout_seconds": cfg.ENV_HEADER_TIMEOUT,
    "jwt_jwks_file": cfg.ENV_JWT_JWKS_FILE,
    "jwt_jwks_url": cfg.ENV_JWT_JWKS_URL,
    "jwt_jwks_refresh_seconds": cfg.ENV_JWT_JWKS_REFRESH,
    "jwt_issuer": cfg.ENV_JWT_ISSUER,
    "jwt_audience": cfg.ENV_JWT_AUDIENCE,
    "jwt_principal_claim": cfg.ENV_JWT_PRINCIPAL_CLAIM,
    "disconnect_grace_seconds": cfg.ENV_DISCONNECT_GRACE,
    "replay_retention_seconds": cfg.ENV_REPLAY_RETENTION,
    "log_level": cfg.ENV_LOG_LEVEL,
    "log_format": cfg.ENV_LOG_FORMAT,
    "metrics": cfg.ENV_METRICS,
    "metrics_port": cfg.ENV_METRICS_PORT,
    "compat": cfg.ENV_COMPAT,
    "metrics_host": cfg.ENV_METRICS_HOST,
    "quiet_health": cfg.ENV_QUIET_HEALTH,
    "heartbeat_seconds": cfg.ENV_HEARTBEAT,
    "interrupt_ttl_seconds": cfg.ENV_INTERRUPT_TTL,
    "max_active_runs": cfg.ENV_MAX_ACTIVE_RUNS,
    "max_active_runs_per_user": cfg.ENV_MAX_ACTIVE_RUNS_PER_USER,
    "run_log_max_events": cfg.ENV_RUN_LOG_MAX_EVENTS,
    "run_log_max_bytes": cfg.ENV_RUN_LOG_MAX_BYTES,
    "history_cache_seconds": cfg.ENV_HISTORY_CACHE,
    "max_history_reads": cfg.ENV_MAX_HISTORY_READS,
    "history_page_bytes": cfg.ENV_HISTORY_PAGE_BYTES,
    "history_max_bytes": cfg.ENV_HISTORY_MAX_BYTES,
    "runtime": cfg.ENV_RUNTIMES,
    "runtimes_file": cfg.ENV_RUNTIMES_FILE,
}

#: Options whose value --help must not print (it may come from the environment).
_SECRET = frozenset({"a2a_token"})

#: The --help sections, in order; an option in none of them stays under "options".
GROUPS: dict[str, tuple[str, ...]] = {
    "runtime (choose exactly one)": ("a2a_url", "runtime", "runtimes_file", "spawn_iac_code", "demo", "a2a_token",
                                     "spawn_env"),
    "listening": ("host", "port", "allowed_host", "allowed_origin", "header_timeout_seconds"),
    "state and workspaces": ("config_dir", "state_dir", "store", "state_retention_days", "durability",
                             "allowed_cwd"),
    "authentication (or the shared token, environment only)": (
        "jwt_jwks_file", "jwt_jwks_url", "jwt_jwks_refresh_seconds", "jwt_issuer", "jwt_audience",
        "jwt_principal_claim",
    ),
    "runs, streams and limits": (
        "heartbeat_seconds", "interrupt_ttl_seconds", "disconnect_grace_seconds", "replay_retention_seconds",
        "run_log_max_events", "run_log_max_bytes", "max_active_runs", "max_active_runs_per_user",
        "max_new_threads_per_user",
    ),
    "conversation history (GET /threads/{id}/messages)": (
        "history_cache_seconds", "max_history_reads", "history_page_bytes",
    ),
    "logs and metrics": ("log_level", "log_format", "quiet_health", "metrics", "metrics_port", "metrics_host"),
    "protocol": ("compat",),
}

EPILOG = f"""\
settings read only from the environment:
  {cfg.ENV_AUTH_TOKEN}  a shared bearer token every caller must send (turns authentication on;
                            excludes --jwt-jwks-file)
  OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SDK_DISABLED, ...
                            OpenTelemetry tracing, as the OpenTelemetry SDK reads them
An option given wins over its environment variable; an empty variable counts as unset.
Migrating from `iac-code agui`: see "Migrating from iac-code agui" in docs/operations.md.
Operator command (list, show, cancel, delete threads): aguiadapter threads --help"""

#: Options of ``iac-code agui`` this server does not take, and what to use instead.
REFERENCE_ONLY: dict[tuple[str, ...], str] = {
    ("--config",): "there is no YAML file here; give its settings as options or IAC_CODE_AGUI_* variables",
    ("--debug", "-d"): "use --log-level DEBUG (or IAC_CODE_AGUI_LOG_LEVEL=DEBUG)",
    ("--log-stdout", "--no-log-stdout"): "logs always go to standard error; use --log-format json for collectors",
    ("--idle-shutdown",): "there is no idle shutdown; stop the server with SIGTERM",
}


#: Whether usage errors are written as JSON lines (``--log-format json``, set by ``main``).
_json_lines = False


def write_json_lines(on: bool) -> None:
    """Write usage errors as JSON lines from now on (or as text again)."""
    global _json_lines
    _json_lines = on


def json_wanted(argv: Sequence[str], env: Mapping[str, str]) -> bool:
    """``--log-format json`` (or its variable), read before the options are
    parsed, so that even a usage error in them is written as JSON."""
    chosen = (env.get(cfg.ENV_LOG_FORMAT) or "").strip().lower()
    for index, arg in enumerate(argv):
        if arg == "--log-format" and index + 1 < len(argv):
            chosen = argv[index + 1].lower()
        elif arg.startswith("--log-format="):
            chosen = arg.partition("=")[2].lower()
    return chosen == "json"


class Parser(argparse.ArgumentParser):
    """Usage errors in one line (the full usage is many lines long), exit status 2."""

    def error(self, message: str) -> NoReturn:
        usage_error(f"{message} (see --help)")
        self.exit(2)


class ReferenceOnly(argparse.Action):
    """An ``iac-code agui`` option: refused with a pointer to what does its job here."""

    def __init__(self, option_strings: Sequence[str], dest: str, pointer: str = "", **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.pointer = pointer

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        parser.error(f"{option_string} is an option of iac-code agui, not of aguiadapter: {self.pointer}")


def document(parser: argparse.ArgumentParser, env: Mapping[str, str]) -> None:
    """Sort the options into :data:`GROUPS` and add each one's default and variable to its help."""
    sections = {title: parser.add_argument_group(title) for title in GROUPS}
    where = {dest: sections[title] for title, dests in GROUPS.items() for dest in dests}
    for action in list(parser._optionals._group_actions):
        if action.help == argparse.SUPPRESS or not action.option_strings:
            continue
        action.help = (action.help or "") + _notes(action)
        group = where.get(action.dest)
        if group is not None:
            parser._optionals._group_actions.remove(action)
            group._group_actions.append(action)


def _notes(action: argparse.Action) -> str:
    notes = []
    shown = action.default not in (None, False, argparse.SUPPRESS) and action.dest not in _SECRET
    if shown and "default" not in (action.help or ""):
        notes.append(f"default: {action.default}")
    if action.dest in ENVIRONMENT:
        notes.append(f"env {ENVIRONMENT[action.dest]}")
    return f" [{'; '.join(notes)}]".replace("%", "%%") if notes else ""


def usage_error(message: str) -> int:
    """Print a one-line usage error; the exit status of one."""
    if _json_lines:
        from .logs import json_line

        print(json_line(message, level=logging.ERROR), file=sys.stderr)
    else:
        print(f"aguiadapter: {message}", file=sys.stderr)
    return 2
