"""Every ```python block in README.md and docs/ runs against the test server.

The blocks of one page run in order in one namespace, so a block may use what an earlier
block on the same page defined. README.md is given nothing: its first block is the setup
its text announces, and the others run after it as a reader would run them (only
``DOCMULTILOCK_MONGODB_URI`` is given: the test server, naming a fresh database). Each page
of docs/ starts with these names already given, on a fresh database of its own:

* ``client``: a :class:`pymongo.MongoClient` on the test server (``uri``); ``db``: the page's
  database;
* ``orders`` (orders 1 and 2: ``status``, ``total``), ``invoices`` (``"INV-1"``: ``lines``,
  ``total``) and ``reports`` (``"order-1"``: ``fence`` 0), collections of ``db``;
* ``order_id`` (1) and ``log`` (a :class:`logging.Logger`);
* ``DOCMULTILOCK_MONGODB_URI`` in the environment, for blocks that make a client of their own
  (an ``AsyncMongoClient``).

A block that defines ``test_*`` functions (the testing how-to) has them called afterwards,
with the fixtures they name: ``docmultilock_client``, ``docmultilock_collection`` (a fresh
collection each) and ``tmp_path``.

A page whose blocks start an :class:`~docmultilock.testing.EmbeddedServer` of their own
(outside a ``test_*`` function) runs on it, not on the test server: it is ``embedded_only``
and skips on a real MongoDB. There a ``test_*`` function that starts one is not called: the
page's other blocks run, then the test skips, naming it.

A block that must not run says so, with a reason, on the line right before its fence::

    <!-- norun: a stored document, not code -->

Use it sparingly: for data shown in Python syntax, or a deliberate mistake (a "DON'T"
that uses names no example could give).
"""

from __future__ import annotations

import ast
import inspect
import logging
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from pymongo import MongoClient

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [page for page in sorted((ROOT / "docs").rglob("*.md")) if "_build" not in page.parts]


def naming_database(uri: str, name: str) -> str:
    """``uri`` naming the database ``name``; its credentials still checked where they were.

    A URI's database is also where a user is authenticated, unless ``authSource`` says
    otherwise: say so, for the database (or ``admin``) it named before.
    """
    parts = urlsplit(uri)
    options = parts.query
    if "@" in parts.netloc and "authsource=" not in options.lower():
        source = parts.path.strip("/") or "admin"
        options = "&".join(filter(None, [options, f"authSource={source}"]))
    return parts._replace(path=f"/{name}", query=options).geturl()


FENCE = re.compile(r"^```(\w*)\s*$")
NORUN = re.compile(r"^<!--\s*norun(?::\s*(?P<reason>.*?))?\s*-->$")

Doc = dict[str, Any]


@dataclass(frozen=True)
class Block:
    """One fenced block of Python: where it starts, its code, and why not to run it."""

    line: int
    code: str
    norun: str | None  # the reason, when the page says not to run it


def python_blocks(text: str) -> list[Block]:
    """The ```python blocks of a Markdown page, in order."""
    blocks: list[Block] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        fence = FENCE.match(lines[index])
        if fence is None:
            index += 1
            continue
        end = next(
            (j for j in range(index + 1, len(lines)) if lines[j].strip() == "```"), len(lines)
        )
        if fence.group(1) == "python":
            before = [line.strip() for line in lines[:index] if line.strip()]
            marker = NORUN.match(before[-1]) if before else None
            reason = None
            if marker is not None:
                reason = marker.group("reason") or ""
            code = "\n".join(lines[index + 1 : end]) + "\n"
            blocks.append(Block(index + 1, code, reason))
        index = end + 1
    return blocks


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


#: The name that starts a server of its own, not the test server.
OWN_SERVER = "EmbeddedServer"


def starts_its_own_server(page: Path) -> bool:
    """Whether a block of the page runs an :class:`EmbeddedServer` outside a test function."""
    for block in python_blocks(page.read_text()):
        if block.norun is not None:
            continue
        for statement in ast.parse(block.code).body:
            if isinstance(
                statement, ast.FunctionDef | ast.AsyncFunctionDef
            ) and statement.name.startswith("test_"):
                continue
            if any(
                isinstance(node, ast.Name) and node.id == OWN_SERVER for node in ast.walk(statement)
            ):
                return True
    return False


def page_param(page: Path) -> Any:
    """The page as a parameter; ``embedded_only`` when it starts a server of its own."""
    marks = []
    if starts_its_own_server(page):
        why = f"{page_id(page)} starts an EmbeddedServer of its own and runs on it"
        marks.append(pytest.mark.embedded_only(why))
    return pytest.param(page, marks=marks, id=page_id(page))


