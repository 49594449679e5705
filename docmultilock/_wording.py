"""How an error reads for what the caller did: a loss, a wait that ran out, a pending upgrade.

A loss is one fact (our entry is gone from the document), but what it means to the caller
depends on what they did: a second ``release`` is their own doing, an ``extend`` cannot
revive an expired lock, a guarded write landed on nothing, the keep-alive found the lock
gone while it was held, or a ``hold()`` block ended after its lock had lapsed. The
wording is chosen here, once; ``_plans.Judge.lost`` builds the error.

A wait that ran out states what was in the way, not the refusal's advice to call again
(its pending entry is gone by then, or reported left behind); a pending upgrade inside
``hold()`` advises ``held.convert``, never the manager's ``convert``, which would leave
the hold renewing a lock that no longer exists.
"""

from __future__ import annotations

from typing import TypeVar

from docmultilock._lock import Lock
from docmultilock.errors import (
    AssertiveLock,
    LockConflict,
    LockError,
    LockNotFound,
    LockTimeout,
)

__all__ = [
    "LOSSES",
    "gave_up",
    "held_upgrade_pending",
    "loss_message",
    "reworded",
    "set_member",
]

E = TypeVar("E", bound=LockError | None)

_WHY = "it expired, or it was released, or an operator broke it"

#: How a loss reads, by what found it: what failed, and what may have happened.
LOSSES: dict[str, tuple[str, str]] = {
    "release": (
        "cannot release",
        "it was already released (a second release of one lock raises this), or it "
        "expired, or an operator broke it",
    ),
    "extend": (
        "cannot extend",
        "it expired before this extension (an expired lock cannot be revived), or it was "
        "released, or an operator broke it",
    ),
    "write": (
        "a guarded write matched nothing",
        "the lock expired, was released, or was broken by an operator before the write landed",
    ),
    "keep alive": (
        "lost while held",
        "the keep-alive found it gone: it expired before an extension landed, or an "
        "operator broke it",
    ),
    "end of block": (
        "lost during the block",
        "found gone when the block ended: it expired (without keepalive=True, the block "
        "must end within the lock's lifetime), or an operator broke it, so the block was "
        "not protected throughout",
    ),
}


def loss_message(lock: Lock, noun: str, doing: str, member: str = "") -> str:
    """The message of ``lock``'s loss on its ``noun`` (document, name), found by ``doing``.

    ``doing`` is a key of :data:`LOSSES`, or any other verb (``"convert"``).
    """
    lead, why = LOSSES.get(doing, (f"cannot {doing}", _WHY))
    return (
        f"{lead}: lock {lock.id} ({lock.tag!r}) is no longer held on {noun} "
        f"{lock.document_id!r}{member}: {why}; another holder may have it now"
    )


def set_member(place: int, size: int) -> str:
    """How a loss names a lock of a set: its key's place (from 1) in the caller's keys."""
    return f" (key {place + 1} of the {size} keys of the set)"


def reworded(error: E, noun: str, doing: str, member: str = "") -> E:
    """``error`` worded for ``doing`` when it is a loss (same class and data); else as it is."""
    if not isinstance(error, LockNotFound):
        return error
    message = loss_message(error.lock, noun, doing, member)
    return type(error)(message, filter=error.filter, lock=error.lock)


def gave_up(
    waiting: str, last: LockConflict, waited: float, attempts: int, *, also: str = ""
) -> LockTimeout:
    """The timeout of a wait ``waiting`` for something, after ``last``, its last refusal.

    The refusal is told without its advice (call again, continue the pending entry): the
    wait is over and its pending entry withdrawn. ``also`` ends the message.
    """
    if isinstance(last, AssertiveLock):
        told = f"these tags did not drain: {', '.join(last.blocking_tags)}"
    else:
        told = str(last)
    return LockTimeout(
        f"gave up waiting {waiting} after {waited:.3g} s and {attempts} attempts: {told}{also}",
        filter=last.filter,
        attempts=attempts,
        waited=waited,
        blocking_tags=getattr(last, "blocking_tags", ()),
    )


def held_upgrade_pending(err: AssertiveLock, was: str, tag: str) -> AssertiveLock:
    """``err``, a held ``was`` lock's pending upgrade to ``tag``, advising ``held.convert``."""
    lock = err.lock
    return AssertiveLock(
        f"upgrade of lock {lock.id} to {tag!r} is pending on {lock.document_id!r} until these "
        f"tags drain: {', '.join(err.blocking_tags)}; the held {was!r} lock is still held: "
        f"call held.convert({tag!r}) again to keep waiting",
        filter=err.filter,
        lock=lock,
        blocking_tags=err.blocking_tags,
    )
