"""Worker processes end with their parent: the demo's and the bench's never linger.

A process started with multiprocessing's spawn method calls :func:`exit_with_parent` first
thing; a daemon thread waits on the parent's sentinel, which becomes ready when the parent
ends in any way (SIGKILL included), and then ends the worker at once.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from multiprocessing.connection import wait

__all__ = ["exit_with_parent"]

#: The exit status of a worker whose parent died (as after SIGTERM, by convention).
ORPHANED = 143


def exit_with_parent() -> None:
    """In a multiprocessing child, end this process as soon as its parent has ended."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return
    sentinel = parent.sentinel

    def watch() -> None:
        wait([sentinel])
        # No cleanup to run: the parent that would read our report is gone.
        os._exit(ORPHANED)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
