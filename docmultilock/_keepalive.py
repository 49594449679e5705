"""One background thread per process that keeps every held lock alive.

Each ``hold(..., keepalive=True)`` registers a *renewal*: a callable that extends its lock
once and returns when it is next due (or ``None`` to stop). The single extender thread runs
the renewals in due order. It is started by the first registration and ends by itself as
soon as nothing is registered, so an idle process has no extra thread.

The renewals themselves bound each extension's time (see ``_hold``): one stalled server
cannot keep the thread past the expiry of the lock it is extending.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

__all__ = ["EXTENDER", "THREAD_NAME", "Extender", "Renewal"]

log = logging.getLogger("docmultilock")

#: The name of the extender thread (one per process at most).
THREAD_NAME = "docmultilock-keepalive"

#: Extend once; return the monotonic time the next extension is due, or None to stop.
Renewal = Callable[[], "float | None"]


class Extender:
    """Runs registered renewals when due, on one daemon thread that lives while any is."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._reset()

    def _reset(self) -> None:
        self._cond = threading.Condition()
        self._wanted: set[Renewal] = set()  # registered, and not removed since
        self._due: dict[Renewal, float] = {}  # those waiting for their time
        self._running: Renewal | None = None  # the one being run right now
        self._thread: threading.Thread | None = None

    def add(self, renewal: Renewal, due: float) -> None:
        """Run ``renewal`` at monotonic time ``due``, and then whenever it says."""
        with self._cond:
            self._wanted.add(renewal)
            self._due[renewal] = due
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name=THREAD_NAME, daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def remove(self, renewal: Renewal) -> None:
        """Stop running ``renewal``; if it is running now, wait until it has returned.

        After this returns, ``renewal`` is not running and will not run again, so a
        holder can release its lock without an extension racing the release.
        """
        with self._cond:
            self._wanted.discard(renewal)
            self._due.pop(renewal, None)
            self._cond.notify_all()  # the thread may have nothing left to wait for
            if threading.current_thread() is not self._thread:
                self._cond.wait_for(lambda: self._running is not renewal)

    def _next(self) -> Renewal | None:
        """Wait for the earliest due renewal and mark it running; None once none is left."""
        with self._cond:
            while True:
                if not self._due:
                    self._thread = None
                    return None
                # A linear scan: a process holds few locks at once.
                renewal = min(self._due, key=self._due.__getitem__)
                delay = self._due[renewal] - self._clock()
                if delay <= 0:
                    del self._due[renewal]
                    self._running = renewal
                    return renewal
                self._cond.wait(delay)

    def _serve(self) -> None:
        try:
            while (renewal := self._next()) is not None:
                due: float | None = None
                try:
                    due = renewal()
                except Exception:  # a renewal handles its own errors; this is a bug
                    log.exception("keep-alive renewal %r failed; it is dropped", renewal)
                with self._cond:
                    self._running = None
                    if due is not None and renewal in self._wanted:
                        self._due[renewal] = due
                    else:
                        self._wanted.discard(renewal)
                    self._cond.notify_all()
        finally:
            with self._cond:
                if self._thread is threading.current_thread():
                    self._thread = None  # ended abnormally: let the next add() start another
                self._running = None
                self._cond.notify_all()


#: The process's extender.
EXTENDER = Extender()

# A forked child has none of the parent's threads and must not extend the parent's locks.
if hasattr(os, "register_at_fork"):  # pragma: no branch - absent on Windows only
    os.register_at_fork(after_in_child=EXTENDER._reset)
