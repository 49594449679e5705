"""What makes a retried operation safe: how often to retry, and what a lost reply leaves.

Every command is idempotent by lock id: an acquire retried after its reply was lost finds
its own entry and answers as granted (or pending) again; an extend renews again. A release
retried after a lost reply finds its entry gone; :class:`Ledger` and :class:`Sent` let the
shell tell that apart from a lock lost to expiry (see ``_LockManager._release``).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime

from docmultilock._lock import Lock
from docmultilock.errors import DbError

__all__ = ["ATTEMPTS", "Ledger", "Sent", "retry_pause"]

#: Transient failures are retried this many times at most, pausing 50 ms, 100 ms, ... 1 s.
ATTEMPTS = 6
_RETRY_PAUSE = 0.05
_RETRY_PAUSE_MAX = 1.0

#: The ledger drops records past their lock's life once per this many new records.
_SWEEP_EVERY = 256


def retry_pause(attempt: int) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (from 0)."""
    return float(min(_RETRY_PAUSE * 2**attempt, _RETRY_PAUSE_MAX))


@dataclass
class Sent:
    """What one operation learned while sending: whether a reply may have been lost."""

    unsure: bool = False


@dataclass
class _Record:
    expires_at: datetime  # as the server stamped it: compared with the server's clock only
    until: float  # monotonic time past which the record is of no use (kept generously)
    unsure: bool = False  # a release failed without an answer: it may have been applied


class Ledger:
    """What this manager saw the server grant, and which releases ended without an answer.

    A release retried after a lost reply finds its entry gone. That is a success only if
    nobody else could have removed the entry: while the lock is unexpired by the server's
    clock, only its holder can (pruning takes expired entries only). The expiry compared
    must be the server's own, as this manager read it in a grant or extension reply: a
    :class:`Lock` a client sends back may carry any ``expires_at``. For a lock this manager
    never saw granted, a release whose reply was lost is reported as the loss.

    Records last at most the lock's life (on the monotonic clock; the wall clock decides
    nothing here); thread-safe.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._records: dict[str, _Record] = {}
        self._added = 0
        self._guard = threading.Lock()

    def saw(self, lock: Lock) -> None:
        """Record ``lock`` as the server just answered it (granted, pending or extended)."""
        life = (lock.expires_at - lock.acquired_at).total_seconds()
        with self._guard:
            now = self._clock()
            old = self._records.get(lock.id)
            self._records[lock.id] = _Record(
                lock.expires_at, now + life, unsure=old is not None and old.unsure
            )
            self._added += 1
            if self._added % _SWEEP_EVERY == 0:
                for lock_id in [k for k, r in self._records.items() if r.until < now]:
                    del self._records[lock_id]

    def expiry(self, lock_id: str) -> datetime | None:
        """The server's expiry of ``lock_id`` as last seen here, or ``None`` if never seen."""
        with self._guard:
            record = self._records.get(lock_id)
            return None if record is None else record.expires_at

    def was_unsure(self, lock_id: str) -> bool:
        """True when an earlier release of ``lock_id`` ended without an answer."""
        with self._guard:
            record = self._records.get(lock_id)
            return record is not None and record.unsure

    @contextlib.contextmanager
    def on_db_error(self, lock_id: str) -> Iterator[None]:
        """Mark ``lock_id``'s release unsure when a :class:`DbError` leaves the block."""
        try:
            yield
        except DbError:
            with self._guard:
                record = self._records.get(lock_id)
                if record is not None:
                    record.unsure = True
            raise

    def forget(self, lock_id: str) -> None:
        """Drop ``lock_id``: released, or known lost."""
        with self._guard:
            self._records.pop(lock_id, None)
