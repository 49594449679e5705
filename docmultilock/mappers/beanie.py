"""Locks on Beanie documents (the ``beanie`` extra): async, on PyMongo's async API.

A model whose records are locked subclasses :class:`LockedDocument` instead of
``beanie.Document``; after ``init_beanie``, :func:`write_lock` or :func:`multi_lock` makes
a lock manager on its collection whose keys are records (or their ids, as
``PydanticObjectId`` or its string), and whose :meth:`~docmultilock.AsyncRecordLocks.save`
writes a held record's fields only while its lock is held::

    class Order(LockedDocument):
        total: int

    await init_beanie(database=client.shop, document_models=[Order])
    orders = write_lock(Order, lock_timeout=30.0)
    async with orders.hold(order, wait=5.0) as held:
        order.total = 10
        await orders.save(order, held.lock)

Which of Beanie's own calls keep the lock field (``docs/howto/beanie.md``): ``save()``,
``save_changes()``, ``update()``, ``set()`` and query updates write with update operators
and keep it; ``replace()`` writes the record without it (the next acquire would be granted
at once and the fence would start again at 1), so :class:`LockedDocument` refuses
``replace()`` and ``replace_many()``.
"""

from __future__ import annotations

from copy import copy
from typing import Any, Generic, TypeVar

from beanie import Document
from beanie.odm.fields import ExpressionField
from beanie.odm.utils.dump import get_dict, get_top_level_nones
from pydantic import TypeAdapter, ValidationError

from docmultilock import AsyncMultiLock, AsyncWriteLock
from docmultilock._async.records import AsyncRecordLocks
from docmultilock._typing import Unpack
from docmultilock.errors import InvalidArgument, InvalidConfiguration
from docmultilock.mappers._guarded import record_key
from docmultilock.options import MultiLockOptions, WriteLockOptions

__all__ = ["LockedDocument", "multi_lock", "write_lock"]

D = TypeVar("D", bound="LockedDocument")

#: What Beanie writes beside the model's fields: its own revision (``use_revision``).
_REVISION = "revision_id"


class LockedDocument(Document):
    """A Beanie document whose records may be locked: its ``replace()`` is refused.

    ``replace()`` writes the whole record as the model holds it, and the lock field is not
    a field of the model, so it would be erased under its holder. Save with ``save()``,
    ``save_changes()`` or the lock manager's guarded ``save()`` instead.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Give a model made after ``init_beanie`` the fields its bases declared.

        ``init_beanie`` sets up a model's bases too (``LockedDocument`` and any base of the
        application's), replacing each of their fields on the class by a query expression
        (``Order.total == 10``); a model defined afterwards, as a test module's is, would
        take those expressions for its fields' defaults (``Id must be of type
        PydanticObjectId``). Pydantic collects the fields after this hook (its documented
        order), so the declared field is put back first.
        """
        super().__init_subclass__(**kwargs)
        for base in cls.__mro__[1:]:
            declared = base.__dict__.get("__pydantic_fields__", {})
            for name, field in declared.items():
                inherited = getattr(cls, name, None)
                if name not in cls.__dict__ and isinstance(inherited, ExpressionField):
                    setattr(cls, name, copy(field))

    async def replace(self, *args: Any, **kwargs: Any) -> Any:  # noqa: D102 - the class says why
        raise InvalidArgument(_refused(type(self), "replace()"))

    @classmethod
    async def replace_many(cls, *args: Any, **kwargs: Any) -> None:  # noqa: D102
        raise InvalidArgument(_refused(cls, "replace_many()"))

    @classmethod
    def is_initialised(cls) -> bool:
        """Whether ``init_beanie`` has set this very model up (not only a base of it).

        It sets up each model it is given in the class itself (and its bases too): a model
        it was not given would reach a base's collection (``"LockedDocument"``).
        """
        return cls.__dict__.get("_document_settings") is not None

    def mark_saved(self) -> None:
        """Record the fields as stored, for Beanie's state management (``get_changes()``)."""
        self._save_state()


def _refused(model: type[Document], call: str) -> str:
    return (
        f"{model.__name__}.{call} is refused: it would write records without their lock "
        "field, erasing a lock under its holder; use save(), save_changes() or the lock "
        "manager's save(record, lock); nothing was written"
    )


class _BeanieRecords(Generic[D]):
    """What a lock needs to know of a Beanie model's records."""

    def __init__(self, model: type[D], field: str) -> None:
        self.model = model
        self.field = field
        # The model's id type (PydanticObjectId unless declared): an id from a URL validates.
        annotation: Any = model.model_fields["id"].annotation
        self.ids: TypeAdapter[Any] = TypeAdapter(annotation)

    def key(self, record: object) -> dict[str, Any]:
        return record_key(
            record, self.model, mapped=Document, stored_id=lambda r: r.id, parse_id=self.parse_id
        )

    def parse_id(self, value: object) -> object:
        try:
            document_id = self.ids.validate_python(value)
        except ValidationError as exc:
            raise InvalidArgument(
                f"{value!r} is not a {self.model.__name__} id: {exc.errors()[0]['msg']}"
            ) from None
        if document_id is None:
            raise InvalidArgument(f"None is not a {self.model.__name__} id")
        return document_id

    async def validate(self, record: D) -> None:
        await record.validate_self()  # as save() does: when the model's validate_on_save

    def fields(self, record: D) -> tuple[dict[str, Any], list[str]]:
        settings = record.get_settings()
        leave_out = {"_id", _REVISION, self.field}
        if settings.use_state_management and record.get_saved_state() is not None:
            values = record.get_changes()
        else:
            values = get_dict(record, to_db=True, keep_nulls=settings.keep_nulls)
        written = {path: value for path, value in values.items() if _top(path) not in leave_out}
        nones = [] if settings.keep_nulls else list(get_top_level_nones(record))
        return written, [path for path in nones if path not in leave_out]

    def saved(self, record: D) -> None:
        record.mark_saved()


def _top(path: str) -> str:
    return path.split(".", 1)[0]


def _collection_of(model: type[LockedDocument]) -> Any:
    """The model's collection, once ``init_beanie`` has set it up."""
    if not (isinstance(model, type) and issubclass(model, LockedDocument)):
        raise InvalidConfiguration(
            {"model": "must be a subclass of docmultilock.mappers.beanie.LockedDocument"}
        )
    if not model.is_initialised():
        raise InvalidConfiguration(
            {"model": f"{model.__name__} is not initialised: call init_beanie(...) with it first"}
        )
    return model.get_pymongo_collection()


def write_lock(model: type[D], **options: Unpack[WriteLockOptions]) -> AsyncRecordLocks[D]:
    """An exclusive lock on ``model``'s records (an :class:`~docmultilock.AsyncWriteLock`).

    :raises InvalidConfiguration: ``model`` is not a :class:`LockedDocument`, or
        ``init_beanie`` has not set it up; naming every problem with the options.
    """
    locks = AsyncWriteLock(_collection_of(model), **options)
    return AsyncRecordLocks(locks, _BeanieRecords(model, locks.options.field))


def multi_lock(model: type[D], **options: Unpack[MultiLockOptions]) -> AsyncRecordLocks[D]:
    """Locks with tags on ``model``'s records (an :class:`~docmultilock.AsyncMultiLock`).

    :raises InvalidConfiguration: as :func:`write_lock`.
    """
    locks = AsyncMultiLock(_collection_of(model), **options)
    return AsyncRecordLocks(locks, _BeanieRecords(model, locks.options.field))
