"""What the replica tests need: a redis-server binary and the redis extra.

A developer machine without them skips these tests with the reason; the
``replicas`` tox environment (and so CI) sets ``AGUIADAPTER_REPLICAS_REQUIRED``,
which turns a missing prerequisite into a failure instead.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

from .redis_server import REDIS_SERVER

_MISSING = [
    reason
    for missing, reason in (
        (REDIS_SERVER is None, "redis-server is not installed (apt-get install redis-server)"),
        (importlib.util.find_spec("redis") is None, "the redis extra is not installed (pip install 'aguiadapter[redis]')"),
    )
    if missing
]
if _MISSING and os.environ.get("AGUIADAPTER_REPLICAS_REQUIRED"):
    raise RuntimeError("replica tests cannot run: " + "; ".join(_MISSING))

#: Marks of every test here: skipped, with the reason, where Redis is missing.
needs_redis = [pytest.mark.skipif(bool(_MISSING), reason="; ".join(_MISSING) or "ready")]
