# Generated from docmultilock/_async/managers.py by tools/unasync.py: do not edit.
# Edit the async source and run `python tools/unasync.py`.
"""The sync lock managers on documents: thin shells that run the core's flows.

Each public method parses its arguments once into a call of its kind (``_calls``, checked
by ``_parsing``), builds its flow (``_lock_flows``, ``_read_flows``) over the manager's
parts (``_parts``), and has the manager's runner (``driver.Runner``) run it and map
its errors; no decision is made here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pymongo.collection import Collection

from docmultilock._args import check_flavour
from docmultilock._command import DOCUMENTS
from docmultilock._flavour import own_methods
from docmultilock._flows import SYSTEM_CLOCK, Clock
from docmultilock._kinds import MULTI_LOCK, WRITE_LOCK, ManagerKind, manager_setup
from docmultilock._lock import Lock
from docmultilock._lock_flows import extend, release
from docmultilock._parts import Parts, describe
from docmultilock._read_flows import break_lock, inspect, locked, preview_break
from docmultilock._snapshot import HolderSnapshot, LockSnapshot
from docmultilock._sync.converting import Converting
from docmultilock._sync.driver import MongoIO, Runner
from docmultilock._sync.hold_methods import Holds
from docmultilock._typing import Unpack
from docmultilock.options import (
    AcquireOptions,
    BreakOptions,
    Duration,
    LockOptions,
    MultiLockOptions,
    PreviewOptions,
    WriteLockOptions,
    take_keywords,
)

__all__ = ["LockManager", "MultiLock", "WriteLock"]

T = TypeVar("T")


class LockManager(Converting, Holds):
    """What every sync lock manager shares: its runner, reads, ``hold()``, ``convert()``, sets."""

    def __init__(self, collection: Collection[Any], parts: Parts) -> None:
        self.collection = collection
        self._parts = parts
        self._parse = parse = parts.parse
        self.options: LockOptions = parse.options
        self._run = Runner(MongoIO(collection), SYSTEM_CLOCK, parse.options.error_factory)

    @property
    def _clock(self) -> Clock:
        """Where flows read time and draw jitter, and where the driver sleeps (tests replace it)."""
        return self._run.clock

    @_clock.setter
    def _clock(self, clock: Clock) -> None:
        self._run.clock = clock

    def __repr__(self) -> str:
        return describe(self.options, self.collection.full_name, type(self).__name__)

    def inspect(self, key: Any, *, timeout: Duration | None = None) -> LockSnapshot:
        """Return the lock on ``key`` (a filter, or a name) as the server sees it now.

        One read-only command: the entries come back with the server's clock, so expiry is
        judged by the server's time; nothing is written, not even pruning::

            snapshot = locks.inspect({"_id": 1})
            print(snapshot.fence, [(h.id, h.tag, h.seconds_left) for h in snapshot.holders])

        :raises ResourceNotFound: no document matches the filter (a name nobody holds gives
            an empty snapshot instead).
        :raises IncompatibleLockField: the field holds data docmultilock does not own.
        """
        call = self._parse.reading(key, timeout=timeout)
        return self._run(inspect(self._parts.core, call, clock=self._run.clock))

    def locked(self, key: Any, tag: str | None = None, *, timeout: Duration | None = None) -> bool:
        """True when a granted, unexpired entry (of ``tag``, if given) holds ``key`` now.

        Read-only, like :meth:`inspect`; the answer may be stale as soon as it returns.

        :raises InvalidArgument: ``tag`` is not one this manager declares (a typo must not
            read as "not locked").
        """
        call = self._parse.reading(key, tag=tag, timeout=timeout)
        return self._run(locked(self._parts.core, call, clock=self._run.clock))

    def preview_break(
        self, key: Any, **options: Unpack[PreviewOptions]
    ) -> tuple[LockSnapshot, tuple[HolderSnapshot, ...]]:
        """Return the lock on ``key`` and what :meth:`break_lock` would remove now.

        Read-only, like :meth:`inspect`; the server picks the entries with the break's own
        condition, at its own time. A break made afterwards decides again::

            snapshot, doomed = locks.preview_break({"_id": 1}, all_expired=True)

        :raises InvalidArgument: not exactly one of the three modes.
        :raises ResourceNotFound: no document matches the filter.
        """
        take_keywords(options, PreviewOptions, "preview_break")
        call, mode, entry = self._parse.breaking(key, **options)
        return self._run(
            preview_break(self._parts.core, call, mode=mode, lock_id=entry, clock=self._run.clock)
        )

    def break_lock(self, key: Any, **options: Unpack[BreakOptions]) -> tuple[HolderSnapshot, ...]:
        """Remove entries from the lock on ``key``, for operators; return what was removed.

        Give exactly one of ``lock_id=`` (that entry), ``all_expired=True`` (only expired
        ones) or ``everyone=True`` (every entry). Expired entries are pruned with any of
        them, as with every write. One atomic command that touches only the lock field and
        keeps its fence, so the next grant outranks every fence granted before the break
        (for a name as well, even once its document is deleted). A removed holder finds out
        as with any loss: its release and extend raise the loss error, its guarded writes
        match nothing, and ``hold()`` reports it::

            removed = locks.break_lock({"_id": 1}, lock_id="5f1c...")

        :raises InvalidArgument: not exactly one of the three modes.
        :raises ResourceNotFound: no document matches the filter (for a name nobody holds,
            nothing is removed).
        :raises IncompatibleLockField: the field holds data docmultilock does not own.
        """
        take_keywords(options, BreakOptions, "break_lock")
        call, mode, entry = self._parse.breaking(key, **options)
        return self._run(
            break_lock(self._parts, call, mode=mode, lock_id=entry, clock=self._run.clock)
        )


class _DocumentLocks(LockManager):
    """The acquire, release, extend and guard of the managers that lock the user's own documents."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # Python's argument errors then name the user's class, not this private one.
        own_methods(cls, ("acquire", "release", "extend", "guard"))

    def __init__(
        self, collection: Collection[Any], options: Mapping[str, Any], kind: ManagerKind
    ) -> None:
        setup = manager_setup(kind, options, type(self).__name__)
        check_flavour(collection, Collection, "collection", type(self).__name__)
        parts = Parts.on(
            collection,
            setup.options,
            home=DOCUMENTS,
            verdicts=setup.verdicts,
            listener=setup.listener,
        )
        super().__init__(collection, parts)

    def acquire(
        self,
        filter: Mapping[str, Any],  # noqa: A002
        **options: Unpack[AcquireOptions],
    ) -> Lock:
        """Acquire a ``tag`` lock on the document matching ``filter``, in one atomic command.

        ``tag`` may be left out when the manager declares one tag (WriteLock's ``write``).
        Give ``lock=`` instead of ``tag=`` to go on waiting with a pending assertive lock.
        It tries once; ``wait=`` (with ``backoff``, ``wake``, ``fair``) waits as
        :meth:`hold` does, a pending assertive lock continued meanwhile and withdrawn if
        the wait runs out (:class:`~docmultilock.options.AcquireOptions`)::

            lock = locks.acquire({"_id": 1}, tag="write", wait=5.0)

        :raises LockTimeout: ``wait`` ran out; nothing is left on the document.
        :raises LockAlreadyTaken: WriteLock's lock is held (nothing recorded).
        :raises CooperativeLock: a tag this one is cooperative with is held (nothing recorded).
        :raises TooManyHolders: the document already has ``max_holders`` entries, or
            as many granted ``tag`` locks as ``lock_limits`` allows (nothing recorded).
        :raises AssertiveLock: registered as pending; call again with ``lock=err.lock``.
        :raises LockNotFound: the pending ``lock`` given is gone.
        :raises ResourceNotFound: no document matches ``filter``.
        """
        return self._acquire(filter, options)

    def release(
        self,
        filter: Mapping[str, Any],  # noqa: A002
        lock: Lock,
        *,
        timeout: Duration | None = None,
        w: int | str | None = None,
    ) -> None:
        """Release ``lock`` on the document it was taken on.

        An expired lock that nobody displaced is removed quietly.

        :raises LockNotFound: the lock is gone (:class:`~docmultilock.LockWasReacquired`
            for a write lock).
        :raises ResourceNotFound: the document no longer matches ``filter``.
        """
        call = self._parse.holding(filter, lock, granted=False, timeout=timeout, w=w)
        self._run(release(self._parts, call, clock=self._run.clock))

    def extend(
        self,
        filter: Mapping[str, Any],  # noqa: A002
        lock: Lock,
        *,
        lock_timeout: Duration | None = None,
        timeout: Duration | None = None,
        w: int | str | None = None,
    ) -> Lock:
        """Push ``lock``'s expiry to the server's now plus its lifetime; return the new Lock.

        The lifetime is the one the lock was taken with, unless ``lock_timeout`` gives
        another (which later extensions then keep).

        :raises LockNotFound: the lock is no longer held: released already (a second
            release raises this), expired, or broken
            (:class:`~docmultilock.LockWasReacquired` for a write lock); an expired lock
            cannot be revived.
        """
        call = self._parse.holding(
            filter, lock, granted=True, lock_timeout=lock_timeout, timeout=timeout, w=w
        )
        return self._run(extend(self._parts, call, clock=self._run.clock))

    def guard(self, filter: Mapping[str, Any], lock: Lock) -> dict[str, Any]:  # noqa: A002
        """Return a filter that matches the document only while ``lock`` is still held.

        Use it for the writes the lock protects, so that a write cannot land after the lock
        expired or was taken over::

            orders.update_one(locks.guard({"_id": 1}, lock), {"$set": {"total": 10}})
        """
        return self._parse.guard(filter, lock)


