"""Each example runs from the built wheel with exactly the extras its docstring names.

An example's docstring says how to run it from a clone, as two lines::

    pip install -e '.[web,embedded]'
    python examples/web_werkzeug.py

The wheel is built once per session from this checkout; each set of extras gets one new
venv holding the wheel with those extras and nothing else, and every example that names
that set runs in it as a script, against the test session's server.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.test_examples import EXAMPLES, run_example

ROOT = Path(__file__).resolve().parent.parent
NAMES = sorted(path.name for path in EXAMPLES.glob("*.py"))

VenvWith = Callable[[tuple[str, ...]], Path]


def extras_of(name: str) -> tuple[str, ...] | None:
    """The extras ``examples/<name>``'s docstring installs to run it, sorted; None if unsaid."""
    docstring = ast.get_docstring(ast.parse((EXAMPLES / name).read_text())) or ""
    how = re.search(
        rf"^ *pip install -e '\.\[([\w,-]+)\]'\n *python examples/{re.escape(name)}$",
        docstring,
        re.MULTILINE,
    )
    return tuple(sorted(how.group(1).split(","))) if how else None


def run(*command: str | Path) -> None:
    """Run ``command``; fail the test with its output unless it succeeds."""
    done = subprocess.run(
        [str(part) for part in command], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This checkout's wheel, built once per session."""
    out = tmp_path_factory.mktemp("wheel")
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", out, ROOT)
    (built,) = out.glob("docmultilock-*.whl")
    return built


@pytest.fixture(scope="session")
def venv_with(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> VenvWith:
    """``venv_with(extras)``: the python of a new venv holding the wheel with ``extras``.

    One venv per set of extras for the session: examples that need the same set share it.
    """
    made: dict[tuple[str, ...], Path] = {}

    def make(extras: tuple[str, ...]) -> Path:
        if extras not in made:
            home = tmp_path_factory.mktemp("venv")
            # Without pip of its own, installed into by this pip (``--python``), and without
            # compiling every installed module: the same packages, in a third of the time.
            run(sys.executable, "-m", "venv", "--without-pip", home)
            python = home / ("Scripts" if sys.platform == "win32" else "bin") / "python"
            run(
                sys.executable,
                "-m",
                "pip",
                "--python",
                python,
                "install",
                "--no-compile",
                "--disable-pip-version-check",
                f"{wheel}[{','.join(extras)}]",
            )
            made[extras] = python
        return made[extras]

    return make


@pytest.mark.parametrize("name", NAMES)
def test_an_example_names_the_extras_it_runs_with(name: str) -> None:
    assert extras_of(name) is not None


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_an_example_runs_from_the_wheel_with_only_the_extras_it_names(
    venv_with: VenvWith, uri: str, name: str
) -> None:
    extras = extras_of(name)
    assert extras is not None

    run_example(name, uri, python=venv_with(extras))
