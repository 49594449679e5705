"""MultiLock: tags, and how cooperative and assertive relationships decide."""

from __future__ import annotations

import threading
import time
from datetime import timezone
from typing import Any

import pytest
from pymongo.collection import Collection

from docmultilock import (
    AssertiveLock,
    CooperativeLock,
    InvalidArgument,
    Lock,
    LockAlreadyTaken,
    LockNotFound,
    LockWasReacquired,
    MultiLock,
    TooManyHolders,
    WriteLock,
)
from tests.flavours import MakeLock
from tests.helpers import USER_FIELDS, stored_lock, user_fields, wait_until

Doc = dict[str, Any]


def pending_of(locks: MultiLock, doc: Doc, tag: str) -> Lock:
    with pytest.raises(AssertiveLock) as exc:
        locks.acquire(doc, tag=tag)
    return exc.value.lock


def holder_tags(collection: Collection[Doc]) -> list[tuple[str, bool]]:
    return [(h["tag"], h["pending"]) for h in stored_lock(collection)["holders"]]


# -- concurrent tags ---------------------------------------------------------------------


def test_readers_share_a_document(rw_lock: MultiLock, doc: Doc) -> None:
    first = rw_lock.acquire(doc, tag="read")
    second = rw_lock.acquire(doc, tag="read")
    assert first.id != second.id


def test_tags_without_a_relationship_are_concurrent(
    make_lock: MakeLock, collection: Collection[Doc], doc: Doc
) -> None:
    locks = make_lock(
        MultiLock, collection, lock_relationships={"audit": {}, "write": {"cooperative": ["write"]}}
    )
    locks.acquire(doc, tag="write")
    locks.acquire(doc, tag="audit")
    locks.acquire(doc, tag="audit")


# -- cooperative -------------------------------------------------------------------------


def test_a_cooperative_tag_is_refused_while_the_other_is_held(rw_lock: MultiLock, doc: Doc) -> None:
    rw_lock.acquire(doc, tag="write")
    with pytest.raises(CooperativeLock) as exc:
        rw_lock.acquire(doc, tag="read")
    assert exc.value.blocking_tags == ("write",)
    assert not isinstance(exc.value, LockAlreadyTaken)


def test_a_cooperative_refusal_records_nothing(
    rw_lock: MultiLock, doc: Doc, collection: Collection[Doc]
) -> None:
    rw_lock.acquire(doc, tag="write")
    before = stored_lock(collection)
    with pytest.raises(CooperativeLock):
        rw_lock.acquire(doc, tag="read")
    assert stored_lock(collection) == before


def test_a_tag_cooperative_with_itself_is_exclusive(rw_lock: MultiLock, doc: Doc) -> None:
    rw_lock.acquire(doc, tag="write")
    with pytest.raises(CooperativeLock, match="held or pending by write"):
        rw_lock.acquire(doc, tag="write")


def test_release_lets_the_cooperative_tag_in(rw_lock: MultiLock, doc: Doc) -> None:
    writer = rw_lock.acquire(doc, tag="write")
    rw_lock.release(doc, writer)
    rw_lock.acquire(doc, tag="read")


# -- assertive ---------------------------------------------------------------------------


def test_an_assertive_tag_registers_as_pending_while_the_other_is_held(
    rw_lock: MultiLock, doc: Doc, collection: Collection[Doc]
) -> None:
    rw_lock.acquire(doc, tag="read")
    with pytest.raises(AssertiveLock) as exc:
        rw_lock.acquire(doc, tag="write")
    pending = exc.value.lock
    assert pending is not None
    assert pending.pending is True
    assert pending.fence == 0
    assert exc.value.blocking_tags == ("read",)
    assert holder_tags(collection) == [("read", False), ("write", True)]


def test_a_pending_lock_blocks_tags_cooperative_with_it(rw_lock: MultiLock, doc: Doc) -> None:
    rw_lock.acquire(doc, tag="read")
    pending_of(rw_lock, doc, "write")
    with pytest.raises(CooperativeLock) as exc:
        rw_lock.acquire(doc, tag="read")
    assert exc.value.blocking_tags == ("write",)


def test_a_pending_lock_blocks_another_writer(rw_lock: MultiLock, doc: Doc) -> None:
    rw_lock.acquire(doc, tag="read")
    pending_of(rw_lock, doc, "write")
    with pytest.raises(CooperativeLock):
        rw_lock.acquire(doc, tag="write")


