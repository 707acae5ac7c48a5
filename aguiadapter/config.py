"""Settings of one adapter instance, and where they come from.

Command-line options win over environment variables, which win over the
defaults. Environment variables use the names of the reference product so
that this server is a drop-in replacement for it.
"""

from __future__ import annotations

import ipaddress
import os
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import attrs

from .logs import mask_url
from .pool.settings import DEFAULT_RUNTIME, RuntimeSpec, check_pool, load_runtimes_file, parse_runtimes
from .protocol.profile import COMPAT_CHOICES, DEFAULT_PROFILE, Profile, parse_profile

MAX_BODY_BYTES = 12 * 1024 * 1024
MAX_CANCEL_BODY_BYTES = 64 * 1024

ENV_AUTH_TOKEN = "IAC_CODE_AGUI_AUTH_TOKEN"
ENV_HOST = "IAC_CODE_AGUI_HOST"
ENV_PORT = "IAC_CODE_AGUI_PORT"
ENV_A2A_URL = "IAC_CODE_AGUI_A2A_URL"
ENV_A2A_TOKEN = "IAC_CODE_AGUI_A2A_TOKEN"
ENV_STATE_DIR = "IAC_CODE_AGUI_STATE_DIR"
ENV_ALLOWED_CWDS = "IAC_CODE_AGUI_ALLOWED_CWDS"
#: The runtime's own variable, read (as iac-code agui reads it) when ours is unset.
ENV_RUNTIME_ALLOWED_CWDS = "IACCODE_A2A_ALLOWED_CWDS"
ENV_CONFIG_DIR = "IAC_CODE_CONFIG_DIR"
ENV_STORE = "IAC_CODE_AGUI_STORE"
ENV_JWT_JWKS_FILE = "IAC_CODE_AGUI_JWT_JWKS_FILE"
ENV_JWT_JWKS_URL = "IAC_CODE_AGUI_JWT_JWKS_URL"
ENV_JWT_JWKS_REFRESH = "IAC_CODE_AGUI_JWT_JWKS_REFRESH_SECONDS"
ENV_JWT_ISSUER = "IAC_CODE_AGUI_JWT_ISSUER"
ENV_JWT_AUDIENCE = "IAC_CODE_AGUI_JWT_AUDIENCE"
ENV_JWT_PRINCIPAL_CLAIM = "IAC_CODE_AGUI_JWT_PRINCIPAL_CLAIM"
ENV_DISCONNECT_GRACE = "IAC_CODE_AGUI_DISCONNECT_GRACE_SECONDS"
ENV_REPLAY_RETENTION = "IAC_CODE_AGUI_REPLAY_RETENTION_SECONDS"
ENV_ALLOWED_HOSTS = "IAC_CODE_AGUI_ALLOWED_HOSTS"
#: More variables a --spawn-iac-code child gets by name (comma-separated).
ENV_SPAWN_ENV = "IAC_CODE_AGUI_SPAWN_ENV"
ENV_STATE_RETENTION = "IAC_CODE_AGUI_STATE_RETENTION_DAYS"
#: ``fsync`` (the default) or ``process``: see :attr:`Config.durability`.
ENV_DURABILITY = "IAC_CODE_AGUI_DURABILITY"
#: The values of ``--durability``.
DURABILITY_CHOICES = ("fsync", "process")
ENV_HEADER_TIMEOUT = "IAC_CODE_AGUI_HEADER_TIMEOUT_SECONDS"
ENV_MAX_NEW_THREADS = "IAC_CODE_AGUI_MAX_NEW_THREADS_PER_USER"
ENV_ALLOWED_ORIGINS = "IAC_CODE_AGUI_ALLOWED_ORIGINS"
#: ``iac-code-agui``: the protocol reference's wire forms where AG-UI 1.0 differs.
ENV_COMPAT = "IAC_CODE_AGUI_COMPAT"
# Logs (read by the command line only: an embedding host sets up its own) and metrics.
ENV_LOG_LEVEL = "IAC_CODE_AGUI_LOG_LEVEL"
ENV_LOG_FORMAT = "IAC_CODE_AGUI_LOG_FORMAT"
ENV_METRICS = "IAC_CODE_AGUI_METRICS"
ENV_METRICS_PORT = "IAC_CODE_AGUI_METRICS_PORT"
ENV_METRICS_HOST = "IAC_CODE_AGUI_METRICS_HOST"
ENV_QUIET_HEALTH = "IAC_CODE_AGUI_QUIET_HEALTH"
ENV_HEARTBEAT = "IAC_CODE_AGUI_HEARTBEAT_SECONDS"
ENV_INTERRUPT_TTL = "IAC_CODE_AGUI_INTERRUPT_TTL_SECONDS"
ENV_MAX_ACTIVE_RUNS = "IAC_CODE_AGUI_MAX_ACTIVE_RUNS"
ENV_MAX_ACTIVE_RUNS_PER_USER = "IAC_CODE_AGUI_MAX_ACTIVE_RUNS_PER_USER"
ENV_RUN_LOG_MAX_EVENTS = "IAC_CODE_AGUI_RUN_LOG_MAX_EVENTS"
ENV_RUN_LOG_MAX_BYTES = "IAC_CODE_AGUI_RUN_LOG_MAX_BYTES"
ENV_HISTORY_CACHE = "IAC_CODE_AGUI_HISTORY_CACHE_SECONDS"
ENV_MAX_HISTORY_READS = "IAC_CODE_AGUI_MAX_HISTORY_READS"
ENV_HISTORY_PAGE_BYTES = "IAC_CODE_AGUI_HISTORY_PAGE_BYTES"
ENV_HISTORY_MAX_BYTES = "IAC_CODE_AGUI_HISTORY_MAX_BYTES"
#: A pool of runtimes: ``a=URL,b=URL`` (``--runtime``), or a TOML file (``--runtimes-file``).
ENV_RUNTIMES = "IAC_CODE_AGUI_RUNTIMES"
ENV_RUNTIMES_FILE = "IAC_CODE_AGUI_RUNTIMES_FILE"

