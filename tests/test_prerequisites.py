"""tests/prerequisites.py: what ``tox`` installs first, and the one line it says when it cannot.

The programs it would run (apt-get, node, npm) are small scripts on a PATH of
the test's own, so nothing on this machine is installed or changed.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tests import prerequisites


class FakeMachine:
    """A PATH folder with stand-ins for apt-get, node and npm that log their calls."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.bin = root / "bin"
        self.bin.mkdir()
        self.log = root / "calls.log"
        self.log.touch()
        monkeypatch.setenv("PATH", str(self.bin))
        monkeypatch.setattr(prerequisites.os, "geteuid", lambda: 0)

    def program(self, name: str, body: str) -> None:
        path = self.bin / name
        # The stand-in itself may use the system's mkdir and chmod.
        path.write_text(f'#!/bin/sh\nPATH="$PATH:/usr/bin:/bin"\necho "{name} $*" >> "{self.log}"\n{body}\n')
        path.chmod(path.stat().st_mode | stat.S_IXUSR)

    def apt_get(self, body: str = "") -> None:
        # Installing a package puts a program of that name on PATH.
        self.program("apt-get", body or (
            f'[ "$1" = install ] && for arg; do case "$arg" in -*|install) ;; '
            f'*) printf "#!/bin/sh\\n" > "{self.bin}/$arg"; chmod +x "{self.bin}/$arg";; esac; done; exit 0'
        ))

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines()


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeMachine:
    return FakeMachine(tmp_path, monkeypatch)


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    (line,) = capsys.readouterr().err.strip().splitlines()
    return line


def test_missing_debian_programs_are_installed_with_one_apt_get(machine: FakeMachine) -> None:
    machine.apt_get()
    assert prerequisites.main(["chromium", "redis-server"]) == 0
    assert machine.calls() == ["apt-get update -qq", "apt-get install -y -qq chromium redis-server"]


def test_programs_already_there_install_nothing(machine: FakeMachine) -> None:
    machine.apt_get()
    machine.program("chromium", "")
    machine.program("redis-server", "")
    assert prerequisites.main(["chromium", "redis-server"]) == 0
    assert machine.calls() == []


def test_without_root_it_names_the_command_to_run(
    machine: FakeMachine, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    machine.apt_get()
    monkeypatch.setattr(prerequisites.os, "geteuid", lambda: 1000)
    assert prerequisites.main(["chromium", "redis-server"]) == 1
    assert "run 'apt-get install -y chromium redis-server' as root" in one_line(capsys)
    assert machine.calls() == []


def test_without_apt_get_it_names_what_to_install(machine: FakeMachine, capsys: pytest.CaptureFixture[str]) -> None:
    assert prerequisites.main(["redis-server"]) == 1
    line = one_line(capsys)
    assert "no apt-get" in line and "install redis-server" in line


def test_a_failing_apt_get_is_reported_with_its_reason(machine: FakeMachine, capsys: pytest.CaptureFixture[str]) -> None:
    machine.apt_get('[ "$1" = install ] && { echo "E: Unable to locate package chromium" >&2; exit 100; }; exit 0')
    assert prerequisites.main(["chromium"]) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "Unable to locate package chromium" in last and "apt-get install -y chromium" in last


def node_project(root: Path, name: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "package-lock.json").write_text('{"lockfileVersion": 3}')
    return folder


@pytest.fixture
def interop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in tests/interop folder with a lockfile, the only Node project."""
    folder = node_project(tmp_path, "interop")
    monkeypatch.setattr(prerequisites, "NODE_PROJECTS", {"tests/interop": folder})
    return folder


def test_npm_ci_runs_once_per_lockfile(machine: FakeMachine, interop: Path) -> None:
    machine.program("node", "echo v20.20.2")
    machine.program("npm", "mkdir -p node_modules")
    assert prerequisites.main(["node-modules"]) == 0
    assert prerequisites.main(["node-modules"]) == 0
    assert [call for call in machine.calls() if call.startswith("npm")] == ["npm ci --no-audit --no-fund"]
    (interop / "package-lock.json").write_text('{"lockfileVersion": 3, "changed": true}')
    assert prerequisites.main(["node-modules"]) == 0
    assert [call for call in machine.calls() if call.startswith("npm")] == ["npm ci --no-audit --no-fund"] * 2


def test_without_npm_it_asks_for_node_20(machine: FakeMachine, interop: Path, capsys: pytest.CaptureFixture[str]) -> None:
    machine.program("node", "echo v20.20.2")
    assert prerequisites.main(["node-modules"]) == 1
    assert "need Node.js 20 or newer with npm" in one_line(capsys)


def test_an_old_node_is_refused(machine: FakeMachine, interop: Path, capsys: pytest.CaptureFixture[str]) -> None:
    machine.program("node", "echo v18.19.0")
    machine.program("npm", "exit 0")
    assert prerequisites.main(["node-modules"]) == 1
    assert "(found v18.19.0)" in one_line(capsys)
    assert not any(call.startswith("npm") for call in machine.calls())


def test_a_failing_npm_ci_fails(machine: FakeMachine, interop: Path, capsys: pytest.CaptureFixture[str]) -> None:
    machine.program("node", "echo v20.20.2")
    machine.program("npm", "exit 1")
    assert prerequisites.main(["node-modules"]) == 1
    assert "'npm ci' in tests/interop failed (exit 1" in capsys.readouterr().err
    assert not (interop / "node_modules" / prerequisites.STAMP).exists()


def test_each_node_project_is_installed_from_its_own_lockfile(
    machine: FakeMachine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    machine.program("node", "echo v20.20.2")
    machine.program("npm", f'mkdir -p node_modules; echo "npm ci in $(basename "$PWD")" >> "{machine.log}"')
    interop, example = node_project(tmp_path, "interop"), node_project(tmp_path, "copilotkit")
    monkeypatch.setattr(prerequisites, "NODE_PROJECTS", {"tests/interop": interop, "examples/copilotkit": example})
    assert prerequisites.main(["node-modules"]) == 0
    (example / "package-lock.json").write_text('{"lockfileVersion": 3, "changed": true}')
    assert prerequisites.main(["node-modules"]) == 0
    assert [call for call in machine.calls() if call.startswith("npm ci in")] == [
        "npm ci in interop", "npm ci in copilotkit", "npm ci in copilotkit",
    ]


def test_a_change_in_the_local_js_package_installs_it_again(
    machine: FakeMachine, interop: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """clients/js is copied into node_modules (install-links): an edit to it
    must reach the tests, though no lockfile changed."""
    package = tmp_path / "clients-js"
    (package / "src").mkdir(parents=True)
    (package / "src" / "index.mjs").write_text("export const one = 1;\n")
    (package / "node_modules").mkdir()
    monkeypatch.setattr(prerequisites, "LOCAL_PACKAGE", package)
    machine.program("node", "echo v20.20.2")
    machine.program("npm", "mkdir -p node_modules")
    assert prerequisites.main(["node-modules"]) == 0
    (package / "node_modules" / "ignored.js").write_text("what npm put there is not the package\n")
    assert prerequisites.main(["node-modules"]) == 0
    (package / "src" / "index.mjs").write_text("export const one = 2;\n")
    assert prerequisites.main(["node-modules"]) == 0
    assert [call for call in machine.calls() if call.startswith("npm")] == ["npm ci --no-audit --no-fund"] * 2
