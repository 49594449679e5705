"""inspect(), locked() and break_lock() on every manager, in both flavours."""

from __future__ import annotations

import time
from typing import Any

import pytest
from bson.int64 import Int64
from pymongo.collection import Collection

from docmultilock import (
    AssertiveLock,
    HolderSnapshot,
    IncompatibleLockField,
    InvalidArgument,
    LockEvent,
    LockListener,
    LockNotFound,
    LockSnapshot,
    MultiLock,
    NamedLocks,
    ResourceNotFound,
    WriteLock,
)
from tests.flavours import MakeLock
from tests.helpers import USER_FIELDS, server_now, stored_lock, user_fields

Doc = dict[str, Any]

RW = {"lock_timeouts": {"read": 10.0, "write": 10.0}}


@pytest.fixture
def rw(make_lock: MakeLock, collection: Collection[Doc]) -> MultiLock:
    made: MultiLock = make_lock(MultiLock, collection, **RW)
    return made


@pytest.fixture
def named(make_lock: MakeLock, collection: Collection[Doc]) -> NamedLocks:
    made: NamedLocks = make_lock(
        NamedLocks, collection.database, collection.name, lock_timeout=10.0
    )
    return made


# -- inspect -----------------------------------------------------------------------------------


def test_inspect_shows_each_entry_by_the_servers_clock(
    rw: MultiLock, doc: Doc, client: Any
) -> None:
    first = rw.acquire(doc, tag="read")
    second = rw.acquire(doc, tag="read", lock_timeout=30.0)

    snapshot = rw.inspect(doc)

    assert isinstance(snapshot, LockSnapshot)
    assert snapshot.document_id == 1
    assert snapshot.fence == second.fence
    assert abs((snapshot.server_time - server_now(client)).total_seconds()) < 5
    assert [(h.id, h.tag, h.fence, h.pending) for h in snapshot.holders] == [
        (first.id, "read", first.fence, False),
        (second.id, "read", second.fence, False),
    ]
    assert snapshot.holders[0].expires_at == first.expires_at
    assert 0 < snapshot.holders[0].seconds_left <= 10
    assert 10 < snapshot.holders[1].seconds_left <= 30
    assert not any(h.expired for h in snapshot.holders)


def test_inspect_marks_an_expired_entry_and_writes_nothing(
    rw: MultiLock, doc: Doc, collection: Collection[Doc]
) -> None:
    lock = rw.acquire(doc, tag="read", lock_timeout=0.05)
    time.sleep(0.2)
    before = collection.find_one(doc)

    snapshot = rw.inspect(doc)

    (holder,) = snapshot.holders
    assert holder.id == lock.id
    assert holder.expired
    assert holder.seconds_left <= 0
    assert snapshot.live == ()
    assert not snapshot.locked()
    assert collection.find_one(doc) == before


def test_inspect_shows_a_pending_entry(rw: MultiLock, doc: Doc) -> None:
    rw.acquire(doc, tag="read")
    with pytest.raises(AssertiveLock) as waiting:
        rw.acquire(doc, tag="write")
    pending = waiting.value.lock

    holders = {h.id: h for h in rw.inspect(doc).holders}

    assert holders[pending.id].pending
    assert holders[pending.id].fence == 0
    assert not holders[pending.id].holds


def test_locked_answers_for_any_tag_and_for_one(rw: MultiLock, doc: Doc) -> None:
    assert not rw.locked(doc)
    rw.acquire(doc, tag="read")

    assert rw.locked(doc)
    assert rw.locked(doc, "read")
    assert not rw.locked(doc, "write")


def test_inspect_of_a_missing_document_is_resource_not_found(rw: MultiLock) -> None:
    with pytest.raises(ResourceNotFound):
        rw.inspect({"_id": "nope"})


#: Fields docmultilock does not own: another type, and our layout with a fence it cannot grow.
FOREIGN = [
    "someone else's",
    [1, 2],
    {"v": 1, "fence": 2.5, "holders": []},
    {"v": 1, "fence": Int64(2**62), "holders": []},
]
FOREIGN_IDS = ["string", "array", "double-fence", "fence-limit"]


@pytest.mark.parametrize("foreign", FOREIGN, ids=FOREIGN_IDS)
def test_inspect_of_a_field_docmultilock_does_not_own_is_refused(
    rw: MultiLock, collection: Collection[Doc], foreign: Any
) -> None:
    collection.insert_one({"_id": 1, "lock": foreign})
    with pytest.raises(IncompatibleLockField):
        rw.inspect({"_id": 1})


def test_inspect_of_a_name_nobody_holds_is_empty(named: NamedLocks) -> None:
    snapshot = named.inspect("nightly")

    assert snapshot.document_id == "nightly"
    assert not snapshot.exists
    assert snapshot.holders == ()
    assert not named.locked("nightly")


