"""The package's modules import each other without a cycle.

A cycle means two modules that cannot be understood (or changed) one
without the other; every import counts, also one under ``TYPE_CHECKING`` or
inside a function, because each is a dependency a reader must follow.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "aguiadapter"
#: Every package whose modules must import each other without a cycle.
PACKAGES = [PACKAGE, ROOT / "benchmarks", ROOT / "tests" / "support"]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path = PACKAGE, *more: Path) -> dict[str, set[str]]:
    """Module → the modules of the same package (or of ``more`` packages) it imports."""
    files = {module_name(path): path for root in (package, *more) for path in root.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in files else base for alias in node.names]
            graph[name].update(target for target in targets if target in files and target != name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_sees_the_package_imports() -> None:
    graph = import_graph()
    assert "aguiadapter.threads.machine" in graph["aguiadapter.runs.shell"]
    assert "aguiadapter.runtime.evidence" in graph["aguiadapter.threads.machine"]


@pytest.mark.parametrize("package", PACKAGES, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_no_module_of_the_package_imports_itself_through_others(package: Path) -> None:
    assert cycles(import_graph(package)) == []


def test_a_cycle_would_be_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# ----------------------------------------------------------------- folders
#: What each part of the package may import, bottom to top. A part is a
#: folder of ``aguiadapter/`` or one of its top-level modules; each folder's
#: ``__init__.py`` says the same in words. A new import across parts must be
#: allowed here first, and the table must stay free of loops.
BASE = frozenset({"errors", "fastjson", "version"})
LAYERS: dict[str, frozenset[str]] = {
    "errors": frozenset(),
    "fastjson": frozenset(),
    "version": frozenset(),
    "i18n": frozenset({"errors"}),
    "telemetry": frozenset({"errors", "version"}),
    "logs": frozenset({"telemetry"}),
    "workspace": frozenset({"errors"}),
    "protocol": BASE,
    "images": BASE | {"protocol"},
    "a2a": BASE | {"protocol", "telemetry"},
    "runtime": BASE | {"a2a", "logs", "protocol"},
    "translate": BASE | {"a2a", "protocol", "runtime"},
    "threads": BASE | {"protocol", "runtime", "translate"},
    "tasks": frozenset(),
    "store": BASE | {"logs", "protocol", "tasks", "threads"},
    "runs": BASE | {"a2a", "i18n", "logs", "protocol", "runtime", "store", "telemetry", "threads", "translate"},
    "service": BASE | {"a2a", "i18n", "logs", "pool", "protocol", "runs", "runtime", "store", "tasks", "telemetry",
                       "threads"},
    "demo": BASE | {"a2a"},
    "pool": BASE | {"a2a", "logs", "runtime", "store", "telemetry"},
    "config": BASE | {"logs", "pool", "protocol"},
    "cli_help": BASE | {"config", "logs"},
    "iac_process": BASE | {"config", "logs"},
    "web": BASE | {"a2a", "config", "demo", "i18n", "images", "logs", "pool", "protocol", "runs", "runtime", "service",
                   "store", "telemetry", "threads", "translate", "workspace"},
    "admin": BASE | {"a2a", "cli_help", "config", "logs", "pool", "service", "store", "threads", "web"},
    "cli": BASE | {"admin", "cli_help", "config", "iac_process", "images", "logs", "pool", "protocol", "store",
                   "telemetry", "threads", "web"},
    "__main__": frozenset({"cli"}),
    "(root)": frozenset({"config", "store", "version", "web"}),
}
#: Modules the thread rules never import: they take events and time in and
#: hand a new record and events out, so a test needs no loop, file or socket.
NO_IO = frozenset({"asyncio", "aiofiles", "aiohttp", "redis", "threading", "concurrent", "socket", "subprocess"})


def part_of(module: str) -> str:
    """``aguiadapter.store.file.index`` → ``store``; the package itself → ``(root)``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "(root)"


def folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Part → the other parts its modules import."""
    folders: dict[str, set[str]] = {}
    for module, targets in graph.items():
        mine = part_of(module)
        folders.setdefault(mine, set()).update(part_of(target) for target in targets if part_of(target) != mine)
    return folders


def external_imports(path: Path) -> set[str]:
    """The top-level names of what a file imports from outside the package."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_every_part_of_the_package_is_in_the_table() -> None:
    assert set(folder_graph(import_graph())) <= set(LAYERS)


def test_each_folder_imports_only_what_the_table_allows() -> None:
    wrong = {
        part: sorted(targets - LAYERS[part])
        for part, targets in folder_graph(import_graph()).items()
        if targets - LAYERS.get(part, frozenset())
    }
    assert wrong == {}


def test_the_table_has_no_loop() -> None:
    assert cycles({part: set(allowed) for part, allowed in LAYERS.items()}) == []


def test_no_folder_imports_itself_through_others() -> None:
    assert cycles(folder_graph(import_graph())) == []


def test_a_folder_loop_would_be_found_where_modules_form_none() -> None:
    # a.x → b.y and b.z → a.w: no module cycle, but the folders a and b need each other.
    graph = {"aguiadapter.a.x": {"aguiadapter.b.y"}, "aguiadapter.b.z": {"aguiadapter.a.w"},
             "aguiadapter.a.w": set(), "aguiadapter.b.y": set()}
    assert cycles(graph) == []
    assert cycles(folder_graph(graph)) == [["a", "b"]]


def test_the_thread_rules_do_no_io() -> None:
    rules = sorted((PACKAGE / "threads").glob("*.py"))
    assert rules, "the thread rules are in aguiadapter/threads/"
    doing_io = {path.name: sorted(external_imports(path) & NO_IO) for path in rules if external_imports(path) & NO_IO}
    assert doing_io == {}


def test_each_folder_says_what_it_holds_and_what_it_may_import() -> None:
    silent = [
        path.parent.relative_to(ROOT).as_posix()
        for path in sorted(PACKAGE.glob("*/**/__init__.py"))
        if "may import:" not in (ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or "").lower()
    ]
    assert silent == []


#: What a pure test may not reach, directly or through the test support modules.
HARNESS = ("tests.support.adapter", "tests.support.iac_runtime", "tests.support.model_stub",
           "tests.support.a2a_proxy", "tests.support.adapter_process", "tests.support.replay_runtime",
           "tests.support.flaky_link", "aguiadapter.demo", "aguiadapter.web.app", "aguiadapter.web.server")


def test_the_pure_tests_reach_no_harness() -> None:
    graph = import_graph(ROOT / "tests", PACKAGE)
    reached: dict[str, list[str]] = {}
    for test in sorted(name for name in graph if name.startswith("tests.pure.")):
        seen, todo = set(), [test]
        while todo:
            for target in graph.get(todo.pop(), ()):
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
        harness = sorted(name for name in seen if name.startswith(HARNESS))
        if harness:
            reached[test] = harness
    assert reached == {}
