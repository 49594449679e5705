"""Named locks: the same lock core, keeping each name's state in a document of its own.

A lock on ``"nightly-report"`` lives in ``{_id: "nightly-report", lock: {...}}`` in a lock
collection (``docmultilock.locks`` by default). The first acquire creates the document in
the same single command (an upsert on ``_id``: MongoDB refuses ``$expr`` in an upsert's
filter, so the decision stays in the pipeline). The last release of the default exclusive
table deletes it; a document left with no live holder is removed later by a TTL index on
``lock.expires``, which every write keeps equal to the latest holder expiry.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from pymongo import MongoClient
from pymongo.database import Database
from pymongo.errors import CollectionInvalid, PyMongoError

from docmultilock._args import tag_or_only
from docmultilock._core import DEFAULT_MAX_HOLDERS
from docmultilock._driver import deadline, translate
from docmultilock._lock import Lock
from docmultilock._rules import WRITE_ONLY
from docmultilock._sync import _LockManager
from docmultilock.errors import InvalidArgument, LockError
from docmultilock.options import Duration, ErrorFactory, load_options, parse_duration

__all__ = ["NamedLocks"]

log = logging.getLogger("docmultilock")

#: The field of a lock document that holds the lock state (the same layout as embedded).
LOCK_FIELD = "lock"
#: The TTL index that removes lock documents nobody holds any more.
TTL_INDEX = "docmultilock_expires"
MAX_NAME_LENGTH = 512

#: After a failed TTL-index creation, acquires try again only this many seconds later.
INDEX_RETRY_SECONDS = 600.0


class _TtlIndexes:
    """Per client, the lock collections whose TTL index this process made sure of, or failed to.

    A failure is kept with the monotonic time a retry is due.
    A deployment may refuse the application's user ``createIndexes``; then every acquire
    must not pay (and log) a failed attempt: it is retried every ``INDEX_RETRY_SECONDS``,
    warned about once.
    """

    def __init__(self) -> None:
        self._done: weakref.WeakKeyDictionary[MongoClient[Any], set[str]] = (
            weakref.WeakKeyDictionary()
        )
        self._retry_at: weakref.WeakKeyDictionary[MongoClient[Any], dict[str, float]] = (
            weakref.WeakKeyDictionary()
        )
        self._guard = threading.Lock()

    def due(self, client: MongoClient[Any], name: str) -> bool:
        """True when an acquire should make sure of the index now."""
        with self._guard:
            if name in self._done.get(client, ()):
                return False
            retry_at = self._retry_at.get(client, {}).get(name)
            return retry_at is None or time.monotonic() >= retry_at

    def created(self, client: MongoClient[Any], name: str) -> None:
        with self._guard:
            self._done.setdefault(client, set()).add(name)
            self._retry_at.get(client, {}).pop(name, None)

    def failed(self, client: MongoClient[Any], name: str) -> bool:
        """Record a failure; True for the first one (the one worth a warning)."""
        with self._guard:
            retries = self._retry_at.setdefault(client, {})
            first = name not in retries
            retries[name] = time.monotonic() + INDEX_RETRY_SECONDS
            return first


_indexes = _TtlIndexes()


def check_name(name: object) -> str:
    """Accept a lock name: a string of 1 to 512 characters that UTF-8 can encode."""
    if not isinstance(name, str):
        raise InvalidArgument(f"a lock name must be a string, not {type(name).__name__}")
    if not 1 <= len(name) <= MAX_NAME_LENGTH:
        raise InvalidArgument(
            f"a lock name must have 1 to {MAX_NAME_LENGTH} characters, not {len(name)}"
        )
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgument(f"a lock name must be valid text: {exc}") from exc
    return name


def _check_collection_name(name: object) -> str:
    if not isinstance(name, str):
        raise InvalidArgument(f"collection must be a string, not {type(name).__name__}")
    if not name or "$" in name or "\x00" in name or name.startswith("system."):
        raise InvalidArgument(
            f"collection must be a non-empty name without '$' or NUL, not in 'system.'; "
            f"got {name!r}"
        )
    return name


class NamedLocks(_LockManager):
    """Locks on names ("order-42", "nightly-report") rather than on your documents.

    Each name's lock state lives in a document of its own in ``collection``, created on
    demand and removed when nobody holds the name. The default table is exclusive (one tag,
    ``write``, with WriteLock's errors); give ``lock_relationships`` for tags, with
    MultiLock's errors::

        jobs = NamedLocks(client.app, lock_timeout=300.0)
        lock = jobs.acquire("nightly-report")     # LockAlreadyTaken (HTTP 409) when held
        jobs.release("nightly-report", lock)

    A name takes at most ``max_holders`` live entries at once (see :class:`MultiLock`).

    :raises InvalidConfiguration: naming every problem with the options.
    """

    def __init__(
        self,
        database: Database[Any],
        collection: str = "docmultilock.locks",
        *,
        lock_timeouts: Mapping[str, Duration] | None = None,
        lock_relationships: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
        lock_timeout: Duration = 30.0,
        timeout: Duration | None = 10.0,
        w: int | str = "majority",
        error_factory: ErrorFactory | None = None,
        max_holders: int = DEFAULT_MAX_HOLDERS,
    ) -> None:
        if not isinstance(database, Database):
            raise InvalidArgument(
                f"database must be a pymongo Database, not {type(database).__name__}"
            )
        options = load_options(
            lock_timeouts=lock_timeouts if lock_timeouts is not None else {},
            lock_relationships=(
                lock_relationships if lock_relationships is not None else WRITE_ONLY
            ),
            lock_timeout=lock_timeout,
            timeout=timeout,
            w=w,
            field=LOCK_FIELD,
            error_factory=error_factory,
            max_holders=max_holders,
        )
        super().__init__(
            database[_check_collection_name(collection)],
            options,
            exclusive=lock_relationships is None,
            named=True,
        )

    def _check_key(self, key: object) -> dict[str, Any]:
        return {"_id": check_name(key)}

    def _acquire(
        self,
        key: object,
        tag: object,
        lock: object,
        lock_timeout: Duration | None,
        timeout: Duration | None,
        w: int | str | None,
    ) -> Lock:
        if tag is None and lock is None:
            self._check_key(key)
            tag = tag_or_only(None, self.options.rules)
        granted = super()._acquire(key, tag, lock, lock_timeout, timeout, w)
        self._index_once()
        return granted

    def acquire(
        self,
        name: str,
        *,
        tag: str | None = None,
        lock: Lock | None = None,
        lock_timeout: Duration | None = None,
        timeout: Duration | None = None,
        w: int | str | None = None,
    ) -> Lock:
        """Acquire a ``tag`` lock on ``name``, creating its lock document in the same command.

        ``tag`` may be left out when the table declares one tag (the default, ``write``).
        Give ``lock=`` instead to go on waiting with a pending assertive lock.

        :raises LockAlreadyTaken: the name is held (default table; nothing recorded).
        :raises CooperativeLock: a tag this one is cooperative with is held (custom table).
        :raises AssertiveLock: registered as pending; call again with ``lock=err.lock``.
        :raises LockNotFound: the pending ``lock`` given is gone.
        """
        with self._mapped_errors():
            return self._acquire(name, tag, lock, lock_timeout, timeout, w)

    def release(
        self,
        name: str,
        lock: Lock,
        *,
        timeout: Duration | None = None,
        w: int | str | None = None,
    ) -> None:
        """Release ``lock`` on ``name``; the default table's last release deletes the document.

        :raises LockNotFound: the lock is gone (:class:`LockWasReacquired` with the default
            table).
        """
        with self._mapped_errors():
            self._release(name, lock, timeout, w)

    def extend(
        self,
        name: str,
        lock: Lock,
        *,
        lock_timeout: Duration | None = None,
        timeout: Duration | None = None,
        w: int | str | None = None,
    ) -> Lock:
        """Push ``lock``'s expiry to the server's now plus its lifetime; return the new Lock.

        :raises LockNotFound: the lock expired or was displaced (:class:`LockWasReacquired`
            with the default table).
        """
        with self._mapped_errors():
            return self._extend(name, lock, lock_timeout, timeout, w)

    def guard(self, name: str, lock: Lock) -> dict[str, Any]:
        """A filter matching ``name``'s lock document only while ``lock`` is still held.

        Use it where a write must be conditional on the lock, for instance as the first
        step of a transaction; the lock's ``fence`` serves where the
        protected data lives elsewhere.
        """
        return self._guard(name, lock)

    def ensure_indexes(self, *, timeout: Duration | None = None) -> None:
        """Create the TTL index that removes lock documents nobody holds (idempotent).

        Acquire creates it lazily, once per process and collection, right after its first
        success; call this at deployment time to have it up front.
        """
        with self._mapped_errors():
            self._create_ttl_index(timeout)

    def _create_ttl_index(self, timeout: Duration | None) -> None:
        collection = self.collection
        limit = self.options.timeout if timeout is None else parse_duration(timeout, "timeout")
        try:
            with deadline(limit):
                # Create the collection first, so the index never creates it implicitly:
                # on the embedded test server, an index build that creates a collection at
                # the same moment as an upsert does can stall it (docs/server.md).
                with contextlib.suppress(CollectionInvalid):  # it exists already
                    collection.database.create_collection(collection.name)
                collection.create_index(
                    [(f"{LOCK_FIELD}.expires", 1)], expireAfterSeconds=0, name=TTL_INDEX
                )
        except PyMongoError as exc:
            raise translate(exc, "ensure_indexes", None) from exc
        _indexes.created(collection.database.client, collection.full_name)

    def _index_once(self) -> None:
        """Make sure of the TTL index after an acquire (the collection exists by then)."""
        collection = self.collection
        client = collection.database.client
        if not _indexes.due(client, collection.full_name):
            return
        try:
            self._create_ttl_index(None)
        except LockError as err:
            # The lock is already held: failing the acquire would leak it. An acquire tries
            # again after INDEX_RETRY_SECONDS; ensure_indexes() reports the error.
            first = _indexes.failed(client, collection.full_name)
            log.log(
                logging.WARNING if first else logging.DEBUG,
                "could not create the TTL index on %s (trying again in %.0f s; create it at "
                "deployment with NamedLocks.ensure_indexes()): %s",
                collection.full_name,
                INDEX_RETRY_SECONDS,
                err,
            )
