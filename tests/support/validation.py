"""``ag-ui-validate`` 0.4 on a captured stream: its CLI and its pytest helper.

:func:`validate` writes the raw SSE body of a stream to a file, runs the
validator's command line on it (``ag-ui-validate FILE --max-warnings 0``,
exit 0 required), then its pytest helper on the parsed events, then this
project's own stream checks. The interop captures and the end-to-end tests
against the real runtime judge their streams with it.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ag_ui_validate.pytest_plugin import assert_valid_agui

from .agui import check_stream, parse_sse

VALIDATE_TIMEOUT = 60.0


def validator_cli() -> list[str]:
    """The ``ag-ui-validate`` console script of the running interpreter's environment."""
    beside = Path(sys.executable).with_name("ag-ui-validate")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("ag-ui-validate")
    if found:
        return [found]
    return [sys.executable, "-c", "import sys; from ag_ui_validate.cli import main; sys.exit(main())"]


async def run_validator(path: Path, *options: str) -> tuple[int, dict[str, Any], str]:
    """Run the CLI on a capture: (exit code, its --json report, its human report)."""
    async def once(*extra: str) -> tuple[int, bytes, bytes]:
        proc = await asyncio.create_subprocess_exec(
            *validator_cli(), str(path), "--max-warnings", "0", "--no-color", *options, *extra,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), VALIDATE_TIMEOUT)
        assert proc.returncode is not None
        return proc.returncode, out, err

    (code, out, err), (json_code, json_out, _) = await asyncio.gather(once(), once("--json"))
    assert code == json_code, (code, json_code)
    assert code in (0, 1), f"ag-ui-validate failed to run ({code}): {err.decode()}"
    return code, json.loads(json_out), out.decode() + err.decode()


def findings(report: dict[str, Any]) -> set[str]:
    """The rules that fired at warning or error level."""
    return {d["rule"] for d in report["diagnostics"] if d["severity"] in ("error", "warning")}


async def validate(
    directory: Path, name: str, body: bytes, excluded: Iterable[str] = (), *, advertised: str | None = None
) -> list[dict[str, Any]]:
    """Write ``name.sse`` and judge it three ways; returns its events.

    ``advertised`` is the profile the adapter that sent it serves (``None``:
    the default): the stream checker is strict in that profile."""
    path = directory / f"{name}.sse"
    path.write_bytes(body)
    options = [opt for rule in excluded for opt in ("--off", rule)]
    code, _report, text = await run_validator(path, *options)
    assert code == 0, f"ag-ui-validate {path.name} --max-warnings 0 {' '.join(options)}:\n{text}"
    events, _ = parse_sse(body)
    assert_valid_agui(events, max_warnings=0, severity_overrides={rule: "off" for rule in excluded})
    check_stream(body, advertised=advertised)
    return events
