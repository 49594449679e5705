"""A refusal's clean-up: retried within the locks' lifetime, and what it leaves behind named.

A lock set refused part way gives back the locks it took, and a wait that gives up
withdraws its pending entry. When those releases fail (a fail point on every write from
the refusal on), they are retried until the locks' lifetime runs out; what is still held
then is raised as ``LocksLeftBehind``, whose locks the caller can release. Over every
manager and both flavours; the pending entries over MultiLock, whose writers wait.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.collection import Collection

from docmultilock import (
    AssertiveLock,
    DbError,
    DbTimeout,
    LockConflict,
    LockEvent,
    LockListener,
    LocksLeftBehind,
    LockTimeout,
    MultiLock,
)
from tests.flavours import MakeLock
from tests.subjects import Subject

Doc = dict[str, Any]

#: The lifetime of the locks a refused call takes: how long its clean-up is retried.
LIFETIME = 1.5

#: Every write the releases may use, failed with BadValue (not a transient error).
WRITES = ("findAndModify", "update", "delete")


#: ``hold(wait=...)`` of the waits that give up after their first attempt: the listener
#: takes longer than that before it lets the attempt end.
SHORT_WAIT = 0.005


class FailAfterRefusal(LockListener):
    """Makes every write fail from the first refusal on, ``times`` times (not retried).

    The refusal's attempt ends :data:`SHORT_WAIT` later or more, so such a wait gives up.
    """

    def __init__(self, arm: Callable[..., None], times: int = 10_000) -> None:
        self.arm = arm
        self.times = times
        self.armed = False

    def on_refused(self, event: LockEvent) -> None:
        if not self.armed:
            self.armed = True
            self.arm(times=self.times, commands=WRITES, errorCode=2)
            time.sleep(2 * SHORT_WAIT)

    on_pending = on_refused


def disarm(client: MongoClient[Doc]) -> None:
    client.admin.command("configureFailPoint", "failCommand", mode="off")


def live_ids(subject: Subject, key: Any) -> list[str]:
    stored = subject.stored(key)
    return [] if stored is None else [h["id"] for h in stored.get("holders", [])]


def ids_on(collection: Collection[Doc], document_id: int) -> list[str]:
    """The ids of the entries stored on document ``document_id``, expired ones included."""
    stored = (collection.find_one({"_id": document_id}) or {}).get("lock") or {}
    return [h["id"] for h in stored.get("holders", [])]


def take(subject: Subject, manager: Any, key: Any) -> Any:
    return manager.acquire(key) if subject.tag is None else manager.acquire(key, tag=subject.tag)


#: The ways to take a set: once, or for a block (trying once, or waiting a little).
WAYS = ["acquire_all", "hold_all", "hold_all-waiting"]


def refused_set(subject: Subject, locks: Any, way: str, keys: list[Any]) -> None:
    """Take ``keys`` as a set the ``way`` given, expecting the call to raise."""
    if way == "acquire_all":
        locks.acquire_all(keys, tag=subject.tag, lock_timeout=LIFETIME)
        return
    wait = SHORT_WAIT if way == "hold_all-waiting" else None
    with locks.hold_all(keys, tag=subject.tag, lock_timeout=LIFETIME, wait=wait):
        pytest.fail("the set was taken")


@pytest.mark.parametrize("way", WAYS)
def test_a_refused_set_whose_clean_up_fails_names_the_locks_left_behind(
    subject: Subject, fail_point: Callable[..., None], client: MongoClient[Doc], way: str
) -> None:
    a, b = subject.new_key(11), subject.new_key(12)
    other = subject.manager()
    holding_b = take(subject, other, b)
    locks = subject.manager(listener=FailAfterRefusal(fail_point))
    with pytest.raises(LocksLeftBehind) as left:
        refused_set(subject, locks, way, [b, a])
    disarm(client)
    assert isinstance(left.value, DbError)
    assert isinstance(left.value.__cause__, LockConflict)
    assert left.value.__cause__.filter == subject.state(b)
    [(key, lock)] = left.value.left_behind
    assert key == a
    assert live_ids(subject, a) == [lock.id]
    locks.release(key, lock)
    assert live_ids(subject, a) == []
    other.release(b, holding_b)


@pytest.mark.parametrize("way", WAYS)
def test_a_refused_sets_clean_up_is_retried_until_it_releases(
    subject: Subject, fail_point: Callable[..., None], way: str
) -> None:
    a, b = subject.new_key(11), subject.new_key(12)
    other = subject.manager()
    holding_b = take(subject, other, b)
    locks = subject.manager(listener=FailAfterRefusal(fail_point, times=3))
    with pytest.raises(LockConflict) as refused:
        refused_set(subject, locks, way, [b, a])
    assert refused.value.filter == subject.state(b)
    assert live_ids(subject, a) == []
    other.release(b, holding_b)


def test_a_refused_sets_pending_entry_and_granted_locks_are_both_named(
    make_lock: MakeLock,
    collection: Collection[Doc],
    fail_point: Callable[..., None],
    client: MongoClient[Doc],
) -> None:
    collection.insert_many([{"_id": 1}, {"_id": 2}])
    reader = make_lock(MultiLock, collection).acquire({"_id": 2}, tag="read")
    locks = make_lock(MultiLock, collection, listener=FailAfterRefusal(fail_point))
    with pytest.raises(LocksLeftBehind) as left:
        locks.acquire_all([{"_id": 1}, {"_id": 2}], tag="write", lock_timeout=LIFETIME)
    disarm(client)
    assert isinstance(left.value.__cause__, AssertiveLock)
    (pending_key, pending), (granted_key, granted) = left.value.left_behind
    assert (pending_key, pending.pending) == ({"_id": 2}, True)
    assert (granted_key, granted.pending) == ({"_id": 1}, False)
    for key, lock in left.value.left_behind:
        locks.release(key, lock)
    assert ids_on(collection, 2) == [reader.id]
    assert ids_on(collection, 1) == []


@pytest.mark.parametrize(
    ("wait", "refusal"), [(SHORT_WAIT, LockTimeout), (None, AssertiveLock)], ids=["wait", "once"]
)
def test_a_wait_that_gives_up_names_the_pending_entry_it_could_not_withdraw(
    make_lock: MakeLock,
    collection: Collection[Doc],
    fail_point: Callable[..., None],
    client: MongoClient[Doc],
    wait: float | None,
    refusal: type[LockConflict],
) -> None:
    collection.insert_one({"_id": 1})
    reader = make_lock(MultiLock, collection).acquire({"_id": 1}, tag="read")
    locks = make_lock(MultiLock, collection, listener=FailAfterRefusal(fail_point))
    with (
        pytest.raises(LocksLeftBehind) as left,
        locks.hold({"_id": 1}, tag="write", wait=wait, lock_timeout=LIFETIME),
    ):
        pytest.fail("the lock was taken")
    disarm(client)
    assert type(left.value.__cause__) is refusal
    [(key, pending)] = left.value.left_behind
    assert key == {"_id": 1}
    assert pending.pending
    locks.release(key, pending)
    assert ids_on(collection, 1) == [reader.id]


def test_a_wait_whose_withdrawal_fails_at_first_withdraws_it_and_times_out(
    make_lock: MakeLock, collection: Collection[Doc], fail_point: Callable[..., None]
) -> None:
    collection.insert_one({"_id": 1})
    reader = make_lock(MultiLock, collection).acquire({"_id": 1}, tag="read")
    locks = make_lock(MultiLock, collection, listener=FailAfterRefusal(fail_point, times=3))
    with (
        pytest.raises(LockTimeout),
        locks.hold({"_id": 1}, tag="write", wait=SHORT_WAIT, lock_timeout=LIFETIME),
    ):
        pytest.fail("the lock was taken")
    assert ids_on(collection, 1) == [reader.id]


def test_a_release_timed_out_behind_a_stalled_reply_is_retried_then_named(
    make_lock: MakeLock,
    collection: Collection[Doc],
    fail_point: Callable[..., None],
    client: MongoClient[Doc],
) -> None:
    collection.insert_many([{"_id": 1}, {"_id": 2}])
    other = make_lock(MultiLock, collection)
    holding = other.acquire({"_id": 2}, tag="write")
    stall = functools.partial(fail_point, blockConnection=True, blockTimeMS=600)
    locks = make_lock(MultiLock, collection, listener=FailAfterRefusal(stall))
    with pytest.raises(LocksLeftBehind) as left:
        locks.acquire_all([{"_id": 1}, {"_id": 2}], tag="write", lock_timeout=LIFETIME, timeout=0.2)
    disarm(client)
    assert isinstance(left.value.failure, DbTimeout)
    [(key, lock)] = left.value.left_behind
    assert key == {"_id": 1}
    locks.release(key, lock)
    other.release({"_id": 2}, holding)
    assert ids_on(collection, 1) == []
