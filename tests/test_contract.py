"""Behaviour every lock class shares, run over each manager where the contract applies.

A contract about keys and locks runs over every manager (``subject``); one about the
user's document (its filter, its other fields, a foreign value in its lock field) over
WriteLock and MultiLock (``make``: ``tests.subjects.document_make``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any, cast

import bson
import pytest
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from pymongo.collection import Collection
from pymongo.errors import OperationFailure

from docmultilock import (
    DbError,
    DbTimeout,
    IncompatibleLockField,
    InvalidArgument,
    Lock,
    LockConflict,
    LockError,
    MultiLock,
    ResourceNotFound,
)
from tests.helpers import USER_FIELDS, CommandLog, stored_lock, user_fields
from tests.subjects import DocumentMake, Subject
from tests.subjects import DocumentManager as Manager
from tests.subjects import Manager as AnyManager

Doc = dict[str, Any]
Factory = DocumentMake


@pytest.fixture
def make(document_make: DocumentMake) -> Factory:
    """Build WriteLock or MultiLock, in either flavour, over a collection, with the same options."""
    return document_make


def take(locks: AnyManager, filter: Any, **kwargs: Any) -> Lock:  # noqa: A002
    """Acquire the exclusive lock, whichever the class (and flavour)."""
    if len(locks.options.rules.tags) > 1:
        return cast(MultiLock, locks).acquire(filter, tag="write", **kwargs)
    return locks.acquire(filter, **kwargs)


@pytest.fixture
def locks(make: Factory, collection: Collection[Doc]) -> Manager:
    return make(collection)


# -- one command per operation --------------------------------------------------------


def test_every_operation_is_exactly_one_command(
    make: Factory, doc: Doc, counted: tuple[Collection[Doc], CommandLog]
) -> None:
    collection, log = counted
    locks = make(collection)
    lock = take(locks, doc)
    with pytest.raises(LockConflict):
        take(locks, doc)
    lock = locks.extend(doc, lock)
    locks.release(doc, lock)
    with pytest.raises(ResourceNotFound):
        take(locks, {"_id": 404})
    assert log.names == ["findAndModify"] * 5


def test_the_lock_owns_only_its_field(
    locks: Manager, doc: Doc, collection: Collection[Doc]
) -> None:
    lock = take(locks, doc)
    lock = locks.extend(doc, lock)
    locks.release(doc, lock)
    assert set(collection.find_one(doc) or {}) == {"_id", *USER_FIELDS, "lock"}
    assert user_fields(collection) == {"_id": 1, **USER_FIELDS}


# -- bad input: a clear error before anything is written ---------------------------------


@pytest.mark.parametrize("bad", [None, "1", 1, [("_id", 1)], {}, {1: 1}])
def test_a_bad_filter_is_refused_before_anything_is_written(
    locks: Manager, doc: Doc, collection: Collection[Doc], bad: Any
) -> None:
    with pytest.raises(InvalidArgument, match="filter"):
        take(locks, bad)
    assert stored_lock(collection) is None


@pytest.mark.parametrize("bad", [True, -1, 0, "5", float("nan")])
def test_a_bad_per_call_lock_timeout_is_refused(subject: Subject, bad: Any) -> None:
    with pytest.raises(InvalidArgument, match="lock_timeout"):
        take(subject.locks, subject.key, lock_timeout=bad)
    assert subject.stored() is None


@pytest.mark.parametrize("bad", [True, -1, 0])
def test_a_bad_per_call_timeout_is_refused(subject: Subject, bad: Any) -> None:
    with pytest.raises(InvalidArgument, match="timeout"):
        take(subject.locks, subject.key, timeout=bad)
    assert subject.stored() is None


@pytest.mark.parametrize("bad", [0, False, -1])
def test_an_unacknowledged_per_call_write_concern_is_refused(subject: Subject, bad: Any) -> None:
    with pytest.raises(InvalidArgument, match="w must"):
        take(subject.locks, subject.key, w=bad)
    assert subject.stored() is None


def test_a_lock_from_another_document_is_refused(
    locks: Manager, doc: Doc, collection: Collection[Doc]
) -> None:
    collection.insert_one({"_id": 2})
    lock = take(locks, doc)
    with pytest.raises(InvalidArgument, match="belongs to document 1"):
        locks.release({"_id": 2}, lock)
    with pytest.raises(InvalidArgument, match="belongs to document 1"):
        locks.extend({"_id": 2}, lock)
    with pytest.raises(InvalidArgument, match="belongs to document 1"):
        locks.guard({"_id": 2}, lock)
    assert stored_lock(collection, 2) is None


def test_a_filter_that_no_longer_matches_the_locks_document_is_404(
    locks: Manager, doc: Doc
) -> None:
    lock = take(locks, doc)
    with pytest.raises(ResourceNotFound):
        locks.release({"name": "someone else"}, lock)
    locks.release({"name": "original"}, lock)


def test_a_lock_of_an_undeclared_tag_is_refused(subject: Subject) -> None:
    lock = take(subject.locks, subject.key)
    forged = Lock(**{**_fields(lock), "tag": "admin"})
    with pytest.raises(InvalidArgument, match="does not declare"):
        subject.locks.release(subject.key, forged)


def test_something_else_than_a_lock_is_refused(subject: Subject) -> None:
    with pytest.raises(InvalidArgument, match=r"docmultilock\.Lock"):
        subject.locks.release(subject.key, {"id": "x"})  # type: ignore[arg-type]


def test_a_forged_lock_id_releases_nothing(subject: Subject) -> None:
    lock = take(subject.locks, subject.key)
    forged = Lock(**{**_fields(lock), "id": "f" * 32})
    with pytest.raises(LockConflict):
        subject.locks.release(subject.key, forged)
    assert [h["id"] for h in subject.holders()] == [lock.id]


def _fields(lock: Lock) -> dict[str, Any]:
    return {name: getattr(lock, name) for name in Lock.__dataclass_fields__}


# -- the lock field belongs to the lock, and nothing else is overwritten -------------------


@pytest.mark.parametrize(
    "foreign",
    [
        "mine",
        7,
        {"owner": "bob"},
        {"v": 2, "holders": []},
        [],
        {"v": 1, "holders": "x"},
        [{"v": 1, "fence": 3, "holders": []}],
    ],
)
def test_a_field_holding_foreign_data_is_never_overwritten(
    locks: Manager, collection: Collection[Doc], foreign: Any
) -> None:
    collection.insert_one({"_id": 1, "lock": foreign})
    with pytest.raises(IncompatibleLockField):
        take(locks, {"_id": 1})
    assert stored_lock(collection) == foreign


@pytest.mark.parametrize("operation", ["release", "extend"])
def test_a_held_lock_whose_field_was_overwritten_is_refused_by_name_and_type(
    locks: Manager, doc: Doc, collection: Collection[Doc], operation: str
) -> None:
    lock = take(locks, doc)
    collection.update_one(doc, {"$set": {"lock": ["overwritten"]}})
    with pytest.raises(IncompatibleLockField, match=r"field 'lock' .*of type array") as refused:
        getattr(locks, operation)(doc, lock)
    assert refused.value.filter == doc
    assert stored_lock(collection) == ["overwritten"]


@pytest.mark.parametrize(
    "husk",
    [
        {"v": 1},
        {"v": 1.0, "fence": 4},
        {"v": 1, "holders": []},
        {"v": 1, "fence": None},
        {"v": 1, "fence": Int64(2**62 - 1)},
    ],
)
def test_a_lock_field_of_our_layout_without_holders_is_unlocked(
    locks: Manager, collection: Collection[Doc], husk: Doc
) -> None:
    collection.insert_one({"_id": 1, "lock": husk})
    lock = take(locks, {"_id": 1})
    assert lock.fence == (husk.get("fence") or 0) + 1


def test_a_null_lock_field_counts_as_unlocked(locks: Manager, collection: Collection[Doc]) -> None:
    collection.insert_one({"_id": 1, "lock": None})
    take(locks, {"_id": 1})


# -- errors: database failures, error_factory ----------------------------------------------


class Translated(Exception):
    def __init__(self, err: LockError) -> None:
        super().__init__(err.status_code)
        self.status = err.status_code


def test_error_factory_replaces_each_lock_error(subject: Subject) -> None:
    locks = subject.manager(error_factory=Translated)
    take(locks, subject.key)
    with pytest.raises(Translated) as exc:
        take(locks, subject.key)
    assert exc.value.status == 409
    assert isinstance(exc.value.__cause__, LockConflict)


def test_error_factory_sees_404s_too(make: Factory, collection: Collection[Doc]) -> None:
    locks = make(collection, error_factory=Translated)
    with pytest.raises(Translated) as exc:
        take(locks, {"_id": 9})
    assert exc.value.status == 404


def test_an_error_the_factory_passes_through_keeps_its_own_cause(
    subject: Subject, fail_point: Callable[..., None]
) -> None:
    def only_conflicts(err: LockError) -> Exception:
        return Translated(err) if isinstance(err, LockConflict) else err

    locks = subject.manager(error_factory=only_conflicts)
    fail_point(errorCode=2)  # BadValue: not retried
    with pytest.raises(DbError) as exc:
        take(locks, subject.key)
    assert isinstance(exc.value.__cause__, OperationFailure)


def test_error_factory_leaves_bad_arguments_alone(
    make: Factory, collection: Collection[Doc]
) -> None:
    locks = make(collection, error_factory=Translated)
    with pytest.raises(InvalidArgument):
        take(locks, {})


def test_a_server_error_becomes_db_error_with_the_cause(
    subject: Subject, fail_point: Callable[..., None]
) -> None:
    # Code 2 (BadValue) is not retryable: the error reaches the caller.
    fail_point(errorCode=2)
    with pytest.raises(DbError) as exc:
        take(subject.locks, subject.key)
    assert exc.value.status_code == 500
    assert exc.value.__cause__ is not None
    assert not isinstance(exc.value, DbTimeout)


def test_an_operation_past_its_timeout_becomes_db_timeout(
    subject: Subject, fail_point: Callable[..., None]
) -> None:
    fail_point(blockConnection=True, blockTimeMS=1500)
    with pytest.raises(DbTimeout) as exc:
        take(subject.locks, subject.key, timeout=0.3)
    assert isinstance(exc.value, TimeoutError)
    assert exc.value.status_code == 504


# -- server time -----------------------------------------------------------------------


def test_expiry_is_stamped_by_the_server_not_the_client(subject: Subject) -> None:
    lock = take(subject.locks, subject.key, lock_timeout=5.0)
    stored = subject.holders()[0]
    assert stored["expires"].replace(tzinfo=timezone.utc) == lock.expires_at
    assert abs(lock.acquired_at - datetime.now(timezone.utc)) < timedelta(minutes=5)


@pytest.mark.parametrize("value", [2**70, object()], ids=["int-beyond-64-bits", "object"])
def test_a_filter_bson_cannot_carry_is_refused(locks: Manager, doc: Doc, value: Any) -> None:
    with pytest.raises(InvalidArgument, match="cannot be sent"):
        take(locks, {"_id": value})


@pytest.mark.parametrize(
    "fence",
    [
        float("nan"),
        float("inf"),
        Decimal128("3"),
        Int64(2**63 - 1),
        Int64(2**62),
        2.5,
        3.0,
        -1,
        "3",
    ],
    ids=[
        "nan",
        "infinity",
        "decimal128",
        "int64-max",
        "fence-limit",
        "fraction",
        "double",
        "negative",
        "str",
    ],
)
def test_a_lock_field_with_a_fence_docmultilock_cannot_grow_is_never_written(
    locks: Manager, collection: Collection[Doc], fence: Any
) -> None:
    collection.insert_one({"_id": 1, "lock": {"v": 1, "fence": fence, "holders": []}})
    with pytest.raises(IncompatibleLockField, match="fence"):
        take(locks, {"_id": 1})
    # Compared as BSON: NaN is not equal to itself in Python.
    assert bson.encode(stored_lock(collection)) == bson.encode(
        {"v": 1, "fence": fence, "holders": []}
    )


def test_a_filter_nested_beyond_mongodbs_depth_is_refused(locks: Manager, doc: Doc) -> None:
    deep: Doc = {"_id": 1}
    for _ in range(2_000):
        deep = {"$and": [deep]}
    with pytest.raises(InvalidArgument, match="deep"):
        take(locks, deep)


def test_a_filter_nested_a_little_is_fine(locks: Manager, doc: Doc) -> None:
    nested: Doc = {"_id": 1}
    for _ in range(20):
        nested = {"$and": [nested]}
    take(locks, nested)
