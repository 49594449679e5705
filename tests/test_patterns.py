"""What docs/howto/patterns.md says: locks are not re-entrant, and a reader asking for write
waits on its own read lock."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from pymongo.collection import Collection

from docmultilock import (
    AssertiveLock,
    CooperativeLock,
    LockAlreadyTaken,
    LockTimeout,
    MultiLock,
    NamedLocks,
    WriteLock,
)
from tests.helpers import wait_until

Doc = dict[str, Any]
ORDER = {"_id": 1}


@pytest.fixture
def order(collection: Collection[Doc]) -> Collection[Doc]:
    collection.insert_one(dict(ORDER))
    return collection


def tags_held(locks: MultiLock) -> list[tuple[str, bool]]:
    return [(holder.tag, holder.pending) for holder in locks.inspect(ORDER).holders]


def test_a_nested_hold_on_the_same_document_is_refused_as_any_other_holder(
    order: Collection[Doc],
) -> None:
    locks = WriteLock(order)

    with locks.hold(ORDER) as outer:
        with pytest.raises(LockAlreadyTaken), locks.hold(ORDER):
            pass
        with pytest.raises(LockTimeout), locks.hold(ORDER, wait=0.3):
            pass
        assert not outer.lost.is_set()
        assert [holder.id for holder in locks.inspect(ORDER).holders] == [outer.lock.id]


def test_a_nested_named_hold_is_refused_too(collection: Collection[Doc]) -> None:
    jobs = NamedLocks(collection.database, collection.name)

    with jobs.hold("nightly"), pytest.raises(LockAlreadyTaken), jobs.hold("nightly"):
        pass


def test_a_reader_asking_for_write_is_pending_behind_its_own_read_lock(
    order: Collection[Doc],
) -> None:
    locks = MultiLock(order)

    with locks.hold(ORDER, tag="read"):
        with pytest.raises(AssertiveLock) as caught, locks.hold(ORDER, tag="write"):
            pass
        assert caught.value.blocking_tags == ("read",)
        assert tags_held(locks) == [("read", False)]  # the pending writer was withdrawn


def test_while_a_reader_waits_for_write_on_itself_new_readers_are_refused(
    order: Collection[Doc],
) -> None:
    locks = MultiLock(order)
    outcome: list[str] = []

    def upgrade() -> None:  # no thread owns a lock: this is the reader's code all the same
        try:
            with locks.hold(ORDER, tag="write", wait=1.0):
                outcome.append("granted")
        except LockTimeout:
            outcome.append("timed out")

    with locks.hold(ORDER, tag="read"):
        waiting = threading.Thread(target=upgrade)
        waiting.start()
        wait_until(lambda: ("write", True) in tags_held(locks))
        with pytest.raises(CooperativeLock):
            locks.acquire(ORDER, tag="read")
        waiting.join()
        assert tags_held(locks) == [("read", False)]

    assert outcome == ["timed out"]
