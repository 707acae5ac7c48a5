"""Find, or create, the virtualenv that holds ``iac-code agui``.

``iac-code[agui]==0.16.0`` needs ``a2a-sdk==1.2.0``, which this project's
own environment must not get, so the reference target lives in a virtualenv
of its own. It is looked for, in order, at ``--iac-venv``,
``$AGUIADAPTER_BENCH_IAC_VENV``, then ``$XDG_CACHE_HOME/aguiadapter-bench/``
(``~/.cache/...``). A missing one is created there with ``python -m venv``
and ``pip install`` (about a minute); a half-made one (no ready marker) is
made again.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

IAC_CODE_VERSION = "0.16.0"
A2A_SDK_VERSION = "1.2.0"
REQUIREMENTS = (f"iac-code[agui]=={IAC_CODE_VERSION}", f"a2a-sdk=={A2A_SDK_VERSION}")
ENV_VAR = "AGUIADAPTER_BENCH_IAC_VENV"
_MARKER = ".aguiadapter-bench-ready"


def default_location() -> Path:
    """Where the venv lives when nothing else is said."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "aguiadapter-bench" / f"iac-code-agui-{IAC_CODE_VERSION}"


def chosen_location(explicit: str | None = None) -> Path:
    """``--iac-venv``, else the environment variable, else the cache folder."""
    if explicit:
        return Path(explicit).expanduser()
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]).expanduser()
    return default_location()


def executable(venv: Path) -> Path:
    """The ``iac-code`` console script of a venv."""
    return venv / "bin" / "iac-code"


def installed_versions(venv: Path) -> dict[str, str] | None:
    """The iac-code and a2a-sdk versions in *venv*, or None when unusable."""
    python = venv / "bin" / "python"
    if not python.exists() or not executable(venv).exists():
        return None
    # Importing the agui modules proves the ``agui`` extra is there too.
    code = (
        "import importlib.metadata as m, json, iac_code.agui.app, uvicorn, sse_starlette;"
        "print(json.dumps({n: m.version(n) for n in ('iac-code', 'a2a-sdk', 'ag-ui-protocol')}))"
    )
    try:
        out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60, check=True)
        return dict(json.loads(out.stdout))
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def is_ready(venv: Path) -> bool:
    """A venv made by us (or by hand) with the pinned versions."""
    versions = installed_versions(venv)
    return bool(versions) and versions.get("iac-code") == IAC_CODE_VERSION and versions.get(
        "a2a-sdk"
    ) == A2A_SDK_VERSION


def find(explicit: str | None = None) -> Path | None:
    """The venv if it exists and is usable, else None (never creates)."""
    venv = chosen_location(explicit)
    return venv if is_ready(venv) else None


def ensure(explicit: str | None = None, *, log=print) -> Path:  # type: ignore[no-untyped-def]
    """The venv, created when missing; raises RuntimeError when that fails."""
    venv = chosen_location(explicit)
    if is_ready(venv):
        return venv
    if venv.exists():
        # Only a folder this script made (or the default cache folder) is ever removed.
        ours = (venv / _MARKER).exists() or venv == default_location()
        if not ours or not (venv / "pyvenv.cfg").exists():
            raise RuntimeError(
                f"{venv} exists but has no usable iac-code[agui]=={IAC_CODE_VERSION} with "
                f"a2a-sdk=={A2A_SDK_VERSION}; fix or remove it, or pick another --iac-venv"
            )
        log(f"[iac-code] {venv} is incomplete or has other versions: making it again")
        shutil.rmtree(venv)
    log(f"[iac-code] creating {venv} with {' '.join(REQUIREMENTS)} (one-time, about a minute)")
    venv.parent.mkdir(parents=True, exist_ok=True)
    base = getattr(sys, "_base_executable", sys.executable)
    _run([base, "-m", "venv", str(venv)])
    (venv / _MARKER).write_text("incomplete\n")  # marks the folder as ours
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    _run([*pip, *REQUIREMENTS])
    if not is_ready(venv):
        raise RuntimeError(f"{venv}: iac-code {IAC_CODE_VERSION} / a2a-sdk {A2A_SDK_VERSION} not found after install")
    (venv / _MARKER).write_text(json.dumps(installed_versions(venv)) + "\n")
    return venv


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:5])} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
