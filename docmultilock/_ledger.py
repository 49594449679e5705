"""What a lock manager saw the server grant, so that a release after a lost reply is judged.

Every command is idempotent by lock id: an acquire retried after its reply was lost finds
its own entry and answers as granted (or pending) again; an extend renews again. A release
retried after a lost reply finds its entry gone; the :class:`Ledger` lets the release flow
(``_lock_flows``) tell that apart from a lock lost to expiry.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple

from docmultilock._clock import SYSTEM_CLOCK, Clock
from docmultilock._lock import Lock

__all__ = ["Ledger", "Stamp"]

#: The ledger drops records past their lock's life once per this many new records.
_SWEEP_EVERY = 256


class Stamp(NamedTuple):
    """An expiry the server stamped, known here as a lower bound that batch renewals move on.

    A batch renewal's reply holds a count, not the new expiry. Applied after it was sent,
    it stamped at least ``renewed - read`` seconds later than the stamp read at ``read``
    (applied before it was read), the clocks running at one rate. Both times are on the
    flow's monotonic clock.
    """

    expires_at: datetime  # as the server stamped it: compared with the server's clock only
    read: float  # when that stamp was read (after the reply)
    renewed: float  # the latest send of a batch renewal applied since (else ``read``)

    @classmethod
    def read_at(cls, expires_at: datetime, read: float) -> Stamp:
        """The stamp ``expires_at`` of a reply read at ``read``."""
        return cls(expires_at, read, read)

    def batch_renewed(self, sent: float) -> Stamp:
        """The stamp once a batch renewal sent at ``sent`` was applied."""
        return self._replace(renewed=max(self.renewed, sent))

    @property
    def expiry(self) -> datetime:
        """A lower bound of the server's expiry: the stamp, moved on by later renewals."""
        return self.expires_at + timedelta(seconds=max(0.0, self.renewed - self.read))


@dataclass(slots=True)
class _Record:
    stamp: Stamp
    until: float  # monotonic time past which the record is of no use (kept generously)
    pending: bool  # the stamp is a pending entry's
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

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        self._records: dict[str, _Record] = {}
        self._added = 0
        self._guard = threading.Lock()

    def saw(self, lock: Lock, *, at: float) -> None:
        """Record ``lock`` as the server just answered it (granted, pending or extended).

        ``at`` is the flow's monotonic time, read after the reply. A pending lock never
        replaces the record of a granted one of the same id: a pending upgrade
        (``_converting``) is a second entry of the granted lock's id, with an expiry of its
        own that says nothing of the granted entry's (withdrawn, it lapses at once).
        """
        life = (lock.expires_at - lock.acquired_at).total_seconds()
        with self._guard:
            now = self._clock.monotonic()
            old = self._records.get(lock.id)
            if lock.pending and old is not None and not old.pending:
                return
            self._records[lock.id] = _Record(
                tuple.__new__(Stamp, (lock.expires_at, at, at)),  # ``Stamp.read_at``, inline
                now + life,
                lock.pending,
                unsure=old is not None and old.unsure,
            )
            self._added += 1
            if self._added % _SWEEP_EVERY == 0:
                for lock_id in [k for k, r in self._records.items() if r.until < now]:
                    del self._records[lock_id]

    def renewed(self, lock_id: str, *, sent: float, life: float) -> None:
        """Note that a batch renewal of ``lock_id``, for ``life`` seconds, was applied.

        ``sent`` is when it was sent, on the flow's monotonic clock (as ``saw``'s ``at``).
        """
        with self._guard:
            record = self._records.get(lock_id)
            if record is not None:
                record.stamp = record.stamp.batch_renewed(sent)
                record.until = max(record.until, self._clock.monotonic() + life)

    def expiry(self, lock_id: str) -> datetime | None:
        """The server's expiry of ``lock_id`` as known here (at least), or ``None`` if never seen.

        The expiry the server stamped in the last grant or extension reply, moved on by the
        batch renewals applied since (:meth:`renewed`).
        """
        with self._guard:
            record = self._records.get(lock_id)
            return None if record is None else record.stamp.expiry

    def was_unsure(self, lock_id: str) -> bool:
        """True when an earlier release of ``lock_id`` ended without an answer."""
        with self._guard:
            record = self._records.get(lock_id)
            return record is not None and record.unsure

    def release_unsure(self, lock_id: str) -> None:
        """Note that a release of ``lock_id`` failed without an answer (it may be applied)."""
        with self._guard:
            record = self._records.get(lock_id)
            if record is not None:
                record.unsure = True

    def forget(self, lock_id: str) -> None:
        """Drop ``lock_id``: released, or known lost."""
        with self._guard:
            self._records.pop(lock_id, None)
