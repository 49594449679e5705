"""Locks on the records of Django models stored by Django MongoDB Backend.

:func:`write_lock` (or :func:`multi_lock`) makes a :class:`ModelLocks` from a model class: a
lock manager on the model's collection (its ``db_table``, through the database Django routes
its writes to) whose keys are the model's instances, or their primary keys. ``edit()`` holds
the lock, reads the record again under it and yields a :class:`HeldRecord`, whose
:meth:`~HeldRecord.save` writes the changed fields only while the lock is held::

    orders = write_lock(Order, lock_timeout=10.0)
    with orders.edit(order) as held:        # order: an Order, or its pk
        order.status = "paid"
        held.save()                         # LockWasReacquired (409) once the lock is lost

The guarded save is the mappers' shared one (``docmultilock.mappers._guarded``): one
``$set`` filtered by the record's key and the lock's guard.

The lock lives in a field of the document that the model does not declare (``lock``), so
none of Django's own writes touches it: ``save()``, ``save(update_fields=...)``,
``bulk_update()`` and ``QuerySet.update()`` set the model's columns only, and keep the lock
field as it was. They are not guarded, though: they land while another process holds the
lock. A model that declares a field stored in the lock field is refused.

Lock errors answer as HTTP through :class:`docmultilock.http.DjangoProblemMiddleware` (409
while another holds a record, 404 for an unknown one). The ``django-mongodb`` extra installs
Django MongoDB Backend.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

import bson

# Django ships no type hints (they are in the separate django-stubs, with a mypy plugin):
# its names are Any here.
from django.core.exceptions import ValidationError  # type: ignore[import-untyped]
from django.db import connections, router  # type: ignore[import-untyped]
from django.db.models import Model  # type: ignore[import-untyped]
from django.db.utils import ConnectionDoesNotExist  # type: ignore[import-untyped]
from pymongo.collection import Collection

from docmultilock._lock import Lock
from docmultilock._sync.held import HeldLock
from docmultilock._sync.managers import MultiLock, WriteLock
from docmultilock._sync.records import RecordLocks
from docmultilock._typing import Unpack
from docmultilock.errors import InvalidArgument, InvalidConfiguration
from docmultilock.options import HoldOptions, MultiLockOptions, WriteLockOptions

__all__ = [
    "HeldRecord",
    "ModelLocks",
    "ModelRecords",
    "multi_lock",
    "write_lock",
]

#: A Django model class.
M = TypeVar("M")
#: A document lock manager, sync.
L = TypeVar("L", WriteLock, MultiLock)


class ModelRecords(Generic[M]):
    """What a record of a Django model is to the guarded save: its key, the fields to write.

    A record read by :meth:`ModelLocks.edit` is tracked: its save writes only the fields whose
    stored value changed since (compared as BSON); any other record writes every field, as
    ``Model.save()`` does.
    """

    def __init__(self, model: type[M], using: str | None) -> None:
        if not (isinstance(model, type) and issubclass(model, Model)) or options_of(model).abstract:
            raise InvalidConfiguration({"model": f"not a concrete Django model: {model!r}"})
        self.model = model
        self.using: str = using or router.db_for_write(model)
        try:
            self._connection = connections[self.using]
        except ConnectionDoesNotExist as exc:
            raise InvalidConfiguration({"using": f"no database {self.using!r}"}) from exc
        if self._connection.vendor != "mongodb":
            raise InvalidConfiguration(
                {"using": f"database {self.using!r} is not Django MongoDB Backend's"}
            )
        # The tracked records' stored values, by the record's identity (a model instance's
        # == and hash are its pk's: two instances of one record are two edits).
        self._stored: dict[int, dict[str, bytes]] = {}

    @property
    def collection(self) -> Collection[Any]:
        """The model's collection (its ``db_table``), through Django MongoDB Backend's client."""
        collection: Collection[Any] = self._connection.database[options_of(self.model).db_table]
        return collection

    def checked(self, locks: L) -> L:
        """``locks``, once sure the model declares no field stored in its lock field.

        :raises InvalidConfiguration: it does: Django's ``save()`` would overwrite the lock.
        """
        field = locks.options.field
        for declared in options_of(self.model).concrete_fields:
            if declared.column == field:
                raise InvalidConfiguration(
                    {
                        "field": f"{self.model.__name__}.{declared.name} is stored in {field!r},"
                        " the lock field: Django's save() would overwrite the lock; give the"
                        " lock another field"
                    }
                )
        return locks

    def key(self, record: object) -> dict[str, Any]:
        """The filter of ``record``'s document: ``{"_id": pk}`` (the pk's column, its BSON value).

        ``record`` is a saved instance of the model, a primary key (``"6650…"`` for an
        ``ObjectIdAutoField`` is read as an ``ObjectId``, as Django reads it), or a filter.

        :raises InvalidArgument: an instance of another model, an unsaved instance, or a
            value the primary key field cannot take.
        """
        if isinstance(record, Mapping):
            return dict(record)  # a filter, checked by the lock manager
        pk_field = options_of(self.model).pk
        pk: object = record
        if isinstance(record, Model):
            if not isinstance(record, self.model):
                raise InvalidArgument(
                    f"a {type(record).__name__} is not a record of {self.model.__name__}"
                )
            pk = options_of(record).pk.value_from_object(record)
            if pk is None:
                raise InvalidArgument(f"an unsaved {self.model.__name__} has no document to lock")
        try:
            value = pk_field.get_db_prep_value(pk_field.to_python(pk), self._connection)
        except (ValidationError, TypeError, ValueError) as exc:
            raise InvalidArgument(
                f"{pk!r} is not a primary key of {self.model.__name__}: {exc}"
            ) from exc
        if value is None:
            raise InvalidArgument(f"{self.model.__name__} has no record with primary key None")
        return {pk_field.column: value}

    def validate(self, record: M) -> None:
        """Nothing, as ``Model.save()``: Django leaves ``full_clean()`` to the caller."""

    def fields(self, record: M) -> tuple[dict[str, Any], list[str]]:
        """The columns a save of ``record`` sets, as ``Model.save()`` stores them; none unset.

        Each value goes through the field's ``pre_save`` (``auto_now`` fields are set) and
        ``get_db_prep_save``, as Django's own save.

        :raises InvalidArgument: a field holds a query expression (``F("total") + 1``).
        """
        stored = self._stored.get(id(record))
        changes: dict[str, Any] = {}
        for field in self._writable():
            value = field.pre_save(record, False)  # add=False: an update
            if hasattr(value, "resolve_expression"):
                raise InvalidArgument(
                    f"{field.name} holds an expression ({value!r}): a guarded save writes"
                    " values; run the expression through QuerySet.update"
                )
            prepared = field.get_db_prep_save(value, self._connection)
            if stored is None or _bson(prepared) != stored[field.column]:
                changes[field.column] = prepared
        return changes, []

    def saved(self, record: M) -> None:
        """Take ``record``'s values as stored, if it is tracked."""
        if id(record) in self._stored:
            self.track(record)

    def track(self, record: M) -> None:
        """Remember what ``record``'s fields hold now, as stored (it was just read)."""
        self._stored[id(record)] = {
            field.column: _bson(
                field.get_db_prep_save(field.value_from_object(record), self._connection)
            )
            for field in self._writable()
        }

    def untrack(self, record: M) -> None:
        """Forget ``record``'s stored values."""
        self._stored.pop(id(record), None)

    def _writable(self) -> list[Any]:
        """The concrete fields a save writes: every one but the primary key."""
        return [field for field in options_of(self.model).concrete_fields if not field.primary_key]


