"""The one waiting loop: attempt, and on a refusal wait and attempt again, until a deadline.

``hold(wait=...)`` (``_holding.wait_flow``, also ``acquire(wait=...)`` and each key of a
set) and ``convert(..., wait=...)`` (``_lock_flows``) both wait here; a :class:`Waiter`
says what differs between them: what one attempt sends, which refusals are waited out,
how a pending entry is given up, the error when the time runs out, and whether change
streams wake the waiter.

* An assertive refusal (:class:`~docmultilock.AssertiveLock`) registered a pending entry:
  the next attempt continues it (a restart would lose its place), soon enough to renew it
  before it lapses.
* The pending entry is given up on every way out (the time runs out, an error, a
  cancellation or an interrupt thrown in at a yield): it would refuse every newcomer
  until it lapses.
* With change streams, once a refusal names the document, the wait between attempts is a
  :class:`~docmultilock._flows.WaitChange` on it: the next attempt goes at once when the
  lock field changes, and the backoff, at the slower ``safety_net`` cadence, is only the
  safety net (a missed event never means a missed grant). Without a change stream, it
  polls.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from docmultilock._flows import Clock, Flow, Sleep, Unwatch, WaitChange, Watch
from docmultilock._lock import Lock
from docmultilock.errors import AssertiveLock, LockConflict, LockTimeout

__all__ = ["Tend", "Waiter", "wait_out"]

#: Run between a waiter's attempts; answers within how many seconds it must run again.
Tend = Callable[[], Flow[float]]


@dataclass(frozen=True, slots=True)
class Waiter:
    """What one waiting call does between the loop's decisions.

    :ivar attempt: one attempt, given the pending entry to continue (``None``: none yet).
    :ivar waits_out: whether a refusal other than an assertive one is waited out, given the
        pending entry the attempt continued; else it is raised (as is any other error).
    :ivar timed_out: the error when the wait runs out: ``(last refusal, waited, attempts)``.
    :ivar give_up: give the pending entry up on the way out: ``(entry, when it was last
        renewed on the flow clock, the error on its way)``.
    :ivar wait: seconds to wait in all; ``None``: one attempt, its refusal raised.
    :ivar delays: ``(min, max)`` seconds between attempts, by attempt number.
    :ivar renew_within: at most this long between attempts while an entry is pending.
    :ivar watching: the :class:`~docmultilock._flows.Watch` of a refusing document, by its
        ``_id`` and the pending entry's id; ``None``: poll only.
    :ivar safety_net: with a watch, ``(min, max)`` seconds of the retry if no change comes.
    """

    attempt: Callable[[Lock | None], Flow[Lock]]
    waits_out: Callable[[LockConflict, Lock | None], bool]
    timed_out: Callable[[LockConflict, float, int], LockTimeout]
    give_up: Callable[[Lock, float, BaseException], Flow[None]]
    wait: float | None
    delays: Callable[[int], tuple[float, float]]
    renew_within: float
    watching: Callable[[Any, str | None], Watch] | None = None
    safety_net: tuple[float, float] = (0.0, 0.0)


def wait_out(waiter: Waiter, clock: Clock, *, tend: Tend | None = None) -> Flow[tuple[Lock, float]]:
    """Attempt until granted, or until ``waiter.wait`` runs out; the lock and when it was sent.

    ``tend``, when given, runs before each wait between attempts and answers within how many
    seconds it must run again (a lock set renews there the locks it already holds).

    :raises LockTimeout: out of time (``waiter.timed_out``'s, the last refusal its cause).
    :raises LockConflict: a refusal not waited out, or any refusal with ``wait=None``.
    """
    started = clock.monotonic()
    pending: Lock | None = None
    renewed = started  # when the pending entry was last renewed (sent)
    watch: Any = None  # the change-stream watch, once the refusing document is known
    wake = waiter.watching is not None
    last: LockConflict
    attempts = 0
    try:
        while True:
            attempts += 1
            sent = clock.monotonic()
            try:
                lock = yield from waiter.attempt(pending)
            except AssertiveLock as err:
                pending, last = err.lock, err  # continue it: a restart would lose its place
                renewed = sent
            except LockConflict as err:
                if not waiter.waits_out(err, pending):
                    raise
                pending, last = None, err  # a refusal also drops a pending entry of ours
            else:
                if watch is not None:
                    yield Unwatch(watch)
                return lock, sent
            waited = clock.monotonic() - started
            if waiter.wait is None:
                raise last
            if waited >= waiter.wait:
                raise waiter.timed_out(last, waited, attempts) from last
            left = waiter.wait - waited
            if tend is not None:
                left = min(left, (yield from tend()))
            if pending is not None:
                left = min(left, waiter.renew_within)
            entry = None if pending is None else pending.id
            if wake and watch is None and waiter.watching is not None:
                document_id = _document_of(pending, last)
                if document_id is not None:
                    watch = yield waiter.watching(document_id, entry)
                    wake = watch is not None  # None: no change stream here; poll from now on
            if watch is not None:
                woke = yield WaitChange(watch, min(clock.uniform(*waiter.safety_net), left), entry)
                if woke is not None:
                    continue
                yield Unwatch(watch)  # the stream turned out unavailable: poll from now on
                watch, wake = None, False
            yield Sleep(min(clock.uniform(*waiter.delays(attempts)), left))
    except BaseException as refusal:
        if watch is not None:
            yield Unwatch(watch)
        if pending is not None:
            # This also runs for a cancellation (or KeyboardInterrupt) thrown in at a yield.
            yield from waiter.give_up(pending, renewed, refusal)
        raise


def _document_of(pending: Lock | None, refusal: LockConflict) -> Any:
    """The ``_id`` of the document that refused, when the server named it."""
    if pending is not None:
        return pending.document_id
    return getattr(refusal, "document_id", None)