def test_continuing_while_the_other_is_still_held_stays_pending(
    rw_lock: MultiLock, doc: Doc, collection: Collection[Doc]
) -> None:
    rw_lock.acquire(doc, tag="read")
    pending = pending_of(rw_lock, doc, "write")
    with pytest.raises(AssertiveLock) as exc:
        rw_lock.acquire(doc, lock=pending)
    assert exc.value.lock.id == pending.id
    assert len(stored_lock(collection)["holders"]) == 2


def test_continuing_renews_the_pending_entrys_expiry(rw_lock: MultiLock, doc: Doc) -> None:
    rw_lock.acquire(doc, tag="read")
    pending = pending_of(rw_lock, doc, "write")
    time.sleep(0.05)
    with pytest.raises(AssertiveLock) as exc:
        rw_lock.acquire(doc, lock=pending)
    assert exc.value.lock.expires_at > pending.expires_at
    assert exc.value.lock.acquired_at == pending.acquired_at


def test_continuing_after_the_other_drains_grants_the_lock(rw_lock: MultiLock, doc: Doc) -> None:
    reader = rw_lock.acquire(doc, tag="read")
    pending = pending_of(rw_lock, doc, "write")
    rw_lock.release(doc, reader)
    granted = rw_lock.acquire(doc, lock=pending)
    assert granted.id == pending.id
    assert granted.pending is False
    assert granted.fence > reader.fence


def test_a_granted_lock_excludes_the_tags_it_waited_for(rw_lock: MultiLock, doc: Doc) -> None:
    reader = rw_lock.acquire(doc, tag="read")
    pending = pending_of(rw_lock, doc, "write")
    rw_lock.release(doc, reader)
    rw_lock.acquire(doc, lock=pending)
    with pytest.raises(CooperativeLock):
        rw_lock.acquire(doc, tag="read")


def test_continuing_a_granted_lock_returns_it_unchanged(rw_lock: MultiLock, doc: Doc) -> None:
    reader = rw_lock.acquire(doc, tag="read")
    pending = pending_of(rw_lock, doc, "write")
    rw_lock.release(doc, reader)
    granted = rw_lock.acquire(doc, lock=pending)
    assert rw_lock.acquire(doc, lock=granted) == granted


def test_an_assertive_tag_with_nothing_held_is_granted_at_once(
    rw_lock: MultiLock, doc: Doc
) -> None:
    assert rw_lock.acquire(doc, tag="write").pending is False


def test_releasing_a_pending_lock_gives_up_waiting(
    rw_lock: MultiLock, doc: Doc, collection: Collection[Doc]
) -> None:
    rw_lock.acquire(doc, tag="read")
    pending = pending_of(rw_lock, doc, "write")
    rw_lock.release(doc, pending)
    assert holder_tags(collection) == [("read", False)]
    rw_lock.acquire(doc, tag="read")


def test_continuing_a_released_pending_lock_raises_lock_not_found(
    rw_lock: MultiLock, doc: Doc
) -> None:
    rw_lock.acquire(doc, tag="read")
    pending = pending_of(rw_lock, doc, "write")
    rw_lock.release(doc, pending)
    with pytest.raises(LockNotFound) as exc:
        rw_lock.acquire(doc, lock=pending)
    assert not isinstance(exc.value, LockWasReacquired)
    assert exc.value.lock == pending


def test_continuing_a_lost_lock_records_nothing(
    rw_lock: MultiLock, doc: Doc, collection: Collection[Doc]
) -> None:
    rw_lock.acquire(doc, tag="read")
    pending = pending_of(rw_lock, doc, "write")
    rw_lock.release(doc, pending)
    with pytest.raises(LockNotFound):
        rw_lock.acquire(doc, lock=pending)
    assert holder_tags(collection) == [("read", False)]


def test_an_asymmetric_cooperative_holder_makes_a_continuing_waiter_give_up(
    make_lock: MakeLock, collection: Collection[Doc], doc: Doc
) -> None:
    # "b" waits for "a"; "c" ignores "b", but "b" refuses "c". A "c" that arrives while "b"
    # is pending refuses "b" when it continues, and "b"'s pending entry is dropped.
    locks = make_lock(
        MultiLock,
        collection,
        lock_relationships={"a": {}, "c": {}, "b": {"assertive": ["a"], "cooperative": ["c"]}},
    )
    locks.acquire(doc, tag="a")
    pending = pending_of(locks, doc, "b")
    locks.acquire(doc, tag="c")
    with pytest.raises(CooperativeLock) as exc:
        locks.acquire(doc, lock=pending)
    assert exc.value.blocking_tags == ("c",)
    assert holder_tags(collection) == [("a", False), ("c", False)]


