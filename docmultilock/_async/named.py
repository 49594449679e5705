"""Async named locks: the same flows, keeping each name's state in a document of its own.

A lock on ``"nightly-report"`` lives in ``{_id: "nightly-report", lock: {...}}`` in a lock
collection (``docmultilock.locks`` by default). The first acquire creates the document in
the same single command (an upsert on ``_id``: MongoDB refuses ``$expr`` in an upsert's
filter, so the decision stays in the pipeline). The last release of the default exclusive
table deletes it; a document left with no live holder is removed later by a TTL index on
``lock.expires``, which every write keeps equal to the latest holder expiry.
"""

from __future__ import annotations

from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from docmultilock._args import check_collection_name, check_flavour
from docmultilock._async.managers import AsyncLockManager
from docmultilock._command import NAMES
from docmultilock._kinds import NAMED_LOCKS, manager_setup
from docmultilock._lock import Lock
from docmultilock._lock_flows import extend, release
from docmultilock._parts import Parts, ensure_indexes
from docmultilock._typing import Unpack
from docmultilock.options import AcquireOptions, Duration, NamedLocksOptions

__all__ = ["AsyncNamedLocks"]


class AsyncNamedLocks(AsyncLockManager):
    """Locks on names ("order-42", "nightly-report") rather than on your documents.

    Each name's lock state lives in a document of its own in ``collection``, created on
    demand and removed when nobody holds the name. The default table is exclusive (one tag,
    ``write``, with WriteLock's errors); give ``lock_relationships`` for tags, with
    MultiLock's errors::

        jobs = AsyncNamedLocks(client.app, lock_timeout=300.0)
        lock = await jobs.acquire("nightly-report")     # LockAlreadyTaken (409) when held
        await jobs.release("nightly-report", lock)

    A name takes at most ``max_holders`` live entries at once. ``lock_limits`` caps a tag of
    a custom table: ``lock_limits={"export": 3}`` grants at most 3 ``export`` locks at once
    on one name (pending ones do not count); the server refuses the 4th with
    :class:`~docmultilock.TooManyHolders` (``err.tag``, ``err.limit``) in the same command,
    and ``hold(wait=...)`` waits for a slot, woken by a release. Each limit is a positive
    int up to ``max_holders``, for a declared tag not cooperative with itself. A
    ``listener`` (:class:`~docmultilock.LockListener`) is told of every decision. Every
    option, with its default: :class:`~docmultilock.options.NamedLocksOptions`.

    :raises InvalidConfiguration: naming every problem with the options.
    """

    def __init__(
        self,
        database: AsyncDatabase[Any],
        collection: str = "docmultilock.locks",
        **options: Unpack[NamedLocksOptions],
    ) -> None:
        check_flavour(database, AsyncDatabase, "database", type(self).__name__)
        setup = manager_setup(NAMED_LOCKS, options, type(self).__name__)
        locks = database[check_collection_name(collection)]
        parts = Parts.on(
            locks, setup.options, home=NAMES, verdicts=setup.verdicts, listener=setup.listener
        )
        super().__init__(locks, parts)

    async def acquire(self, name: str, **options: Unpack[AcquireOptions]) -> Lock:
        """Acquire a ``tag`` lock on ``name``, creating its lock document in the same command.

        ``tag`` may be left out when the table declares one tag (the default, ``write``).
        Give ``lock=`` instead to go on waiting with a pending assertive lock. It tries
        once; ``wait=`` (with ``backoff``, ``wake``, ``fair``) waits as :meth:`hold` does::

            lock = await jobs.acquire("nightly-report", wait=30.0)

        :raises LockTimeout: ``wait`` ran out; nothing is left on the name.
        :raises LockAlreadyTaken: the name is held (default table; nothing recorded).
        :raises CooperativeLock: a tag this one is cooperative with is held (custom table).
        :raises TooManyHolders: ``max_holders`` entries, or ``lock_limits`` reached.
        :raises AssertiveLock: registered as pending; call again with ``lock=err.lock``.
        :raises LockNotFound: the pending ``lock`` given is gone.
        """
        return await self._acquire(name, options)

    async def release(
        self,
        name: str,
        lock: Lock,
        *,
        timeout: Duration | None = None,
        w: int | str | None = None,
    ) -> None:
        """Release ``lock`` on ``name``; the default table's last release deletes the document.

        :raises LockNotFound: the lock is gone (:class:`~docmultilock.LockWasReacquired`
            with the default table).
        """
        call = self._parse.holding(name, lock, granted=False, timeout=timeout, w=w)
        await self._run(release(self._parts, call, clock=self._run.clock))

    async def extend(
        self,
        name: str,
        lock: Lock,
        *,
        lock_timeout: Duration | None = None,
        timeout: Duration | None = None,
        w: int | str | None = None,
    ) -> Lock:
        """Push ``lock``'s expiry to the server's now plus its lifetime; return the new Lock.

        :raises LockNotFound: the lock is no longer held: released already (a second
            release raises this), expired, or broken
            (:class:`~docmultilock.LockWasReacquired` with the default table).
        """
        call = self._parse.holding(
            name, lock, granted=True, lock_timeout=lock_timeout, timeout=timeout, w=w
        )
        return await self._run(extend(self._parts, call, clock=self._run.clock))

    def guard(self, name: str, lock: Lock) -> dict[str, Any]:
        """A filter matching ``name``'s lock document only while ``lock`` is still held.

        Use it where a write must be conditional on the lock, for instance as the first
        step of a transaction; the lock's ``fence`` serves where the protected data lives
        elsewhere.
        """
        return self._parse.guard(name, lock)

    async def ensure_indexes(self, *, timeout: Duration | None = None) -> None:
        """Create the TTL index that removes lock documents nobody holds (idempotent).

        Acquire creates it lazily, once per process and collection, right after its first
        success; call this at deployment time to have it up front.
        """
        await self._run(ensure_indexes(self._parts.where, limit=self._parse.limit(timeout)))