class ModelLocks(RecordLocks[M]):
    """Locks on a Django model's records: a :class:`~docmultilock.RecordLocks` with ``edit()``.

    Made by :func:`write_lock` or :func:`multi_lock`. Every method takes a saved instance,
    its pk, or a filter.

    :ivar model: the model class.
    :ivar using: the Django database alias of its collection.
    """

    def __init__(self, locks: WriteLock | MultiLock, records: ModelRecords[M]) -> None:
        super().__init__(locks, records)
        self.records = records
        self.model = records.model
        self.using = records.using

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.model.__name__} on {self.using!r}: {self.locks!r}>"

    @contextmanager
    def edit(self, record: object, **options: Unpack[HoldOptions]) -> Iterator[HeldRecord[M]]:
        """Hold the lock on ``record`` for a ``with`` block; yield it read again under it.

        ``record`` is an instance (refreshed in place from the database once the lock is
        held, so that edits start from the stored values) or a pk (the record is loaded).
        The options and errors are ``hold()``'s (``tag=`` for a :func:`multi_lock`)::

            with orders.edit(order, wait=2.0) as held:
                held.record.status = "paid"
                held.save()

        :raises InvalidArgument: ``record`` is a filter: ``edit()`` reads a record by its pk.
        """
        if isinstance(record, Mapping):
            raise InvalidArgument("edit() takes a record or its pk, not a filter")
        with self.hold(record, **options) as held:
            if isinstance(record, Model):
                record.refresh_from_db(using=self.using)
                loaded: M = record
            else:
                loaded = options_of(self.model).base_manager.using(self.using).get(pk=record)
            self.records.track(loaded)
            try:
                yield HeldRecord(self, held, loaded)
            finally:
                self.records.untrack(loaded)