#: Why a configuration without a runtime is refused (the CLI's and ``create_app``'s words).
NO_RUNTIME = (
    "no agent runtime chosen: give an A2A runtime URL (--a2a-url or IAC_CODE_AGUI_A2A_URL; Config.a2a_url), "
    "--spawn-iac-code to start a local `iac-code a2a`, or --demo for the scripted demo agent (Config.demo)"
)


@attrs.frozen
class JwtSettings:
    """Verified identity: bearer JWTs checked against the keys of a JWKS
    file or of a JWKS URL (exactly one of them)."""

    jwks_file: Path | None = None
    #: ``iss`` must equal this when given.
    issuer: str | None = None
    #: ``aud`` must contain this: required, so that a token minted for another
    #: service never opens this one (``None`` is refused by ``Config``).
    audience: str | None = None
    #: The claim that names the user (the thread's principal).
    principal_claim: str = "sub"
    #: Clock skew allowed on ``exp``, ``nbf`` and ``iat``.
    leeway_seconds: float = 30.0
    #: The JWKS file is looked at (stat) at most this often; 0: on every request.
    jwks_check_seconds: float = 5.0
    #: The JWKS URL (``https://``, or ``http://`` on loopback), fetched at start,
    #: again when its ``Cache-Control`` max-age ends, and when a token names an
    #: unknown ``kid`` (at most every ``jwks_refresh_seconds``).
    jwks_url: str | None = None
    jwks_refresh_seconds: float = 10.0
    #: One fetch of the URL gives up after this long (the last good set stays).
    jwks_fetch_timeout_seconds: float = 5.0

    def __attrs_post_init__(self) -> None:
        if (self.jwks_file is None) == (self.jwks_url is None):
            raise ValueError(f"JWT mode takes one key source: --jwt-jwks-file ({ENV_JWT_JWKS_FILE}) or "
                             f"--jwt-jwks-url ({ENV_JWT_JWKS_URL}), not {'both' if self.jwks_file else 'neither'}")
        if self.jwks_url is not None:
            check_jwks_url(self.jwks_url)
        if not self.jwks_refresh_seconds > 0 or not 0 < self.jwks_fetch_timeout_seconds <= 60:
            raise ValueError("jwks_refresh_seconds must be positive and jwks_fetch_timeout_seconds within 0-60")

    @property
    def key_source(self) -> str:
        """The file or URL the keys come from (banner, logs)."""
        return str(self.jwks_file) if self.jwks_file is not None else mask_url(self.jwks_url or "")


