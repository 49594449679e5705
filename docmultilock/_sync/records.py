# Generated from docmultilock/_async/records.py by tools/unasync.py: do not edit.
# Edit the async source and run `python tools/unasync.py`.
"""Sync locks on a mapper's records: keys that are records, and the guarded save.

:class:`RecordLocks` wraps a document lock manager on the mapper's collection: every
method takes a record (a model instance), its id, or a filter, as the key, and
:meth:`~RecordLocks.save` writes the record's fields only while its lock is held
(``docmultilock.mappers._guarded`` decides; this shell performs the update and the read).
What a record is (its key, the fields to write) comes from a :class:`RecordMapper`, one per
mapper module (``docmultilock.mappers.beanie``, ...).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

from pymongo.collection import Collection
from pymongo.errors import PyMongoError

from docmultilock._command import SIMPLE_COLLATION
from docmultilock._failures import translate
from docmultilock._lock import Lock
from docmultilock._snapshot import LockSnapshot
from docmultilock._sync.held import Hold
from docmultilock._sync.managers import MultiLock, WriteLock
from docmultilock._typing import Unpack
from docmultilock.errors import LockError
from docmultilock.mappers._guarded import SaveFlow, Update, plan_save, save_flow
from docmultilock.options import AcquireOptions, Duration, HoldOptions, raised_for

__all__ = ["RecordLocks", "RecordMapper"]

R = TypeVar("R")
R_contra = TypeVar("R_contra", contravariant=True)


class RecordMapper(Protocol[R_contra]):
    """What a lock on a mapper's record needs from the mapper."""

    def key(self, record: object) -> dict[str, Any]:
        """The filter of ``record`` (a model instance, its id, or a filter): ``{"_id": ...}``.

        :raises InvalidArgument: a record of another model, or one never saved.
        """
        ...

    def validate(self, record: R_contra) -> None:
        """Check ``record`` as the mapper's own save would; raise the mapper's error if not."""
        ...

    def fields(self, record: R_contra) -> tuple[dict[str, Any], list[str]]:
        """What a save of ``record`` writes: the fields to ``$set``, those to ``$unset``.

        Never the lock field nor ``_id``.
        """
        ...

    def saved(self, record: R_contra) -> None:
        """Tell the mapper that ``record``'s fields are now stored (its change tracking)."""
        ...


class RecordLocks(Generic[R]):
    """A document lock manager whose keys are a mapper's records; and their guarded save.

    :ivar locks: the lock manager on the model's collection (every other method of it,
        ``hold_all`` or ``break_lock``, takes ``records.key(record)`` as its key).
    """

    def __init__(self, locks: WriteLock | MultiLock, mapper: RecordMapper[R]) -> None:
        self.locks = locks
        self._mapper = mapper

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.locks!r})"

    def key(self, record: R | object) -> dict[str, Any]:
        """The filter a lock on ``record`` (a model instance, its id, or a filter) is taken by."""
        return self._mapper.key(record)

    def acquire(self, record: R | object, **options: Unpack[AcquireOptions]) -> Lock:
        """Acquire a lock on ``record``, as :meth:`~docmultilock.MultiLock.acquire`."""
        return self.locks.acquire(self.key(record), **options)

    def release(
        self,
        record: R | object,
        lock: Lock,
        *,
        timeout: Duration | None = None,
        w: int | str | None = None,
    ) -> None:
        """Release ``lock`` on ``record``, as :meth:`~docmultilock.MultiLock.release`."""
        self.locks.release(self.key(record), lock, timeout=timeout, w=w)

    def extend(
        self,
        record: R | object,
        lock: Lock,
        *,
        lock_timeout: Duration | None = None,
        timeout: Duration | None = None,
        w: int | str | None = None,
    ) -> Lock:
        """Extend ``lock`` on ``record``, as :meth:`~docmultilock.MultiLock.extend`."""
        return self.locks.extend(
            self.key(record), lock, lock_timeout=lock_timeout, timeout=timeout, w=w
        )

    def hold(self, record: R | object, **options: Unpack[HoldOptions]) -> Hold:
        """Hold a lock on ``record`` for a ``with`` block, as ``hold()`` does."""
        return self.locks.hold(self.key(record), **options)

    def guard(self, record: R | object, lock: Lock) -> dict[str, Any]:
        """A filter matching ``record`` only while ``lock`` is held, as ``guard()``."""
        return self.locks.guard(self.key(record), lock)

    def inspect(self, record: R | object, *, timeout: Duration | None = None) -> LockSnapshot:
        """The lock on ``record`` as the server sees it now (read-only)."""
        return self.locks.inspect(self.key(record), timeout=timeout)

    def locked(
        self, record: R | object, tag: str | None = None, *, timeout: Duration | None = None
    ) -> bool:
        """True when a granted, unexpired lock (of ``tag``, if given) holds ``record`` now."""
        return self.locks.locked(self.key(record), tag, timeout=timeout)

    def keys(self, records: Sequence[R | object]) -> list[dict[str, Any]]:
        """The filters of ``records``, for ``hold_all`` and the other set methods."""
        return [self.key(record) for record in records]

    def save(self, record: R, lock: Lock) -> None:
        """Write ``record``'s fields in one update that lands only while ``lock`` is held.

        ``$set`` and ``$unset`` of the fields the mapper reports, filtered by the record's
        key and ``lock``'s guard: the lock field and every field not written are kept byte
        for byte. A record with nothing to write only checks that ``lock`` is held::

            with orders.hold(order, wait=5.0) as held:
                order.total = 10
                orders.save(order, held.lock)

        :raises LockNotFound: ``lock`` is no longer held (:class:`~docmultilock.LockWasReacquired`
            for a write lock); nothing was written.
        :raises ResourceNotFound: the record is gone; nothing was written.
        :raises InvalidArgument: a lock of another record, or a field the save must not
            write (``_id``, the lock field); before anything is sent.

        The record is validated first, as the mapper's own save does (its own error, before
        anything is sent).
        """
        key = self.key(record)
        self._mapper.validate(record)
        set_fields, unset_fields = self._mapper.fields(record)
        plan = plan_save(self.locks, key, lock, set_fields=set_fields, unset_fields=unset_fields)
        try:
            self._perform(save_flow(plan), key)
        except LockError as err:
            raise raised_for(err, self.locks.options.error_factory)  # noqa: B904 - sets the cause
        self._mapper.saved(record)

    def _perform(self, flow: SaveFlow, key: Mapping[str, Any]) -> None:
        """Run a save's flow: each effect performed on the manager's collection."""
        collection: Collection[Any] = self.locks.collection
        reply: object = None
        while True:
            try:
                effect = flow.send(reply)
            except StopIteration:
                return
            try:
                if isinstance(effect, Update):
                    done = collection.update_one(
                        effect.filter, effect.update, collation=SIMPLE_COLLATION
                    )
                    reply = done.matched_count
                else:
                    found = collection.find_one(
                        effect.filter, {"_id": 1}, collation=SIMPLE_COLLATION
                    )
                    reply = found is not None
            except PyMongoError as exc:
                raise translate(exc, "save", key) from exc
