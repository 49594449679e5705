"""Idempotence by lock id: an operation whose reply was lost is safe to send again.

Fail points stand in for a cut connection or a fail-over. ``writeConcernError`` applies the
write and then answers with an error: exactly a reply lost after the server did the work.
``closeConnection`` cuts the connection before the command runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.collection import Collection

from docmultilock import (
    AssertiveLock,
    DbError,
    LockNotFound,
    LockTimeout,
    LockWasReacquired,
    MultiLock,
    NamedLocks,
    WriteLock,
)
from docmultilock.pytest_plugin import CLIENT_OPTIONS
from tests.flavours import MakeLock
from tests.helpers import USER_FIELDS, server_now, stored_lock, user_fields, wait_until
from tests.subjects import Build

Doc = dict[str, Any]
Arm = Callable[..., None]

#: Applied, then answered with a transient error (91: shutting down): retried.
LOST_REPLY = {"writeConcernError": {"code": 91, "errmsg": "shutting down"}}
#: Applied, then answered with an error that is not transient (64: wtimeout): reaches the
#: caller, who may retry.
APPLIED_THEN_FAILED = {"writeConcernError": {"code": 64, "errmsg": "waiting for replication"}}


@pytest.fixture(params=[True, False], ids=["retryWrites", "noRetryWrites"])
def plain(uri: str, request: pytest.FixtureRequest) -> Iterator[MongoClient[Doc]]:
    """A client with and without pymongo's own retry of writes."""
    client: MongoClient[Doc] = MongoClient(uri, retryWrites=request.param, **CLIENT_OPTIONS)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def locks(make_lock: MakeLock, plain: MongoClient[Doc], collection: Collection[Doc]) -> WriteLock:
    return make_lock(WriteLock, plain[collection.database.name][collection.name])


@pytest.fixture
def named(make_lock: MakeLock, plain: MongoClient[Doc], collection: Collection[Doc]) -> NamedLocks:
    return make_lock(NamedLocks, plain[collection.database.name], collection.name)


def holder_ids(collection: Collection[Doc], _id: Any = 1) -> list[str]:
    return [h["id"] for h in stored_lock(collection, _id)["holders"]]


def test_a_release_whose_reply_was_lost_succeeds(
    locks: WriteLock, doc: Doc, collection: Collection[Doc], fail_point: Arm
) -> None:
    lock = locks.acquire(doc)
    fail_point(**LOST_REPLY)
    locks.release(doc, lock)
    assert holder_ids(collection) == []


def test_a_caller_retrying_a_release_that_was_applied_succeeds(
    locks: WriteLock, doc: Doc, collection: Collection[Doc], fail_point: Arm
) -> None:
    lock = locks.acquire(doc)
    fail_point(**APPLIED_THEN_FAILED)
    with pytest.raises(DbError):
        locks.release(doc, lock)
    assert holder_ids(collection) == []  # the first attempt did the work
    locks.release(doc, lock)


def test_a_release_retried_after_the_lock_expired_is_reported_lost(
    locks: WriteLock, doc: Doc, collection: Collection[Doc], fail_point: Arm
) -> None:
    # Past its expiry a lock may have been pruned by anyone: the retry cannot tell, and
    # says so rather than claim a release that might not have protected anything.
    lock = locks.acquire(doc, lock_timeout=0.3)
    fail_point(**APPLIED_THEN_FAILED)
    with pytest.raises(DbError):
        locks.release(doc, lock)
    wait_until(lambda: server_now(collection.database.client) > lock.expires_at)
    with pytest.raises(LockWasReacquired):
        locks.release(doc, lock)


def test_a_release_twice_without_a_lost_reply_is_still_an_error(locks: WriteLock, doc: Doc) -> None:
    lock = locks.acquire(doc)
    locks.release(doc, lock)
    with pytest.raises(LockWasReacquired):
        locks.release(doc, lock)


def test_a_release_cut_off_before_it_ran_is_retried(
    locks: WriteLock, doc: Doc, collection: Collection[Doc], fail_point: Arm
) -> None:
    lock = locks.acquire(doc)
    fail_point(closeConnection=True)
    locks.release(doc, lock)
    assert holder_ids(collection) == []


def test_an_acquire_whose_reply_was_lost_is_granted_once(
    locks: WriteLock, doc: Doc, collection: Collection[Doc], fail_point: Arm
) -> None:
    fail_point(**LOST_REPLY)
    lock = locks.acquire(doc)
    assert holder_ids(collection) == [lock.id]  # not a second entry, not a conflict with itself
    assert lock.fence == 1


def test_an_acquire_cut_off_twice_is_granted_once(
    locks: WriteLock, doc: Doc, collection: Collection[Doc], fail_point: Arm
) -> None:
    fail_point(times=2, closeConnection=True)
    lock = locks.acquire(doc)
    assert holder_ids(collection) == [lock.id]


def test_a_pending_acquire_whose_reply_was_lost_stays_one_pending_entry(
    make_lock: MakeLock,
    plain: MongoClient[Doc],
    collection: Collection[Doc],
    doc: Doc,
    fail_point: Arm,
) -> None:
    rw = make_lock(MultiLock, plain[collection.database.name][collection.name])
    rw.acquire(doc, tag="read")
    fail_point(**LOST_REPLY)
    with pytest.raises(AssertiveLock) as waiting:
        rw.acquire(doc, tag="write")
    entries = stored_lock(collection)["holders"]
    assert [h["pending"] for h in entries] == [False, True]
    assert entries[1]["id"] == waiting.value.lock.id


