"""``python -m docmultilock``: the same command line as the ``docmultilock`` script."""

from __future__ import annotations

import sys

from docmultilock.cli import main

__all__: list[str] = []

# Guarded: the demo's worker processes are spawned, and spawning imports this module again.
if __name__ == "__main__":
    sys.exit(main())
