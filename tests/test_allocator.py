"""The server's allocator gives large blocks back (issue 34, item 1).

glibc raises its mapping threshold once a large block is freed: later
request bodies and image buffers (up to 12 MiB) then come from the heap,
which keeps them after they are freed. ``tune_allocator`` (called by
``python -m aguiadapter`` at start) fixes the threshold at 1 MiB. Each case
runs in a fresh interpreter, as the server does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_HOLD_AND_FREE = """
import json, os, sys
from aguiadapter.images import tune_allocator
tuned = tune_allocator() if sys.argv[1] == "tuned" else None
page = os.sysconf("SC_PAGE_SIZE")
def rss():
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * page
first = b"x" * (12 * 1024 * 1024)
del first  # glibc raises its mapping threshold here, unless it is fixed
before = rss()
bodies = [b"%d" % n * (12 * 1024 * 1024) for n in range(4)]
pinned = b"y" * (2 * 1024 * 1024)  # a later block above them on the heap: the freed ones cannot be trimmed
del bodies
print(json.dumps({"tuned": tuned, "kept": rss() - before}))
"""


def _kept(mode: str) -> dict[str, object]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("MALLOC_")}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run([sys.executable, "-c", _HOLD_AND_FREE, mode], env=env, cwd=ROOT,
                         capture_output=True, text=True, check=True, timeout=60).stdout
    return dict(json.loads(out))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc and /proc are Linux's")
def test_large_blocks_freed_are_given_back_to_the_system() -> None:
    tuned = _kept("tuned")
    if tuned["tuned"] is False:
        pytest.skip("not glibc: nothing to tune")
    assert int(str(tuned["kept"])) < 8 * 1024 * 1024, tuned
    # The control: glibc's default keeps them (the defect the tuning removes).
    assert int(str(_kept("default")["kept"])) > 40 * 1024 * 1024
