"""What makes a retried operation safe: how often to retry, and what a lost reply leaves.

Every command is idempotent by lock id: an acquire retried after its reply was lost finds
its own entry and answers as granted (or pending) again; an extend renews again. A release
retried after a lost reply finds its entry gone; :class:`UnsureReleases` and :class:`Sent`
let the shell tell that apart from a lock lost to expiry (see ``_LockManager._release``).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from docmultilock._lock import Lock
from docmultilock.errors import DbError

__all__ = ["ATTEMPTS", "Sent", "UnsureReleases", "retry_pause"]

#: Transient failures are retried this many times at most, pausing 50 ms, 100 ms, ... 1 s.
ATTEMPTS = 6
_RETRY_PAUSE = 0.05
_RETRY_PAUSE_MAX = 1.0


def retry_pause(attempt: int) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (from 0)."""
    return float(min(_RETRY_PAUSE * 2**attempt, _RETRY_PAUSE_MAX))


@dataclass
class Sent:
    """What one operation learned while sending: whether a reply may have been lost."""

    unsure: bool = False


class UnsureReleases:
    """Locks whose last release failed without an answer, so the caller may retry it.

    Kept per lock manager for at most the lock's lifetime from the failure (a bound on
    its remaining life, measured on the monotonic clock: the wall clock decides nothing
    here); thread-safe.
    """

    def __init__(self) -> None:
        self._until: dict[str, float] = {}
        self._guard = threading.Lock()

    @contextlib.contextmanager
    def on_db_error(self, lock: Lock) -> Iterator[None]:
        """Remember ``lock`` when a :class:`DbError` leaves the block (outcome unknown)."""
        try:
            yield
        except DbError:
            lifetime = (lock.expires_at - lock.acquired_at).total_seconds()
            with self._guard:
                now = time.monotonic()
                for lock_id in [k for k, until in self._until.items() if until < now]:
                    del self._until[lock_id]
                self._until[lock.id] = now + lifetime
            raise

    def was_lost(self, lock: Lock) -> bool:
        with self._guard:
            return lock.id in self._until

    def forget(self, lock: Lock) -> None:
        with self._guard:
            self._until.pop(lock.id, None)
