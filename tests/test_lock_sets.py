"""Lock sets (hold_all, acquire_all, release_all): all or nothing, in one canonical order.

Over every lock manager and both flavours (the ``subject`` fixture of ``test_hold``).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any, cast

import pytest
from pymongo.collection import Collection

from docmultilock import (
    AssertiveLock,
    InvalidArgument,
    Lock,
    LockConflict,
    LockError,
    LockEvent,
    LockListener,
    LockNotFound,
    LockTimeout,
    MultiLock,
)
from tests.flavours import MakeLock
from tests.helpers import CommandLog
from tests.subjects import Build, Subject

Doc = dict[str, Any]


def keys(subject: Subject, *numbers: int) -> list[Any]:
    """New keys numbered ``numbers`` (10 and up: the subject made its own key 1)."""
    return [subject.new_key(10 + n) for n in numbers]


def is_free(subject: Subject, key: Any) -> bool:
    """True when another manager can take ``key`` now (and gives it back at once)."""
    try:
        with subject.hold(subject.manager(), key=key):
            return True
    except LockConflict:
        return False


def live_holders(subject: Subject, key: Any) -> list[Doc]:
    stored = subject.stored(key)
    return [] if stored is None else list(stored.get("holders", []))


def hold_all(subject: Subject, key_list: list[Any], **kwargs: Any) -> Any:
    return subject.locks.hold_all(key_list, tag=subject.tag, **kwargs)


def inside(
    subject: Subject, key_list: list[Any], body: Callable[[Any], object] = print, **kwargs: Any
) -> None:
    """Hold the set of ``key_list`` and run ``body(held)`` inside the block."""
    with hold_all(subject, key_list, **kwargs) as held:
        body(held)


def acquire(subject: Subject, manager: Any, key: Any) -> Lock:
    """``key``'s lock, taken by ``manager`` (WriteLock's acquire takes no tag)."""
    if subject.tag is None:
        return cast(Lock, manager.acquire(key))
    return cast(Lock, manager.acquire(key, tag=subject.tag))


@contextlib.contextmanager
def held_for(subject: Subject, key: Any, seconds: float) -> Iterator[None]:
    """``key`` held by another manager, which releases it ``seconds`` after entering."""
    other = subject.manager()
    timer = threading.Timer(seconds, other.release, (key, acquire(subject, other, key)))
    timer.start()
    try:
        yield
    finally:
        timer.join()


def steal(subject: Subject, key: Any) -> None:
    """What an operator does to break a lock: remove the lock field."""
    subject.collection.update_one(subject.state(key), {"$unset": {"lock": ""}})


def acquired_ids(log: CommandLog) -> list[Any]:
    """The ``_id`` each findAndModify sent so far was aimed at, in the order sent."""
    return [
        c["query"]["_id"] if "findAndModify" in c else c["deletes"][0]["q"]["_id"]
        for c in log.commands
        if "findAndModify" in c or "delete" in c
    ]


def test_every_lock_of_the_set_is_held_inside_the_block(subject: Subject) -> None:
    a, b, c = keys(subject, 1, 2, 3)
    with hold_all(subject, [a, b, c]):
        assert [is_free(subject, key) for key in (a, b, c)] == [False, False, False]
    assert [is_free(subject, key) for key in (a, b, c)] == [True, True, True]


def test_the_locks_come_in_the_callers_order(subject: Subject) -> None:
    given = keys(subject, 3, 1, 2)
    with hold_all(subject, given) as held:
        ids = [lock.document_id for lock in held.locks]
    assert ids == [subject.state(key)["_id"] for key in given]


@pytest.mark.parametrize("order", [(3, 1, 2), (2, 3, 1), (1, 2, 3)])
def test_the_locks_are_taken_in_id_order_whatever_the_callers(
    build: Build, counted: tuple[Collection[Doc], CommandLog], order: tuple[int, ...]
) -> None:
    collection, log = counted
    subject = build(collection)
    given = keys(subject, *order)
    log.commands.clear()
    with hold_all(subject, given):
        taken = acquired_ids(log)
    ids = sorted(subject.state(key)["_id"] for key in given)
    assert taken == ids


def test_the_exit_releases_in_reverse_order(
    build: Build, counted: tuple[Collection[Doc], CommandLog]
) -> None:
    collection, log = counted
    subject = build(collection)
    given = keys(subject, 2, 3, 1)
    with hold_all(subject, given):
        log.commands.clear()
    ids = sorted(subject.state(key)["_id"] for key in given)
    assert acquired_ids(log) == ids[::-1]


def test_an_exception_in_the_block_releases_every_lock(subject: Subject) -> None:
    a, b = keys(subject, 1, 2)
    with pytest.raises(ZeroDivisionError), hold_all(subject, [a, b]):
        1 / 0  # noqa: B018
    assert is_free(subject, a)
    assert is_free(subject, b)


def test_a_refused_key_releases_what_was_taken_and_raises_its_own_error(
    subject: Subject,
) -> None:
    a, b, c = keys(subject, 1, 2, 3)
    with subject.hold(subject.manager(), key=c):
        with pytest.raises(LockConflict) as refused:
            inside(subject, [c, a, b], body=pytest.fail)
        assert live_holders(subject, a) == []
        assert live_holders(subject, b) == []
    assert refused.value.filter == subject.state(c)


def test_a_wait_that_runs_out_leaves_nothing_held_and_names_the_key(subject: Subject) -> None:
    a, b = keys(subject, 1, 2)
    with subject.hold(subject.manager(), key=b) as other:
        with pytest.raises(LockTimeout) as timed_out:
            inside(subject, [a, b], body=pytest.fail, wait=0.3, backoff=(0.01, 0.05))
        assert live_holders(subject, a) == []
        assert [h["id"] for h in live_holders(subject, b)] == [other.lock.id]
    assert timed_out.value.filter == subject.state(b)


def test_a_waiting_set_is_granted_once_the_other_holder_leaves(subject: Subject) -> None:
    a, b = keys(subject, 1, 2)
    with held_for(subject, b, 0.3), hold_all(subject, [a, b], wait=30.0) as held:
        assert len(held.locks) == 2


def test_the_locks_taken_first_are_extended_while_the_set_waits(subject: Subject) -> None:
    a, b = keys(subject, 1, 2)
    with held_for(subject, b, 2.5), hold_all(subject, [a, b], wait=30.0, lock_timeout=1.0) as held:
        first = held.locks[0]
        # Taken about 2.5 s ago with a 1 s lifetime: only extensions kept it alive.
        assert not held.lost.is_set()
        assert first.expires_at - first.acquired_at > timedelta(seconds=2.0)


def test_guard_and_require_act_on_the_keys_own_lock(subject: Subject) -> None:
    a, b = keys(subject, 1, 2)
    with hold_all(subject, [a, b]) as held:
        result = subject.collection.update_one(held.guard(b), {"$set": {"touched": True}})
        assert held.require(result) is result
        touched = subject.collection.find({"touched": True}, {"_id": 1}).to_list()
    assert touched == [{"_id": subject.state(b)["_id"]}]


def test_guard_refuses_a_key_outside_the_set(subject: Subject) -> None:
    a, b, c = keys(subject, 1, 2, 3)
    with hold_all(subject, [a, b]) as held, pytest.raises(InvalidArgument, match="not one of"):
        held.guard(c)


def test_require_raises_the_loss_of_the_guarded_key(subject: Subject) -> None:
    a, b = keys(subject, 1, 2)

    def body(held: Any) -> None:
        steal(subject, b)
        with pytest.raises(LockNotFound) as lost:
            held.require(subject.collection.update_one(held.guard(b), {"$set": {"x": 1}}))
        assert lost.value.filter == subject.state(b)
        assert held.lost.is_set()

    with pytest.raises(LockNotFound):  # and the exit reports the loss
        inside(subject, [a, b], body)


def test_on_lost_is_called_once_per_lost_lock(subject: Subject) -> None:
    a, b, c = keys(subject, 1, 2, 3)
    lost: list[Lock] = []

    def body(held: Any) -> None:
        steal(subject, b)
        assert held.lost.wait(10)
        time.sleep(0.3)  # more renewals: the other locks stay held

    with pytest.raises(LockError):
        inside(
            subject,
            [a, b, c],
            body,
            keepalive=True,
            lock_timeout=1.5,
            extend_every=0.1,
            on_lost=lambda lock, error: lost.append(lock),
        )
    assert [lock.document_id for lock in lost] == [subject.state(b)["_id"]]


#: Kept-alive sets below: locks of 1.5 s, renewed every half second.
LIFETIME = 1.5


def break_one(subject: Subject, held: Any, key_list: list[Any], key: Any) -> None:
    """What an operator does to one lock of the set: break it by its id."""
    subject.locks.break_lock(key, lock_id=held.locks[key_list.index(key)].id)


def held_on_server(subject: Subject, held: Any, key: Any) -> bool:
    """True while the set's lock on ``key`` is granted and unexpired (by the server's clock)."""
    return subject.collection.count_documents(held.guard(key)) == 1


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    """True once ``condition`` holds; False after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def test_a_set_keeps_its_other_locks_alive_after_one_is_lost(subject: Subject) -> None:
    key_list = keys(subject, 1, 2, 3)
    a, b, c = key_list
    lost: list[Lock] = []

    def body(held: Any) -> None:
        break_one(subject, held, key_list, b)
        assert held.lost.wait(10)
        time.sleep(3 * LIFETIME)  # past the lifetime of the last renewal before the loss
        assert held_on_server(subject, held, a)
        assert held_on_server(subject, held, c)
        assert [isinstance(err, LockNotFound) for err in held.errors] == [True]
        assert [lock.document_id for lock in lost] == [subject.state(b)["_id"]]

    with pytest.raises(LockNotFound):
        inside(
            subject,
            key_list,
            body,
            keepalive=True,
            lock_timeout=LIFETIME,
            on_lost=lambda lock, error: lost.append(lock),
        )


