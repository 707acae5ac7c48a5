"""Signing keys, JWKS files and bearer JWTs for the identity tests.

Every token is really signed here, with keys made for the test run: HS256
with an ``oct`` key, ES256 with a P-256 key. The JWKS file the adapter reads
holds only what a verifier needs (the secret of an ``oct`` key, the public
part of an EC key).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import time
import warnings
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

ISSUER = "https://login.example.test/"
AUDIENCE = "aguiadapter-tests"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class SigningKey:
    """One key that signs tokens, and its entry in a JWKS document."""

    def __init__(self, algorithm: str, kid: str, *, rsa_bits: int = 2048) -> None:
        self.algorithm = algorithm
        self.kid = kid
        if algorithm == "HS256":
            self.secret = secrets.token_bytes(32)
            self.private: Any = self.secret
            self.jwk: dict[str, Any] = {"kty": "oct", "kid": kid, "k": b64url(self.secret), "alg": "HS256"}
        elif algorithm == "ES256":
            self.private = ec.generate_private_key(ec.SECP256R1())
            public = ECAlgorithm.to_jwk(self.private.public_key(), as_dict=True)
            self.jwk = {**public, "kid": kid, "use": "sig"}
        elif algorithm == "ES256K":
            self.private = ec.generate_private_key(ec.SECP256K1())
            public = ECAlgorithm.to_jwk(self.private.public_key(), as_dict=True)
            self.jwk = {**public, "kid": kid, "use": "sig", "alg": "ES256K"}
        elif algorithm == "RS256":
            self.private = rsa.generate_private_key(65537, rsa_bits)
            public = RSAAlgorithm.to_jwk(self.private.public_key(), as_dict=True)
            self.jwk = {**public, "kid": kid, "use": "sig", "alg": "RS256"}
        else:
            raise ValueError(algorithm)

    def token(self, subject: str | None = "alice", *, headers: dict[str, Any] | None = None, **claims: Any) -> str:
        """A token for ``subject`` valid for ten minutes; ``claims`` add or override (``None`` drops one)."""
        now = int(time.time())
        body: dict[str, Any] = {"iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 600, "sub": subject}
        body.update(claims)
        body = {name: value for name, value in body.items() if value is not None}
        with warnings.catch_warnings():  # PyJWT's own warning about the weak keys some tests sign with
            warnings.simplefilter("ignore")
            return jwt.encode(body, self.private, algorithm=self.algorithm, headers={"kid": self.kid, **(headers or {})})


def hand_made_token(header: dict[str, Any], claims: dict[str, Any], secret: bytes | None) -> str:
    """A token built without PyJWT (which refuses to make the bad ones): HS256 over
    ``secret``, or an empty signature when ``secret`` is ``None``."""
    signing_input = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims).encode())}"
    signature = b"" if secret is None else hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64url(signature)}"


def valid_claims(subject: str = "alice") -> dict[str, Any]:
    now = int(time.time())
    return {"iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 600, "sub": subject}


def write_jwks(path: Path, *keys: SigningKey, extra: list[dict[str, Any]] | None = None) -> None:
    """Replace the JWKS file atomically (write, then rename), as an operator should."""
    document = {"keys": [key.jwk for key in keys] + (extra or [])}
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(document, indent=1))
    temporary.replace(path)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
