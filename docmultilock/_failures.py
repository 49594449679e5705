"""The one place a pymongo failure is judged: whether to retry it, and what it becomes.

Pure functions on pymongo's exception objects; the flows (``_flows``) call them on the
exception a driver threw in, and raise the result ``from`` the pymongo error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pymongo.errors import (
    CollectionInvalid,
    ConnectionFailure,
    OperationFailure,
    PyMongoError,
    WriteConcernError,
)

from docmultilock._layout import LAYOUT, foreign_field
from docmultilock.errors import (
    DbError,
    DbTimeout,
    DocumentTooLarge,
    IncompatibleLockField,
    LockError,
)

__all__ = ["COMMAND_NOT_FOUND", "already_made", "is_transient", "translate"]

#: CommandNotFound: what a server answers a command it does not have (``hello`` before
#: MongoDB 4.4.2, whose drivers' handshake and docmultilock then use ``isMaster``).
COMMAND_NOT_FOUND = 59

#: Server error codes of a node shutting down, stepping down or unreachable (fail-over).
_TRANSIENT_CODES = frozenset({6, 7, 89, 91, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436})

#: Server error codes of an update whose result would exceed the 16 MiB document limit
#: (BSONObjectTooLarge, and the two an update reports for its result).
_TOO_LARGE_CODES = frozenset({10334, 17419, 17420})


#: What creating a collection or an index answers when another process made it first, or
#: is making it now (mongodb/mongo ``src/mongo/base/error_codes.yml``): NamespaceExists (48),
#: IndexAlreadyExists (68) and IndexBuildAlreadyInProgress (285, the same index being built
#: by a concurrent ``createIndexes``).
_ALREADY_MADE_CODES = frozenset({48, 68, 285})

#: ConversionFailure: what the pipeline's refusal of a foreign lock field raises.
_CONVERSION_FAILURE = 241


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


def already_made(exc: PyMongoError) -> bool:
    """True when creating a collection or index failed only because someone else made it.

    pymongo's ``create_collection`` raises ``CollectionInvalid`` for a collection it saw
    listed, and the server's NamespaceExists when another process created it in between.
    """
    if isinstance(exc, CollectionInvalid):
        return True
    return isinstance(exc, OperationFailure) and exc.code in _ALREADY_MADE_CODES


def translate(exc: PyMongoError, doing: str, filter: Mapping[str, Any] | None) -> LockError:  # noqa: A002
    """The docmultilock error for a pymongo failure (raise it ``from exc``)."""
    if isinstance(exc, OperationFailure) and exc.code == _CONVERSION_FAILURE:
        foreign = foreign_field(str(exc))
        if foreign is not None:
            field, held = foreign
            return IncompatibleLockField(
                f"{doing} refused: field {field} of the document matching "
                f"{dict(filter or {})!r} holds data docmultilock does not own (of type "
                f"{held}); docmultilock writes {LAYOUT}; nothing was written",
                filter=filter,
            )
    if isinstance(exc, OperationFailure) and exc.code in _TOO_LARGE_CODES:
        return DocumentTooLarge(
            f"{doing} refused: the lock's entry would take the document past MongoDB's "
            f"16 MiB limit; nothing was written ({exc})",
            filter=filter,
        )
    error = DbTimeout if exc.timeout else DbError
    return error(f"{doing} failed: {type(exc).__name__}: {exc}", filter=filter)
