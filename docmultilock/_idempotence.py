"""What makes a retried operation safe: how often to retry, and what a lost reply leaves.

Every command is idempotent by lock id: an acquire retried after its reply was lost finds
its own entry and answers as granted (or pending) again; an extend renews again. A release
retried after a lost reply finds its entry gone; :class:`UnsureReleases` and :class:`Sent`
let the shell tell that apart from a lock lost to expiry (see ``_LockManager._release``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime, timezone

from docmultilock._lock import Lock

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

    Kept per lock manager until the lock's expiry; thread-safe.
    """

    def __init__(self) -> None:
        self._expiries: dict[str, datetime] = {}
        self._guard = threading.Lock()

    def lost(self, lock: Lock) -> None:
        with self._guard:
            now = datetime.now(timezone.utc)
            # Drop what expired (by this clock: only memory is at stake here).
            for lock_id in [k for k, v in self._expiries.items() if v < now]:
                del self._expiries[lock_id]
            self._expiries[lock.id] = lock.expires_at

    def was_lost(self, lock: Lock) -> bool:
        with self._guard:
            return lock.id in self._expiries

    def forget(self, lock: Lock) -> None:
        with self._guard:
            self._expiries.pop(lock.id, None)
