"""Bearer JWTs checked against the keys of a JWKS file that may change
(or of a JWKS URL: :mod:`aguiadapter.web.jwks_url`).

Used with ``--jwt-jwks-file`` (needs ``aguiadapter[jwt]``: PyJWT with its
``crypto`` extra). The file is a JSON Web Key Set (RFC 7517) of public keys
(``RSA``, ``EC``, ``OKP``) and ``oct`` secrets for HMAC. Each key's
algorithm comes from the key (its ``alg`` member, else its type and curve:
RSA → RS256, P-256 → ES256, Ed25519 → EdDSA, oct → HS256); a token is
verified only with a key whose algorithm is the one its header names, so the
header can pick among the keys but never choose how one is used (a public
key is never an HMAC secret, and ``none`` names no key).

The key objects are built once per version of the file. The file is looked
at (one ``stat``, in a worker thread) at most every ``jwks_check_seconds``;
when its inode, size or modification time changed it is read and parsed
again, also off the event loop. A version without a usable key keeps the
last good set and logs one line. Nothing here logs or keeps a token.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import attrs
import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.exceptions import (
    ExpiredSignatureError,
    ImmatureSignatureError,
    InvalidAudienceError,
    InvalidIssuerError,
    InvalidSignatureError,
    MissingRequiredClaimError,
    PyJWTError,
)

from ..config import JwtSettings

log = logging.getLogger(__name__)

#: The longest principal a token may name (the limit of the other identifiers).
MAX_PRINCIPAL_LENGTH = 256
#: JWK members that only a private key has: such a key does not belong in a verification set.
_PRIVATE_MEMBERS = frozenset({"d", "p", "q", "dp", "dq", "qi", "oth"})
_ASYMMETRIC = frozenset({"RSA", "EC", "OKP"})
#: Shortest HMAC secret accepted per algorithm: the digest size (RFC 7518, 3.2).
_HMAC_MIN_BYTES = {"HS256": 32, "HS384": 48, "HS512": 64}


class JwksError(RuntimeError):
    """The JWKS file cannot be read or holds no usable key (a startup error)."""


class TokenRefused(Exception):
    """A bearer token that does not prove who calls; ``reason`` says why (never
    the token). ``kid`` and ``iss``, as the token claims them (unverified, for
    the log line an operator reads when a provider rotates or a client
    mixes up environments), are set by :meth:`JwtVerifier.principal`."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.kid: str | None = None
        self.iss: str | None = None


@attrs.frozen
class FileVersion:
    """What one ``stat`` says about the file: a change of any field means a new version."""

    inode: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, path: Path) -> FileVersion:
        """Stat ``path`` (``OSError`` when it is gone)."""
        info = os.stat(path)
        return cls(info.st_ino, info.st_size, info.st_mtime_ns)


@attrs.frozen
class KeySet:
    """The usable keys of one version of the file, as PyJWT key objects."""

    by_kid: Mapping[str, jwt.PyJWK]
    without_kid: tuple[jwt.PyJWK, ...] = ()

    def __len__(self) -> int:
        return len(self.by_kid) + len(self.without_kid)

    def candidates(self, kid: str | None, algorithm: str) -> list[jwt.PyJWK]:
        """The keys a token with this header may be checked with.

        A ``kid`` names exactly one key, which must be of the header's
        algorithm; a token without one is tried against every key of it.
        """
        if kid is not None:
            key = self.by_kid.get(kid)
            if key is None:
                raise TokenRefused("unknown_key")
            if key.algorithm_name != algorithm:
                raise TokenRefused("algorithm_mismatch")
            return [key]
        keys = [key for key in (*self.by_kid.values(), *self.without_kid) if key.algorithm_name == algorithm]
        if not keys:
            raise TokenRefused("unknown_key")
        return keys


def parse_jwks(data: bytes) -> tuple[KeySet, list[str]]:
    """The usable keys of a JWKS document, and why the others were skipped.

    Raises ``ValueError`` when the document is not a key set or has no
    usable key (the reasons name keys by ``kid`` or position, never their
    material).
    """
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    entries = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise ValueError('not a JWK Set: no "keys" array')
    by_kid: dict[str, jwt.PyJWK] = {}
    without_kid: list[jwt.PyJWK] = []
    skipped: list[str] = []
    for index, entry in enumerate(entries):
        name = f"key {entry.get('kid')!r}" if isinstance(entry, dict) and "kid" in entry else f"keys[{index}]"
        try:
            key = _verification_key(entry)
        except ValueError as exc:
            skipped.append(f"{name}: {exc}")
            continue
        if key.key_id is None:
            without_kid.append(key)
        elif key.key_id in by_kid:
            raise ValueError(f"two keys share the kid {key.key_id!r}")
        else:
            by_kid[key.key_id] = key
    keys = KeySet(by_kid, tuple(without_kid))
    if not len(keys):
        raise ValueError("no usable key" + (f" ({'; '.join(skipped)})" if skipped else ""))
    return keys, skipped


