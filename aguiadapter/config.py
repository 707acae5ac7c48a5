"""Settings of one adapter instance, and where they come from.

Command-line options win over environment variables, which win over the
defaults. Environment variables use the names of the reference product so
that this server is a drop-in replacement for it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from urllib.parse import urlsplit

import attrs

MAX_BODY_BYTES = 12 * 1024 * 1024
MAX_CANCEL_BODY_BYTES = 64 * 1024

ENV_AUTH_TOKEN = "IAC_CODE_AGUI_AUTH_TOKEN"
ENV_HOST = "IAC_CODE_AGUI_HOST"
ENV_PORT = "IAC_CODE_AGUI_PORT"
ENV_A2A_URL = "IAC_CODE_AGUI_A2A_URL"
ENV_A2A_TOKEN = "IAC_CODE_AGUI_A2A_TOKEN"
ENV_STATE_DIR = "IAC_CODE_AGUI_STATE_DIR"
ENV_ALLOWED_CWDS = "IAC_CODE_AGUI_ALLOWED_CWDS"
ENV_CONFIG_DIR = "IAC_CODE_CONFIG_DIR"
ENV_STORE = "IAC_CODE_AGUI_STORE"
ENV_JWT_JWKS_FILE = "IAC_CODE_AGUI_JWT_JWKS_FILE"
ENV_JWT_ISSUER = "IAC_CODE_AGUI_JWT_ISSUER"
ENV_JWT_AUDIENCE = "IAC_CODE_AGUI_JWT_AUDIENCE"
ENV_JWT_PRINCIPAL_CLAIM = "IAC_CODE_AGUI_JWT_PRINCIPAL_CLAIM"
ENV_DISCONNECT_GRACE = "IAC_CODE_AGUI_DISCONNECT_GRACE_SECONDS"
ENV_REPLAY_RETENTION = "IAC_CODE_AGUI_REPLAY_RETENTION_SECONDS"
ENV_ALLOWED_HOSTS = "IAC_CODE_AGUI_ALLOWED_HOSTS"
ENV_STATE_RETENTION = "IAC_CODE_AGUI_STATE_RETENTION_DAYS"
ENV_HEADER_TIMEOUT = "IAC_CODE_AGUI_HEADER_TIMEOUT_SECONDS"
ENV_MAX_NEW_THREADS = "IAC_CODE_AGUI_MAX_NEW_THREADS_PER_USER"
ENV_ALLOWED_ORIGINS = "IAC_CODE_AGUI_ALLOWED_ORIGINS"


@attrs.frozen
class JwtSettings:
    """Verified identity: bearer JWTs checked against the keys of a JWKS file."""

    jwks_file: Path
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
    #: New threads a verified user may start per ``new_threads_window_seconds`` (0: no limit);
    #: beyond it 429 ``TOO_MANY_THREADS`` with ``Retry-After``.
    max_new_threads_per_user: int = 60
    new_threads_window_seconds: float = 60.0
    #: The file store deletes idle and terminal threads untouched this long (0: never); the
    #: Redis store takes ``?retention_days=`` in its URL.
    state_retention_days: float = 30.0
    #: Seconds a connection may take to send a request's headers (0: no limit beyond keep-alive);
    #: applied by :class:`~aguiadapter.web.server.AdapterRunner` (``python -m aguiadapter``).
    header_timeout_seconds: float = 10.0
    #: ``Host`` names accepted besides the loopback ones on a loopback listener without auth.
    allowed_hosts: tuple[str, ...] = attrs.field(default=(), converter=_lower_names)
    #: Origins (``scheme://host[:port]``) whose pages may call the server (CORS).
    allowed_origins: tuple[str, ...] = attrs.field(default=(), converter=_origins)

    def __attrs_post_init__(self) -> None:
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
        if self.run_log_max_events < 1 or self.run_log_max_bytes < 1024:
            raise ValueError("run_log_max_events must be at least 1 and run_log_max_bytes at least 1024")

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


def split_allowed_cwds(value: str | None) -> tuple[str, ...]:
    """``IAC_CODE_AGUI_ALLOWED_CWDS`` holds roots separated by ``os.pathsep``."""
    if not value:
        return ()
    return tuple(part for part in value.split(os.pathsep) if part.strip())
