"""docmultilock: document-level locks on MongoDB, decided atomically by the server.

A lock lives inside the locked document, in a ``lock`` subdocument. Each acquire, release
and extend is one atomic ``findAndModify`` whose update pipeline applies the tag rules and
judges expiry by the server's clock::

    from docmultilock import MultiLock
    locks = MultiLock(db.orders)
    lock = locks.acquire({"_id": 1}, tag="write")
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from docmultilock._hold import HeldLock
from docmultilock._lock import Lock, LockSchema
from docmultilock._named import NamedLocks
from docmultilock._sync import MultiLock, WriteLock
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
    LockError,
    LockNotFound,
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
    "CooperativeLock",
    "DbError",
    "DbTimeout",
    "DocumentTooLarge",
    "HeldLock",
    "IncompatibleLockField",
    "InvalidArgument",
    "InvalidConfiguration",
    "Lock",
    "LockAlreadyTaken",
    "LockConflict",
    "LockError",
    "LockNotFound",
    "LockSchema",
    "LockTimeout",
    "LockWasReacquired",
    "MultiLock",
    "NamedLocks",
    "ResourceNotFound",
    "TooManyHolders",
    "WriteLock",
    "__version__",
]