def test_an_extend_whose_reply_was_lost_returns_the_extended_lock(
    locks: WriteLock, doc: Doc, collection: Collection[Doc], fail_point: Arm
) -> None:
    lock = locks.acquire(doc, lock_timeout=5.0)
    fail_point(**LOST_REPLY)
    extended = locks.extend(doc, lock, lock_timeout=60.0)
    assert extended.expires_at > lock.expires_at
    assert holder_ids(collection) == [lock.id]


def test_a_named_release_whose_delete_reply_was_lost_succeeds(
    named: NamedLocks, collection: Collection[Doc], fail_point: Arm
) -> None:
    lock = named.acquire("job")
    wait_until(lambda: server_now(collection.database.client) > lock.acquired_at)
    fail_point(**LOST_REPLY)
    named.release("job", lock)
    assert collection.find_one({"_id": "job"}) is None


def test_a_caller_retrying_an_applied_named_release_succeeds(
    named: NamedLocks, collection: Collection[Doc], fail_point: Arm
) -> None:
    lock = named.acquire("job")
    wait_until(lambda: server_now(collection.database.client) > lock.acquired_at)
    fail_point(**APPLIED_THEN_FAILED)
    with pytest.raises(DbError):
        named.release("job", lock)
    assert collection.find_one({"_id": "job"}) is None
    named.release("job", lock)


def test_a_named_acquire_whose_reply_was_lost_is_granted_once(
    named: NamedLocks, collection: Collection[Doc], fail_point: Arm
) -> None:
    fail_point(**LOST_REPLY)
    lock = named.acquire("job")
    assert holder_ids(collection, "job") == [lock.id]


def test_a_lost_release_never_frees_someone_elses_lock(
    locks: WriteLock, doc: Doc, collection: Collection[Doc], fail_point: Arm
) -> None:
    mine = locks.acquire(doc, lock_timeout=0.3)
    wait_until(lambda: server_now(collection.database.client) > mine.expires_at)
    theirs = locks.acquire(doc)
    fail_point(**LOST_REPLY)
    with pytest.raises(LockNotFound):
        locks.release(doc, mine)
    assert holder_ids(collection) == [theirs.id]
    assert user_fields(collection) == {"_id": 1, **USER_FIELDS}


def test_a_guarded_update_retried_after_a_cut_applies_once(
    write_lock: WriteLock, doc: Doc, collection: Collection[Doc], fail_point: Arm
) -> None:
    # The user's own guarded write rides on pymongo's retryable writes.
    lock = write_lock.acquire(doc)
    fail_point(commands=["update"], closeConnection=True)
    collection.update_one(write_lock.guard(doc, lock), {"$inc": {"total": 1}})
    assert user_fields(collection)["total"] == 11


RW_TABLE: dict[str, Any] = {
    "lock_timeouts": {"read": 10.0, "write": 10.0},
    "lock_relationships": {
        "read": {"cooperative": ["write"]},
        "write": {"cooperative": ["write"], "assertive": ["read"]},
    },
}


@pytest.fixture
def rw_unretried(
    tagged_build: Build, uri: str, collection: Collection[Doc]
) -> Iterator[tuple[Any, Any]]:
    """A readers-writer manager whose client leaves retries to docmultilock, and its key."""
    client: MongoClient[Doc] = MongoClient(uri, retryWrites=False, **CLIENT_OPTIONS)
    try:
        subject = tagged_build(client[collection.database.name][collection.name])
        yield subject.manager(**RW_TABLE), subject.key
    finally:
        client.close()


def test_a_withdrawn_pending_upgrade_never_vouches_for_a_lost_release_of_the_read_lock(
    rw_unretried: tuple[Any, Any], collection: Collection[Doc], fail_point: Arm
) -> None:
    locks, key = rw_unretried
    read = locks.acquire(key, tag="read", lock_timeout=0.5)
    other = locks.acquire(key, tag="read")
    with pytest.raises(LockTimeout):  # pending for 10 s, then withdrawn
        locks.convert(key, read, tag="write", wait=0.05, backoff=(0.01, 0.02))
    wait_until(lambda: server_now(collection.database.client) > read.expires_at)
    locks.extend(key, other)  # a write: the expired read entry is pruned
    fail_point(**LOST_REPLY)
    with pytest.raises(LockNotFound):
        locks.release(key, read)


@pytest.mark.parametrize(("old", "new"), [("read", "write"), ("write", "read"), ("read", "read")])
def test_a_conversion_whose_reply_was_lost_returns_the_converted_lock(
    rw_unretried: tuple[Any, Any], fail_point: Arm, old: str, new: str
) -> None:
    # The retry finds the lock converted under a greater fence: by this very call, as the
    # entry records, not a value spent before.
    locks, key = rw_unretried
    lock = locks.acquire(key, tag=old)
    fail_point(**LOST_REPLY)
    converted = locks.convert(key, lock, tag=new)
    assert (converted.id, converted.tag) == (lock.id, new)
    assert converted.fence > lock.fence
    locks.release(key, converted)
