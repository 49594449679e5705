"""The docs tell the whole model: every attribute of a held lock, every member the API
reference documents, every error in the README, and sets, conversions and limits on the
pages a newcomer reads first."""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from pathlib import Path

import pytest

import docmultilock

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"


def _instance_attributes(cls: type) -> set[str]:
    """The public names ``cls.__init__`` assigns on ``self``."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls.__init__)))  # type: ignore[misc]
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.ctx, ast.Store)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and not node.attr.startswith("_")
    }


def _public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")} | _instance_attributes(cls)


def test_the_hold_page_describes_every_attribute_of_held() -> None:
    page = (DOCS / "howto" / "hold.md").read_text()
    described = set(re.findall(r"^`held\.(\w+)", page, re.MULTILINE))
    assert described == _public(docmultilock.HeldLock)


#: ``.. autoclass:: Name()`` followed by its ``:members:`` line, in docs/api.md.
AUTOCLASS = re.compile(r"^\.\. autoclass:: (\w+)\(?\)?\n   :members: (.+)$", re.MULTILINE)


@pytest.mark.parametrize(
    ("name", "members"),
    AUTOCLASS.findall((DOCS / "api.md").read_text()),
    ids=lambda value: value if re.fullmatch(r"\w+", value) else "",
)
def test_the_api_reference_lists_every_member_of_a_class_it_lists_members_of(
    name: str, members: str
) -> None:
    cls = getattr(docmultilock, name)
    listed = {member.strip() for member in members.split(",")}
    attributes = _instance_attributes(cls)
    documented = set(re.findall(r":ivar (\w+):", cls.__doc__ or ""))
    assert listed | (attributes & documented) == _public(cls)


def test_the_readme_names_every_error() -> None:
    errors = [
        name
        for name in docmultilock.__all__
        if isinstance(getattr(docmultilock, name), type)
        and issubclass(getattr(docmultilock, name), Exception)
    ]
    assert [name for name in errors if f"`{name}`" not in README] == []


@pytest.mark.parametrize(
    ("page", "links"),
    [
        ("README.md", ("docs/howto/sets.md", "docs/howto/read-write.md", "docs/howto/patterns.md")),
        (
            "docs/index.md",
            ("{doc}`howto/sets`", "{doc}`howto/read-write`", "{doc}`howto/patterns`"),
        ),
        (
            "docs/tutorial.md",
            ("{doc}`howto/sets`", "{doc}`howto/read-write`", "{doc}`howto/patterns`"),
        ),
    ],
)
def test_a_first_page_introduces_sets_conversions_and_limits_with_links(
    page: str, links: tuple[str, ...]
) -> None:
    text = (ROOT / page).read_text()
    for word in ("hold_all", "convert", "lock_limits", *links):
        assert word in text, word


def test_the_patterns_page_does_not_call_conversion_planned() -> None:
    assert "planned" not in (DOCS / "howto" / "patterns.md").read_text()


def test_the_readme_names_inspect_all_for_operators() -> None:
    assert "`docmultilock inspect --all`" in README


def test_the_readme_says_locks_are_not_re_entrant_and_links_the_page_for_other_libraries() -> None:
    assert "Locks are not re-entrant" in README
    assert "`docs/coming-from.md`" in README
    assert "coming-from" in (DOCS / "index.md").read_text()


# -- slips ------------------------------------------------------------------------------------


def test_the_server_page_does_not_say_docmultilock_never_upserts() -> None:
    # Named locks upsert on their first acquire.
    assert "docmultilock never upserts" not in (DOCS / "server.md").read_text()


def test_the_mongodb_page_opens_with_what_a_standalone_server_gives() -> None:
    opening = (DOCS / "howto" / "mongodb.md").read_text().split("\n\n")[1]
    assert "standalone" in opening


def test_contributing_names_no_tool_it_does_not_explain() -> None:
    assert "duplicates --change" not in (ROOT / "CONTRIBUTING.md").read_text()


def test_the_index_says_which_server_the_suite_runs_on() -> None:
    index = (DOCS / "index.md").read_text()
    assert "Tested against a real server, the embedded one" in index
    assert "no MongoDB server can be" in index


def test_the_server_page_gives_the_slowdown_the_commands_report() -> None:
    page = (DOCS / "server.md").read_text()
    assert "## It slows down as writes accumulate" in page
    assert "about 5 to 18 times slower after 10,200 writes" in page
    assert "python tools/server_wear.py" in page
