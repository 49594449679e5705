"""The import rules and public modules ARCHITECTURE.md states, checked on the source (no server).

Read from the source tree next to the tests, with ``ast``: only imports at module level
count as a module's dependencies (a lazy import inside a function is how the command line
reaches tooling on demand, and is checked by its own rule below).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "docmultilock"

#: The decision core: pure, free of I/O. It may import bson, pymongo's errors and its
#: value types, and other core modules; never a driver, a client or a shell.
CORE = frozenset({
    "docmultilock._acquiring",
    "docmultilock._args",
    "docmultilock._backoff",
    "docmultilock._batch_renewal",
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
    "docmultilock._holding",
    "docmultilock._kinds",
    "docmultilock._indexes",
    "docmultilock._inspection",
    "docmultilock._judge",
    "docmultilock._schedule_entry",
    "docmultilock._layout",
    "docmultilock._ledger",
    "docmultilock._lock",
    "docmultilock._lock_flows",
    "docmultilock._lockset",
    "docmultilock._wording",
    "docmultilock._parsing",
    "docmultilock._parts",
    "docmultilock._pipeline",
    "docmultilock._plans",
    "docmultilock._read_flows",
    "docmultilock._schedule",
    "docmultilock._reply",
    "docmultilock._resumption",
    "docmultilock._rules",
    "docmultilock._schema",
    "docmultilock._sending",
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


#: The public modules: what users import, each named in docs/api.md. Every other module is
#: private, whether or not its name starts with an underscore; a public module's public
#: names are its ``__all__`` (``docmultilock``'s: the managers, ``Lock``, the errors, ...).
PUBLIC = frozenset({
    "docmultilock",
    "docmultilock.errors",  # the errors' home: a traceback and a pickle name them there
    "docmultilock.http",
    "docmultilock.mappers",
    "docmultilock.mappers.beanie",
    "docmultilock.mappers.django",
    "docmultilock.mappers.mongoengine",
    "docmultilock.options",
    "docmultilock.pytest_plugin",
    "docmultilock.testing",
})  # fmt: skip

#: Modules that are run, not imported: the ``docmultilock`` command (``pyproject.toml``'s
#: script) and ``python -m docmultilock``. Their ``__all__`` is what the command calls.
RUN = frozenset({"docmultilock.cli", "docmultilock.__main__"})

#: The shells that talk to the server (each with its generated sync twin): the driver
#: performs the flows' effects, the wake-up follows a change stream, and the records'
#: driver sends a guarded save's two commands. No other library module calls a collection.
TALKERS = frozenset({
    f"docmultilock._{flavour}.{module}"
    for flavour in ("async", "sync")
    for module in ("driver", "wakeup", "records")
})  # fmt: skip

#: What a collection, database or client does on the server.
SERVER_CALLS = frozenset({
    "aggregate", "bulk_write", "command", "count_documents", "create_collection",
    "create_index", "create_indexes", "delete_many", "delete_one",
    "find_one", "find_one_and_delete", "find_one_and_replace", "find_one_and_update",
    "insert_many", "insert_one", "list_indexes", "replace_one", "update_many",
    "update_one", "watch",
})  # fmt: skip

#: Where users read code: the README, the docs' pages and the examples; and the public
#: usages that must type-check (``tests/typing``).
README = ROOT / "README.md"
PAGES = [page for page in sorted((ROOT / "docs").rglob("*.md")) if "_build" not in page.parts]
EXAMPLES = [
    *sorted((ROOT / "examples").glob("*.py")),
    *sorted((ROOT / "tests" / "typing").glob("*.py")),
]

FENCE = re.compile(r"^```(?P<lang>\S*)\n(?P<code>.*?)^```\s*$", re.MULTILINE | re.DOTALL)
#: A cross-reference in the docs' text: ``{py:class}`~docmultilock.Lock``` or ``:class:`...```.
REFERENCE = re.compile(r"(?:\{py:\w+\}|:\w+:)`[~!]?(?:[^`<]*<)?(?P<target>docmultilock[\w.]*)>?`")


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


def is_private(name: str) -> bool:
    """True when a part of the dotted ``name`` below the package starts with ``_``."""
    return any(part.startswith("_") for part in name.split(".")[1:])


def exported(name: str) -> list[str] | None:
    """The public module ``name``'s ``__all__``, read from its source; ``None`` without one."""
    path = source_of(name)
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id == "__all__":
            return [str(name) for name in ast.literal_eval(value)]
    return None


def bound_names(path: Path) -> set[str]:
    """The names ``path`` binds at module level (in ``if`` and ``try`` blocks too)."""
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                found.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, ast.Assign):
                found.update(t.id for t in node.targets if isinstance(t, ast.Name))
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                found.add(node.target.id)
            elif isinstance(node, (ast.If, ast.Try)):
                visit(node.body)
                visit(node.orelse)
                for handler in getattr(node, "handlers", ()):
                    visit(handler.body)

    visit(ast.parse(path.read_text(), str(path)).body)
    return found


