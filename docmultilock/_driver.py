"""The pymongo boundary shared by the shells: write-concern views, deadlines, error mapping."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import pymongo
from pymongo import ReturnDocument
from pymongo.collection import Collection
from pymongo.errors import (
    ConnectionFailure,
    DuplicateKeyError,
    OperationFailure,
    PyMongoError,
    WriteConcernError,
)
from pymongo.write_concern import WriteConcern

from docmultilock._core import Command
from docmultilock.errors import DbError, DbTimeout, DocumentTooLarge, LockError

__all__ = ["WriteConcernViews", "deadline", "execute", "is_transient", "translate"]


class WriteConcernViews:
    """One view of the user's collection per write concern, made once and reused."""

    def __init__(self, collection: Collection[Any]) -> None:
        self._collection = collection
        self._views: dict[int | str, Collection[Any]] = {}

    def __call__(self, w: int | str) -> Collection[Any]:
        view = self._views.get(w)
        if view is None:
            view = self._collection.with_options(write_concern=WriteConcern(w=w))
            self._views[w] = view
        return view


@contextlib.contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Bound every operation inside by pymongo's client-side operation timeout."""
    if seconds is None:
        yield
        return
    with pymongo.timeout(seconds):
        yield


#: Server error codes of an update whose result would exceed the 16 MiB document limit
#: (BSONObjectTooLarge, and the two an update reports for its result).
_TOO_LARGE_CODES = frozenset({10334, 17419, 17420})


def translate(exc: PyMongoError, doing: str, filter: Mapping[str, Any] | None) -> LockError:  # noqa: A002
    """The one place a pymongo error becomes a docmultilock error (raise it ``from exc``)."""
    if isinstance(exc, OperationFailure) and exc.code in _TOO_LARGE_CODES:
        return DocumentTooLarge(
            f"{doing} refused: the lock's entry would take the document past MongoDB's "
            f"16 MiB limit; nothing was written ({exc})",
            filter=filter,
        )
    error = DbTimeout if exc.timeout else DbError
    return error(f"{doing} failed: {type(exc).__name__}: {exc}", filter=filter)


def execute(collection: Collection[Any], command: Command) -> Mapping[str, Any] | None:
    """Send one core command and return the server's (projected) reply."""
    if command.delete:
        return collection.find_one_and_delete(command.filter, projection=command.projection)
    retried = False
    while True:
        try:
            reply = collection.find_one_and_update(
                command.filter,
                command.update,
                projection=command.projection,
                return_document=(
                    ReturnDocument.AFTER if command.return_after else ReturnDocument.BEFORE
                ),
                upsert=command.upsert,
            )
        except DuplicateKeyError:
            # Two first acquirers of a name both tried to insert its document. MongoDB
            # retries such an ``_id`` upsert itself (4.2+), but not in every topology: once
            # more is enough, as the document now exists and the command becomes an update
            # that decides as usual (the loser meets the winner's entry: a plain conflict).
            if not command.upsert or retried:
                raise
            retried = True
            continue
        if reply is None and command.upsert:
            return _reread_after_upsert(collection, command)
        return reply


def _reread_after_upsert(collection: Collection[Any], command: Command) -> Mapping[str, Any] | None:
    """The reply to an upsert that answered ``None``: the document, read again.

    SecantusDB workaround (``docs/server.md``): an upsert that loses the race to create
    the document is applied to the winner's document as an update, yet answered with
    ``None``. MongoDB never answers ``None`` to an upsert returning the new image, so this
    extra read happens on that server only. ``None`` is neither "granted" nor "nothing
    written"; the document itself tells (the projection is the same, and our entry, once
    written, stays until its expiry).
    """
    found: Mapping[str, Any] | None = collection.find_one(
        command.filter, projection=command.projection
    )
    return found


#: Server error codes of a node shutting down, stepping down or unreachable (fail-over).
_TRANSIENT_CODES = frozenset({6, 7, 89, 91, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436})


def is_transient(exc: PyMongoError) -> bool:
    """True for a failure that the same command may get past: a cut connection, a fail-over.

    A deadline that has passed is not: the caller's time is up.
    """
    if exc.timeout:
        return False
    if isinstance(exc, ConnectionFailure) or exc.has_error_label("RetryableWriteError"):
        return True
    if isinstance(exc, (OperationFailure, WriteConcernError)):
        return exc.code in _TRANSIENT_CODES
    return False
