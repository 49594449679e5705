"""One public call, parsed once: the value every flow is given instead of raw arguments.

A public method checks its arguments once, before anything is sent
(``_parsing.Parser.acquiring`` and its siblings), into a value of its kind, and the
flows take it keyword-only:

* :class:`Fresh`: the acquisition of a new lock (its tag);
* :class:`Continued`: the acquisition continuing a pending lock (the lock);
* :class:`Held`: a command on a held lock (release, extend);
* :class:`Conversion`: a held lock converted (the lock, and its new tag);
* :class:`Read`: a read or a break (the tag asked about, if any).

No field is optional by kind, so a flow never asks which kind it was given. ``hold()``
carries its acquisition from attempt to attempt, continuing a pending lock with
:meth:`Fresh.continued` and commanding the lock it got with :meth:`Fresh.held`, rather
than parsing again.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple, TypeAlias, cast

from docmultilock._lock import Lock

__all__ = [
    "Acquisition",
    "AnyCall",
    "Continued",
    "Conversion",
    "Fresh",
    "Held",
    "Read",
    "new_continued",
    "new_fresh",
    "new_held",
]

# Named tuples, as a frozen value made for every call is about three times cheaper so.


class Held(NamedTuple):
    """A command on a held lock: its release or its extension."""

    #: What the caller passed (a filter, or a name): errors and messages name it.
    key: Any
    #: The filter of ``key``'s state document.
    user_filter: dict[str, Any]
    #: The lock acted on.
    lock: Lock
    #: The lifetime in ms an extension gives; ``None``: the lock's own.
    lifetime_ms: int | None
    #: The operation timeout in force, in seconds (``None``: no limit).
    limit: float | None
    #: The write concern in force.
    concern: int | str


#: ``new_held((key, user_filter, lock, lifetime_ms, limit, concern))``: a :class:`Held`
#: made by ``tuple.__new__`` itself, without the Python-level ``__new__`` of a named tuple:
#: calls are made on the hot path.
new_held = cast(Callable[[tuple[Any, ...]], Held], partial(tuple.__new__, Held))


class Fresh(NamedTuple):
    """The acquisition of a new lock of ``tag``."""

    key: Any
    user_filter: dict[str, Any]
    #: The tag of the new lock.
    tag: str
    #: The lifetime in ms; ``None``: the tag's default.
    lifetime_ms: int | None
    limit: float | None
    concern: int | str

    def continued(self, pending: Lock) -> Continued:
        """The same acquisition, continuing the pending lock it registered."""
        return new_continued(_around(self, pending))

    def held(self, lock: Lock) -> Held:
        """The holder's command of ``lock``, which this acquisition got."""
        return new_held(_around(self, lock))


class Continued(NamedTuple):
    """The acquisition continuing the pending ``lock`` (under its own id and tag)."""

    key: Any
    user_filter: dict[str, Any]
    #: The pending lock continued.
    lock: Lock
    #: The lifetime in ms; ``None``: the tag's default.
    lifetime_ms: int | None
    limit: float | None
    concern: int | str

    @property
    def tag(self) -> str:
        """The tag this acquisition takes: the pending lock's."""
        return self.lock.tag

    def continued(self, pending: Lock) -> Continued:
        """The same acquisition, continuing ``pending`` instead."""
        return new_continued(_around(self, pending))

    def held(self, lock: Lock) -> Held:
        """The holder's command of ``lock``, which this acquisition got."""
        return new_held(_around(self, lock))


def _around(call: Fresh | Continued | Conversion, lock: Lock) -> tuple[Any, ...]:
    """``call``'s key and bounds around ``lock``: the fields of the call acting on it next."""
    return (call.key, call.user_filter, lock, call.lifetime_ms, call.limit, call.concern)


#: ``new_fresh((key, user_filter, tag, lifetime_ms, limit, concern))``, as :data:`new_held`.
new_fresh = cast(Callable[[tuple[Any, ...]], Fresh], partial(tuple.__new__, Fresh))
#: ``new_continued((key, user_filter, lock, lifetime_ms, limit, concern))``, as above.
new_continued = cast(Callable[[tuple[Any, ...]], Continued], partial(tuple.__new__, Continued))

#: An acquisition, new or continued: what ``acquire()`` and ``hold()`` take.
Acquisition: TypeAlias = Fresh | Continued


class Conversion(NamedTuple):
    """The conversion of the held ``lock`` to ``tag``."""

    key: Any
    user_filter: dict[str, Any]
    #: The lock converted.
    lock: Lock
    #: Its new tag.
    tag: str
    #: The lifetime in ms from now on; ``None``: as ``_converting`` decides.
    lifetime_ms: int | None
    limit: float | None
    concern: int | str

    def held(self, lock: Lock) -> Held:
        """The holder's command of ``lock``, which this conversion returned."""
        return new_held(_around(self, lock))


class Read(NamedTuple):
    """A read (``inspect``, ``locked``) or a break of ``key``'s lock field."""

    key: Any
    user_filter: dict[str, Any]
    #: The tag asked about (``locked``); ``None``: any.
    tag: str | None
    limit: float | None
    concern: int | str


#: A call of any kind: what ``_sending.send_for`` sends a command within.
AnyCall: TypeAlias = Fresh | Continued | Held | Conversion | Read
