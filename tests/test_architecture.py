"""The import rules ARCHITECTURE.md states, checked on the package's source (no server).

Read from the source tree next to the tests, with ``ast``: only imports at module level
count as a module's dependencies (a lazy import inside a function is how the command line
reaches tooling on demand, and is checked by its own rule below).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "docmultilock"

#: The decision core: pure, free of I/O. It may import bson, pymongo's errors and its
#: value types, and other core modules; never a driver, a client or a shell.
CORE = frozenset({
    "docmultilock._acquiring",
    "docmultilock._args",
    "docmultilock._backoff",
    "docmultilock._batch_rules",
    "docmultilock._bson_identity",
    "docmultilock._calls",
    "docmultilock._changes",
    "docmultilock._cleanup",
    "docmultilock._clock",
    "docmultilock._command",
    "docmultilock._converting",
    "docmultilock._core",
    "docmultilock._schedule_answers",
    "docmultilock._error_state",
    "docmultilock._expr",
    "docmultilock._events",
    "docmultilock._failures",
    "docmultilock._flavour",
    "docmultilock._flows",
    "docmultilock._held_lock",
    "docmultilock._kinds",
    "docmultilock._indexes",
    "docmultilock._inspection",
    "docmultilock._judge",
    "docmultilock._schedule_entry",
    "docmultilock._layout",
    "docmultilock._ledger",
    "docmultilock._lock",
    "docmultilock._lock_flows",
    "docmultilock._wording",
    "docmultilock._operating",
    "docmultilock._pipeline",
    "docmultilock._plans",
    "docmultilock._read_flows",
    "docmultilock._schedule",
    "docmultilock._reply",
    "docmultilock._resumption",
    "docmultilock._rules",
    "docmultilock._schema",
    "docmultilock._snapshot",
    "docmultilock._typing",
    "docmultilock._waiting",
    "docmultilock.errors",
    "docmultilock.options",
})  # fmt: skip

#: What the core may import from pymongo: errors and value types, nothing that talks.
CORE_PYMONGO = frozenset({"pymongo.errors", "pymongo.read_preferences", "pymongo.collation"})

#: Tooling: the command line, the bench, the demo, the test server. The library proper
#: never imports them at module level.
TOOLING_PREFIXES = (
    "docmultilock._bench",
    "docmultilock._demo",
    "docmultilock._workers",
    "docmultilock._cli",
    "docmultilock._doctor",
    "docmultilock._server_wear",
    "docmultilock.cli",
    "docmultilock.testing",
    "docmultilock.pytest_plugin",
    "docmultilock.__main__",
)


#: The mapper integrations, each an optional extra: the mapper each one imports. Nothing
#: else in the library imports them (or a mapper), so the core installs without any.
MAPPERS = {
    "docmultilock.mappers.beanie": "beanie",
    "docmultilock.mappers.mongoengine": "mongoengine",
    "docmultilock.mappers.django": "django",
}


def is_module(name: str) -> bool:
    """True when ``name`` is a module or package of the source tree."""
    where = PACKAGE.parent / Path(*name.split("."))
    return where.with_suffix(".py").exists() or (where / "__init__.py").exists()


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield module_name(path), path


def top_level_imports(path: Path) -> set[str]:
    """The modules ``path`` imports at module level (``if TYPE_CHECKING:`` blocks too)."""
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    package = module_name(path).rsplit(".", 1)[0] if path.name != "__init__.py" else None
    for node in tree.body:
        nodes = node.body if isinstance(node, ast.If) else [node]
        for statement in nodes:
            if isinstance(statement, ast.Import):
                found.update(alias.name for alias in statement.names)
            elif isinstance(statement, ast.ImportFrom):
                base = statement.module or ""
                if statement.level:
                    anchor = (package or module_name(path)).split(".")
                    base = ".".join([*anchor[: len(anchor) - statement.level + 1], base])
                # ``from docmultilock import _x`` imports the submodule ``_x`` (and, as a
                # dependency, not the package it is found in).
                submodules = {f"{base}.{alias.name}" for alias in statement.names}
                submodules = {m for m in submodules if is_module(m)}
                found |= submodules
                if len(submodules) < len(statement.names):
                    found.add(base)
    return found


GRAPH = {name: top_level_imports(path) for name, path in modules()}
OURS = {name: {m for m in deps if m.startswith("docmultilock")} for name, deps in GRAPH.items()}


def is_tooling(name: str) -> bool:
    return name.startswith(TOOLING_PREFIXES)


def test_every_core_module_exists() -> None:
    assert set(GRAPH) >= CORE, sorted(CORE - set(GRAPH))


@pytest.mark.parametrize("name", sorted(CORE))
def test_the_core_imports_no_driver_shell_or_client(name: str) -> None:
    ours = {m for m in OURS[name] if m != "docmultilock"}
    assert ours <= CORE, sorted(ours - CORE)
    pymongo = {m for m in GRAPH[name] if m == "pymongo" or m.startswith("pymongo.")}
    assert pymongo <= CORE_PYMONGO, sorted(pymongo - CORE_PYMONGO)


@pytest.mark.parametrize("name", sorted(n for n in GRAPH if not is_tooling(n)))
def test_the_library_imports_no_tooling(name: str) -> None:
    assert not {m for m in OURS[name] if is_tooling(m)}


@pytest.mark.parametrize("name", sorted(GRAPH))
def test_only_a_mappers_module_imports_the_mapper_and_no_module_imports_it(name: str) -> None:
    for module, mapper in MAPPERS.items():
        if name == module:
            continue
        assert module not in OURS[name]
        assert not {m for m in GRAPH[name] if m == mapper or m.startswith(f"{mapper}.")}


@pytest.mark.parametrize("name", sorted(n for n in GRAPH if n.startswith("docmultilock._sync")))
def test_the_sync_shell_never_imports_the_async_one(name: str) -> None:
    assert not {m for m in OURS[name] if m.startswith("docmultilock._async")}


@pytest.mark.parametrize("name", sorted(n for n in GRAPH if n.startswith("docmultilock._async")))
def test_the_async_shell_never_imports_the_sync_one(name: str) -> None:
    assert not {m for m in OURS[name] if m.startswith("docmultilock._sync")}


def test_no_module_imports_another_modules_private_names() -> None:
    offenders = []
    for name, path in modules():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("docmultilock"):
                # A private *module* (``from docmultilock import _indexes``) or a dunder
                # (``__version__``) is fine; a private name inside a module is not.
                private = [
                    a.name
                    for a in node.names
                    if a.name.startswith("_")
                    and not a.name.startswith("__")
                    and not is_module(f"{node.module}.{a.name}")
                ]
                if private:
                    offenders.append(f"{name}: from {node.module} import {', '.join(private)}")
    assert offenders == []


def test_the_package_has_no_import_cycle() -> None:
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(name: str) -> None:
        state[name] = 1
        path.append(name)
        for dep in sorted(OURS.get(name, ())):
            if dep not in OURS or dep == name or dep == "docmultilock":
                continue
            if state.get(dep) == 1:
                cycle = [*path[path.index(dep) :], dep]
                raise AssertionError(" -> ".join(cycle))
            if dep not in state:
                visit(dep)
        path.pop()
        state[name] = 2

    for name in sorted(OURS):
        if name not in state:
            visit(name)


def test_no_library_module_is_over_400_lines() -> None:
    # Tooling (the bench) and generated code aside: a room holds one idea.
    over = {
        name: lines
        for name, path in modules()
        if not name.startswith(("docmultilock._bench", "docmultilock._sync"))
        and (lines := len(path.read_text().splitlines())) > 400
    }
    assert over == {}


def test_no_flow_takes_more_than_three_positional_parameters() -> None:
    # A flow is any function annotated to return ``Flow[...]``; beyond three positional
    # parameters (``self`` included) the rest must be keyword-only, so two of one type
    # (``lock_timeout`` and ``timeout``) can never be swapped silently.
    crowded = []
    for name, path in modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            returns = ast.unparse(node.returns) if node.returns is not None else ""
            if returns.startswith("Flow["):
                positional = len(node.args.posonlyargs) + len(node.args.args)
                if positional > 3:
                    crowded.append(f"{name}.{node.name}: {positional}")
    assert crowded == []