def _verification_key(entry: Any) -> jwt.PyJWK:
    """One JWK as a key that verifies signatures, or ``ValueError`` saying why not."""
    if not isinstance(entry, dict):
        raise ValueError("not a JSON object")
    kty = entry.get("kty")
    if kty in _ASYMMETRIC and _PRIVATE_MEMBERS & entry.keys():
        raise ValueError("holds a private key; publish the public key only")
    if entry.get("use", "sig") != "sig":
        raise ValueError(f"its use is {entry.get('use')!r}, not 'sig'")
    operations = entry.get("key_ops")
    if operations is not None and (not isinstance(operations, list) or "verify" not in operations):
        raise ValueError("its key_ops do not include 'verify'")
    kid = entry.get("kid")
    if kid is not None and not isinstance(kid, str):
        raise ValueError("its kid is not a string")
    algorithm = entry.get("alg")
    if algorithm is not None and (not isinstance(algorithm, str) or algorithm.lower() == "none"):
        raise ValueError(f"its alg {algorithm!r} verifies nothing")
    try:
        key = jwt.PyJWK(entry)
    except _JWK_ERRORS as exc:
        raise ValueError(_jwk_problem(exc)) from None
    minimum = _HMAC_MIN_BYTES.get(key.algorithm_name)
    if minimum is not None and len(key.key) < minimum:
        raise ValueError(f"an {key.algorithm_name} secret needs at least {minimum} bytes")
    _check_strength(key)
    return key


#: The weakest RSA modulus accepted (NIST SP 800-131A; PyJWT only warns, on every token).
MIN_RSA_BITS = 2048
#: The EC curves of JWS (RFC 7518, 3.4); secp256k1 and other curves are refused.
_EC_CURVES = frozenset({"secp256r1", "secp384r1", "secp521r1"})


def _check_strength(key: jwt.PyJWK) -> None:
    """``ValueError`` for an RSA key under 2048 bits or an EC key off the JWS curves."""
    material = key.key
    if isinstance(material, rsa.RSAPublicKey) and material.key_size < MIN_RSA_BITS:
        raise ValueError(f"an RSA key of {material.key_size} bits is too weak (at least {MIN_RSA_BITS})")
    if isinstance(material, ec.EllipticCurvePublicKey) and material.curve.name not in _EC_CURVES:
        raise ValueError(f"the EC curve {material.curve.name} is not one of P-256, P-384, P-521")


#: What building a key from a malformed JWK may raise (PyJWT wraps most, not all).
_JWK_ERRORS = (PyJWTError, NotImplementedError, ValueError, TypeError, KeyError, AttributeError)


def _jwk_problem(exc: Exception) -> str:
    """PyJWT's reason, without the key material some of its messages quote."""
    text = str(exc).split(":", 1)[0]
    return text or type(exc).__name__


class KeySource(Protocol):
    """Where a verifier's keys come from: a file, a URL."""

    async def load(self) -> None:
        """The first read (at start): ``JwksError`` when it gives no usable set."""

    async def current(self) -> KeySet:
        """The key set to check a token with."""

    async def unknown_kid(self) -> KeySet:
        """The key set after a token named a ``kid`` it lacks (fetched again when allowed)."""

    async def close(self) -> None:
        """Release what the source holds open."""


#: What :class:`JwksFile` remembers of a file that cannot be read at all.
_MISSING = "missing"


class JwksFile:
    """The key set of a JWKS file, reloaded when the file changes."""

    def __init__(self, path: Path, check_seconds: float) -> None:
        self.path = path
        self.check_seconds = check_seconds
        self.keys = KeySet({})
        self._loaded: FileVersion | None = None
        #: The version last refused (or ``_MISSING``), so that a bad file is reported once.
        self._refused: FileVersion | str | None = None
        self._checked_at = float("-inf")

    async def close(self) -> None:
        """Nothing is held open."""

    async def unknown_kid(self) -> KeySet:
        """A file is looked at on its own schedule: the set as it is."""
        return self.keys

    async def load(self) -> None:
        """The first read (at startup): ``JwksError`` when it fails."""
        try:
            version, keys, skipped = await asyncio.to_thread(self._read)
        except (OSError, ValueError) as exc:
            raise JwksError(f"JWKS file {self.path}: {_reason(exc)}") from None
        self._use(version, keys, skipped)

    async def current(self) -> KeySet:
        """The key set, after looking at the file if that is due."""
        now = time.monotonic()
        if now - self._checked_at >= self.check_seconds:
            # Requests that arrive meanwhile use the current set rather than queue up.
            self._checked_at = now
            await self._check()
        return self.keys

    async def _check(self) -> None:
        try:
            version = await asyncio.to_thread(FileVersion.of, self.path)
        except OSError as exc:
            self._refuse(_MISSING, _reason(exc))
            return
        if version == self._loaded or version == self._refused:
            return
        try:
            version, keys, skipped = await asyncio.to_thread(self._read)
        except (OSError, ValueError) as exc:
            self._refuse(version, _reason(exc))
            return
        self._use(version, keys, skipped)
        log.info("JWKS file %s reloaded: %d keys", self.path, len(keys))

    def _read(self) -> tuple[FileVersion, KeySet, list[str]]:
        # Stat before reading: a change during the read is seen by the next check.
        version = FileVersion.of(self.path)
        keys, skipped = parse_jwks(self.path.read_bytes())
        return version, keys, skipped

    def _use(self, version: FileVersion, keys: KeySet, skipped: list[str]) -> None:
        self.keys, self._loaded, self._refused = keys, version, None
        for reason in skipped:
            log.warning("JWKS file %s: %s skipped", self.path, reason)

    def _refuse(self, version: FileVersion | str, why: str) -> None:
        if version == self._refused:
            return
        self._refused = version
        if version == _MISSING:
            # Whatever comes back in its place is read again, even if it looks the same.
            self._loaded = None
        log.warning("JWKS file %s not used: %s; keeping the last good key set (%d keys)",
                    self.path, why, len(self.keys))


