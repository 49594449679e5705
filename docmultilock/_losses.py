"""How a lost lock's error reads: worded for what found the loss.

A loss is one fact (our entry is gone from the document), but what it means to the caller
depends on what they did: a second ``release`` is their own doing, an ``extend`` cannot
revive an expired lock, a guarded write landed on nothing, the keep-alive found the lock
gone while it was held, or a ``hold()`` block ended after its lock had lapsed. The
wording is chosen here, once; ``_plans.Judge.lost`` builds the error.
"""

from __future__ import annotations

from typing import TypeVar

from docmultilock._lock import Lock
from docmultilock.errors import LockError, LockNotFound

__all__ = ["LOSSES", "loss_message", "reworded", "set_member"]

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
