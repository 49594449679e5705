"""Giving back what a failed acquisition took, retried within the locks' lifetime.

A lock set refused part way (``_lockset``) releases the locks it took, and a wait that
gives up (``_holding``) withdraws its pending entry: the caller never received those
locks, so nobody else could release them. A database failure of such a release is
therefore retried, pausing as :func:`~docmultilock._flows.send` pauses, until the lock's
expiry estimate (after it, the lock may have expired, and it keeps nobody out longer than
its lifetime anyway). A lock whose release still failed is *left behind*: the refusal is
then raised as :class:`~docmultilock.LocksLeftBehind` (a ``DbError`` whose ``__cause__``
is the refusal), which names each such lock with its key, so the caller can release it.

A cancellation or an interrupt is not held up by retries: one attempt, and a lock left
behind is only logged (the cancellation goes on, and the lock lapses with its lifetime).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from docmultilock._calls import Acquisition
from docmultilock._flows import Clock, Flow, Sleep, retry_pause
from docmultilock._lock import Lock
from docmultilock._lock_flows import release
from docmultilock._parts import Parts
from docmultilock.errors import DbError, LockError, LocksLeftBehind

__all__ = ["Taken", "give_back_all"]

log = logging.getLogger("docmultilock")


@dataclass(frozen=True, slots=True)
class Taken:
    """A lock a failed acquisition must give back.

    :ivar call: the acquisition's call (the key, its bounds and write concern).
    :ivar lock: the lock taken, granted or pending.
    :ivar until: its expiry estimate on the flow clock: before it, it is surely held.
    """

    call: Acquisition
    lock: Lock
    until: float


def give_back_all(
    parts: Parts, taken: Sequence[Taken], refusal: BaseException, *, clock: Clock
) -> Flow[None]:
    """Release each of ``taken``, in order, after ``refusal``; raise what is left behind.

    Returns when every lock was released or found gone (the caller then raises
    ``refusal``). A lock lost meanwhile is only logged: nothing is left of it to release.

    :raises LocksLeftBehind: a release still failed when its lock's estimate ran out;
        ``refusal`` is its ``__cause__`` (or, when ``refusal`` is itself one, its cause,
        and its locks come first).
    """
    retry = isinstance(refusal, Exception)  # a cancellation or an interrupt is not held up
    left: list[tuple[Any, Lock]] = []
    failures: list[LockError] = []
    cause = refusal
    if isinstance(refusal, LocksLeftBehind):  # the wait's own pending entry, left first
        left.extend(refusal.left_behind)
        failures.append(refusal.failure)
        cause = refusal.__cause__ or refusal
    for each in taken:
        error = yield from _give_back(parts, each, retry=retry, clock=clock)
        if isinstance(error, DbError):
            left.append((each.call.key, each.lock))
            failures.append(error)
        elif error is not None:
            log.warning(
                "lock %s on %r was lost before it was given back: %s",
                each.lock.id,
                each.call.key,
                error,
            )
    if not left:
        return
    if not retry:
        for key, lock in left:
            log.warning("lock %s on %r is left behind, held until it expires", lock.id, key)
        return
    raise LocksLeftBehind.after(cause, left, failures[-1]) from cause


def _give_back(parts: Parts, taken: Taken, *, retry: bool, clock: Clock) -> Flow[LockError | None]:
    """Release ``taken.lock``; ``None`` once released, else the error of the last attempt.

    A :class:`~docmultilock.DbError` (the command failed, or ran out of time) is retried
    while ``retry``, until ``taken.until``; each attempt is bounded by the call's timeout
    and the time left. Any other error is final: the lock is not there to release.
    """
    attempt = 0
    while True:
        limit = taken.call.limit
        if retry:
            left = max(taken.until - clock.monotonic(), 0.001)
            limit = left if limit is None else min(limit, left)
        call = taken.call.held(taken.lock)._replace(limit=limit)
        try:
            yield from release(parts, call, clock=clock)
        except DbError as err:
            pause = retry_pause(attempt)
            if not retry or clock.monotonic() + pause >= taken.until:
                return err
            log.debug("release of lock %s failed, retrying: %s", taken.lock.id, err)
            attempt += 1
            yield Sleep(pause)
        except LockError as err:
            return err
        else:
            return None
