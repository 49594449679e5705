"""A lock a client sends back only identifies an entry: what the server stored decides its rights.

The web flow hands a :class:`Lock` to a client (``LockSchema().dump``) and loads it back in a
later request. Everything in it but the id and the document can be edited on the way; an
edited lock must get the loss error or ``InvalidArgument``, never more rights.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone
from typing import Any

import pytest
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from pymongo import MongoClient
from pymongo.collection import Collection

from docmultilock import (
    AssertiveLock,
    DbError,
    InvalidArgument,
    LockNotFound,
    LockSchema,
    LockWasReacquired,
    MultiLock,
    WriteLock,
)
from docmultilock.pytest_plugin import CLIENT_OPTIONS
from tests.flavours import MakeLock
from tests.helpers import server_now, stored_lock, wait_until

Doc = dict[str, Any]

#: Applied, then answered with an error that is not transient: the caller sees DbError.
APPLIED_THEN_FAILED = {"writeConcernError": {"code": 64, "errmsg": "waiting for replication"}}


def relabelled(lock: Any, tag: str) -> Any:
    """The lock as a client would send it back after editing its tag."""
    body = LockSchema().dump(lock)
    body["tag"] = tag
    return LockSchema().load(body)


def pending_writer(rw_lock: MultiLock, doc: Doc) -> Any:
    with pytest.raises(AssertiveLock) as caught:
        rw_lock.acquire(doc, tag="write")
    return caught.value.lock


def test_a_pending_writer_relabelled_as_a_reader_is_not_granted(
    rw_lock: MultiLock, doc: Doc, collection: Collection[Doc]
) -> None:
    rw_lock.acquire(doc, tag="read")
    pending = pending_writer(rw_lock, doc)
    with pytest.raises(LockNotFound):
        rw_lock.acquire(doc, lock=relabelled(pending, "read"))
    mine = [h for h in stored_lock(collection)["holders"] if h["id"] == pending.id]
    assert [(h["tag"], h["pending"]) for h in mine] == [("write", True)]


def test_a_pending_writer_continued_with_its_own_tag_still_waits(
    rw_lock: MultiLock, doc: Doc
) -> None:
    rw_lock.acquire(doc, tag="read")
    pending = pending_writer(rw_lock, doc)
    with pytest.raises(AssertiveLock):
        rw_lock.acquire(doc, lock=relabelled(pending, "write"))


def test_a_reader_relabelled_as_a_writer_is_not_extended(
    make_lock: MakeLock, collection: Collection[Doc], doc: Doc
) -> None:
    locks = make_lock(MultiLock, collection, lock_timeouts={"read": 2.0, "write": 60.0})
    reader = locks.acquire(doc, tag="read")
    before = stored_lock(collection)["holders"][0]["expires"]
    with pytest.raises(LockNotFound):
        locks.extend(doc, relabelled(reader, "write"))
    assert stored_lock(collection)["holders"][0]["expires"] == before


def test_the_guard_of_a_reader_relabelled_as_a_writer_matches_nothing(
    rw_lock: MultiLock, doc: Doc, collection: Collection[Doc]
) -> None:
    reader = rw_lock.acquire(doc, tag="read")
    assert collection.count_documents(rw_lock.guard(doc, reader)) == 1
    assert collection.count_documents(rw_lock.guard(doc, relabelled(reader, "write"))) == 0


def test_a_relabelled_lock_still_releases_its_own_entry(
    rw_lock: MultiLock, doc: Doc, collection: Collection[Doc]
) -> None:
    reader = rw_lock.acquire(doc, tag="read")
    rw_lock.release(doc, relabelled(reader, "write"))
    assert stored_lock(collection)["holders"] == []


def test_a_tampered_expiry_never_turns_a_lost_release_into_success(
    make_lock: MakeLock, uri: str, collection: Collection[Doc], doc: Doc, fail_point: Any
) -> None:
    own: MongoClient[Doc] = MongoClient(uri, **CLIENT_OPTIONS)
    try:
        locks = make_lock(
            WriteLock, own[collection.database.name][collection.name], lock_timeout=1.0
        )
        lock = locks.acquire(doc)
        fail_point(**APPLIED_THEN_FAILED)
        with pytest.raises(DbError):
            locks.release(doc, lock)
        wait_until(lambda: server_now(own) > lock.expires_at)
        make_lock(WriteLock, collection).acquire(doc)  # someone else holds it now
        forever = datetime(2099, 1, 1, tzinfo=timezone.utc)
        with pytest.raises(LockWasReacquired):
            locks.release(doc, dataclasses.replace(lock, expires_at=forever))
    finally:
        own.close()


def test_a_release_retried_by_a_manager_that_never_saw_the_lock_reports_the_loss(
    make_lock: MakeLock, uri: str, collection: Collection[Doc], doc: Doc, fail_point: Any
) -> None:
    # Only what this manager recorded from the server can vouch for a lost reply; a lock
    # loaded from a request carries nothing this manager can trust.
    locks = make_lock(WriteLock, collection)
    lock = locks.acquire(doc)
    fail_point(**APPLIED_THEN_FAILED)
    other = make_lock(WriteLock, collection)
    with pytest.raises(DbError):
        other.release(doc, lock)
    with pytest.raises(LockWasReacquired):
        other.release(doc, lock)


# -- a lock's document is compared with the filter as MongoDB compares _ids ---------------


@pytest.mark.parametrize(
    ("stored_id", "filter_id"),
    [(1, Decimal128("1")), (1, 1.0), (1, Int64(1)), ({"a": 1, "b": 2}, {"a": 1.0, "b": 2})],
    ids=["decimal128", "double", "int64", "document-with-double"],
)
def test_a_filter_naming_the_same_id_in_another_bson_type_is_accepted(
    write_lock: WriteLock, collection: Collection[Doc], stored_id: Any, filter_id: Any
) -> None:
    collection.insert_one({"_id": stored_id})
    lock = write_lock.acquire({"_id": stored_id})
    write_lock.release({"_id": filter_id}, lock)
    assert stored_lock(collection, stored_id)["holders"] == []


@pytest.mark.parametrize(
    ("stored_id", "filter_id"),
    [
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}),
        (1, True),
        ("1", 1),
        ({"a": [1, 2]}, {"a": [2, 1]}),
    ],
    ids=["document-in-another-order", "bool", "string", "array-order"],
)
def test_a_filter_naming_another_id_is_refused(
    write_lock: WriteLock, collection: Collection[Doc], stored_id: Any, filter_id: Any
) -> None:
    collection.insert_one({"_id": stored_id})
    lock = write_lock.acquire({"_id": stored_id})
    with pytest.raises(InvalidArgument, match="belongs to document"):
        write_lock.release({"_id": filter_id}, lock)
    assert [h["id"] for h in stored_lock(collection, stored_id)["holders"]] == [lock.id]


def test_a_refused_relabel_writes_nothing_even_when_a_cooperative_tag_is_live(
    make_lock: MakeLock, collection: Collection[Doc], doc: Doc
) -> None:
    # A table where the relabelled tag would be refused: the refusal must not drop the
    # real entry either.
    locks = make_lock(
        MultiLock,
        collection,
        lock_relationships={
            "read": {"cooperative": ["write", "audit"]},
            "write": {"cooperative": ["write"], "assertive": ["read"]},
            "audit": {"cooperative": ["read"]},
        },
    )
    locks.acquire(doc, tag="read")
    pending = pending_writer(locks, doc)
    with pytest.raises(LockNotFound):
        locks.acquire(doc, lock=relabelled(pending, "read"))
    assert pending.id in [h["id"] for h in stored_lock(collection)["holders"]]