def _claimed(token: str) -> tuple[str | None, str | None]:
    """The ``kid`` and ``iss`` a token claims, unverified, cut to a length a log line holds."""
    try:
        kid = jwt.get_unverified_header(token).get("kid")
    except PyJWTError:
        kid = None
    try:
        iss = jwt.decode(token, options={"verify_signature": False}).get("iss")
    except (PyJWTError, AttributeError):
        iss = None
    return (kid[:100] if isinstance(kid, str) else None), (iss[:200] if isinstance(iss, str) else None)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    return str(exc)


class JwtVerifier:
    """Checks bearer JWTs and tells whose they are."""

    def __init__(self, settings: JwtSettings, source: KeySource | None = None) -> None:
        """``source``: where the keys come from (a :class:`~aguiadapter.web.jwks_url.JwksUrl`);
        by default the settings' JWKS file."""
        self.settings = settings
        if source is None:
            if settings.jwks_file is None:
                raise ValueError("no JWKS file in the settings: give the key source")
            source = JwksFile(settings.jwks_file, settings.jwks_check_seconds)
        self.jwks = source

    async def start(self) -> None:
        """Read the key set (``JwksError`` when it is unusable)."""
        await self.jwks.load()

    async def close(self) -> None:
        """Close what the key source holds open (the URL's connections)."""
        await self.jwks.close()

    async def principal(self, token: str) -> str:
        """The user a valid token names; ``TokenRefused`` (with the token's
        claimed ``kid`` and ``iss``) otherwise. A ``kid`` the set does not
        hold may be a key just rotated in: the source is asked again (a
        URL at most every ``jwks_refresh_seconds``), once."""
        try:
            try:
                return self.verify(token, await self.jwks.current())
            except TokenRefused as exc:
                if exc.reason != "unknown_key":
                    raise
                return self.verify(token, await self.jwks.unknown_kid())
        except TokenRefused as exc:
            exc.kid, exc.iss = _claimed(token)
            raise

    def verify(self, token: str, keys: KeySet) -> str:
        """Check ``token`` with ``keys`` (signature, algorithm, time, issuer, audience)."""
        try:
            header = jwt.get_unverified_header(token)
        except PyJWTError:
            raise TokenRefused("malformed") from None
        algorithm, kid = header.get("alg"), header.get("kid")
        if not isinstance(algorithm, str) or algorithm.lower() == "none":
            raise TokenRefused("algorithm_none")
        if kid is not None and not isinstance(kid, str):
            raise TokenRefused("malformed")
        claims: dict[str, Any] | None = None
        for key in keys.candidates(kid, algorithm):
            try:
                claims = self._decode(token, key)
                break
            except InvalidSignatureError:
                continue
        if claims is None:
            raise TokenRefused("bad_signature")
        return self._principal_of(claims)

    def _decode(self, token: str, key: jwt.PyJWK) -> dict[str, Any]:
        settings = self.settings
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[key.algorithm_name],
                audience=settings.audience,
                issuer=settings.issuer,
                leeway=settings.leeway_seconds,
                options={"require": ["exp", "aud"], "verify_aud": True},
            )
        except InvalidSignatureError:
            raise
        except ExpiredSignatureError:
            raise TokenRefused("expired") from None
        except ImmatureSignatureError:
            raise TokenRefused("not_yet_valid") from None
        except InvalidAudienceError:
            raise TokenRefused("audience") from None
        except InvalidIssuerError:
            raise TokenRefused("issuer") from None
        except MissingRequiredClaimError as exc:
            raise TokenRefused(f"missing_{exc.claim}") from None
        except PyJWTError:
            raise TokenRefused("invalid") from None
        return claims

    def _principal_of(self, claims: Mapping[str, Any]) -> str:
        value = claims.get(self.settings.principal_claim)
        if (
            not isinstance(value, str)
            or not value.strip()
            or len(value) > MAX_PRINCIPAL_LENGTH
            or any(ord(char) < 32 or ord(char) == 127 for char in value)
        ):
            raise TokenRefused("no_principal")
        return value