def test_inspect_of_a_held_name(named: NamedLocks) -> None:
    lock = named.acquire("nightly")

    snapshot = named.inspect("nightly")

    assert snapshot.exists
    assert [h.id for h in snapshot.holders] == [lock.id]
    assert named.locked("nightly", "write")


def test_snapshots_are_immutable_and_json_safe(rw: MultiLock, doc: Doc) -> None:
    rw.acquire(doc, tag="read")
    snapshot = rw.inspect(doc)

    with pytest.raises(AttributeError):
        snapshot.fence = 0  # type: ignore[misc]
    data = snapshot.as_json()
    assert data["document_id"] == {"$numberInt": "1"}
    assert data["holders"][0]["tag"] == "read"


# -- break_lock --------------------------------------------------------------------------------


def test_break_by_lock_id_removes_that_entry_only(
    rw: MultiLock, doc: Doc, collection: Collection[Doc]
) -> None:
    broken = rw.acquire(doc, tag="read")
    kept = rw.acquire(doc, tag="read")

    removed = rw.break_lock(doc, lock_id=broken.id)

    assert [h.id for h in removed] == [broken.id]
    assert isinstance(removed[0], HolderSnapshot)
    assert [h.id for h in rw.inspect(doc).holders] == [kept.id]
    assert user_fields(collection) == {"_id": 1, **USER_FIELDS}


def test_the_removed_holder_sees_a_normal_loss(rw: MultiLock, doc: Doc) -> None:
    lock = rw.acquire(doc, tag="write")
    rw.break_lock(doc, lock_id=lock.id)

    with pytest.raises(LockNotFound):
        rw.extend(doc, lock)
    with pytest.raises(LockNotFound):
        rw.release(doc, lock)


def test_a_guarded_write_of_a_removed_holder_matches_nothing(
    rw: MultiLock, doc: Doc, collection: Collection[Doc]
) -> None:
    lock = rw.acquire(doc, tag="write")
    rw.break_lock(doc, everyone=True)

    assert collection.update_one(rw.guard(doc, lock), {"$set": {"x": 1}}).matched_count == 0


def test_break_all_expired_keeps_live_entries(rw: MultiLock, doc: Doc) -> None:
    old = rw.acquire(doc, tag="read", lock_timeout=0.05)
    time.sleep(0.2)
    live = rw.acquire(doc, tag="read")
    # The grant above pruned the expired entry; put one back by waiting for a short one.
    short = rw.acquire(doc, tag="read", lock_timeout=0.05)
    time.sleep(0.2)

    removed = rw.break_lock(doc, all_expired=True)

    assert [h.id for h in removed] == [short.id]
    assert removed[0].expired
    assert old.id not in [h.id for h in rw.inspect(doc).holders]
    assert [h.id for h in rw.inspect(doc).holders] == [live.id]


def test_break_everyone_removes_every_entry(rw: MultiLock, doc: Doc) -> None:
    locks = [rw.acquire(doc, tag="read") for _ in range(3)]

    removed = rw.break_lock(doc, everyone=True)

    assert sorted(h.id for h in removed) == sorted(lock.id for lock in locks)
    assert rw.inspect(doc).holders == ()
    assert rw.break_lock(doc, everyone=True) == ()


def test_break_with_nothing_to_remove_writes_nothing(
    rw: MultiLock, doc: Doc, collection: Collection[Doc]
) -> None:
    before = collection.find_one(doc)

    assert rw.break_lock(doc, everyone=True) == ()
    assert collection.find_one(doc) == before


@pytest.mark.parametrize(
    "modes",
    [{}, {"lock_id": "a" * 32, "everyone": True}, {"all_expired": True, "everyone": True}],
)
def test_break_needs_exactly_one_mode(rw: MultiLock, doc: Doc, modes: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgument):
        rw.break_lock(doc, **modes)


def test_break_on_a_missing_document_is_resource_not_found(rw: MultiLock) -> None:
    with pytest.raises(ResourceNotFound):
        rw.break_lock({"_id": "nope"}, everyone=True)


@pytest.mark.parametrize("foreign", FOREIGN, ids=FOREIGN_IDS)
def test_break_leaves_a_foreign_field_alone(
    rw: MultiLock, collection: Collection[Doc], foreign: Any
) -> None:
    collection.insert_one({"_id": 1, "lock": foreign})
    with pytest.raises(IncompatibleLockField):
        rw.break_lock({"_id": 1}, everyone=True)
    assert stored_lock(collection) == foreign


def test_the_fence_grows_across_break_lock_on_a_document(
    make_lock: MakeLock, collection: Collection[Doc], doc: Doc
) -> None:
    locks: WriteLock = make_lock(WriteLock, collection)
    fences = []
    for _ in range(4):
        lock = locks.acquire(doc)
        fences.append(lock.fence)
        locks.break_lock(doc, lock_id=lock.id)
    assert locks.inspect(doc).fence == fences[-1]
    assert locks.acquire(doc).fence > max(fences)


