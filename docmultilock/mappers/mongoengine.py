"""Locks on MongoEngine documents (the ``mongoengine`` extra): sync, on PyMongo.

A model whose records are locked subclasses :class:`LockedDocument` instead of
``mongoengine.Document``; :func:`write_lock` or :func:`multi_lock` makes a lock manager on
its collection (through its connection alias, or the one given) whose keys are records, or
their ids, and whose :meth:`~docmultilock.RecordLocks.save` writes a held record's fields
only while its lock is held::

    class Order(LockedDocument):
        total = IntField()

    orders = write_lock(Order, lock_timeout=30.0)
    order = Order.objects.get(number=7)
    with orders.hold(order, wait=5.0) as held:
        order.total = 10
        orders.save(order, held.lock)

Which of MongoEngine's own calls keep the lock field (``docs/howto/mongoengine.md``): a
loaded record's ``save()``, ``update()``, ``modify()`` and ``Order.objects(...).update()``
write with update operators and keep it. Two things would not, and :class:`LockedDocument`
changes both: a strict model cannot load a record that carries a field it does not
declare (``FieldDoesNotExist``), so its ``meta`` has ``strict: False``; and ``save()`` of
a new instance built with the id of a stored record replaces that record, lock field and
all, so a new instance is inserted (``force_insert``): the stored record is left as it
is and MongoEngine raises ``NotUniqueError``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Generic, TypeVar

from mongoengine import Document, ValidationError
from mongoengine.base import BaseField
from mongoengine.context_managers import switch_db

from docmultilock import MultiLock, WriteLock
from docmultilock._sync.records import RecordLocks
from docmultilock._typing import Unpack
from docmultilock.errors import InvalidArgument, InvalidConfiguration
from docmultilock.mappers._guarded import record_key
from docmultilock.options import MultiLockOptions, WriteLockOptions

__all__ = ["LockedDocument", "multi_lock", "write_lock"]

D = TypeVar("D", bound="LockedDocument")


class LockedDocument(Document):  # type: ignore[misc]  # MongoEngine ships no type hints
    """A MongoEngine document whose records may be locked (an abstract base).

    Not strict, so a record carrying its lock field loads; and ``save()`` of a new
    instance inserts it rather than replacing a stored record of the same id.
    """

    meta: ClassVar[dict[str, Any]] = {"abstract": True, "strict": False}

    @classmethod
    def pymongo_collection(cls) -> Any:
        """The PyMongo collection of the model's records, on its connection alias."""
        return cls._get_collection()

    def save(self, *args: Any, **kwargs: Any) -> Any:
        """Save as MongoEngine does; a new instance is inserted, never replacing a record."""
        if self._created:
            kwargs["force_insert"] = True
        return super().save(*args, **kwargs)


class _MongoEngineRecords(Generic[D]):
    """What a lock needs to know of a MongoEngine model's records."""

    def __init__(self, model: type[D], field: str) -> None:
        self.model = model
        self.field = field
        fields = {name: getattr(model, name) for name in model()}
        self.declared = {f.db_field for f in fields.values() if isinstance(f, BaseField)}
        self.id_field = next(f for f in fields.values() if getattr(f, "db_field", "") == "_id")

    def key(self, record: object) -> dict[str, Any]:
        return record_key(
            record, self.model, mapped=Document, stored_id=lambda r: r.pk, parse_id=self.parse_id
        )

    def parse_id(self, value: object) -> object:
        try:
            self.id_field.validate(value)
        except ValidationError as exc:
            raise InvalidArgument(f"{value!r} is not a {self.model.__name__} id: {exc}") from None
        return self.id_field.to_mongo(value)

    def validate(self, record: D) -> None:
        record.validate()  # as save() does

    def fields(self, record: D) -> tuple[dict[str, Any], list[str]]:
        stored = record.to_mongo()
        leave_out = {"_id", self.field}
        written = {name: value for name, value in stored.items() if name not in leave_out}
        empty = sorted(self.declared - set(stored) - leave_out)
        return written, empty

    def saved(self, record: D) -> None:
        """Nothing to tell: the record's change tracking is MongoEngine's own."""


def _collection_of(model: type[LockedDocument], alias: str | None) -> Any:
    """The model's PyMongo collection, on its own connection alias or on ``alias``."""
    if not (isinstance(model, type) and issubclass(model, LockedDocument)):
        raise InvalidConfiguration(
            {"model": "must be a subclass of docmultilock.mappers.mongoengine.LockedDocument"}
        )
    if alias is None:
        return model.pymongo_collection()
    with switch_db(model, alias) as switched:
        return switched.pymongo_collection()


def write_lock(
    model: type[D], *, alias: str | None = None, **options: Unpack[WriteLockOptions]
) -> RecordLocks[D]:
    """An exclusive lock on ``model``'s records (a :class:`~docmultilock.WriteLock`).

    :param alias: the connection alias to lock on, when not the model's own (as
        ``switch_db``).
    :raises InvalidConfiguration: ``model`` is not a :class:`LockedDocument`; naming every
        problem with the options.
    """
    locks = WriteLock(_collection_of(model, alias), **options)
    return RecordLocks(locks, _MongoEngineRecords(model, locks.options.field))


def multi_lock(
    model: type[D], *, alias: str | None = None, **options: Unpack[MultiLockOptions]
) -> RecordLocks[D]:
    """Locks with tags on ``model``'s records (a :class:`~docmultilock.MultiLock`).

    :raises InvalidConfiguration: as :func:`write_lock`.
    """
    locks = MultiLock(_collection_of(model, alias), **options)
    return RecordLocks(locks, _MongoEngineRecords(model, locks.options.field))
