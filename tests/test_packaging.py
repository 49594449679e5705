"""What users install: under tox the tests run against the built wheel, not the source tree."""

from __future__ import annotations

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