def test_break_lock_on_a_name_keeps_its_fence_and_the_next_grant_outranks_it(
    named: NamedLocks, collection: Collection[Doc]
) -> None:
    first = named.acquire("job")
    named.break_lock("job", everyone=True)
    assert named.inspect("job").fence == first.fence
    second = named.acquire("job")
    assert second.fence > first.fence
    named.break_lock("job", lock_id=second.id)
    assert named.inspect("job").fence == second.fence
    # The emptied document may go (the TTL index, or by hand): the fence still grows.
    collection.delete_one({"_id": "job"})
    assert named.acquire("job").fence > second.fence


def test_a_broken_name_is_lost_for_its_holder(named: NamedLocks) -> None:
    lock = named.acquire("job")
    named.break_lock("job", lock_id=lock.id)

    with pytest.raises(LockNotFound):
        named.release("job", lock)
    assert named.break_lock("gone", everyone=True) == ()


def test_hold_reports_a_broken_lock(rw: MultiLock, doc: Doc) -> None:
    holding = rw.hold(doc, tag="write", keepalive=True, lock_timeout=0.6)
    held = holding.__enter__()
    rw.break_lock(doc, lock_id=held.lock.id)
    assert held.lost.wait(10.0)
    with pytest.raises(LockNotFound):
        holding.__exit__(None, None, None)


# -- review fixes ------------------------------------------------------------------------------


def test_locked_refuses_an_undeclared_tag(rw: MultiLock, doc: Doc) -> None:
    rw.acquire(doc, tag="write")
    with pytest.raises(InvalidArgument, match="undeclared tag 'wirte'"):
        rw.locked(doc, "wirte")


@pytest.mark.parametrize(
    "bad",
    [
        {"$where": "true"},
        {"_id": 1, "$or": [{"$where": "true"}]},
        {"loc": {"$near": [0, 0]}},
        {"loc": {"$nearSphere": [0, 0]}},
    ],
)
def test_inspect_refuses_operators_an_aggregation_cannot_match(
    rw: MultiLock, doc: Doc, bad: Doc
) -> None:
    with pytest.raises(InvalidArgument, match="aggregation"):
        rw.inspect(bad)


def test_inspect_refuses_a_filter_bson_cannot_carry(rw: MultiLock, doc: Doc) -> None:
    with pytest.raises(InvalidArgument, match="cannot be sent"):
        rw.inspect({"_id": 2**70})


def _unset_dates(collection: Collection[Doc]) -> None:
    collection.update_one(
        {"_id": 1}, {"$unset": {"lock.holders.0.expires": "", "lock.holders.0.acquired": ""}}
    )


def test_inspect_marks_a_hand_edited_entry_instead_of_failing(
    rw: MultiLock, collection: Collection[Doc], doc: Doc
) -> None:
    lock = rw.acquire(doc, tag="write")
    _unset_dates(collection)

    (holder,) = rw.inspect(doc).holders

    assert (holder.id, holder.malformed, holder.expired) == (lock.id, True, True)
    assert not rw.locked(doc)


def test_break_of_a_hand_edited_entry_reports_it_without_failing(
    rw: MultiLock, collection: Collection[Doc], doc: Doc
) -> None:
    lock = rw.acquire(doc, tag="write")
    _unset_dates(collection)

    (removed,) = rw.break_lock(doc, everyone=True)

    assert (removed.id, removed.malformed) == (lock.id, True)
    assert rw.inspect(doc).holders == ()


def test_preview_break_shows_what_the_break_removes(rw: MultiLock, doc: Doc) -> None:
    live = rw.acquire(doc, tag="read")
    expired = rw.acquire(doc, tag="read", lock_timeout=0.05)
    time.sleep(0.2)

    snapshot, doomed = rw.preview_break(doc, all_expired=True)

    assert {h.id for h in snapshot.holders} == {live.id, expired.id}
    assert [h.id for h in doomed] == [expired.id]
    _, by_id = rw.preview_break(doc, lock_id=live.id)
    assert {h.id for h in by_id} == {live.id, expired.id}
    assert [h.id for h in rw.break_lock(doc, all_expired=True)] == [expired.id]


def test_break_lock_tells_the_listener_what_it_removed(
    make_lock: MakeLock, collection: Collection[Doc], doc: Doc
) -> None:
    class Broken(LockListener):
        def __init__(self) -> None:
            self.events: list[LockEvent] = []

        def on_broken(self, event: LockEvent) -> None:
            self.events.append(event)

    listener = Broken()
    locks: MultiLock = make_lock(MultiLock, collection, listener=listener, **RW)
    lock = locks.acquire(doc, tag="write")
    locks.break_lock(doc, everyone=True)

    (event,) = listener.events
    assert (event.kind, event.outcome, event.filter) == ("broken", "broken", doc)
    assert [h.id for h in event.removed] == [lock.id]
