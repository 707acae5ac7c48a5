"""--jwt-jwks-url: keys from an identity provider's URL, served here by a
real HTTP server on loopback that the tests rotate, break and count."""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from aguiadapter.config import Config, JwtSettings
from aguiadapter.demo.runtime import DemoRuntime
from aguiadapter.web.jwks_url import cache_seconds
from tests.support.adapter import RunningAdapter, run_body, start_adapter
from tests.support.tokens import AUDIENCE, ISSUER, SigningKey, bearer
from tests.support.serve import on_loopback, port_of

REFRESH = 0.5


class Provider:
    """An identity provider's JWKS endpoint: what it serves, and how often it was asked."""

    def __init__(self, *keys: SigningKey) -> None:
        self.keys = list(keys)
        self.status = 200
        self.cache_control: str | None = None
        self.hang = False
        self.padding = 0
        self.requests = 0
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def jwks(self, request: web.Request) -> web.Response:
        self.requests += 1
        if self.hang:
            await asyncio.sleep(30)
        headers = {"Cache-Control": self.cache_control} if self.cache_control else {}
        document: dict[str, Any] = {"keys": [key.jwk for key in self.keys]}
        if self.padding:
            document["x-padding"] = "p" * self.padding  # a member a verifier ignores
        body = json.dumps(document)
        return web.Response(text=body, status=self.status, content_type="application/json", headers=headers)

    async def start(self) -> Provider:
        app = web.Application()
        app.router.add_get("/.well-known/jwks.json", self.jwks)
        self._runner = web.AppRunner(app, shutdown_timeout=0.1)
        await on_loopback(self._runner)
        port = port_of(self._runner)
        self.url = f"http://127.0.0.1:{port}/.well-known/jwks.json"
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
def first_key() -> SigningKey:
    return SigningKey("ES256", kid="2026-11")


@pytest.fixture
async def provider(first_key: SigningKey) -> AsyncIterator[Provider]:
    served = await Provider(first_key).start()
    try:
        yield served
    finally:
        await served.close()


@pytest.fixture
async def jwt_adapter(tmp_path: Path, demo: DemoRuntime, provider: Provider) -> AsyncIterator[RunningAdapter]:
    settings = JwtSettings(jwks_url=provider.url, issuer=ISSUER, audience=AUDIENCE, jwks_refresh_seconds=REFRESH,
                           jwks_fetch_timeout_seconds=1.0)
    running = await start_adapter(tmp_path / "state", demo.url, allowed_cwds=(str(tmp_path / "workspaces"),),
                                  jwt=settings)
    try:
        yield running
    finally:
        await running.close()


async def status_of(adapter: RunningAdapter, token: str) -> int:
    async with adapter.session.get(adapter.url + "threads", headers=bearer(token)) as resp:
        await resp.read()
        return resp.status


async def test_a_key_rotated_in_at_the_provider_is_accepted_after_a_refresh(
    jwt_adapter: RunningAdapter, provider: Provider, first_key: SigningKey, workspace: Path
) -> None:
    assert await status_of(jwt_adapter, first_key.token("alice")) == 200
    reply = await jwt_adapter.run(run_body(thread_id="t-url", text="hi", cwd=str(workspace)),
                              headers=bearer(first_key.token("alice")))
    assert reply.status == 200 and reply.events()[-1]["type"] == "RUN_FINISHED"
    rotated = SigningKey("ES256", kid="2026-12")
    provider.keys = [first_key, rotated]
    await asyncio.sleep(REFRESH)  # the fetch at start was just now
    assert await status_of(jwt_adapter, rotated.token("alice")) == 200, "the new kid made the adapter fetch again"
    provider.keys = [rotated]  # the old key retired: refused once the set is fetched again
    await asyncio.sleep(REFRESH)
    provider.cache_control = None
    assert await status_of(jwt_adapter, SigningKey("ES256", kid="unknown").token("alice")) == 401  # fetches again
    assert await status_of(jwt_adapter, first_key.token("alice")) == 401


async def test_an_outage_of_the_url_keeps_the_last_good_set(
    jwt_adapter: RunningAdapter, provider: Provider, first_key: SigningKey, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "aguiadapter.web.jwks_url")
    provider.status = 503
    for _ in range(3):
        await asyncio.sleep(REFRESH)
        # An unknown kid makes it try the URL, which fails: the known key still works.
        assert await status_of(jwt_adapter, SigningKey("ES256", kid=secrets.token_hex(4)).token()) == 401
        assert await status_of(jwt_adapter, first_key.token("alice")) == 200
    warnings = [record.getMessage() for record in caplog.records if "not used" in record.getMessage()]
    assert len(warnings) == 1 and "HTTP 503" in warnings[0] and "keeping the last good key set (1 keys)" in warnings[0]
    # Down and hanging: a fetch gives up after its timeout, the requests waiting on it go on.
    provider.status, provider.hang = 200, True
    await asyncio.sleep(REFRESH)
    started = time.monotonic()
    assert await status_of(jwt_adapter, SigningKey("ES256", kid="hung").token()) == 401
    assert time.monotonic() - started < 5
    assert await status_of(jwt_adapter, first_key.token("alice")) == 200
    provider.hang = False
    await asyncio.sleep(REFRESH)
    assert await status_of(jwt_adapter, SigningKey("ES256", kid="again").token()) == 401
    assert any("answers again" in record.getMessage() for record in caplog.records)


