"""Generate the sync shell (``docmultilock/_sync/``) from the async one (``docmultilock/_async/``).

The async side is the source: edit it, then run ``python tools/unasync.py``. The output is
committed with a header saying so, and ``python tools/unasync.py --check`` (run by the lint
env) fails when a generated file differs from what the script makes, so a hand edit of the
generated side fails CI. Models: httpcore's ``scripts/unasync.py``, PyMongo's
``tools/synchro.py``.

Each line goes through the table below, in order; the result is formatted by ruff (imports
sorted, and those only the async side used dropped). ``--check`` also fails on a rule that
matches no line any more, so the table keeps only what the sources need.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "docmultilock" / "_async"
TARGET = ROOT / "docmultilock" / "_sync"

HEADER = (
    "# Generated from docmultilock/_async/{name} by tools/unasync.py: do not edit.\n"
    "# Edit the async source and run `python tools/unasync.py`.\n"
)

#: (pattern, replacement), applied in order to every line. Each must still match something:
#: ``--check`` fails on a rule that no longer does, so the table cannot rot.
SUBSTITUTIONS: list[tuple[str, str]] = [
    # Modules and names that are not a mere prefix away.
    (r"\bpymongo\.asynchronous\.(collection|database|mongo_client)\b", r"pymongo.\1"),
    (r"\bdocmultilock\._async\b", "docmultilock._sync"),
    (r"\bAsyncOnly\b", "SyncOnly"),
    (r"^import asyncio$", "import threading"),
    (r"\basyncio\.Event\b", "threading.Event"),
    (r"\basleep\b", "sleep"),
    # The flavour pairs of docmultilock._concurrency: async_start -> start, ...
    (r"\basync_(?=[a-z])", ""),
    (r"\bPerLoop\b", "PerProcess"),
    # The language (an ``async with`` block: the article first).
    (r"\ban ``async with", "a ``with"),
    (r"\basync def\b", "def"),
    (r"\basync with\b", "with"),
    (r"\bawait ", ""),
    (r"\b__aenter__\b", "__enter__"),
    (r"\b__aexit__\b", "__exit__"),
    (r"\bAwaitable\[([^\]]*)\]", r"\1"),
    # AsyncWriteLock -> WriteLock, _AsyncDocumentLocks -> _DocumentLocks, ...
    (r"(?<![A-Za-z0-9])Async(?=[A-Z])", ""),
    # Words left in docstrings and comments.
    (r"\ban async\b", "a sync"),
    (r"\basync\b", "sync"),
    (r"\bAsync\b", "Sync"),
    (r"\b([Tt])he running loop\b", r"\1he process"),
]
_COMPILED = [(re.compile(pattern), replacement) for pattern, replacement in SUBSTITUTIONS]


def unasync_line(line: str, used: set[str] | None = None) -> str:
    """One line of async source as sync source; the patterns that matched go to ``used``."""
    for pattern, replacement in _COMPILED:
        line, count = pattern.subn(replacement, line)
        if count and used is not None:
            used.add(pattern.pattern)
    return line


def _ruff(text: str, path: Path, *command: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "ruff", *command, "--stdin-filename", str(path), "-"],
        input=text,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return done.stdout


def _format(text: str, path: Path) -> str:
    """``text`` with its imports sorted again and formatted, as the project's ruff does."""
    # F401: an import only the async flavour uses (``Awaitable``) goes.
    tidied = _ruff(text, path, "check", "--select", "I,F401", "--fix", "--quiet", "--exit-zero")
    return _ruff(tidied, path, "format")


#: The generated package's ``__init__``: the one file not translated line by line.
INIT = (
    '''"""The sync shell: lock managers on PyMongo's sync API.

'''
    "Generated from ``docmultilock/_async`` by ``tools/unasync.py``: do not edit.\n"
    '''"""\n'''
)


def generate(source: Path, used: set[str] | None = None) -> str:
    """The generated text of the sync twin of ``source``; matched patterns go to ``used``."""
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
    body = "".join(unasync_line(line, used) for line in lines)
    return _format(HEADER.format(name=source.name) + body, TARGET / source.name)


def main(argv: list[str] | None = None) -> int:
    """Write (or with ``--check``, compare) every generated file; the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a generated file differs")
    args = parser.parse_args(argv)
    sources = sorted(path for path in SOURCE.glob("*.py") if path.name != "__init__.py")
    used: set[str] = set()
    expected = {TARGET / source.name: generate(source, used) for source in sources}
    expected[TARGET / "__init__.py"] = INIT
    stale = sorted(set(TARGET.glob("*.py")) - set(expected))
    dead = [pattern for pattern, _ in SUBSTITUTIONS if pattern not in used]
    for pattern in dead:
        print(f"tools/unasync.py: the rule {pattern!r} matches nothing: remove it", file=sys.stderr)
    if args.check:
        wrong = [
            path
            for path, text in expected.items()
            if not path.exists() or path.read_text(encoding="utf-8") != text
        ]
        for path in [*wrong, *stale]:
            print(
                f"{path.relative_to(ROOT)} is not what tools/unasync.py generates", file=sys.stderr
            )
        if wrong or stale:
            print("run: python tools/unasync.py", file=sys.stderr)
        return 1 if wrong or stale or dead else 0
    TARGET.mkdir(exist_ok=True)
    for path in stale:
        path.unlink()
    for path, text in expected.items():
        path.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
