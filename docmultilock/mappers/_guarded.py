"""The guarded save of a mapper's record: its fields as one update, landing only while held.

Mapper-independent and without I/O. A mapper module says what a record is (its key, the
``_id`` filter; the fields to set and those to unset); :func:`plan_save` checks them before
anything is sent (never ``_id``, never the lock field or a path inside it) and builds one
update whose filter is the key and the lock's guard (``guard()``, judged by the server's
clock), so the write cannot land once the lock expired, was broken or was taken over.
:func:`save_flow` is the save as a flow: the update, and only when it matched nothing, one
read to tell a lost lock (the manager's loss error) from a missing record
(:class:`~docmultilock.ResourceNotFound`). A driver performs its two effects; the sync and
async ones are ``docmultilock._sync.records`` and ``docmultilock._async.records``.

The update uses ``$set`` and ``$unset`` only: an update operator document never replaces
the record, so the lock field, like every field not named, is kept byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Generator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from docmultilock._async.managers import AsyncWriteLock
from docmultilock._lock import Lock
from docmultilock._sync.managers import WriteLock
from docmultilock.errors import (
    InvalidArgument,
    LockError,
    LockNotFound,
    LockWasReacquired,
    ResourceNotFound,
)
from docmultilock.options import LockOptions

__all__ = [
    "Exists",
    "GuardedSave",
    "Guarding",
    "SaveFlow",
    "Update",
    "plan_save",
    "record_key",
    "save_flow",
]


class Guarding(Protocol):
    """A document lock manager, sync or async: its options and its ``guard()``."""

    options: LockOptions

    def guard(self, filter: Mapping[str, Any], lock: Lock) -> dict[str, Any]:  # noqa: A002
        """A filter matching the document only while ``lock`` is held."""
        ...


class Update(NamedTuple):
    """Send ``update_one(filter, update)``; the flow receives the matched count."""

    filter: dict[str, Any]
    update: dict[str, Any]


class Exists(NamedTuple):
    """Read whether a document matches ``filter``; the flow receives a bool."""

    filter: dict[str, Any]


SaveFlow = Generator[Update | Exists, Any, None]


@dataclass(frozen=True)
class GuardedSave:
    """One guarded save, checked: the update and what a miss means.

    :ivar key: the record's filter, as the caller's errors name it.
    :ivar guarded: the key and the lock's guard.
    :ivar update: ``$set`` and ``$unset`` of the record's fields; empty when nothing is to
        be written (the save then only checks that the lock is held).
    :ivar lost: the loss error of the manager (``LockWasReacquired`` for a write lock).
    """

    key: dict[str, Any]
    lock: Lock
    guarded: dict[str, Any]
    update: dict[str, Any]
    lost: type[LockNotFound]

    def miss(self, *, exists: bool) -> LockError:
        """The error of a save that matched nothing; ``exists``: the record is still there."""
        if not exists:
            return ResourceNotFound(
                f"cannot save: no record matches {self.key!r}; nothing was written",
                filter=self.key,
            )
        return self.lost(
            f"cannot save: lock {self.lock.id} ({self.lock.tag!r}) is no longer held on "
            f"document {self.lock.document_id!r}: it was released, or it expired, or an "
            "operator broke it, and another holder may have it now; nothing was written",
            filter=self.key,
            lock=self.lock,
        )


def record_key(
    record: object,
    model: type,
    *,
    mapped: type,
    stored_id: Callable[[Any], object],
    parse_id: Callable[[object], object],
) -> dict[str, Any]:
    """The filter of ``record``: one of ``model``'s records, its id, or a filter as it is.

    :param mapped: the mapper's base class of every model's records.
    :param stored_id: a record's id, ``None`` while it was never stored.
    :param parse_id: an id as the model stores it (from a string, say);
        :class:`~docmultilock.InvalidArgument` when it is not one.
    :raises InvalidArgument: a record of another model, or one never stored.
    """
    if isinstance(record, mapped):
        if not isinstance(record, model):
            raise InvalidArgument(
                f"a {type(record).__name__} record is not a {model.__name__} record"
            )
        document_id = stored_id(record)
        if document_id is None:
            raise InvalidArgument(f"this {model.__name__} record was never stored")
        return {"_id": document_id}
    if isinstance(record, Mapping):
        return dict(record)
    return {"_id": parse_id(record)}


def plan_save(
    manager: Guarding,
    key: Mapping[str, Any],
    lock: Lock,
    *,
    set_fields: Mapping[str, Any],
    unset_fields: Collection[str] = (),
) -> GuardedSave:
    """Check a save of ``key``'s record under ``lock`` and build its update.

    :param set_fields: the values to ``$set``, by field path (``"total"``, ``"address.city"``).
    :param unset_fields: the field paths to ``$unset``.
    :raises InvalidArgument: a path that is ``_id``, the lock field or inside it, empty, or
        starting with ``$``; a path both set and unset; a lock that is not a granted
        :class:`~docmultilock.Lock` of this manager, or one of another record.
    """
    field = manager.options.field
    for path in (*set_fields, *unset_fields):
        _check_path(path, field)
    both = sorted(set(set_fields) & set(unset_fields))
    if both:
        raise InvalidArgument(f"cannot save: fields both set and unset: {', '.join(both)}")
    guarded = manager.guard(key, lock)
    update: dict[str, Any] = {}
    if set_fields:
        update["$set"] = dict(set_fields)
    if unset_fields:
        update["$unset"] = dict.fromkeys(unset_fields, "")
    exclusive = isinstance(manager, (WriteLock, AsyncWriteLock))
    return GuardedSave(
        dict(key), lock, guarded, update, LockWasReacquired if exclusive else LockNotFound
    )


def _check_path(path: object, field: str) -> None:
    """Refuse a path the guarded save must not write: ``_id``, the lock field, an operator."""
    if not isinstance(path, str) or not path or path.startswith("$") or "\0" in path:
        raise InvalidArgument(f"cannot save the field {path!r}: not a field path")
    top = path.split(".", 1)[0]
    if top == "_id":
        raise InvalidArgument(f"cannot save {path!r}: a record's _id is never rewritten")
    if top == field:
        raise InvalidArgument(
            f"cannot save {path!r}: it is the lock field {field!r}, which only the lock "
            "manager writes"
        )


def save_flow(plan: GuardedSave) -> SaveFlow:
    """The guarded save: one update, and one read only when it matched nothing.

    With nothing to write, the save reads whether the lock is held instead, so a save of an
    unchanged record under a lost lock still raises.
    """
    if plan.update:
        landed = bool((yield Update(plan.guarded, plan.update)))
    else:
        landed = bool((yield Exists(plan.guarded)))
    if landed:
        return
    exists = bool((yield Exists(plan.key)))
    raise plan.miss(exists=exists)