class MultiLock(_DocumentLocks):
    """Locks with tags (``read``, ``write``, ...) embedded in the locked document itself.

    Tags relate through ``lock_relationships``: *cooperative* tags refuse each other,
    *assertive* tags register and wait for the other to drain. The default table is the
    readers-writer one (readers share; a writer excludes writers and waits for readers)::

        locks = MultiLock(db.orders, lock_timeouts={"read": 2.0, "write": 20.0})
        lock = locks.acquire({"_id": 1}, tag="read")
        locks.release({"_id": 1}, lock)

    A document takes at most ``max_holders`` live entries (held and pending) at once; one
    more is refused with :class:`~docmultilock.TooManyHolders`, as is one more granted lock
    of a tag than ``lock_limits`` allows (``{"export": 3}``: 3 at once per document, pending
    ones not counted; ``err.tag``, ``err.limit``). A ``listener``
    (:class:`~docmultilock.LockListener`) is told of every decision. Every option, with
    its default: :class:`~docmultilock.options.MultiLockOptions`.

    :raises InvalidConfiguration: naming every problem with the options.
    """

    def __init__(self, collection: Collection[Any], **options: Unpack[MultiLockOptions]) -> None:
        super().__init__(collection, options, MULTI_LOCK)


class WriteLock(_DocumentLocks):
    """An exclusive lock embedded in the locked document: a MultiLock with one tag, ``write``.

    ::

        locks = WriteLock(db.orders, lock_timeout=10.0)
        lock = locks.acquire({"_id": 1})      # LockAlreadyTaken (HTTP 409) when held
        locks.release({"_id": 1}, lock)

    Every option, with its default: :class:`~docmultilock.options.WriteLockOptions`.

    :raises InvalidConfiguration: naming every problem with the options.
    """

    def __init__(self, collection: Collection[Any], **options: Unpack[WriteLockOptions]) -> None:
        super().__init__(collection, options, WRITE_LOCK)