def source_of(name: str) -> Path:
    where = PACKAGE.parent / Path(*name.split("."))
    return where / "__init__.py" if where.is_dir() else where.with_suffix(".py")


def users_code() -> Iterator[tuple[str, str, str]]:
    """Every piece of code users read: ``(where, language, code)``."""
    for page in [README, *PAGES]:
        for fence in FENCE.finditer(page.read_text()):
            yield str(page.relative_to(ROOT)), fence["lang"], fence["code"]
    for example in EXAMPLES:
        yield str(example.relative_to(ROOT)), "python", example.read_text()


def imported_from_docmultilock(code: str) -> Iterator[tuple[str, str | None]]:
    """``(module, name)`` for each import of docmultilock in ``code`` (name ``None``:
    the module itself is imported)."""
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "docmultilock":
                    yield alias.name, None
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == (
            "docmultilock"
        ):
            for alias in node.names:
                module = f"{node.module}.{alias.name}"
                yield (module, None) if is_module(module) else (node.module or "", alias.name)


def test_every_module_not_named_private_is_public_or_run() -> None:
    # A module without an underscore is one users may import: declare it (and document
    # it), or name it with an underscore.
    unnamed = {n for n in GRAPH if not is_private(n)} - PUBLIC - RUN
    assert unnamed == set()
    assert {n for n in PUBLIC | RUN if not is_private(n)} <= set(GRAPH)


def test_every_public_module_is_named_in_the_api_reference() -> None:
    api = (ROOT / "docs" / "api.md").read_text()
    unnamed = {n for n in PUBLIC if f"`{n}`" not in api and f"automodule:: {n}\n" not in api}
    assert unnamed == set()


def pyproject_entry_points() -> dict[str, set[str]]:
    """What ``pyproject.toml`` runs: ``{"scripts": modules, "plugins": modules}`` (read by
    line: ``tomllib`` is Python 3.11+)."""
    found: dict[str, set[str]] = {"scripts": set(), "plugins": set()}
    section = ""
    for line in (ROOT / "pyproject.toml").read_text().splitlines():
        if line.startswith("["):
            section = line.strip("[] ")
        elif (value := re.fullmatch(r'\s*[\w-]+\s*=\s*"([\w.]+)(?::\w+)?"\s*', line)) is not None:
            if section == "project.scripts":
                found["scripts"].add(value[1])
            elif section.startswith("project.entry-points."):
                found["plugins"].add(value[1])
    return found


def test_the_run_modules_are_what_pyproject_runs() -> None:
    runs = pyproject_entry_points()
    assert runs["scripts"] | {"docmultilock.__main__"} == RUN
    assert runs["plugins"]
    assert runs["plugins"] <= PUBLIC


@pytest.mark.parametrize("name", sorted(PUBLIC | RUN))
def test_a_public_module_declares_its_names_in_all(name: str) -> None:
    names = exported(name)
    assert isinstance(names, list), f"{name} has no __all__"
    assert set(names) <= bound_names(source_of(name)), sorted(
        set(names) - bound_names(source_of(name))
    )


def test_users_code_imports_only_public_modules_and_their_names() -> None:
    wrong = []
    for where, lang, code in users_code():
        if re.search(r"\bdocmultilock\._", code):
            wrong.append(f"{where}: names a private module")
        if lang not in ("python", "py", "pycon"):
            continue
        for module, name in imported_from_docmultilock(code):
            if module not in PUBLIC:
                wrong.append(f"{where}: imports {module}")
            elif name is not None and name not in (exported(module) or ()):
                wrong.append(f"{where}: imports {name} from {module}, not in its __all__")
    assert wrong == []


def test_the_docs_refer_only_to_public_modules_and_their_names() -> None:
    wrong = []
    for page in [README, *PAGES]:
        for reference in REFERENCE.finditer(page.read_text()):
            parts = reference["target"].split(".")
            # The longest prefix that is a module; the next part is a name it exports.
            cut = max(i for i in range(1, len(parts) + 1) if is_module(".".join(parts[:i])))
            module, rest = ".".join(parts[:cut]), parts[cut:]
            if module not in PUBLIC:
                wrong.append(f"{page.name}: {reference['target']}")
            elif rest and rest[0] not in (exported(module) or ()):
                wrong.append(f"{page.name}: {reference['target']} (not in {module}.__all__)")
    assert wrong == []


def test_only_the_drivers_call_the_server() -> None:
    # Tooling (the bench, the doctor, the demo) aside: everything else is a flow, whose
    # commands are effects a driver performs.
    callers = set()
    for name, path in modules():
        if is_tooling(name) or name in TALKERS:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in SERVER_CALLS
            ):
                callers.add(f"{name}: .{node.func.attr}()")
    assert callers == set()
