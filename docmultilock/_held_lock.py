"""A held lock: what its ``hold()`` asked (:class:`HoldSpec`), and its state (:class:`Holding`).

The state has one owner, :class:`Holding`. The holder keeps a local, conservative
estimate of the expiry (the time *before* the command that set it, plus the lifetime: the
server stamped its expiry later than that), so ``hold()`` can tell "surely still held"
from "perhaps expired" without a clock shared with the server. Whatever renewed the lock
(a lone extension, a batch, a conversion), the renewal is recorded here, once; so is the
loss, whoever found it, with everything it tells (the holder's ``lost`` events, the
warning, ``on_lost``).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from docmultilock._backoff import Backoff
from docmultilock._calls import Acquisition
from docmultilock._ledger import Stamp
from docmultilock._lock import Lock
from docmultilock.errors import DbTimeout, LockError
from docmultilock.options import OnLost

__all__ = ["HoldSpec", "Holding"]

log = logging.getLogger("docmultilock")


@dataclass(frozen=True, slots=True)
class HoldSpec:
    """Validated arguments of one ``hold()`` call: its acquisition's call, and the rest."""

    call: Acquisition  # parsed once; continued, and its lock commanded, from it
    wait: float | None
    backoff: Backoff
    keepalive: bool
    every: float
    lifetime: float
    on_lost: OnLost | None
    wake: bool = True  # wait for change events (True), or poll only
    fair: bool = False  # hold a place in line while waiting
    member: str = ""  # a set's lock: its place in the set, for the loss messages

    @property
    def key(self) -> Any:
        """What the caller passed: a filter, or a name."""
        return self.call.key

    @property
    def tag(self) -> str:
        """The lock's tag."""
        return self.call.tag


class Holding:
    """One held lock's state, and its one owner: the lock, the expiry estimate, the loss.

    Every renewal, whatever sent it (a lone extension, a batch, a conversion), is recorded
    by :meth:`renewed`; the loss, whoever found it, by :meth:`lose`. Thread-safe: the
    keep-alive updates it while the block reads it. ``expires`` is on the flow clock's
    timeline and never later than the server's expiry; so is ``lock.expires_at`` on the
    server's (a lower bound after a batch renewal, as the ledger's).
    """

    def __init__(self, spec: HoldSpec, lock: Lock, sent: float, *, read: float) -> None:
        self.spec = spec
        self._guard = threading.Lock()
        self._lock = lock
        self._stamp = Stamp.read_at(lock.expires_at, read)
        self._expires = sent + spec.lifetime
        self._tell: tuple[Callable[[], None], ...] = ()
        self.error: LockError | None = None

    @property
    def lock(self) -> Lock:
        """The current lock: a new value after each renewal."""
        with self._guard:
            return self._lock

    @property
    def expires(self) -> float:
        """The expiry estimate: before it, the server surely still holds the lock."""
        with self._guard:
            return self._expires

    def renewed(self, sent: float, *, read: float, lock: Lock | None = None) -> Lock:
        """Record a renewal sent at ``sent`` and answered at ``read``; the lock it leaves.

        ``lock`` is the server's answer (a lone extension, a conversion). A batch's reply
        holds counts, not entries: without ``lock``, ``expires_at`` moves on as a lower
        bound (:class:`~docmultilock._ledger.Stamp`). A renewal answered late, after a
        later one, moves nothing back.
        """
        with self._guard:
            if lock is None:
                self._stamp = self._stamp.batch_renewed(sent)
                expiry = self._stamp.expiry
                if expiry > self._lock.expires_at:
                    self._lock = dataclasses.replace(self._lock, expires_at=expiry)
            else:
                self._lock, self._stamp = lock, Stamp.read_at(lock.expires_at, read)
            self._expires = max(self._expires, sent + self.spec.lifetime)
            return self._lock

    def overdue(self) -> None:
        """The expiry estimate passed before a renewal succeeded: the lock counts as lost.

        Told by the keep-alive at the estimate, also while an extension is still in
        flight: from then on nobody can vouch for the lock.
        """
        spec, lock = self.spec, self.lock
        self.lose(
            DbTimeout(
                f"lock {lock.id} ({lock.tag!r}) on {spec.key!r} was not extended before "
                f"its expiry estimate ({spec.lifetime:g} s after the last extension was "
                "sent): the server did not answer in time, or the process fell behind"
            )
        )

    def tell_loss_to(self, *signals: Callable[[], None]) -> None:
        """Call each of ``signals`` when the lock is lost (a holder's ``lost`` events)."""
        self._tell = signals

    def lose(self, error: LockError) -> None:
        """Record the loss once: the signals, a warning, then ``on_lost`` (errors logged)."""
        with self._guard:
            if self.error is not None:
                return
            self.error = error
            lock = self._lock
        for signal in self._tell:
            signal()
        log.warning("lock %s (%r) on %r lost: %s", lock.id, lock.tag, self.spec.key, error)
        on_lost = self.spec.on_lost
        if on_lost is not None:
            try:
                on_lost(lock, error)
            except Exception:
                log.exception("on_lost raised for lock %s; ignored", lock.id)