@pytest.fixture
def givens(docmultilock_client: MongoClient[Doc]) -> Iterator[dict[str, Any]]:
    """The names every page starts with, on a fresh database dropped afterwards."""
    name = f"docs_{uuid.uuid4().hex[:12]}"
    db = docmultilock_client[name]
    db.orders.insert_many([
        {"_id": 1, "status": "new", "total": 10},
        {"_id": 2, "status": "new", "total": 20},
    ])  # fmt: skip
    db.invoices.insert_one({"_id": "INV-1", "lines": [{"item": "pen", "price": 10}], "total": 10})
    db.reports.insert_one({"_id": "order-1", "fence": 0})
    try:
        yield {
            "__name__": "docs_page",
            "client": docmultilock_client,
            "db": db,
            "orders": db.orders,
            "invoices": db.invoices,
            "reports": db.reports,
            "order_id": 1,
            "log": logging.getLogger("docs_page"),
        }
    finally:
        docmultilock_client.drop_database(name)


def call_tests(
    namespace: dict[str, Any],
    client: MongoClient[Doc],
    tmp_path: Path,
    already: set[str],
    left_out: list[str] | None = None,
) -> None:
    """Call the ``test_*`` functions the page's blocks defined, with the fixtures they name.

    With ``left_out`` (on a real MongoDB), a function that starts an :class:`EmbeddedServer`
    of its own is not called but named there.
    """
    fixtures: dict[str, Callable[[], Any]] = {
        "docmultilock_client": lambda: client,
        "docmultilock_collection": lambda: client.docmultilock_test[uuid.uuid4().hex[:12]],
        "tmp_path": lambda: tmp_path / uuid.uuid4().hex[:12],
    }
    for name, function in list(namespace.items()):
        if not name.startswith("test_") or not callable(function) or name in already:
            continue
        already.add(name)
        if left_out is not None and OWN_SERVER in function.__code__.co_names:
            left_out.append(name)
            continue
        arguments = {arg: fixtures[arg]() for arg in inspect.signature(function).parameters}
        if "tmp_path" in arguments:
            arguments["tmp_path"].mkdir()
        try:
            function(**arguments)
        finally:
            if "docmultilock_collection" in arguments:
                arguments["docmultilock_collection"].drop()


def run_blocks(
    page: Path, namespace: dict[str, Any], after: Callable[[], None] = lambda: None
) -> None:
    """Run the page's blocks in order in ``namespace``, calling ``after`` after each one.

    Line numbers in tracebacks point into the page.
    """
    for block in python_blocks(page.read_text()):
        if block.norun is not None:
            assert block.norun, f"{page_id(page)}:{block.line}: norun needs a reason"
            continue
        exec(compile("\n" * block.line + block.code, page_id(page), "exec"), namespace)
        after()


@pytest.mark.parametrize("page", [page_param(page) for page in PAGES])
def test_the_pages_python_blocks_run(
    page: Path,
    givens: dict[str, Any],
    docmultilock_client: MongoClient[Doc],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    docmultilock_uri: str,
    monkeypatch: pytest.MonkeyPatch,
    is_embedded: bool,
    require_embedded: Callable[[str], None],
) -> None:
    # Pages whose blocks make their own client (the async ones) read the server from here.
    monkeypatch.setenv("DOCMULTILOCK_MONGODB_URI", docmultilock_uri)
    namespace = {**givens, "uri": docmultilock_uri}
    called: set[str] = set()
    left_out: list[str] | None = None if is_embedded else []
    run_blocks(
        page,
        namespace,
        after=lambda: call_tests(namespace, docmultilock_client, tmp_path, called, left_out),
    )
    capsys.readouterr()
    if left_out:
        require_embedded(
            f"{', '.join(left_out)} in {page_id(page)} starts an EmbeddedServer of its own "
            "(the page's other blocks ran)"
        )


def test_the_readmes_snippets_run_after_its_setup_block_alone(
    docmultilock_uri: str,
    docmultilock_client: MongoClient[Doc],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    first = python_blocks(README.read_text())[0]
    assert first.norun is None, "README's setup block runs"
    assert "DOCMULTILOCK_MONGODB_URI" in first.code
    # The setup block uses the database its URI names: a fresh one, dropped afterwards.
    name = f"docs_readme_{uuid.uuid4().hex[:12]}"
    monkeypatch.setenv("DOCMULTILOCK_MONGODB_URI", naming_database(docmultilock_uri, name))
    namespace: dict[str, Any] = {"__name__": "readme"}
    try:
        run_blocks(README, namespace)
        assert namespace["db"].name == name
    finally:
        if "db" in namespace:  # the setup's own client, which the README leaves open
            namespace["db"].client.close()
        docmultilock_client.drop_database(name)
    capsys.readouterr()


def test_a_norun_marker_is_read_with_its_reason() -> None:
    text = (
        "Text.\n\n<!-- norun: data, not code -->\n```python\n{'a': 1}\n```\n\n"
        "```python\nx = 1\n```\n"
    )
    assert python_blocks(text) == [
        Block(4, "{'a': 1}\n", "data, not code"),
        Block(8, "x = 1\n", None),
    ]