class Losses(LockListener):
    """The documents of the locks a listener was told are lost."""

    def __init__(self) -> None:
        self.of: set[Any] = set()

    def on_lost(self, event: LockEvent) -> None:
        assert event.lock is not None
        self.of.add(event.lock.document_id)


def test_each_lost_lock_of_a_set_is_told_when_it_is_lost(subject: Subject) -> None:
    key_list = keys(subject, 1, 2, 3)
    a, b, c = key_list
    lost: list[Any] = []
    told = Losses()

    def body(held: Any) -> None:
        break_one(subject, held, key_list, c)
        assert wait_for(lambda: len(lost) == 1)
        time.sleep(2 * LIFETIME)  # the others are renewed meanwhile
        break_one(subject, held, key_list, b)
        assert wait_for(lambda: len(lost) == 2), "the second loss was not told in the block"
        assert lost == [subject.state(c)["_id"], subject.state(b)["_id"]]
        assert told.of == set(lost)
        assert [err.filter for err in held.errors] == [subject.state(b), subject.state(c)]
        assert held_on_server(subject, held, a)

    hold = subject.manager(listener=told).hold_all(
        key_list,
        tag=subject.tag,
        keepalive=True,
        lock_timeout=LIFETIME,
        on_lost=lambda lock, error: lost.append(lock.document_id),
    )
    with pytest.raises(LockNotFound), hold as held:
        body(held)
    assert len(lost) == 2  # the exit tells nobody again


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param([], id="empty"),
        pytest.param("key", id="a string"),
        pytest.param({"_id": 1}, id="a single filter"),
        pytest.param(None, id="None"),
    ],
)
def test_a_malformed_key_sequence_is_refused(subject: Subject, bad: Any) -> None:
    with pytest.raises(InvalidArgument):
        hold_all(subject, bad)
    with pytest.raises(InvalidArgument):
        subject.locks.acquire_all(bad, tag=subject.tag)