def test_assertive_waits_also_for_pending_entries_of_the_other_tag(
    make_lock: MakeLock, collection: Collection[Doc], doc: Doc
) -> None:
    # "top" waits for "mid", which itself waits for "low": a pending "mid" must be waited
    # for too, or it could be granted under "top" later.
    locks = make_lock(
        MultiLock,
        collection,
        lock_relationships={
            "low": {},
            "mid": {"assertive": ["low"]},
            "top": {"assertive": ["mid"]},
        },
    )
    low = locks.acquire(doc, tag="low")
    mid = pending_of(locks, doc, "mid")
    top = pending_of(locks, doc, "top")
    locks.release(doc, low)
    locks.release(doc, locks.acquire(doc, lock=mid))
    assert locks.acquire(doc, lock=top).pending is False


# -- expiry ------------------------------------------------------------------------------


@pytest.mark.slow
def test_an_expired_entry_beside_a_live_one_never_lets_a_conflicting_holder_in(
    make_lock: MakeLock, collection: Collection[Doc], doc: Doc
) -> None:
    # A dotted match such as {"lock.holders.expires": {"$lt": now}} is true when *any*
    # entry expired; the decision must look at each entry.
    locks = make_lock(
        MultiLock, collection, lock_relationships={"x": {}, "y": {"cooperative": ["x"]}}
    )
    locks.acquire(doc, tag="x", lock_timeout=0.2)
    locks.acquire(doc, tag="x", lock_timeout=30.0)
    time.sleep(0.4)
    with pytest.raises(CooperativeLock):
        locks.acquire(doc, tag="y")


@pytest.mark.slow
def test_an_expired_reader_beside_a_live_one_keeps_the_writer_pending(
    make_lock: MakeLock, collection: Collection[Doc], doc: Doc
) -> None:
    locks = make_lock(MultiLock, collection)
    locks.acquire(doc, tag="read", lock_timeout=0.2)
    locks.acquire(doc, tag="read", lock_timeout=30.0)
    time.sleep(0.4)
    with pytest.raises(AssertiveLock):
        locks.acquire(doc, tag="write")


@pytest.mark.slow
def test_a_writer_gets_through_once_a_dead_readers_entry_expires(
    make_lock: MakeLock, collection: Collection[Doc], doc: Doc
) -> None:
    locks = make_lock(MultiLock, collection, lock_timeouts={"read": 0.5, "write": 10.0})
    locks.acquire(doc, tag="read")  # this reader dies: it never releases
    pending = pending_of(locks, doc, "write")
    started = time.monotonic()
    while True:
        try:
            granted = locks.acquire(doc, lock=pending)
            break
        except AssertiveLock:
            assert time.monotonic() - started < 5.0, "the writer waited on a dead reader"
            time.sleep(0.05)
    assert granted.pending is False


@pytest.mark.slow
def test_a_waiter_that_stops_asking_stops_blocking_others(
    make_lock: MakeLock, collection: Collection[Doc], doc: Doc
) -> None:
    locks = make_lock(MultiLock, collection, lock_timeouts={"read": 10.0, "write": 0.3})
    reader = locks.acquire(doc, tag="read")
    pending_of(locks, doc, "write")  # this writer dies while pending
    with pytest.raises(CooperativeLock):
        locks.acquire(doc, tag="read")
    wait_until(lambda: _can_read(locks, doc))
    locks.release(doc, reader)


def _can_read(locks: MultiLock, doc: Doc) -> bool:
    try:
        locks.acquire(doc, tag="read")
    except CooperativeLock:
        return False
    return True


@pytest.mark.slow
def test_continuing_an_expired_pending_lock_raises_lock_not_found(
    make_lock: MakeLock, collection: Collection[Doc], doc: Doc
) -> None:
    locks = make_lock(MultiLock, collection, lock_timeouts={"read": 10.0, "write": 0.2})
    locks.acquire(doc, tag="read")
    pending = pending_of(locks, doc, "write")
    time.sleep(0.4)
    with pytest.raises(LockNotFound):
        locks.acquire(doc, lock=pending)


@pytest.mark.slow
def test_release_of_an_expired_lock_nobody_displaced_removes_it_quietly(
    rw_lock: MultiLock, doc: Doc, collection: Collection[Doc]
) -> None:
    lock = rw_lock.acquire(doc, tag="read", lock_timeout=0.2)
    time.sleep(0.4)
    rw_lock.release(doc, lock)
    assert stored_lock(collection)["holders"] == []


