"""WriteLock: an exclusive lock embedded in the user's document."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from bson import ObjectId
from pymongo.collection import Collection

from docmultilock import (
    CooperativeLock,
    LockAlreadyTaken,
    LockNotFound,
    LockWasReacquired,
    MultiLock,
    ResourceNotFound,
    WriteLock,
)
from tests.flavours import MakeLock
from tests.helpers import USER_FIELDS, server_now, stored_lock, user_fields

Doc = dict[str, Any]


def test_acquire_returns_a_lock_on_the_matched_document(write_lock: WriteLock, doc: Doc) -> None:
    lock = write_lock.acquire(doc)
    assert lock.tag == "write"
    assert lock.document_id == 1
    assert lock.pending is False
    assert len(lock.id) == 32


def test_the_lock_is_recorded_inside_the_document(
    write_lock: WriteLock, doc: Doc, collection: Collection[Doc]
) -> None:
    lock = write_lock.acquire(doc)
    stored = stored_lock(collection)
    assert stored["v"] == 1
    assert [h["id"] for h in stored["holders"]] == [lock.id]


def test_a_second_acquire_is_refused_with_409(write_lock: WriteLock, doc: Doc) -> None:
    write_lock.acquire(doc)
    with pytest.raises(LockAlreadyTaken) as exc:
        write_lock.acquire(doc)
    assert exc.value.status_code == 409
    assert exc.value.blocking_tags == ("write",)
    assert exc.value.filter == doc


def test_a_refusal_is_also_a_cooperative_lock(write_lock: WriteLock, doc: Doc) -> None:
    write_lock.acquire(doc)
    with pytest.raises(CooperativeLock):
        write_lock.acquire(doc)


def test_a_refusal_records_nothing(
    write_lock: WriteLock, doc: Doc, collection: Collection[Doc]
) -> None:
    write_lock.acquire(doc)
    before = stored_lock(collection)
    with pytest.raises(LockAlreadyTaken):
        write_lock.acquire(doc)
    assert stored_lock(collection) == before


def test_a_live_entry_another_table_left_on_the_field_refuses_it(
    write_lock: WriteLock, make_lock: MakeLock, doc: Doc, collection: Collection[Doc]
) -> None:
    # A MultiLock reader on the same field: granting would leave the write lock as the only
    # holder, dropping the reader's live entry, so the write lock is refused instead.
    make_lock(MultiLock, collection).acquire(doc, tag="read")
    before = stored_lock(collection)
    with pytest.raises(LockAlreadyTaken):
        write_lock.acquire(doc)
    assert stored_lock(collection) == before


@pytest.mark.parametrize(
    "names",
    [["expired", "live"], ["live", "expired"], ["empty", "number", "live"]],
    ids=["expired-first", "live-first", "beside-malformed-entries"],
)
def test_one_live_entry_among_others_refuses_it(
    write_lock: WriteLock, collection: Collection[Doc], client: Any, names: list[str]
) -> None:
    now = server_now(client)
    entries: dict[str, Any] = {
        "expired": {"id": "a" * 32, "tag": "write", "expires": now - timedelta(hours=1)},
        "live": {"id": "b" * 32, "tag": "write", "expires": now + timedelta(hours=1)},
        "empty": {},
        "number": 5,
    }
    holders = [entries[name] for name in names]
    collection.insert_one({"_id": 1, "lock": {"v": 1, "fence": 1, "holders": holders}})
    before = stored_lock(collection)
    with pytest.raises(LockAlreadyTaken):
        write_lock.acquire({"_id": 1})
    assert stored_lock(collection) == before


def test_release_frees_the_document(write_lock: WriteLock, doc: Doc) -> None:
    lock = write_lock.acquire(doc)
    write_lock.release(doc, lock)
    assert write_lock.acquire(doc).document_id == 1


def test_release_leaves_no_husk_that_breaks_later_acquisitions(
    write_lock: WriteLock, doc: Doc, collection: Collection[Doc]
) -> None:
    for _ in range(3):
        write_lock.release(doc, write_lock.acquire(doc))
    assert stored_lock(collection)["holders"] == []
    write_lock.acquire(doc)


def test_releasing_twice_raises_lock_was_reacquired(write_lock: WriteLock, doc: Doc) -> None:
    lock = write_lock.acquire(doc)
    write_lock.release(doc, lock)
    with pytest.raises(LockWasReacquired) as exc:
        write_lock.release(doc, lock)
    assert exc.value.lock == lock
    assert isinstance(exc.value, LockNotFound)


def test_acquiring_a_missing_document_raises_404(write_lock: WriteLock, doc: Doc) -> None:
    with pytest.raises(ResourceNotFound) as exc:
        write_lock.acquire({"_id": 2})
    assert exc.value.status_code == 404
    assert exc.value.filter == {"_id": 2}


def test_acquiring_a_missing_document_creates_nothing(
    write_lock: WriteLock, collection: Collection[Doc]
) -> None:
    with pytest.raises(ResourceNotFound):
        write_lock.acquire({"_id": 2})
    assert collection.count_documents({}) == 0


def test_release_on_a_deleted_document_raises_404(
    write_lock: WriteLock, doc: Doc, collection: Collection[Doc]
) -> None:
    lock = write_lock.acquire(doc)
    collection.delete_one(doc)
    with pytest.raises(ResourceNotFound):
        write_lock.release(doc, lock)


def test_any_filter_locks_the_document_it_matches(
    write_lock: WriteLock, doc: Doc, collection: Collection[Doc]
) -> None:
    lock = write_lock.acquire({"name": "original"})
    assert lock.document_id == 1
    with pytest.raises(LockAlreadyTaken):
        write_lock.acquire({"_id": 1})
    write_lock.release({"name": "original"}, lock)


def test_object_ids_are_locked_like_any_id(
    write_lock: WriteLock, collection: Collection[Doc]
) -> None:
    oid = collection.insert_one({"n": 1}).inserted_id
    assert isinstance(oid, ObjectId)
    lock = write_lock.acquire({"_id": oid})
    assert lock.document_id == oid
    write_lock.release({"_id": oid}, lock)


def test_extend_pushes_the_expiry_by_server_time(write_lock: WriteLock, doc: Doc) -> None:
    lock = write_lock.acquire(doc, lock_timeout=1.0)
    longer = write_lock.extend(doc, lock, lock_timeout=60.0)
    assert longer.id == lock.id
    assert longer.fence == lock.fence
    assert longer.expires_at - lock.expires_at > timedelta(seconds=58)


def test_extend_keeps_other_fields_of_the_lock(write_lock: WriteLock, doc: Doc) -> None:
    lock = write_lock.acquire(doc)
    longer = write_lock.extend(doc, lock)
    assert (longer.acquired_at, longer.tag, longer.document_id) == (
        lock.acquired_at,
        lock.tag,
        lock.document_id,
    )


def test_extend_of_a_released_lock_raises_lock_was_reacquired(
    write_lock: WriteLock, doc: Doc
) -> None:
    lock = write_lock.acquire(doc)
    write_lock.release(doc, lock)
    with pytest.raises(LockWasReacquired):
        write_lock.extend(doc, lock)


def test_times_are_server_times_in_utc(write_lock: WriteLock, doc: Doc, client: Any) -> None:
    before = server_now(client)
    lock = write_lock.acquire(doc, lock_timeout=30.0)
    after = server_now(client)
    assert lock.acquired_at.utcoffset() == timedelta(0)
    assert before - timedelta(seconds=1) <= lock.acquired_at <= after + timedelta(seconds=1)
    assert lock.expires_at - lock.acquired_at == timedelta(seconds=30)


def test_operations_leave_the_users_fields_alone(
    write_lock: WriteLock, doc: Doc, collection: Collection[Doc]
) -> None:
    lock = write_lock.acquire(doc)
    with pytest.raises(LockAlreadyTaken):
        write_lock.acquire(doc)
    lock = write_lock.extend(doc, lock)
    write_lock.release(doc, lock)
    assert user_fields(collection) == {"_id": 1, **USER_FIELDS}


def test_a_custom_field_name_holds_the_lock(
    make_lock: MakeLock, collection: Collection[Doc], doc: Doc
) -> None:
    locks = make_lock(WriteLock, collection, field="_mutex")
    lock = locks.acquire(doc)
    assert stored_lock(collection, field="_mutex")["holders"][0]["id"] == lock.id
    assert stored_lock(collection) is None


def test_two_lock_fields_on_one_document_are_independent(
    make_lock: MakeLock, collection: Collection[Doc], doc: Doc
) -> None:
    first = make_lock(WriteLock, collection, field="edit")
    second = make_lock(WriteLock, collection, field="publish")
    first.acquire(doc)
    second.acquire(doc)


@pytest.mark.slow
def test_an_expired_lock_can_be_taken_by_another(write_lock: WriteLock, doc: Doc) -> None:
    old = write_lock.acquire(doc, lock_timeout=0.3)
    time.sleep(0.5)
    new = write_lock.acquire(doc)
    assert new.fence > old.fence
    with pytest.raises(LockWasReacquired):
        write_lock.extend(doc, old)
    with pytest.raises(LockWasReacquired):
        write_lock.release(doc, old)