def test_a_key_given_twice_is_refused_before_anything_is_written(subject: Subject) -> None:
    a, b = keys(subject, 1, 2)
    with pytest.raises(InvalidArgument, match="same document"):
        subject.locks.acquire_all([a, b, a], tag=subject.tag)
    assert subject.stored(a) is None
    assert subject.stored(b) is None


def test_numbers_of_other_types_name_the_same_document(
    make_lock: MakeLock, collection: Collection[Doc]
) -> None:
    locks = make_lock(MultiLock, collection)
    collection.insert_one({"_id": 1})
    with pytest.raises(InvalidArgument, match="same document"):
        locks.acquire_all([{"_id": 1}, {"_id": 1.0}], tag="write")


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param({"name": "x"}, id="no _id"),
        pytest.param({"_id": {"$in": [1, 2]}}, id="an operator"),
    ],
)
def test_a_filter_not_selecting_by_id_is_refused(
    make_lock: MakeLock, collection: Collection[Doc], bad: Doc
) -> None:
    locks = make_lock(MultiLock, collection)
    collection.insert_one({"_id": 1, "name": "x"})
    with pytest.raises(InvalidArgument, match="_id equality"):
        locks.acquire_all([{"_id": 2}, bad], tag="write")
    assert collection.find_one({"_id": 1}) == {"_id": 1, "name": "x"}


