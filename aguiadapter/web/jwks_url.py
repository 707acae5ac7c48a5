"""The key set of a JWKS URL (``--jwt-jwks-url``): an identity provider's
published keys, shared by every replica without a file to sync.

When it is fetched:

- at start (a URL that does not give a usable set stops the start, as an
  unusable file does);
- when the set's ``Cache-Control: max-age`` has passed (kept between
  ``refresh_seconds`` and a day; ``no-cache``/``no-store``: ``refresh_seconds``;
  without the header: :data:`DEFAULT_MAX_AGE`), by the first request after
  it, in the background: requests meanwhile use the set they have;
- when a token names a ``kid`` the set does not hold (a key the provider
  just rotated in), at most once per ``refresh_seconds`` whatever the
  tokens: a flood of made-up ``kid`` values costs one fetch per interval.

One fetch at a time, bounded by ``fetch_timeout`` and :data:`MAX_BYTES`; a
fetch that fails (network, status, a set without a usable key) keeps the
last good set and logs one line per failing streak, and a line when the URL
answers again. Nothing here logs or keeps a token.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from typing import Final

import aiohttp

from ..logs import mask_url
from .jwks import JwksError, KeySet, parse_jwks

log = logging.getLogger(__name__)

#: The largest JWKS document read (a provider's set is a few KB).
MAX_BYTES: Final = 1024 * 1024
#: How long a set is kept when the answer says nothing about caching.
DEFAULT_MAX_AGE: Final = 300.0
#: The longest a set is kept, whatever ``max-age`` says.
LONGEST_MAX_AGE: Final = 86_400.0
_MAX_AGE = re.compile(r"(?:^|,)\s*max-age\s*=\s*\"?(\d+)\"?\s*(?:,|$)", re.IGNORECASE)
_NO_CACHE = re.compile(r"(?:^|,)\s*(?:no-cache|no-store)\s*(?:,|$)", re.IGNORECASE)


def cache_seconds(cache_control: str | None, refresh_seconds: float) -> float:
    """How long a set fetched with this ``Cache-Control`` is used before it is fetched again."""
    if not cache_control:
        return max(DEFAULT_MAX_AGE, refresh_seconds)
    if _NO_CACHE.search(cache_control):
        return refresh_seconds
    found = _MAX_AGE.search(cache_control)
    if found is None:
        return max(DEFAULT_MAX_AGE, refresh_seconds)
    return min(max(float(found.group(1)), refresh_seconds), LONGEST_MAX_AGE)


class JwksUrl:
    """The key set of a JWKS URL, cached and refreshed within bounds."""

    def __init__(self, url: str, refresh_seconds: float, fetch_timeout: float) -> None:
        self.url = url
        self.shown = mask_url(url)
        self.refresh_seconds = refresh_seconds
        self.keys = KeySet({})
        #: Fetches made (tests and the rate bound's proof read it).
        self.fetches = 0
        self._timeout = aiohttp.ClientTimeout(total=fetch_timeout)
        self._session: aiohttp.ClientSession | None = None
        self._expires_at = float("-inf")
        #: When the last fetch started, whatever became of it (the rate bound).
        self._fetched_at = float("-inf")
        self._fetching: asyncio.Task[None] | None = None
        self._failing = False

    async def load(self) -> None:
        """The first fetch (at start): ``JwksError`` when it fails."""
        try:
            await self._fetch()
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as exc:
            await self.close()
            raise JwksError(f"JWKS URL {self.shown}: {_reason(exc)}") from None

    async def close(self) -> None:
        """Stop a fetch in flight and close the connection pool."""
        fetching, self._fetching = self._fetching, None
        if fetching is not None:
            fetching.cancel()
            await asyncio.gather(fetching, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def current(self) -> KeySet:
        """The key set; once its cache time is over, a fetch starts in the background."""
        if time.monotonic() >= self._expires_at:
            self._start_fetch()
        return self.keys

    async def unknown_kid(self) -> KeySet:
        """The key set after a fetch, when one is allowed now (else at once, as it is)."""
        fetching = self._start_fetch()
        if fetching is not None:
            await asyncio.shield(fetching)
        return self.keys

    def _start_fetch(self) -> asyncio.Task[None] | None:
        """The fetch in flight, or a new one if the last began ``refresh_seconds``
        ago or more (a failing URL is not tried more often either)."""
        if self._fetching is not None:
            return self._fetching
        if time.monotonic() - self._fetched_at < self.refresh_seconds:
            return None
        self._fetching = asyncio.create_task(self._refresh(), name="jwks-url-fetch")
        return self._fetching

    async def _refresh(self) -> None:
        try:
            await self._fetch()
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as exc:
            if not self._failing:
                self._failing = True
                log.warning("JWKS URL %s not used: %s; keeping the last good key set (%d keys)",
                            self.shown, _reason(exc), len(self.keys))
        else:
            if self._failing:
                self._failing = False
                log.info("JWKS URL %s answers again: %d keys", self.shown, len(self.keys))
        finally:
            self._fetching = None

    async def _fetch(self) -> None:
        self._fetched_at = time.monotonic()
        self.fetches += 1
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        async with self._session.get(self.url, headers={"Accept": "application/json"},
                                     allow_redirects=False) as resp:
            if resp.status != 200:
                raise ValueError(f"HTTP {resp.status}")
            chunks: list[bytes] = []
            size = 0
            async for chunk in resp.content.iter_chunked(64 * 1024):
                size += len(chunk)
                if size > MAX_BYTES:
                    raise ValueError(f"larger than {MAX_BYTES} bytes")
                chunks.append(chunk)
            data = b"".join(chunks)
            cache_control = resp.headers.get("Cache-Control")
        keys, skipped = parse_jwks(data)
        before = {*self.keys.by_kid}
        self.keys = keys
        self._expires_at = time.monotonic() + cache_seconds(cache_control, self.refresh_seconds)
        for reason in skipped:
            log.warning("JWKS URL %s: %s skipped", self.shown, reason)
        if before and before != {*keys.by_kid}:
            log.info("JWKS URL %s: %d keys (kids %s)", self.shown, len(keys), ", ".join(sorted(keys.by_kid)))


def _reason(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return "timed out"
    return str(exc) or type(exc).__name__
