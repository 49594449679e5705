"""``hold()``: a lock taken for the span of a ``with`` block, waited for, kept alive, released.

Built on the lock managers' raw operations (``_acquire``, ``_extend``, ``_release``, which
raise LockErrors unmapped), so one implementation serves every lock manager. What this
module adds:

* **Waiting.** ``wait=`` retries refusals with exponential backoff and full jitter until a
  deadline. An assertive lock is continued with its pending entry, never restarted, and a
  pending entry is released on every way out (timeout, error, KeyboardInterrupt).
* **Knowing when the lock is lost.** The holder keeps a local, conservative estimate of the
  expiry (monotonic time *before* the command that set it, plus the lifetime: the server
  stamped its expiry later than that), so ``hold()`` can tell "surely still held" from
  "perhaps expired" without a clock shared with the server; the server decides the rest.
* **Keep-alive** through the process's one extender thread (``_keepalive``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from docmultilock._args import tag_or_only
from docmultilock._keepalive import EXTENDER
from docmultilock._lock import Lock
from docmultilock.errors import (
    AssertiveLock,
    CooperativeLock,
    InvalidArgument,
    LockConflict,
    LockError,
    LockNotFound,
    LockTimeout,
)
from docmultilock.options import Duration, parse_duration, parse_write_concern

if TYPE_CHECKING:
    from docmultilock._sync import _LockManager

__all__ = ["Backoff", "HeldLock", "OnLost", "Pacing", "hold", "plan_hold"]

log = logging.getLogger("docmultilock")

#: Called once, from the thread that found out, with the lock and why it is lost.
OnLost = Callable[[Lock, LockError], object]

#: The shortest time an extension is given, even when the lock seems about to expire: the
#: estimate is conservative, and the server may still find the lock live.
_MIN_EXTEND_TIMEOUT = 0.05


@dataclass(frozen=True, slots=True)
class Pacing:
    """Where the waiting loop reads time, sleeps, and draws jitter; replaced in tests."""

    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    uniform: Callable[[float, float], float] = random.uniform


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with full jitter, between ``low`` and ``high`` seconds."""

    low: float
    high: float

    def bounds(self, retry: int) -> tuple[float, float]:
        """The range the delay before retry number ``retry`` (1, 2, ...) is drawn from."""
        # The exponent is capped: 2.0 ** 1100 overflows, and 2 ** 64 exceeds any ``high``.
        return self.low, min(self.high, self.low * 2.0 ** min(retry, 64))


@dataclass(frozen=True, slots=True)
class HoldSpec:
    """Validated arguments of one ``hold()`` call."""

    key: Any
    tag: str
    wait: float | None
    backoff: Backoff
    keepalive: bool
    every: float
    lifetime: float
    on_lost: OnLost | None
    lock_timeout: Duration | None
    timeout: float | None  # per-call override; None means the manager's default
    op_timeout: float | None  # the one in force (None: no limit)
    w: int | str | None


def _check_backoff(value: object) -> Backoff:
    if (
        not isinstance(value, Sequence)
        or isinstance(value, str)
        or len(value) != 2
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    ):
        raise InvalidArgument(f"backoff must be a pair of numbers (min, max), not {value!r}")
    low, high = float(value[0]), float(value[1])
    if not (math.isfinite(high) and 0 < low <= high):
        raise InvalidArgument(f"backoff must satisfy 0 < min <= max, finite; got {value!r}")
    return Backoff(low, high)