def test_acquire_all_returns_the_locks_in_the_callers_order(subject: Subject) -> None:
    given = keys(subject, 2, 1)
    locks = subject.locks.acquire_all(given, tag=subject.tag)
    assert [lock.document_id for lock in locks] == [subject.state(k)["_id"] for k in given]
    assert not any(is_free(subject, key) for key in given)
    subject.locks.release_all(given, locks)
    assert all(is_free(subject, key) for key in given)


def test_acquire_all_refused_leaves_nothing_held(subject: Subject) -> None:
    a, b = keys(subject, 1, 2)
    with subject.hold(subject.manager(), key=b), pytest.raises(LockConflict) as refused:
        subject.locks.acquire_all([b, a], tag=subject.tag)
    assert refused.value.filter == subject.state(b)
    assert live_holders(subject, a) == []


def test_release_all_releases_the_others_then_raises_the_first_loss(subject: Subject) -> None:
    a, b, c = keys(subject, 1, 2, 3)
    locks = subject.locks.acquire_all([a, b, c], tag=subject.tag)
    steal(subject, b)
    with pytest.raises(LockNotFound) as lost:
        subject.locks.release_all([a, b, c], locks)
    assert lost.value.filter == subject.state(b)
    assert is_free(subject, a)
    assert is_free(subject, c)


def test_release_all_refuses_locks_that_do_not_pair_with_the_keys(subject: Subject) -> None:
    a, b = keys(subject, 1, 2)
    locks = subject.locks.acquire_all([a, b], tag=subject.tag)
    with pytest.raises(InvalidArgument, match="one Lock per key"):
        subject.locks.release_all([a, b], locks[:1])
    subject.locks.release_all([a, b], locks)


def test_an_assertive_refusal_withdraws_its_pending_entry(
    make_lock: MakeLock, collection: Collection[Doc]
) -> None:
    locks = make_lock(MultiLock, collection)
    collection.insert_many([{"_id": 1}, {"_id": 2}])
    reader = locks.acquire({"_id": 2}, tag="read")
    with pytest.raises(AssertiveLock) as pending:
        locks.acquire_all([{"_id": 1}, {"_id": 2}], tag="write")
    assert pending.value.filter == {"_id": 2}
    holders = collection.find_one({"_id": 2})["lock"]["holders"]  # type: ignore[index]
    assert [h["id"] for h in holders] == [reader.id]
    assert collection.find_one({"_id": 1})["lock"]["holders"] == []  # type: ignore[index]


def test_sets_taken_in_opposite_orders_do_not_deadlock(subject: Subject) -> None:
    a, b = keys(subject, 1, 2)
    errors: list[BaseException] = []
    grants = [0, 0]

    def worker(index: int, order: list[Any]) -> None:
        manager = subject.manager()
        deadline = time.monotonic() + 2.0
        try:
            while time.monotonic() < deadline:
                with manager.hold_all(order, tag=subject.tag, wait=20.0, backoff=(0.01, 0.05)):
                    grants[index] += 1
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=worker, args=(0, [a, b])),
        threading.Thread(target=worker, args=(1, [b, a])),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert min(grants) > 0
