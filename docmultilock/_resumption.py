"""What a wake-up stream does after an error: resume, pause, start afresh, or give up.

No I/O here: the stream loop (``_async/wakeup.py`` and its generated twin) asks, and does
what it is told. Whom an event wakes is ``_changes``' decision; when to resume and when to
stop trying is this module's:

* after an error the stream resumes from its resume token, unless the error says the token
  is no use (:func:`forget_token`), after a pause that grows with each failure
  (:func:`reopen_pause`);
* a stream that never opened is given up once the server says change streams are not to be
  had, or after a few transient failures (:func:`gives_up`); its collection is then marked
  as having none (:class:`Unavailable`), and its waiters poll.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from typing import Any

from pymongo.errors import OperationFailure, PyMongoError

from docmultilock._changes import Interest
from docmultilock._flows import Watch

__all__ = [
    "Invalidated",
    "Unavailable",
    "forget_token",
    "gives_up",
    "make_interest",
    "newly_covered",
    "reopen_pause",
]

log = logging.getLogger("docmultilock")

#: Server errors after which a resume token is no use: start afresh (waking everyone).
_TOKEN_LOST = frozenset({280, 286})

#: The longest pause between attempts to reopen a failed stream, in seconds.
_REOPEN_MAX = 1.0

#: Server errors that say change streams are not to be had here: no privilege (13),
#: unknown command or stage (59, 115, 40324), not a replica set (40573).
_NO_STREAMS = frozenset({13, 59, 115, 40324, 40573})
#: Failed attempts to open a stream that never opened, after which the collection's
#: waiters poll even though no error said streams are unsupported.
_OPEN_ATTEMPTS = 5


def make_interest(watch: Watch, notify: Callable[[], None], collection: Any) -> Interest:
    """The interest a waiter's ``watch`` registers with its collection's stream.

    It may raise (an id its collection's codec options cannot encode): before any stream.
    """
    return Interest(
        watch.document_id,
        watch.exclusive,
        notify,
        watch.blockers,
        watch.entry,
        watch.fair,
        collection.codec_options,
    )


class Invalidated(Exception):
    """The stream ended for good: its collection was dropped or renamed (an invalidate)."""


def newly_covered(ids: list[Any], covered: list[Any], token: Any) -> list[Any]:
    """The ids a stream (re)opened on ``ids`` covers for the first time: wake their waiters.

    A release may have come before the stream covered them. A stream opened afresh
    (``token`` is ``None``) covers every id for the first time.
    """
    return [i for i in ids if token is None or i not in covered]


def forget_token(exc: Exception, token: Any) -> Any:
    """The token to resume from after ``exc``: ``None`` to start afresh (waking everyone)."""
    # After an invalidate no token resumes the stream.
    if isinstance(exc, Invalidated):
        return None
    if isinstance(exc, OperationFailure) and exc.code in _TOKEN_LOST:
        return None
    return token


def reopen_pause(failures: int) -> float:
    """Seconds to wait before reopening a stream after ``failures`` failures in a row."""
    return float(min(0.05 * 2**failures, _REOPEN_MAX))


def gives_up(exc: PyMongoError, opened: bool, failures: int) -> bool:
    """True when a stream that never opened is not to be tried again: its waiters poll.

    A transient failure (a fail-over, a dropped connection) is not a server without change
    streams: the stream is tried again, a few times, before the collection is given up.
    """
    if opened:
        return False
    if isinstance(exc, OperationFailure) and exc.code in _NO_STREAMS:
        return True
    return failures >= _OPEN_ATTEMPTS


class Unavailable:
    """The (client, collection) pairs where a change stream could not be opened."""

    def __init__(self) -> None:
        self._names: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()

    def __contains__(self, where: tuple[Any, str]) -> bool:
        client, name = where
        return name in self._names.get(client, ())

    def add(self, client: Any, name: str, exc: BaseException) -> None:
        """Mark ``name`` of ``client`` as having no stream; logged at DEBUG."""
        self._names.setdefault(client, set()).add(name)
        log.debug("no change stream on %s (%r): waiters poll", name, exc)