def plan_hold(
    manager: _LockManager,
    key: object,
    *,
    tag: object,
    wait: object,
    backoff: object,
    keepalive: object,
    extend_every: object,
    on_lost: object,
    lock_timeout: Duration | None,
    timeout: object,
    w: object,
) -> HoldSpec:
    """Check every argument of ``hold()``; raise :class:`InvalidArgument` before any write."""
    manager._check_key(key)
    rules = manager.options.rules
    tag = tag_or_only(tag, rules)
    lifetime = manager._lifetime(tag, lock_timeout) / 1000
    if not isinstance(keepalive, bool):
        raise InvalidArgument(f"keepalive must be True or False, not {keepalive!r}")
    every = lifetime / 3
    if extend_every is not None:
        every = parse_duration(extend_every, "extend_every")
        if every >= lifetime:
            raise InvalidArgument(
                f"extend_every ({every} s) must be shorter than the lock's lifetime "
                f"({lifetime} s), or the lock expires between extensions"
            )
    if on_lost is not None and not callable(on_lost):
        raise InvalidArgument(f"on_lost must be callable or None, not {type(on_lost).__name__}")
    per_call = None if timeout is None else parse_duration(timeout, "timeout")
    return HoldSpec(
        key=key,
        tag=tag,
        wait=None if wait is None else parse_duration(wait, "wait"),
        backoff=_check_backoff(backoff),
        keepalive=keepalive,
        every=every,
        lifetime=lifetime,
        on_lost=on_lost,
        lock_timeout=lock_timeout,
        timeout=per_call,
        op_timeout=manager.options.timeout if per_call is None else per_call,
        w=None if w is None else parse_write_concern(w),
    )


class HeldLock:
    """A lock held for the span of a ``with manager.hold(...)`` block.

    :ivar lost: a :class:`threading.Event`, set once the lock is known or feared lost
        (expired, taken over, or an extension failed).
    :ivar error: the :class:`~docmultilock.LockError` that told, once ``lost`` is set.
    """

    def __init__(self, manager: _LockManager, spec: HoldSpec, lock: Lock, sent: float) -> None:
        self._manager = manager
        self._spec = spec
        self._state = threading.Lock()
        self._lock = lock
        self._expires = sent + spec.lifetime  # never later than the server's expiry
        self.lost = threading.Event()
        self.error: LockError | None = None
        self._renewal = self._renew  # one object, to register and remove

    def __repr__(self) -> str:
        state = "lost" if self.lost.is_set() else "held"
        return f"<HeldLock {self.lock.tag!r} {self.lock.id} on {self._spec.key!r}: {state}>"

    @property
    def lock(self) -> Lock:
        """The current :class:`~docmultilock.Lock` (a new value after each extension)."""
        with self._state:
            return self._lock

    def guard(self) -> dict[str, Any]:
        """A filter matching the locked document only while this lock is held.

        ::

            orders.update_one(held.guard(), {"$set": {"status": "paid"}})
        """
        return self._manager._guard(self._spec.key, self.lock)

    def _lose(self, error: LockError) -> None:
        """Record the loss once: set ``lost``, then tell ``on_lost`` (its errors are logged)."""
        with self._state:
            if self.error is not None:
                return
            self.error = error
            lock = self._lock
        self.lost.set()
        log.warning("lock %s (%r) on %r lost: %s", lock.id, lock.tag, self._spec.key, error)
        if self._spec.on_lost is not None:
            try:
                self._spec.on_lost(lock, error)
            except Exception:
                log.exception("on_lost raised for lock %s; ignored", lock.id)

    def _extend(self, timeout: float | None) -> None:
        """Extend once; update the lock and the expiry estimate, or record the loss."""
        spec = self._spec
        sent = time.monotonic()
        try:
            lock = self._manager._extend(spec.key, self.lock, spec.lock_timeout, timeout, spec.w)
        except LockError as err:
            self._lose(err)
            return
        with self._state:
            self._lock = lock
            self._expires = sent + spec.lifetime

    def _renew(self) -> float | None:
        """One keep-alive turn, run by the extender thread; when the next is due, or None."""
        spec = self._spec
        now = time.monotonic()
        with self._state:
            left = self._expires - now
        # Bounded by the expiry estimate: past it the answer cannot save the lock, and the
        # extender thread must go on to the other locks. A stalled server therefore costs
        # this lock (lost) and never keeps the thread beyond its expiry.
        limit = max(left, _MIN_EXTEND_TIMEOUT)
        if spec.op_timeout is not None:
            limit = min(limit, spec.op_timeout)
        try:
            self._extend(limit)
        except Exception as exc:  # not a LockError: a bug; the lock can no longer be trusted
            log.exception("keep-alive of lock %s failed", self.lock.id)
            error = LockError(f"keep-alive failed: {type(exc).__name__}: {exc}")
            error.__cause__ = exc
            self._lose(error)
        if self.lost.is_set():
            return None
        return now + spec.every

    def _release(self, *, quiet: bool) -> None:
        """Stop the keep-alive, then release; raise the loss unless ``quiet``."""
        spec = self._spec
        if spec.keepalive:
            EXTENDER.remove(self._renewal)
        if not quiet and not self.lost.is_set() and time.monotonic() >= self._expires:
            # Perhaps expired: a release would remove an expired entry quietly, so ask the
            # server whether the lock is still live (an extension refuses an expired one).
            self._extend(spec.timeout)
        try:
            self._manager._release(spec.key, self.lock, spec.timeout, spec.w)
        except LockNotFound as err:
            self._lose(err)
        except LockError as err:
            if not quiet and self.error is None:
                raise
            log.warning("could not release lock %s on %r: %s", self.lock.id, spec.key, err)
        if not quiet and self.error is not None:
            raise self.error