async def test_tokens_naming_unknown_kids_fetch_at_most_once_per_interval(
    jwt_adapter: RunningAdapter, provider: Provider, first_key: SigningKey
) -> None:
    await asyncio.sleep(REFRESH)  # the fetch at start is one interval old: one more is allowed
    before = provider.requests
    started = time.monotonic()
    refused = await asyncio.gather(*(status_of(jwt_adapter, SigningKey("HS256", kid=f"forged-{n}").token())
                                     for n in range(60)))
    for n in range(20):
        refused.append(await status_of(jwt_adapter, SigningKey("HS256", kid=f"late-{n}").token()))
    elapsed = time.monotonic() - started
    assert set(refused) == {401}
    fetched = provider.requests - before
    assert 1 <= fetched <= int(elapsed / REFRESH) + 1, (fetched, elapsed)
    assert await status_of(jwt_adapter, first_key.token("alice")) == 200


async def test_the_refusal_log_names_the_kid_and_issuer_never_the_token(
    jwt_adapter: RunningAdapter, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "aguiadapter.web.auth")
    token = SigningKey("ES256", kid="kid-from-staging").token("alice", iss="https://staging.example.test/")
    assert await status_of(jwt_adapter, token) == 401
    (line,) = [record for record in caplog.records if record.getMessage().startswith("JWT refused")]
    assert line.fields == {"reason": "unknown_key", "kid": "kid-from-staging",  # type: ignore[attr-defined]
                           "iss": "https://staging.example.test/"}
    assert token not in caplog.text and token.split(".")[2] not in caplog.text


async def test_the_cache_control_of_the_set_decides_when_it_is_fetched_again(
    jwt_adapter: RunningAdapter, provider: Provider, first_key: SigningKey
) -> None:
    # The set fetched at start came without Cache-Control: kept 300 s, known kids fetch nothing.
    for _ in range(5):
        assert await status_of(jwt_adapter, first_key.token()) == 200
    assert provider.requests == 1
    provider.cache_control = "public, max-age=0"  # kept the refresh interval at least
    await asyncio.sleep(REFRESH)
    assert await status_of(jwt_adapter, SigningKey("ES256", kid="new").token()) == 401  # fetched: max-age=0 now
    assert provider.requests == 2
    assert await status_of(jwt_adapter, first_key.token()) == 200
    assert provider.requests == 2, "within the refresh interval nothing is fetched"
    await asyncio.sleep(REFRESH)
    assert await status_of(jwt_adapter, first_key.token()) == 200  # past its age: a fetch starts behind it
    await asyncio.sleep(0.2)
    assert provider.requests == 3
    assert cache_seconds("max-age=600, must-revalidate", 10) == 600
    assert cache_seconds("no-store", 10) == 10 and cache_seconds(None, 10) == 300
    assert cache_seconds("max-age=99999999", 10) == 86_400


async def test_a_url_that_gives_no_usable_set_stops_the_start(tmp_path: Path, demo: DemoRuntime) -> None:
    from aguiadapter.web.jwks import JwksError

    broken = await Provider().start()  # an empty set
    try:
        settings = JwtSettings(jwks_url=broken.url, issuer=ISSUER, audience=AUDIENCE)
        with pytest.raises(JwksError, match="no usable key"):
            await start_adapter(tmp_path / "state", demo.url, jwt=settings)
    finally:
        await broken.close()


def test_the_url_must_be_https_or_loopback_and_the_only_key_source(tmp_path: Path) -> None:
    def settings(**given: Any) -> JwtSettings:
        return JwtSettings(audience=AUDIENCE, **given)

    for url in ("http://idp.example.test/jwks.json", "ftp://127.0.0.1/jwks", "https:///jwks"):
        with pytest.raises(ValueError, match="--jwt-jwks-url must be an https://"):
            settings(jwks_url=url)
    for url in ("https://idp.example.test/jwks.json", "http://127.0.0.1:8080/jwks", "http://[::1]/j",
                "http://localhost/j"):
        assert settings(jwks_url=url).jwks_url == url
    with pytest.raises(ValueError, match="not both"):
        settings(jwks_url="https://idp.example.test/jwks.json", jwks_file=tmp_path / "jwks.json")
    with pytest.raises(ValueError, match="not neither"):
        settings()
    config = Config.from_env({"IAC_CODE_AGUI_JWT_JWKS_URL": "https://idp.example.test/jwks.json",
                              "IAC_CODE_AGUI_JWT_AUDIENCE": AUDIENCE,
                              "IAC_CODE_AGUI_JWT_JWKS_REFRESH_SECONDS": "30",
                              "IAC_CODE_AGUI_STATE_DIR": str(tmp_path)}, demo=True)
    assert config.jwt is not None and config.jwt.jwks_refresh_seconds == 30


async def test_a_large_set_is_read_whole_and_one_over_a_mebibyte_is_refused(
    jwt_adapter: RunningAdapter, provider: Provider, first_key: SigningKey, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "aguiadapter.web.jwks_url")
    rotated = SigningKey("ES256", kid="padded")
    provider.keys, provider.padding = [first_key, rotated], 900_000  # many network chunks
    await asyncio.sleep(REFRESH)
    assert await status_of(jwt_adapter, rotated.token()) == 200
    late = SigningKey("ES256", kid="too-large")
    provider.keys, provider.padding = [first_key, rotated, late], 1_100_000
    await asyncio.sleep(REFRESH)
    assert await status_of(jwt_adapter, late.token()) == 401
    assert await status_of(jwt_adapter, rotated.token()) == 200, "the last good set stays"
    assert any("larger than 1048576 bytes" in record.getMessage() for record in caplog.records)
