"""Checked by ``mypy --strict`` (tox -e lint), never run: a host application
that uses only the documented imports from the package root type-checks.

Were a public name typed ``object`` (the lazy ``__getattr__`` alone), every
line below would be an error.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from aguiadapter import (
    PRINCIPAL_KEY,
    AdapterRunner,
    Config,
    JwtSettings,
    PrincipalHook,
    ThreadStore,
    Unauthorized,
    __version__,
    create_app,
    create_metrics_app,
    open_store,
    principal_from_request_key,
)


async def from_session(request: web.Request) -> str | None:
    user = request.get(PRINCIPAL_KEY)
    if user == "banned":
        raise Unauthorized()
    return user if isinstance(user, str) else None


def build(state_dir: Path) -> web.Application:
    host = web.Application()
    hook: PrincipalHook = from_session
    adapter: web.Application = create_app(Config(state_dir=state_dir, demo=True, metrics=True), principal=hook)
    host.add_subapp("/agui/", adapter)
    host.add_subapp("/metrics-app/", create_metrics_app(adapter))
    other: web.Application = create_app(Config.from_env(demo=True), principal=principal_from_request_key)
    host.add_subapp("/other/", other)
    shared: ThreadStore = open_store(None, state_dir=state_dir / "shared")
    host.add_subapp("/shared/", create_app(Config(state_dir=state_dir, demo=True), store=shared))
    settings: JwtSettings | None = Config.from_env().jwt
    assert settings is None or settings.principal_claim
    return host


async def serve(state_dir: Path) -> None:
    runner: web.AppRunner = AdapterRunner(build(state_dir))
    await runner.setup()
    await runner.cleanup()


VERSION: str = __version__