def acquire_waiting(manager: _LockManager, spec: HoldSpec, pacing: Pacing) -> tuple[Lock, float]:
    """Acquire, retrying refusals until ``spec.wait`` runs out; the lock and when it was sent.

    :raises LockTimeout: out of time (the last refusal is ``__cause__``).
    :raises LockConflict: refused, with ``wait=None``.
    """
    started = pacing.monotonic()
    pending: Lock | None = None
    last: LockConflict
    attempts = 0
    try:
        while True:
            attempts += 1
            sent = time.monotonic()
            try:
                tag = None if pending is not None else spec.tag
                lock = manager._acquire(
                    spec.key, tag, pending, spec.lock_timeout, spec.timeout, spec.w
                )
            except AssertiveLock as err:
                pending, last = err.lock, err  # continue it: a restart would lose its place
            except CooperativeLock as err:
                pending, last = None, err  # a refusal also drops a pending entry of ours
            except LockNotFound as err:
                if pending is None:
                    raise
                pending, last = None, err  # our pending entry lapsed: register anew
            else:
                return lock, sent
            waited = pacing.monotonic() - started
            if spec.wait is None:
                raise last
            if waited >= spec.wait:
                raise LockTimeout(
                    f"gave up waiting for a {spec.tag!r} lock on {spec.key!r} after "
                    f"{waited:.3g} s and {attempts} attempts: {last}",
                    filter=last.filter,
                    attempts=attempts,
                    waited=waited,
                    blocking_tags=getattr(last, "blocking_tags", ()),
                ) from last
            delay = pacing.uniform(*spec.backoff.bounds(attempts))
            if pending is not None:
                # Each continuation renews the pending entry: come back before it lapses.
                delay = min(delay, spec.lifetime / 3)
            pacing.sleep(min(delay, spec.wait - waited))
    except BaseException:
        if pending is not None:
            # Never leave a pending entry behind: it refuses every newcomer until it lapses.
            try:
                manager._release(spec.key, pending, spec.timeout, spec.w)
            except LockError as err:
                log.warning("could not release pending lock %s: %s", pending.id, err)
        raise


@contextlib.contextmanager
def hold(manager: _LockManager, spec: HoldSpec, pacing: Pacing) -> Iterator[HeldLock]:
    """Run ``manager.hold()``: acquire (waiting), keep alive, release, report a loss."""
    with manager._mapped_errors():
        lock, sent = acquire_waiting(manager, spec, pacing)
    held = HeldLock(manager, spec, lock, sent)
    try:
        if spec.keepalive:
            EXTENDER.add(held._renewal, sent + spec.every)
        yield held
    except BaseException:
        # The body's own exception wins; the release only logs what it finds.
        held._release(quiet=True)
        raise
    with manager._mapped_errors():
        held._release(quiet=False)
