"""One public call, parsed once: the value every flow is given instead of raw arguments.

A public method checks its arguments once, before anything is sent
(``_operating.Operating.acquiring`` and its siblings), into a :class:`Call`; the flows take
it keyword-only, and ``hold()`` carries it from attempt to attempt, continuing a pending
lock or renewing a held one with ``call._replace(lock=...)`` rather than parsing again.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple, cast

from docmultilock._lock import Lock

__all__ = ["Call", "lived_tag", "new_call"]


class Call(NamedTuple):
    """A checked call: where, what, and within which bounds.

    A named tuple, as a frozen value made for every call is about three times cheaper so.
    """

    #: What the caller passed (a filter, or a name): errors and messages name it.
    key: Any
    #: The filter of ``key``'s state document.
    user_filter: dict[str, Any]
    #: The tag of a new lock; ``None`` when ``lock`` is acted on (its own tag counts), and
    #: for reads the tag asked about (``None``: any).
    tag: str | None
    #: The lock acted on: a pending one continued, one released or extended.
    lock: Lock | None
    #: The lifetime in ms; ``None``: the tag's default for a new lock, the lock's own else.
    lifetime_ms: int | None
    #: The operation timeout in force, in seconds (``None``: no limit).
    limit: float | None
    #: The write concern in force.
    concern: int | str


#: ``new_call((key, user_filter, tag, lock, lifetime_ms, limit, concern))``: a :class:`Call`
#: made by ``tuple.__new__`` itself, without the Python-level ``__new__`` of a named tuple:
#: two are made per lock cycle, on the hot path.
new_call = cast(Callable[[tuple[Any, ...]], Call], partial(tuple.__new__, Call))


def lived_tag(call: Call) -> str:
    """The tag an acquisition's ``call`` takes: its new tag, or the pending lock's it continues."""
    if call.lock is not None:
        return call.lock.tag
    assert call.tag is not None, "an acquisition takes a tag, or continues a lock"
    return call.tag
