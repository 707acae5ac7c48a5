"""Install what the interop, replica and benchmark suites need outside Python.

    python tests/prerequisites.py [node-modules] [chromium] [redis-server]

tox runs this before the environments that need it (``commands_pre`` in
tox.ini), so the README's ``pip install tox && tox`` prepares a fresh Debian
machine by itself:

- ``node-modules``: ``npm ci`` in tests/interop (``@ag-ui/client``,
  ``playwright-core``, ``esbuild``) and in examples/copilotkit (CopilotKit,
  React, ``esbuild``; about a minute and 750 MB the first time), each exactly
  as its lockfile says; needs Node.js 20 or newer with npm. Both also install
  this repository's own JS package, clients/js (``@aguiadapter/client``), from
  its folder, as the copy npm would publish (``install-links`` in their
  ``.npmrc``); it has no dependencies of its own to fetch.
- ``chromium``, ``redis-server``: Debian's packages of that name, with
  ``apt-get`` (as root). No browser is ever downloaded by anything else.

A step whose prerequisite is already there does nothing (each node_modules
remembers the lockfile, and the clients/js files, it was installed from). When something cannot be
installed here (not root, no apt-get, no npm, an install that fails) the
script exits with status 1 and one line saying what to install; the tests
themselves never skip for a missing prerequisite, they fail.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The Node projects the suites use, by the name a message gives them.
NODE_PROJECTS = {
    "tests/interop": ROOT / "tests" / "interop",
    "examples/copilotkit": ROOT / "examples" / "copilotkit",
}
#: The repository's own JS package, which both projects install from its folder (a copy, not a link).
LOCAL_PACKAGE = ROOT / "clients" / "js"
#: Written into node_modules after a successful ``npm ci``: the SHA-256 of the
#: lockfile it installed and of the local package's files it copied.
STAMP = ".aguiadapter-lockfile-sha256"
MIN_NODE_MAJOR = 20
#: Programs the suites run, each from the Debian package of the same name.
DEBIAN_PROGRAMS = ("chromium", "redis-server")
STEPS = ("node-modules", *DEBIAN_PROGRAMS)
AGAIN = "then run tox again"


class CannotPrepare(Exception):
    """A prerequisite this machine cannot get by itself; the message says what to install."""


def say(text: str) -> None:
    print(f"prerequisites: {text}", file=sys.stderr, flush=True)


def ensure_debian_programs(programs: Sequence[str]) -> None:
    """Install the Debian packages of the programs not on PATH."""
    missing = [program for program in programs if shutil.which(program) is None]
    if not missing:
        return
    named = " and ".join(missing)
    install = f"apt-get install -y {' '.join(missing)}"
    if shutil.which("apt-get") is None:
        raise CannotPrepare(f"the tests need {named} on PATH and there is no apt-get here: install {named}, {AGAIN}")
    if os.geteuid() != 0:
        raise CannotPrepare(f"the tests need Debian's {named}: run '{install}' as root, {AGAIN}")
    say(f"installing Debian's {named} (apt-get, once per machine)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *missing]):
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
            raise CannotPrepare(f"'{' '.join(command)}' failed ({last}): run '{install}' as root, {AGAIN}")
    still = " and ".join(program for program in missing if shutil.which(program) is None)
    if still:
        raise CannotPrepare(f"apt-get installed {named} but {still} is not on PATH: put it there, {AGAIN}")


def installed_from(folder: Path) -> str:
    """What a project's node_modules is made of: its lockfile and the local package's files."""
    digest = hashlib.sha256((folder / "package-lock.json").read_bytes())
    for path in sorted(LOCAL_PACKAGE.rglob("*")):
        if path.is_file() and "node_modules" not in path.relative_to(LOCAL_PACKAGE).parts:
            digest.update(str(path.relative_to(LOCAL_PACKAGE)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def ensure_node_modules() -> None:
    """``npm ci`` in each Node project, unless its node_modules comes from its very lockfile."""
    node, npm = shutil.which("node"), shutil.which("npm")
    need = f"the tests need Node.js {MIN_NODE_MAJOR} or newer with npm on PATH (for {' and '.join(NODE_PROJECTS)})"
    if node is None or npm is None:
        raise CannotPrepare(f"{need}: install them, {AGAIN}")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=False).stdout.strip()
    major = version.lstrip("v").split(".")[0]
    if not major.isdigit() or int(major) < MIN_NODE_MAJOR:
        raise CannotPrepare(f"{need} (found {version or 'a node that prints no version'}): install it, {AGAIN}")
    for name, folder in NODE_PROJECTS.items():
        digest = installed_from(folder)
        stamp = folder / "node_modules" / STAMP
        if stamp.is_file() and stamp.read_text().strip() == digest:
            continue
        say(f"installing {name}'s Node packages (npm ci, from the lockfile)")
        done = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=folder, check=False)
        if done.returncode != 0:
            raise CannotPrepare(f"'npm ci' in {name} failed (exit {done.returncode}, output above): fix it, {AGAIN}")
        stamp.write_text(digest + "\n")


def main(argv: Sequence[str]) -> int:
    unknown = [step for step in argv if step not in STEPS]
    if unknown or not argv:
        say(f"usage: python tests/prerequisites.py {' '.join(f'[{step}]' for step in STEPS)}")
        return 2
    try:
        ensure_debian_programs([step for step in argv if step in DEBIAN_PROGRAMS])
        if "node-modules" in argv:
            ensure_node_modules()
    except CannotPrepare as exc:
        say(str(exc))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
