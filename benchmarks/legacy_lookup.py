"""18. What naming another user's thread from before per-user keys costs (issue 34, item 5).

A verified user's thread made before threads had per-user keys is still kept
under its bare id. When bob names that id, his own key holds nothing, so the
adapter looks under the bare id, where alice's record is. It used to read
and parse it before answering 404 (a parse of a 1,000-run record takes
milliseconds), so the answer's time told bob that such a thread exists. Now
the record's owner is read from its bytes first, and another owner's record
is not parsed.

An adapter (file store, verified users by an HS256 JWKS, the demo runtime in
its process) holds alice's thread ``t-old`` under its bare id, with 1,000
runs (about 160 kB). Bob asks ``GET /threads/t-old`` and
``GET /threads/t-unknown`` in turns, 200 times each per round: the median of
each round, in ms, is printed; the two should not differ.

    python -m benchmarks.legacy_lookup [--rounds 5] [--requests 200]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import secrets
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp
import jwt
from aiohttp import web

from aguiadapter.config import Config, JwtSettings
from aguiadapter.store.file.store import FileThreadStore
from aguiadapter.threads.record import thread_key
from aguiadapter.web.app import create_app

ISSUER, AUDIENCE = "https://idp.bench", "aguiadapter-bench"


def _token(secret: bytes, subject: str) -> str:
    now = int(time.time())
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": subject, "iat": now, "exp": now + 3600}
    return jwt.encode(claims, secret, algorithm="HS256", headers={"kid": "bench"})


async def _serve(config: Config) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(create_app(config))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}/"


async def measure(rounds: int, requests: int) -> dict[str, list[float]]:
    """Per round, the median ms of bob's GET of alice's legacy id and of an unknown id."""
    home = Path(tempfile.mkdtemp(prefix="legacy-lookup-"))
    workspace = home / "workspace"
    workspace.mkdir()
    secret = secrets.token_bytes(32)
    key = base64.urlsafe_b64encode(secret).rstrip(b"=").decode()
    (home / "jwks.json").write_text(json.dumps({"keys": [{"kty": "oct", "kid": "bench", "k": key, "alg": "HS256"}]}))
    config = Config(state_dir=home / "state", demo=True, allowed_cwds=(str(workspace),), jwt=JwtSettings(
        jwks_file=home / "jwks.json", issuer=ISSUER, audience=AUDIENCE, jwks_check_seconds=0))
    alice = {"Authorization": f"Bearer {_token(secret, 'alice')}"}
    bob = {"Authorization": f"Bearer {_token(secret, 'bob')}"}
    runner, url = await _serve(config)
    try:
        body = {"threadId": "t-old", "runId": "r-1", "state": {}, "tools": [], "context": [],
                "messages": [{"id": "m-1", "role": "user", "content": "hello"}],
                "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "i-1", "cwd": str(workspace)}}}
        async with aiohttp.ClientSession() as session, session.post(url, json=body, headers=alice) as resp:
            await resp.read()
    finally:
        await runner.cleanup()
    # As an earlier version kept it: under the bare id, with 1,000 runs.
    files = FileThreadStore(home / "state")
    record = await files.load(thread_key("t-old", "alice"))
    assert record is not None
    for n in range(1000):
        record.remember_run(f"run-{n:04d}-{'x' * 20}", "sha256:" + "0" * 64)
    record.namespaced = False
    await files.save(record)
    files.path_for(thread_key("t-old", "alice")).unlink()
    runner, url = await _serve(config)
    medians: dict[str, list[float]] = {"t-old": [], "t-unknown": []}
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(rounds):
                for thread in medians:
                    times = []
                    for _ in range(requests):
                        began = time.perf_counter()
                        async with session.get(f"{url}threads/{thread}", headers=bob) as resp:
                            await resp.read()
                            assert resp.status == 404, resp.status
                        times.append(time.perf_counter() - began)
                    medians[thread].append(statistics.median(times) * 1000)
    finally:
        await runner.cleanup()
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    medians = asyncio.run(measure(args.rounds, args.requests))
    for thread, label in (("t-old", "alice's thread from before per-user keys"), ("t-unknown", "an unknown id")):
        shown = ", ".join(f"{value:.2f}" for value in medians[thread])
        print(f"bob's GET /threads/{{id}}, {label}: median ms per round {shown}")


if __name__ == "__main__":
    main()