@pytest.mark.slow
def test_extend_of_an_expired_lock_raises_lock_not_found(rw_lock: MultiLock, doc: Doc) -> None:
    lock = rw_lock.acquire(doc, tag="write", lock_timeout=0.2)
    time.sleep(0.4)
    with pytest.raises(LockNotFound):
        rw_lock.extend(doc, lock)


@pytest.mark.slow
def test_expired_holders_are_pruned_by_the_next_write(
    rw_lock: MultiLock, doc: Doc, collection: Collection[Doc]
) -> None:
    for _ in range(3):
        rw_lock.acquire(doc, tag="read", lock_timeout=0.2)
    time.sleep(0.4)
    assert len(stored_lock(collection)["holders"]) == 3
    survivor = rw_lock.acquire(doc, tag="read")
    assert [h["id"] for h in stored_lock(collection)["holders"]] == [survivor.id]


def test_each_tag_gets_its_own_lifetime(
    make_lock: MakeLock, collection: Collection[Doc], doc: Doc
) -> None:
    locks = make_lock(MultiLock, collection, lock_timeouts={"read": 2.0}, lock_timeout=7.0)
    reader = locks.acquire(doc, tag="read")
    locks.release(doc, reader)
    writer = locks.acquire(doc, tag="write")
    assert (reader.expires_at - reader.acquired_at).total_seconds() == 2.0
    assert (writer.expires_at - writer.acquired_at).total_seconds() == 7.0


# -- fences and guard ---------------------------------------------------------------------


def test_the_fence_grows_with_every_grant(rw_lock: MultiLock, doc: Doc) -> None:
    fences = []
    for tag in ["read", "read", "read"]:
        fences.append(rw_lock.acquire(doc, tag=tag).fence)
    assert fences == sorted(set(fences))
    assert fences[0] >= 1


def test_the_fence_survives_release(rw_lock: MultiLock, doc: Doc) -> None:
    first = rw_lock.acquire(doc, tag="write")
    rw_lock.release(doc, first)
    assert rw_lock.acquire(doc, tag="write").fence == first.fence + 1


def test_a_refusal_does_not_consume_a_fence(rw_lock: MultiLock, doc: Doc) -> None:
    first = rw_lock.acquire(doc, tag="write")
    with pytest.raises(CooperativeLock):
        rw_lock.acquire(doc, tag="write")
    rw_lock.release(doc, first)
    assert rw_lock.acquire(doc, tag="write").fence == first.fence + 1


def test_guard_matches_while_the_lock_is_held(
    rw_lock: MultiLock, doc: Doc, collection: Collection[Doc]
) -> None:
    lock = rw_lock.acquire(doc, tag="write")
    result = collection.update_one(rw_lock.guard(doc, lock), {"$set": {"total": 11}})
    assert result.modified_count == 1


def test_guard_matches_nothing_after_release(
    rw_lock: MultiLock, doc: Doc, collection: Collection[Doc]
) -> None:
    lock = rw_lock.acquire(doc, tag="write")
    guard = rw_lock.guard(doc, lock)
    rw_lock.release(doc, lock)
    assert collection.update_one(guard, {"$set": {"total": 11}}).matched_count == 0
    assert user_fields(collection)["total"] == USER_FIELDS["total"]


@pytest.mark.slow
def test_guard_matches_nothing_once_the_lock_expired(
    rw_lock: MultiLock, doc: Doc, collection: Collection[Doc]
) -> None:
    lock = rw_lock.acquire(doc, tag="write", lock_timeout=0.2)
    guard = rw_lock.guard(doc, lock)
    time.sleep(0.4)
    assert collection.count_documents(guard) == 0


def test_guard_refuses_a_pending_lock(rw_lock: MultiLock, doc: Doc) -> None:
    rw_lock.acquire(doc, tag="read")
    pending = pending_of(rw_lock, doc, "write")
    with pytest.raises(InvalidArgument, match="pending"):
        rw_lock.guard(doc, pending)


def test_guard_keeps_the_callers_filter(
    rw_lock: MultiLock, doc: Doc, collection: Collection[Doc]
) -> None:
    lock = rw_lock.acquire({"name": "original"}, tag="write")
    assert collection.count_documents(rw_lock.guard({"name": "original"}, lock)) == 1
    assert collection.count_documents(rw_lock.guard({"name": "changed"}, lock)) == 0