def check_jwks_url(url: str) -> None:
    """``ValueError`` unless ``url`` is https, or http on a loopback address:
    keys fetched in clear over a network would let anyone on the path mint users."""
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return
    if parts.scheme == "http" and parts.hostname and _loopback(parts.hostname):
        return
    raise ValueError(f"--jwt-jwks-url must be an https:// URL (or http:// on loopback), not {mask_url(url)[:200]!r}")


def _loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _lower_names(names: Iterable[str]) -> tuple[str, ...]:
    return tuple(name.strip().lower() for name in names)


def _origins(origins: Iterable[str]) -> tuple[str, ...]:
    return tuple(normalise_origin(origin) for origin in origins)


@attrs.frozen
class Config:
    """Everything ``create_app`` needs; secrets are excluded from ``repr``."""

    @property
    def keeps_metrics(self) -> bool:
        """Whether metrics are served anywhere (and so worth keeping)."""
        return self.metrics or self.metrics_port is not None

    state_dir: Path
    a2a_url: str | None = None
    a2a_token: str | None = attrs.field(default=None, repr=False)
    auth_token: str | None = attrs.field(default=None, repr=False)
    allowed_cwds: tuple[str, ...] = ()
    heartbeat_seconds: float = 15.0
    max_body_bytes: int = MAX_BODY_BYTES
    max_cancel_body_bytes: int = MAX_CANCEL_BODY_BYTES
    interrupt_ttl_seconds: float = 3600.0
    #: Serve ``GET /metrics`` on the app's own listener.
    metrics: bool = False
    #: Also serve ``GET /metrics`` on a listener of its own (``metrics_host``:port), started with the app.
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    #: ``redis://HOST:PORT/DB`` shares thread state between replicas; ``None``: files in ``state_dir``.
    store_url: str | None = attrs.field(default=None, repr=False)
    #: Verified identity (JWTs); excludes ``auth_token``.
    jwt: JwtSettings | None = None
    #: Runs streaming at once on the whole server (all replicas on a shared store); ``None``: no limit.
    max_active_runs: int | None = None
    #: Runs streaming at once per principal (or per ``userId`` without JWTs); ``None``: no limit.
    max_active_runs_per_user: int | None = None
    #: How long a run whose client vanished goes on, waiting for a re-attach
    #: (0: cancelled at once, as the protocol reference says).
    disconnect_grace_seconds: float = 0.0
    #: How long an ended run can still be replayed (0 with no grace: no
    #: event ids, no re-attach).
    replay_retention_seconds: float = 600.0
    #: The bounds of one run's event log.
    run_log_max_events: int = 10_000
    run_log_max_bytes: int = 8 * 1024 * 1024
    #: The config folder of an ``iac-code a2a`` on this machine (``--config-dir``,
    #: which the two share by default): where the adapter finds the ids of a
    #: permission raised while no stream of its followed the task. ``None``:
    #: such a permission ends its run ``EXECUTION_LOST``.
    runtime_config_dir: Path | None = None
    #: New threads a verified user may start per ``new_threads_window_seconds`` (0: no limit);
    #: beyond it 429 ``TOO_MANY_THREADS`` with ``Retry-After``.
    max_new_threads_per_user: int = 60
    new_threads_window_seconds: float = 60.0
    #: The file store deletes idle and terminal threads untouched this long (0: never); the
    #: Redis store takes ``?retention_days=`` in its URL.
    state_retention_days: float = 30.0
    #: How far the file store's writes go before the event that depends on
    #: them: ``fsync`` (on disk: survives a power cut) or ``process`` (in the
    #: page cache: survives the adapter's crash or kill -9, not the machine's).
    #: The Redis store's durability is the Redis server's own.
    durability: str = "fsync"
    #: Seconds a connection may take to send a request's headers (0: no limit beyond keep-alive);
    #: applied by :class:`~aguiadapter.web.server.AdapterRunner` (``python -m aguiadapter``).
    header_timeout_seconds: float = 10.0
    #: ``Host`` names accepted besides the loopback ones on a loopback listener without auth.
    allowed_hosts: tuple[str, ...] = attrs.field(default=(), converter=_lower_names)
    #: Origins (``scheme://host[:port]``) whose pages may call the server (CORS).
    allowed_origins: tuple[str, ...] = attrs.field(default=(), converter=_origins)
    #: Serve the embedded scripted demo agent (canned answers, for trying the
    #: server and for tests); excludes ``a2a_url``. Without either, ``create_app`` refuses.
    demo: bool = False
    #: Shown by ``/health`` and the banner: the runtime at ``a2a_url`` is an
    #: ``iac-code a2a`` child this server supervises (``--spawn-iac-code``).
    spawned_runtime: bool = False
    #: How long a thread's conversation read from the runtime is kept in memory
    #: (``GET /threads/{id}/messages``; 0: read on every request).
    history_cache_seconds: float = 5.0
    #: Transcript reads in flight at once in this process (more wait, then 503 ``HISTORY_UNAVAILABLE``).
    max_history_reads: int = 4
    #: The JSON bytes of messages one history page holds at most (at least one turn is always sent).
    history_page_bytes: int = 512 * 1024
    #: The longest transcript read from the runtime (or its session file); a
    #: longer one is refused (503 ``HISTORY_UNAVAILABLE``, not retried).
    history_max_bytes: int = 32 * 1024 * 1024
    #: The wire profile (``--compat``): AG-UI 1.0 (the default), or ``iac-code-agui`` for the
    #: protocol reference's forms where they differ (stops as ``RUN_ERROR CANCELLED``, unusable
    #: content parts refused). A name is accepted as well as a :class:`Profile`.
    profile: Profile = attrs.field(default=DEFAULT_PROFILE, converter=parse_profile)
    #: A pool of named runtimes (``--runtime NAME=URL``); excludes ``a2a_url``, which is a pool
    #: of one named ``default``. Each takes ``a2a_token`` unless its spec has a token of its own.
    runtimes: tuple[RuntimeSpec, ...] = attrs.field(default=(), converter=check_pool)
    #: The TOML file the pool was read from (``--runtimes-file``; read again on SIGHUP).
    runtimes_file: Path | None = None
    #: How often each runtime of the pool is probed (``GET /health`` of the runtime).
    runtime_probe_seconds: float = 5.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ, **overrides: Any) -> Config:
        """The settings ``python -m aguiadapter`` would use with no option
        given: the same environment variables, the same defaults (an empty
        variable counts as unset). ``overrides`` set fields by name, e.g.
        ``demo=True``. Raises ``ValueError`` naming a variable whose value is
        not one."""
        jwks = env.get(ENV_JWT_JWKS_FILE) or None
        jwks_url = env.get(ENV_JWT_JWKS_URL) or None
        jwt = None if jwks is None and jwks_url is None else JwtSettings(
            jwks_file=None if jwks is None else Path(jwks).expanduser(),
            jwks_url=jwks_url,
            jwks_refresh_seconds=env_seconds(env, ENV_JWT_JWKS_REFRESH, 10.0),
            issuer=env.get(ENV_JWT_ISSUER) or None,
            audience=env.get(ENV_JWT_AUDIENCE) or None,
            principal_claim=env.get(ENV_JWT_PRINCIPAL_CLAIM) or "sub",
        )
        settings: dict[str, Any] = {
            "state_dir": default_state_dir(None, env),
            "a2a_url": env.get(ENV_A2A_URL) or None,
            "a2a_token": env.get(ENV_A2A_TOKEN) or None,
            "auth_token": env.get(ENV_AUTH_TOKEN) or None,
            "allowed_cwds": allowed_cwds_from(env),
            "store_url": env.get(ENV_STORE) or None,
            "jwt": jwt,
            "disconnect_grace_seconds": env_seconds(env, ENV_DISCONNECT_GRACE, 0.0),
            "replay_retention_seconds": env_seconds(env, ENV_REPLAY_RETENTION, 600.0),
            "metrics": env_flag(env, ENV_METRICS),
            "metrics_port": env_port(env, ENV_METRICS_PORT, None),
            "metrics_host": env.get(ENV_HOST) or "127.0.0.1",
            "runtime_config_dir": default_config_dir(env),
            "max_new_threads_per_user": env_count(env, ENV_MAX_NEW_THREADS, 60),
            "state_retention_days": env_seconds(env, ENV_STATE_RETENTION, 30.0),
            "durability": env.get(ENV_DURABILITY) or "fsync",
            "header_timeout_seconds": env_seconds(env, ENV_HEADER_TIMEOUT, 10.0),
            "allowed_hosts": split_list(env.get(ENV_ALLOWED_HOSTS)),
            "allowed_origins": env_origins(env, ENV_ALLOWED_ORIGINS),
            "profile": env_profile(env, ENV_COMPAT),
            "heartbeat_seconds": env_seconds(env, ENV_HEARTBEAT, 15.0),
            "interrupt_ttl_seconds": env_seconds(env, ENV_INTERRUPT_TTL, 3600.0),
            "max_active_runs": env_count(env, ENV_MAX_ACTIVE_RUNS, 0) or None,
            "max_active_runs_per_user": env_count(env, ENV_MAX_ACTIVE_RUNS_PER_USER, 0) or None,
            "run_log_max_events": env_count(env, ENV_RUN_LOG_MAX_EVENTS, 10_000),
            "run_log_max_bytes": env_count(env, ENV_RUN_LOG_MAX_BYTES, 8 * 1024 * 1024),
            "history_cache_seconds": env_seconds(env, ENV_HISTORY_CACHE, 5.0),
            "max_history_reads": env_count(env, ENV_MAX_HISTORY_READS, 4),
            "history_page_bytes": env_count(env, ENV_HISTORY_PAGE_BYTES, 512 * 1024),
            "history_max_bytes": env_count(env, ENV_HISTORY_MAX_BYTES, 32 * 1024 * 1024),
            "runtimes": env_runtimes(env, ENV_RUNTIMES),
            "runtimes_file": Path(env[ENV_RUNTIMES_FILE]).expanduser() if env.get(ENV_RUNTIMES_FILE) else None,
        }
        if env.get(ENV_METRICS_HOST):
            settings["metrics_host"] = env[ENV_METRICS_HOST]
        return cls(**{**settings, **overrides})

    def __attrs_post_init__(self) -> None:
        if self.demo and self.a2a_url:
            raise ValueError("the demo runtime (--demo) and an A2A runtime URL exclude each other: choose one")
        self._check_pool()
        if self.a2a_url is not None:
            parts = urlsplit(self.a2a_url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"the A2A runtime URL must be an http:// or https:// URL, not {self.a2a_url[:200]!r}")
        if not self.allowed_cwds and not self.demo:
            # The reference's default: its working directory and the temporary directory.
            object.__setattr__(self, "allowed_cwds", default_workspace_roots())
        if self.auth_token and self.jwt is not None:
            raise ValueError(
                f"{ENV_AUTH_TOKEN} and a JWKS file (--jwt-jwks-file, {ENV_JWT_JWKS_FILE}) exclude each other: "
                "configure one way to authenticate callers"
            )
        for root in self.allowed_cwds:
            if not root.strip() or not os.path.isabs(root):
                raise ValueError(
                    f"an allowed workspace root (--allowed-cwd, {ENV_ALLOWED_CWDS}) must be an absolute path, "
                    f"not {root!r}"
                )
        if self.jwt is not None and not (self.jwt.audience or "").strip():
            raise ValueError(
                f"JWT mode needs an audience (--jwt-audience, {ENV_JWT_AUDIENCE}): without one a token "
                "minted for another service would open this one"
            )
        for name in ("max_active_runs", "max_active_runs_per_user"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1, not {value}")
        if self.max_new_threads_per_user < 0 or self.new_threads_window_seconds <= 0:
            raise ValueError("max_new_threads_per_user must not be negative and its window must be positive")
        for name in ("disconnect_grace_seconds", "replay_retention_seconds", "header_timeout_seconds",
                     "state_retention_days"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, not {getattr(self, name)}")
        if self.durability not in DURABILITY_CHOICES:
            raise ValueError(f"durability ({ENV_DURABILITY}) must be one of {', '.join(DURABILITY_CHOICES)}, "
                             f"not {self.durability!r}")
        if not self.runtime_probe_seconds > 0:
            raise ValueError("runtime_probe_seconds must be positive")
        if self.history_max_bytes < 1:
            raise ValueError("history_max_bytes must be at least 1")
        if self.history_cache_seconds < 0 or self.max_history_reads < 1 or self.history_page_bytes < 1:
            raise ValueError("history_cache_seconds must not be negative, max_history_reads and "
                             "history_page_bytes at least 1")
        if self.run_log_max_events < 1 or self.run_log_max_bytes < 1024:
            raise ValueError("run_log_max_events must be at least 1 and run_log_max_bytes at least 1024")

    def _check_pool(self) -> None:
        """One way to name the runtimes; a runtimes file is read now (its errors are the config's)."""
        named = bool(self.runtimes) and self.runtimes_file is None  # a file fills ``runtimes`` too
        given = [name for name, on in (("--a2a-url", self.a2a_url), ("--runtime", named),
                                       ("--runtimes-file", self.runtimes_file), ("--demo", self.demo)) if on]
        if len(given) > 1:
            raise ValueError(f"{' and '.join(given)} exclude each other: name the runtimes one way")
        if self.runtimes_file is not None:
            object.__setattr__(self, "runtimes", load_runtimes_file(self.runtimes_file))

    def pool_specs(self) -> tuple[RuntimeSpec, ...]:
        """The runtimes of the pool: the named ones, or ``a2a_url`` as the one named ``default``
        (so that thread records written before pools keep their runtime); empty for the demo."""
        if self.runtimes:
            return self.runtimes
        if self.a2a_url is None:
            return ()
        return (RuntimeSpec(DEFAULT_RUNTIME, self.a2a_url, config_dir=self.runtime_config_dir),)

    @property
    def runtime_kind(self) -> str:
        """``demo``, ``iac-code`` (a supervised child) or ``a2a``; ``none`` before one is chosen."""
        if self.demo:
            return "demo"
        if self.runtimes:
            return "iac-code" if self.spawned_runtime else "a2a"
        if self.a2a_url is None:
            return "none"
        return "iac-code" if self.spawned_runtime else "a2a"

    @property
    def resumable(self) -> bool:
        """Whether runs keep an event log (ids, re-attach)."""
        return self.replay_retention_seconds > 0 or self.disconnect_grace_seconds > 0


def normalise_origin(origin: str) -> str:
    """``scheme://host[:port]`` in lower case, without a trailing slash (``ValueError`` if not an origin)."""
    parts = urlsplit(origin.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.path not in ("", "/") or parts.query:
        raise ValueError(f"not an origin (scheme://host[:port]): {origin!r}")
    return f"{parts.scheme}://{parts.netloc}".lower()


def split_list(value: str | None) -> tuple[str, ...]:
    """A comma-separated list of an environment variable (empty items dropped)."""
    return tuple(part.strip() for part in (value or "").split(",") if part.strip())


def env_origins(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    """Origins from a comma-separated variable, normalised (``ValueError`` naming the variable)."""
    try:
        return tuple(normalise_origin(origin) for origin in split_list(env.get(name)))
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


def env_runtimes(env: Mapping[str, str], name: str) -> tuple[RuntimeSpec, ...]:
    """The pool a variable names (``a=URL,b=URL``), ``ValueError`` naming the variable."""
    try:
        return parse_runtimes(env.get(name))
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


def default_config_dir(env: Mapping[str, str] = os.environ) -> Path:
    """``$IAC_CODE_CONFIG_DIR`` or ``~/.iac-code``, as the reference product."""
    configured = env.get(ENV_CONFIG_DIR, "").strip()
    return Path(configured).expanduser() if configured else Path.home() / ".iac-code"


def default_state_dir(config_dir: Path | None = None, env: Mapping[str, str] = os.environ) -> Path:
    """``$IAC_CODE_AGUI_STATE_DIR`` or ``<config-dir>/agui``."""
    configured = env.get(ENV_STATE_DIR, "").strip()
    if configured:
        return Path(configured).expanduser()
    return (config_dir or default_config_dir(env)) / "agui"


_N = TypeVar("_N", int, float)
_V = TypeVar("_V")
_D = TypeVar("_D")

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


def _number(text: str, kind: Callable[[str], _N], what: str) -> _N:
    """``text`` read as ``kind``; ``ValueError`` naming ``what`` it is not."""
    try:
        return kind(text)
    except ValueError:
        raise ValueError(f"not {what}: {text!r}") from None


def parse_port(text: str) -> int:
    """A TCP port number (0: any free one); ``ValueError`` for anything else."""
    port = _number(text, int, "a port number")
    if not 0 <= port <= 65535:
        raise ValueError(f"a port is between 0 and 65535, not {port}")
    return port


def parse_seconds(text: str) -> float:
    """A duration, not negative; ``ValueError`` for anything else."""
    value = _number(text, float, "a number of seconds")
    if not value >= 0:
        raise ValueError(f"must not be negative, not {text}")
    return value


def parse_count(text: str) -> int:
    """A whole number, not negative (0 usually means no limit); ``ValueError`` for anything else."""
    value = _number(text, int, "a whole number")
    if value < 0:
        raise ValueError(f"must not be negative, not {value}")
    return value


def _from_env(env: Mapping[str, str], name: str, parse: Callable[[str], _V], default: _D) -> _V | _D:
    """``env[name]`` read by ``parse`` (empty means unset: ``default``); a
    ``ValueError`` names the variable."""
    raw = env.get(name) or ""
    try:
        return parse(raw) if raw else default
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


def env_count(env: Mapping[str, str], name: str, default: int) -> int:
    """A count from the environment (empty means unset)."""
    return _from_env(env, name, parse_count, default)


def env_port(env: Mapping[str, str], name: str, default: int | None) -> int | None:
    """A port from the environment (empty means unset)."""
    return _from_env(env, name, parse_port, default)


def env_seconds(env: Mapping[str, str], name: str, default: float) -> float:
    """A duration from the environment (empty means unset)."""
    return _from_env(env, name, parse_seconds, default)


def env_flag(env: Mapping[str, str], name: str) -> bool:
    """An on/off switch from the environment (empty means off)."""
    raw = (env.get(name) or "").strip().lower()
    if raw not in _TRUE + _FALSE:
        raise ValueError(f"{name} must be 1/true/yes/on or 0/false/no/off, not {raw!r}")
    return raw in _TRUE


def env_choice(env: Mapping[str, str], name: str, choices: tuple[str, ...], default: str) -> str:
    """One of ``choices`` (case-insensitive) from the environment (empty means ``default``)."""
    raw = (env.get(name) or "").strip()
    for choice in choices:
        if raw.lower() == choice.lower():
            return choice
    if raw:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, not {raw!r}")
    return default


def env_profile(env: Mapping[str, str], name: str) -> Profile:
    """The wire profile from the environment (empty means the default, AG-UI 1.0)."""
    try:
        return parse_profile(env.get(name))
    except ValueError:
        raise ValueError(f"{name} must be one of {', '.join(COMPAT_CHOICES)}, not {env.get(name)!r}") from None


def default_workspace_roots() -> tuple[str, ...]:
    """Where runs may work when nothing is configured, as ``iac-code agui``:
    the server's working directory and the temporary directory."""
    return (os.getcwd(), tempfile.gettempdir())


def allowed_cwds_from(env: Mapping[str, str]) -> tuple[str, ...]:
    """The workspace roots the environment names (ours, else the runtime's variable)."""
    return split_allowed_cwds(env.get(ENV_ALLOWED_CWDS) or env.get(ENV_RUNTIME_ALLOWED_CWDS))


def split_allowed_cwds(value: str | None) -> tuple[str, ...]:
    """``IAC_CODE_AGUI_ALLOWED_CWDS`` holds roots separated by ``os.pathsep``."""
    if not value:
        return ()
    return tuple(part for part in value.split(os.pathsep) if part.strip())