class HeldRecord(Generic[M]):
    """A record read under its held lock: save it guarded, only while the lock is held.

    :ivar record: the model instance.
    :ivar held: the :class:`~docmultilock.HeldLock` (``lost``, ``error``, ``guard()``).
    """

    def __init__(self, locks: ModelLocks[M], held: HeldLock, record: M) -> None:
        self.held = held
        self.record = record
        self._locks = locks

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.record!r}: {self.held!r}>"

    @property
    def lock(self) -> Lock:
        """The held :class:`~docmultilock.Lock`."""
        return self.held.lock

    def save(self) -> None:
        """Write the record's changed fields in one update that lands only while the lock is held.

        ``$set`` of each field whose value differs from the one read under the lock, as
        ``Model.save()`` would store it (``auto_now`` fields are set); the lock field and
        the other fields are kept byte for byte. Django's signals are not sent. With
        nothing changed, only checks that the lock is held.

        :raises LockWasReacquired: the lock was lost (broken, expired, taken over); nothing
            was written.
        :raises ResourceNotFound: the record was deleted; nothing was written.
        :raises InvalidArgument: a field holds a query expression (use ``QuerySet.update``
            for those); nothing was sent.
        """
        self._locks.save(self.record, self.lock)


def write_lock(
    model: type[M], *, using: str | None = None, **options: Unpack[WriteLockOptions]
) -> ModelLocks[M]:
    """An exclusive lock on ``model``'s records (a :class:`~docmultilock.WriteLock`).

    On the model's collection (its ``db_table``), in the database ``using`` names, or the
    one Django's router gives for writes of the model::

        orders = write_lock(Order, lock_timeout=10.0)

    :raises InvalidConfiguration: ``model`` is not a concrete model, its database is not
        Django MongoDB Backend's, it declares a field stored in the lock field, or an
        option is invalid.
    """
    records = ModelRecords(model, using)
    return ModelLocks(records.checked(WriteLock(records.collection, **options)), records)


def multi_lock(
    model: type[M], *, using: str | None = None, **options: Unpack[MultiLockOptions]
) -> ModelLocks[M]:
    """Locks with tags on ``model``'s records (a :class:`~docmultilock.MultiLock`).

    ``edit(order, tag="write")`` and the other methods take the tag as ``MultiLock`` does.

    :raises InvalidConfiguration: as :func:`write_lock`.
    """
    records = ModelRecords(model, using)
    return ModelLocks(records.checked(MultiLock(records.collection, **options)), records)


#: ``model._meta``: Django's documented Options API, whose underscore is Django's, not a
#: private name of another module.
options_of: Callable[[object], Any] = operator.attrgetter("_meta")


def _bson(value: object) -> bytes:
    """``value`` as BSON bytes: equal only when MongoDB would store the same thing."""
    return bson.encode({"v": value})
