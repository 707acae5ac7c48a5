"""The suites' guard against a hanging test (tests/conftest.py): past its
limit the test's process prints every stack and ends, so a run fails
instead of waiting for CI's budget to run out."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def test_a_test_that_hangs_ends_its_run_with_its_stack(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(
        "import tests.conftest as guard\n"
        "from tests.conftest import pytest_runtest_protocol  # noqa: F401\n"
        "guard.TEST_HANG_SECONDS = 1\n"
    )
    (tmp_path / "test_hangs.py").write_text("import time\n\ndef test_waits_forever():\n    time.sleep(60)\n")
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
         str(tmp_path / "test_hangs.py")],
        capture_output=True, text=True, cwd=HERE, timeout=50, env={"PYTHONPATH": str(HERE), "PATH": "/usr/bin:/bin"},
    )
    assert time.monotonic() - started < 30
    assert done.returncode != 0
    assert "test_waits_forever still running after 1 s" in done.stderr, done.stderr[-2000:]
    assert "time.sleep" in done.stderr or "test_hangs.py" in done.stderr, "no stack"
