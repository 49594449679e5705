"""What users install: under tox the tests run against the built wheel, not the source tree."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import sysconfig
from pathlib import Path

import pytest

import docmultilock


@pytest.mark.skipif(
    not os.environ.get("DOCMULTILOCK_TEST_INSTALLED"),
    reason="only under tox (DOCMULTILOCK_TEST_INSTALLED=1), which installs the built wheel",
)
def test_the_package_under_test_is_the_installed_wheel() -> None:
    installed = Path(sysconfig.get_paths()["purelib"]).resolve()
    assert installed in Path(docmultilock.__file__).resolve().parents


def test_check_dist_fails_when_the_package_is_not_among_the_tracked_files() -> None:
    path = Path(__file__).parents[1] / "tools" / "check_dist.py"
    if not path.exists():
        pytest.skip("tools/ is not shipped with the package")
    spec = importlib.util.spec_from_file_location("check_dist", path)
    assert spec is not None
    assert spec.loader is not None
    check_dist = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check_dist)

    with pytest.raises(SystemExit, match=r"__init__\.py is not among the 0 tracked files"):
        check_dist.check_tracked([])
    check_dist.check_tracked(["docmultilock/__init__.py"])


def test_every_public_name_is_imported_on_first_use_from_where_mypy_sees_it() -> None:
    # The package imports its names lazily; the TYPE_CHECKING imports are what mypy and
    # readers see, and must name the same things, from the same modules.
    source = Path(docmultilock.__file__).read_text()
    block = next(
        node
        for node in ast.parse(source).body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    )
    seen = {
        alias.name: statement.module
        for statement in block.body
        if isinstance(statement, ast.ImportFrom)
        for alias in statement.names
    }
    assert set(seen) == set(docmultilock.__all__) - {"__version__"}
    for name, module in seen.items():
        assert getattr(docmultilock, name) is getattr(importlib.import_module(str(module)), name)
    assert set(docmultilock.__all__) <= set(dir(docmultilock))
    with pytest.raises(AttributeError, match="has no attribute 'Nothing'"):
        _ = docmultilock.Nothing  # type: ignore[attr-defined]
