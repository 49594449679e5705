"""What users install: under tox the tests run against the built wheel, not the source tree."""

from __future__ import annotations

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
