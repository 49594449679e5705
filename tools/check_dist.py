"""Check what users install: build the wheel and sdist, compare them with git, run the wheel.

Run from the project root (``tox -e packaging`` does)::

    python tools/check_dist.py            # build into a temporary directory, check, run
    python tools/check_dist.py --quick    # contents only: no clean venv, no demo

It fails when a tracked module under ``docmultilock/`` is missing from the wheel, when a
tracked file is missing from the sdist (the sdist must be able to run the test suite), or
when the wheel, installed alone into a new venv and run from a directory with no source
tree, cannot import ``docmultilock`` or run ``docmultilock --version``, ``demo`` and
``bench``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
import tempfile
import venv
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "docmultilock"
#: Tracked files that have no business in the sdist.
NOT_IN_SDIST = {".gitignore"}
#: The commands run with the installed wheel, each short (seconds, not minutes).
SMOKE = [
    ["python", "-c", f"import {PACKAGE}, sys; print({PACKAGE}.__file__)"],
    [PACKAGE, "--version"],
    ["python", "-m", PACKAGE, "--help"],
    [PACKAGE, "demo", "--seconds", "2", "--workers", "2"],
    [PACKAGE, "bench", "--scenarios", "1", "--duration", "1"],
]


def tracked_files() -> list[str]:
    """The files git tracks, or every file under the root when it is not a git checkout."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
        ).stdout.decode()
    except (OSError, subprocess.CalledProcessError):
        # An unpacked sdist: its own files are what it ships.
        return sorted(
            str(path.relative_to(ROOT))
            for path in ROOT.rglob("*")
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
        )
    return sorted(name for name in listed.split("\0") if name and (ROOT / name).exists())


def check_tracked(tracked: list[str]) -> None:
    """Refuse a listing without the package's ``__init__.py``: every check would pass on it.

    ``git ls-files`` lists nothing when run outside the work tree it should list (or in
    a checkout it cannot read), and "every tracked file is shipped" holds for no files.
    """
    if f"{PACKAGE}/__init__.py" not in tracked:
        raise SystemExit(
            f"check_dist: {PACKAGE}/__init__.py is not among the {len(tracked)} tracked files "
            f"listed in {ROOT}; nothing would be checked"
        )


def build(out: Path) -> tuple[Path, Path]:
    """Build the wheel and the sdist into ``out``; return their paths."""
    subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], check=True)
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    return wheel, sdist


def missing_from_wheel(wheel: Path, tracked: list[str]) -> list[str]:
    """Tracked files of the package (modules, py.typed) that the wheel lacks."""
    with zipfile.ZipFile(wheel) as archive:
        shipped = set(archive.namelist())
    return [name for name in tracked if name.startswith(f"{PACKAGE}/") and name not in shipped]


def missing_from_sdist(sdist: Path, tracked: list[str]) -> list[str]:
    """Tracked files that the sdist lacks."""
    with tarfile.open(sdist) as archive:
        # Every member sits under one top directory, "docmultilock-<version>/".
        shipped = {name.partition("/")[2] for name in archive.getnames()}
    return [name for name in tracked if name not in NOT_IN_SDIST and name not in shipped]


def run_installed(wheel: Path, work: Path) -> None:
    """Install the wheel (with the embedded server) into a new venv and run the smoke commands.

    They run from an empty directory with no PYTHONPATH, so only the installed copy of the
    package can be imported.
    """
    env_dir = work / "venv"
    venv.create(env_dir, with_pip=True)
    bin_dir = env_dir / ("Scripts" if os.name == "nt" else "bin")
    python = str(bin_dir / "python")
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", f"{PACKAGE}[embedded] @ {wheel.as_uri()}"],
        check=True,
    )
    empty = work / "elsewhere"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME"}}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    for command in SMOKE:
        print("$", " ".join(command), flush=True)
        program = python if command[0] == "python" else str(bin_dir / command[0])
        done = subprocess.run(
            [program, *command[1:]],
            cwd=empty,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        print(done.stdout[-2000:], done.stderr[-2000:], sep="", flush=True)
        if done.returncode != 0:
            raise SystemExit(f"check_dist: {' '.join(command)} exited with {done.returncode}")
        if command[0] == "python" and "-c" in command:
            imported = Path(done.stdout.strip())
            if env_dir.resolve() not in imported.resolve().parents:
                raise SystemExit(f"check_dist: imported {imported}, not the installed wheel")


def main() -> int:
    """Build, compare with git, and (unless ``--quick``) run the installed wheel."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="check contents only")
    args = parser.parse_args()
    tracked = tracked_files()
    check_tracked(tracked)
    with tempfile.TemporaryDirectory(prefix="docmultilock-dist-") as temp:
        work = Path(temp)
        wheel, sdist = build(work / "dist")
        problems = [
            f"missing from the wheel: {name}" for name in missing_from_wheel(wheel, tracked)
        ]
        problems += [
            f"missing from the sdist: {name}" for name in missing_from_sdist(sdist, tracked)
        ]
        if problems:
            print("\n".join(problems), file=sys.stderr)
            return 1
        print(f"check_dist: {wheel.name} and {sdist.name} ship every tracked file", flush=True)
        if not args.quick:
            run_installed(wheel, work)
            print("check_dist: the installed wheel runs", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
