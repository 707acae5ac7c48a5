"""Why a replica test may be skipped: what it needs and this machine may lack."""

from __future__ import annotations

import importlib.util

import pytest

from aguiadapter.cli import build_parser

from .redis_server import REDIS_SERVER

#: Marks of every test here: skipped (with the reason) where Redis is missing.
needs_redis = [
    pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed (apt-get install redis-server)"),
    pytest.mark.skipif(
        importlib.util.find_spec("redis") is None,
        reason="the redis extra is not installed (pip install 'aguiadapter[redis]')",
    ),
]
HAS_STORE_OPTION = "--store" in build_parser({})._option_string_actions
#: The process tests also need ``--store`` on the command line.
needs_store_option = pytest.mark.skipif(not HAS_STORE_OPTION, reason="the CLI has no --store option yet")