def test_extend_refuses_a_pending_lock(rw_lock: MultiLock, doc: Doc) -> None:
    rw_lock.acquire(doc, tag="read")
    pending = pending_of(rw_lock, doc, "write")
    with pytest.raises(InvalidArgument, match="pending"):
        rw_lock.extend(doc, pending)


# -- bad arguments ----------------------------------------------------------------------


def test_an_undeclared_tag_is_refused_before_anything_is_written(
    rw_lock: MultiLock, doc: Doc, collection: Collection[Doc]
) -> None:
    with pytest.raises(InvalidArgument, match="undeclared tag 'wirte'"):
        rw_lock.acquire(doc, tag="wirte")
    assert stored_lock(collection) is None


def test_tag_and_lock_together_are_refused(
    rw_lock: MultiLock, doc: Doc, collection: Collection[Doc]
) -> None:
    lock = rw_lock.acquire(doc, tag="read")
    before = stored_lock(collection)
    with pytest.raises(InvalidArgument, match="exactly one of tag"):
        rw_lock.acquire(doc, tag="read", lock=lock)
    assert stored_lock(collection) == before


def test_neither_tag_nor_lock_is_refused(
    rw_lock: MultiLock, doc: Doc, collection: Collection[Doc]
) -> None:
    with pytest.raises(InvalidArgument, match="give tag="):
        rw_lock.acquire(doc)
    assert stored_lock(collection) is None


def test_a_lock_of_a_tag_the_manager_does_not_declare_is_refused(
    make_lock: MakeLock, collection: Collection[Doc], doc: Doc
) -> None:
    reader = make_lock(MultiLock, collection).acquire(doc, tag="read")
    exclusive = make_lock(WriteLock, collection)
    with pytest.raises(InvalidArgument, match="'read'"):
        exclusive.release(doc, reader)


def test_the_stored_expiry_is_the_latest_holders(
    rw_lock: MultiLock, doc: Doc, collection: Collection[Doc]
) -> None:
    long = rw_lock.acquire(doc, tag="read", lock_timeout=60.0)
    short = rw_lock.acquire(doc, tag="read", lock_timeout=5.0)
    assert stored_lock(collection)["expires"].replace(tzinfo=timezone.utc) == long.expires_at
    rw_lock.release(doc, long)
    assert stored_lock(collection)["expires"].replace(tzinfo=timezone.utc) == short.expires_at


# -- a bounded number of entries ---------------------------------------------------------------


@pytest.fixture
def capped(make_lock: MakeLock, collection: Collection[Doc]) -> MultiLock:
    return make_lock(MultiLock, collection, max_holders=3)


def test_a_document_takes_at_most_max_holders_entries(capped: MultiLock, doc: Doc) -> None:
    for _ in range(3):
        capped.acquire(doc, tag="read")
    with pytest.raises(TooManyHolders) as caught:
        capped.acquire(doc, tag="read")
    assert (caught.value.status_code, caught.value.limit) == (409, 3)


def test_a_refusal_for_too_many_holders_records_nothing(
    capped: MultiLock, doc: Doc, collection: Collection[Doc]
) -> None:
    for _ in range(3):
        capped.acquire(doc, tag="read")
    before = stored_lock(collection)
    with pytest.raises(TooManyHolders):
        capped.acquire(doc, tag="write")  # would otherwise register as pending
    assert stored_lock(collection) == before


def test_a_place_frees_up_when_a_holder_releases(capped: MultiLock, doc: Doc) -> None:
    readers = [capped.acquire(doc, tag="read") for _ in range(3)]
    capped.release(doc, readers[0])
    capped.acquire(doc, tag="read")


def test_a_pending_lock_already_counted_is_continued_when_the_document_is_full(
    capped: MultiLock, doc: Doc
) -> None:
    capped.acquire(doc, tag="read")
    capped.acquire(doc, tag="read")
    pending = pending_of(capped, doc, "write")
    with pytest.raises(AssertiveLock):
        capped.acquire(doc, lock=pending)


def test_hold_waits_for_a_place_when_the_document_is_full(capped: MultiLock, doc: Doc) -> None:
    readers = [capped.acquire(doc, tag="read") for _ in range(3)]
    releaser = threading.Timer(0.3, capped.release, args=(doc, readers[0]))
    releaser.start()
    try:
        with capped.hold(doc, tag="read", wait=10.0) as held:
            assert not held.lock.pending
    finally:
        releaser.join()
