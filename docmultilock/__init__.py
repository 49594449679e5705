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

from importlib.metadata import PackageNotFoundError, version

from docmultilock._async.hold import AsyncHeldLock, AsyncHeldLocks
from docmultilock._async.managers import AsyncMultiLock, AsyncWriteLock
from docmultilock._async.named import AsyncNamedLocks
from docmultilock._async.records import AsyncRecordLocks
from docmultilock._events import LockEvent, LockListener
from docmultilock._lock import Lock, LockSchema
from docmultilock._snapshot import HolderSnapshot, LockSnapshot
from docmultilock._sync.hold import HeldLock, HeldLocks
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
