"""Who is calling: nobody in particular, a holder of the shared token, or a verified user.

One of four modes, from the configuration or ``create_app``'s ``principal`` hook:

- **open** (no token, no JWKS file): every request is let in, nobody is named;
- **shared token** (``IAC_CODE_AGUI_AUTH_TOKEN``): ``Authorization: Bearer
  <token>`` must match (compared in constant time); nobody is named either,
  so a thread's ``userId`` is whatever the first run's body said;
- **verified identity** (``--jwt-jwks-file``): the bearer token is a JWT
  checked by :mod:`aguiadapter.web.jwks`; its principal claim names the
  user, who owns the threads they start (:mod:`aguiadapter.threads.access`);
- **the host's user** (``create_app(config, principal=hook)``): an app that
  mounts the adapter and already knows who calls (its sessions, its auth
  middleware) names the user; ownership, run limits and metrics then work as
  with JWTs. The hook is a coroutine from the request to the principal
  (``None``: nobody signed in, 401), or :func:`principal_from_request_key`,
  which reads what the host's middleware put in ``request[PRINCIPAL_KEY]``.

A refusal is ``UNAUTHORIZED`` (401) with a ``WWW-Authenticate`` challenge
(RFC 6750). No token reaches a log line, an error message or a record: the
log says only why a token was refused.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable
from typing import Final, Protocol

import attrs
from aiohttp import web

from ..config import Config, JwtSettings
from ..errors import AdapterError, ErrorCode
from ..logs import log_fields
from ..protocol.inputs import RunAgentInput

log = logging.getLogger(__name__)

REALM = "aguiadapter"
#: Message ids of refused tokens whose reason is worth telling the caller.
_MESSAGES = {"expired": "unauthorized_token_expired"}


class Unauthorized(AdapterError):
    """``UNAUTHORIZED`` with its challenge; ``presented`` when a token came and was refused."""

    def __init__(self, message_id: str | None = None, *, presented: bool = False) -> None:
        super().__init__(ErrorCode.UNAUTHORIZED, message_id)
        self.presented = presented

    def response_headers(self) -> dict[str, str]:
        """``WWW-Authenticate: Bearer realm=...`` (with ``error="invalid_token"`` for a refused token)."""
        challenge = f'Bearer realm="{REALM}"'
        if self.presented:
            challenge += ', error="invalid_token"'
        return {"WWW-Authenticate": challenge}


class Authenticator(Protocol):
    """Decides whether a request may go on, and names its user when it can."""

    async def start(self) -> None:
        """Load what checking needs (a JWKS file); fail here, not on the first request."""

    async def close(self) -> None:
        """Release what ``start`` opened (a JWKS URL's connections)."""

    async def principal(self, request: web.Request) -> str | None:
        """The verified user (``None`` when the mode names nobody); ``Unauthorized`` to refuse."""


class OpenAccess:
    """No authentication configured: every request goes on, unnamed."""

    async def start(self) -> None:
        """Nothing to load."""

    async def close(self) -> None:
        """Nothing to release."""

    async def principal(self, request: web.Request) -> str | None:
        """Nobody is named."""
        return None


@attrs.define
class SharedToken:
    """One bearer token shared by every caller (the reference's mode)."""

    token: str = attrs.field(repr=False)

    async def start(self) -> None:
        """Nothing to load."""

    async def close(self) -> None:
        """Nothing to release."""

    async def principal(self, request: web.Request) -> str | None:
        """Nobody is named; a missing or different token is refused."""
        given = bearer_token(request)
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            raise Unauthorized(presented=True)
        return None


class VerifiedIdentity:
    """Bearer JWTs verified against a JWKS file or URL; the principal claim names the user."""

    def __init__(self, settings: JwtSettings) -> None:
        try:
            from .jwks import JwtVerifier
            from .jwks_url import JwksUrl
        except ImportError as exc:
            raise RuntimeError(
                "--jwt-jwks-file and --jwt-jwks-url need the jwt extra: pip install 'aguiadapter[jwt]'"
            ) from exc
        url = settings.jwks_url
        source = None if url is None else JwksUrl(url, settings.jwks_refresh_seconds,
                                                  settings.jwks_fetch_timeout_seconds)
        self.verifier = JwtVerifier(settings, source)

    async def start(self) -> None:
        """Read the key set; an unusable file or URL stops the start."""
        await self.verifier.start()

    async def close(self) -> None:
        """Close the key source's connections."""
        await self.verifier.close()

    async def principal(self, request: web.Request) -> str | None:
        """The user the token names."""
        from .jwks import TokenRefused

        token = bearer_token(request)
        try:
            return await self.verifier.principal(token)
        except TokenRefused as exc:
            # The claimed kid and iss (never the token): a rotation or a client
            # of another environment shows at a glance.
            log_fields(log, logging.INFO, "JWT refused", {"reason": exc.reason, "kid": exc.kid, "iss": exc.iss})
            raise Unauthorized(_MESSAGES.get(exc.reason), presented=True) from None


#: A coroutine from the request to the verified user (``None``: nobody, 401);
#: it may also raise :class:`Unauthorized` itself.
PrincipalHook = Callable[[web.Request], Awaitable["str | None"]]

#: Where :func:`principal_from_request_key` looks: the host's middleware sets
#: ``request[PRINCIPAL_KEY] = "user-id"`` before the adapter's handler runs
#: (a typed request key, so that aiohttp does not warn and mypy checks the value).
PRINCIPAL_KEY: Final = web.RequestKey("aguiadapter.principal", str)

#: Longest principal a hook may name, in characters (it is stored with each thread).
MAX_PRINCIPAL_CHARS: Final = 1024


async def principal_from_request_key(request: web.Request) -> str | None:
    """The hook for hosts whose middleware names the user in ``request[PRINCIPAL_KEY]``."""
    value = request.get(PRINCIPAL_KEY)
    return value if isinstance(value, str) else None


@attrs.define
class HostPrincipal:
    """The host application names the user, through its hook."""

    hook: PrincipalHook

    async def start(self) -> None:
        """Nothing to load."""

    async def close(self) -> None:
        """Nothing to release."""

    async def principal(self, request: web.Request) -> str | None:
        """The user the hook names; nobody (or a name no thread can hold) is refused."""
        user = await self.hook(request)
        if not isinstance(user, str) or not user or len(user) > MAX_PRINCIPAL_CHARS:
            raise Unauthorized()
        return user


def authenticator_for(config: Config, hook: PrincipalHook | None = None) -> Authenticator:
    """The mode the configuration (or the host's hook) asks for; one at a time."""
    if hook is not None:
        if config.jwt is not None or config.auth_token:
            raise ValueError("a principal hook excludes Config.auth_token and Config.jwt: the host names the user")
        return HostPrincipal(hook)
    if config.jwt is not None:
        return VerifiedIdentity(config.jwt)
    if config.auth_token:
        return SharedToken(config.auth_token)
    return OpenAccess()


def bearer_token(request: web.Request) -> str:
    """The token of ``Authorization: Bearer <token>``; ``Unauthorized`` when there is none."""
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    token = given.strip()
    if scheme.lower() != "bearer" or not token:
        raise Unauthorized()
    return token


def named_user_id(request: web.Request, principal: str | None) -> str | None:
    """The ``userId`` a thread route's caller names (``?userId=``), for the thread to match.

    Every thread route checks it as ``GET /threads`` and ``POST /connect``
    do: with the shared token (or none) a thread started with another
    ``userId`` answers as a thread that does not exist. With a verified user
    it may only repeat that user (400 otherwise) and checks nothing more:
    the user's key already does. ``None``: nothing to check. Checked before
    the thread is looked up, so that a refusal tells nothing about it.
    """
    user_id = request.query.get("userId")
    if user_id is None:
        return None
    if not user_id or len(user_id) > MAX_PRINCIPAL_CHARS:
        raise AdapterError(ErrorCode.INVALID_INPUT, "thread_list_bad_user_id")
    if principal is not None:
        if user_id != principal:
            raise AdapterError(ErrorCode.INVALID_INPUT, "input_user_id_not_principal", path="userId")
        return None
    return user_id


def bind_user_id(run_input: RunAgentInput, principal: str | None) -> RunAgentInput:
    """With a verified user, ``forwardedProps.iacCode.userId`` is that user.

    An absent ``userId`` becomes the principal (it reaches the runtime and
    the thread's binding as such); a different one is refused.
    """
    if principal is None:
        return run_input
    props = run_input.iac_code
    if props.user_id is None:
        forwarded = attrs.evolve(run_input.forwarded_props, iac_code=attrs.evolve(props, user_id=principal))
        return attrs.evolve(run_input, forwarded_props=forwarded)
    if props.user_id != principal:
        raise AdapterError(ErrorCode.INVALID_INPUT, "input_user_id_not_principal", path="forwardedProps.iacCode.userId")
    return run_input
