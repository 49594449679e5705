"""docmultilock: document-level locks on MongoDB, decided atomically by the server.

A lock lives inside the locked document, in a ``lock`` subdocument. Each acquire, release
and extend is one atomic ``findAndModify`` whose update pipeline applies the tag rules and
judges expiry by the server's clock::

    from docmultilock import MultiLock
    locks = MultiLock(db.orders)
    lock = locks.acquire({"_id": 1}, tag="write")

Every class has an async twin on PyMongo's native async API (``AsyncMultiLock`` over an
``AsyncMongoClient``'s collection, ``await locks.acquire(...)``, ``async with
locks.hold(...)``), with the same arguments, errors and semantics.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from docmultilock._async.held import AsyncHeldLock, AsyncHeldLocks
    from docmultilock._async.managers import AsyncMultiLock, AsyncWriteLock
    from docmultilock._async.named import AsyncNamedLocks
    from docmultilock._async.records import AsyncRecordLocks
    from docmultilock._events import LockEvent, LockListener
    from docmultilock._lock import Lock, LockSchema
    from docmultilock._snapshot import HolderSnapshot, LockSnapshot
    from docmultilock._sync.held import HeldLock, HeldLocks
    from docmultilock._sync.managers import MultiLock, WriteLock
    from docmultilock._sync.named import NamedLocks
    from docmultilock._sync.records import RecordLocks
    from docmultilock.errors import (
        AssertiveLock,
        CooperativeLock,
        DbError,
        DbTimeout,
        DocumentTooLarge,
        IncompatibleLockField,
        InvalidArgument,
        InvalidConfiguration,
        LockAlreadyTaken,
        LockConflict,
        LockConverted,
        LockError,
        LockNotFound,
        LocksLeftBehind,
        LockTimeout,
        LockWasReacquired,
        ResourceNotFound,
        TooManyHolders,
    )

#: Where each public name lives. Imported on first use (:func:`__getattr__`), so that
#: ``import docmultilock`` (and ``docmultilock --version``) costs no pymongo, marshmallow or
#: lock machinery until a name is used.
_HOMES = {
    "AssertiveLock": "docmultilock.errors",
    "AsyncHeldLock": "docmultilock._async.held",
    "AsyncHeldLocks": "docmultilock._async.held",
    "AsyncMultiLock": "docmultilock._async.managers",
    "AsyncNamedLocks": "docmultilock._async.named",
    "AsyncRecordLocks": "docmultilock._async.records",
    "AsyncWriteLock": "docmultilock._async.managers",
    "CooperativeLock": "docmultilock.errors",
    "DbError": "docmultilock.errors",
    "DbTimeout": "docmultilock.errors",
    "DocumentTooLarge": "docmultilock.errors",
    "HeldLock": "docmultilock._sync.held",
    "HeldLocks": "docmultilock._sync.held",
    "HolderSnapshot": "docmultilock._snapshot",
    "IncompatibleLockField": "docmultilock.errors",
    "InvalidArgument": "docmultilock.errors",
    "InvalidConfiguration": "docmultilock.errors",
    "Lock": "docmultilock._lock",
    "LockAlreadyTaken": "docmultilock.errors",
    "LockConflict": "docmultilock.errors",
    "LockConverted": "docmultilock.errors",
    "LockError": "docmultilock.errors",
    "LockEvent": "docmultilock._events",
    "LockListener": "docmultilock._events",
    "LockNotFound": "docmultilock.errors",
    "LockSchema": "docmultilock._lock",
    "LockSnapshot": "docmultilock._snapshot",
    "LockTimeout": "docmultilock.errors",
    "LockWasReacquired": "docmultilock.errors",
    "LocksLeftBehind": "docmultilock.errors",
    "MultiLock": "docmultilock._sync.managers",
    "NamedLocks": "docmultilock._sync.named",
    "RecordLocks": "docmultilock._sync.records",
    "ResourceNotFound": "docmultilock.errors",
    "TooManyHolders": "docmultilock.errors",
    "WriteLock": "docmultilock._sync.managers",
}


# Hidden from type checkers, which see the imports above: a module ``__getattr__`` would
# make every misspelt name type-check.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        """Import a public name from its module on first use, then keep it here."""
        home = _HOMES.get(name)
        if home is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


#: The installed version of docmultilock.
__version__: str
try:
    __version__ = version("docmultilock")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0+unknown"

__all__ = [
    "AssertiveLock",
    "AsyncHeldLock",
    "AsyncHeldLocks",
    "AsyncMultiLock",
    "AsyncNamedLocks",
    "AsyncRecordLocks",
    "AsyncWriteLock",
    "CooperativeLock",
    "DbError",
    "DbTimeout",
    "DocumentTooLarge",
    "HeldLock",
    "HeldLocks",
    "HolderSnapshot",
    "IncompatibleLockField",
    "InvalidArgument",
    "InvalidConfiguration",
    "Lock",
    "LockAlreadyTaken",
    "LockConflict",
    "LockConverted",
    "LockError",
    "LockEvent",
    "LockListener",
    "LockNotFound",
    "LockSchema",
    "LockSnapshot",
    "LockTimeout",
    "LockWasReacquired",
    "LocksLeftBehind",
    "MultiLock",
    "NamedLocks",
    "RecordLocks",
    "ResourceNotFound",
    "TooManyHolders",
    "WriteLock",
    "__version__",
]
