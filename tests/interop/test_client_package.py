"""clients/js (``@aguiadapter/client``) is a package npm can publish as it is.

``npm pack --dry-run`` (no network) lists what a publish would ship; the
projects of this repository install it from its folder as that same copy
(``install-links``), and these tests check they run what is in the folder.
"""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest

from .conftest import HERE, run_node

PACKAGE = HERE.parent.parent / "clients" / "js"


async def test_npm_would_publish_the_modules_the_readme_and_a_licence(node: str) -> None:
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail("npm is missing: run python tests/prerequisites.py node-modules", pytrace=False)
    proc = await asyncio.create_subprocess_exec(
        npm, "pack", "--dry-run", "--json", cwd=str(PACKAGE),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    (packed,) = json.loads(out)
    assert packed["name"] == "@aguiadapter/client"
    assert sorted(entry["path"] for entry in packed["files"]) == [
        "README.md", "package.json", "src/connect.mjs", "src/core.mjs", "src/index.mjs", "src/resumable-fetch.mjs",
    ]
    manifest = json.loads((PACKAGE / "package.json").read_text())
    assert manifest["license"] == "Apache-2.0" and manifest["type"] == "module"
    assert manifest["main"] == manifest["exports"]["."] == "./src/index.mjs"
    assert "dependencies" not in manifest and "@ag-ui/client" in manifest["peerDependencies"]


async def test_the_installed_copy_is_the_folder_and_exports_what_the_readme_shows(node: str) -> None:
    installed = HERE / "node_modules" / "@aguiadapter" / "client"
    assert not installed.is_symlink(), "a copy, as from the registry (install-links in .npmrc)"
    for module in sorted((PACKAGE / "src").iterdir()):
        assert (installed / "src" / module.name).read_bytes() == module.read_bytes(), (
            f"{module.name} changed since npm ci: run python tests/prerequisites.py node-modules"
        )
    exported = await run_node(node, HERE / "client-exports.mjs", {})
    assert exported == {
        "@aguiadapter/client": ["AdapterHttpAgent", "connectUrl", "reattachDelay", "resumableFetch", "withAdapter",
                                "withConnect"],
        "@aguiadapter/client/core": ["connectUrl", "reattachDelay", "resumableFetch", "withAdapter", "withConnect"],
        "agent": {"isHttpAgent": True, "connects": True, "reattaches": True, "plainWithoutReattach": True},
        "delays": [0, 250, 500, 1000, 2000, 4000, 4000],
    }
