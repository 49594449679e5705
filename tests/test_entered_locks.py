"""A lock entered as a context manager by mistake: released first, so nothing stays locked.

``with locks.acquire(...)`` (``async with await locks.acquire(...)``) enters the lock just
granted, which the caller then never receives. Over every manager and both flavours, with
``with`` and ``async with``: the TypeError says what to write instead, and the lock is
released before it (in a plain ``with`` inside an event loop, an async manager's release
is started as a task of that loop).
"""

from __future__ import annotations

import copy as copy_module
import gc
import inspect
import pickle
import warnings
from typing import Any

import pytest
from pymongo.collection import Collection

from docmultilock import Lock, LockNotFound, LockSchema, MultiLock
from tests.flavours import MakeLock, Portal
from tests.helpers import wait_until
from tests.subjects import Subject

Doc = dict[str, Any]

STATEMENTS = ["with", "async with"]


def tag_of(subject: Subject) -> dict[str, Any]:
    return {} if subject.tag is None else {"tag": subject.tag}


def unwrapped(manager: Any) -> Any:
    """The manager itself: an async one, out of the view that runs it on the portal."""
    return getattr(manager, "wrapped", manager)


async def enter(lock: Any, statement: str) -> None:
    if inspect.iscoroutine(lock):
        lock = await lock
    if statement == "with":
        with lock:
            pytest.fail("a lock was entered")
    else:
        async with lock:
            pytest.fail("a lock was entered")


def is_free(subject: Subject) -> bool:
    return subject.holders() == []


@pytest.mark.parametrize("statement", STATEMENTS)
def test_an_acquired_lock_entered_is_released_before_the_type_error(
    subject: Subject, portal: Portal, flavour: str, statement: str
) -> None:
    locks = unwrapped(subject.locks)
    entered = enter(locks.acquire(subject.key, **tag_of(subject)), statement)
    started_only = flavour == "async" and statement == "with"  # no await in a plain with
    told = "is being released" if started_only else r"was released \(nothing stays locked\)"
    with pytest.raises(TypeError, match=f"not a context manager, so the lock it names {told}"):
        portal.call(entered)
    if started_only:
        wait_until(lambda: is_free(subject), timeout=5.0)
    assert is_free(subject)
    assert not subject.is_refused()


@pytest.mark.parametrize("statement", STATEMENTS)
def test_a_converted_lock_entered_is_released_before_the_type_error(
    make_lock: MakeLock,
    collection: Collection[Doc],
    doc: Doc,
    portal: Portal,
    flavour: str,
    statement: str,
) -> None:
    view = make_lock(MultiLock, collection)
    read = view.acquire(doc, tag="read")
    entered = enter(unwrapped(view).convert(doc, read, tag="write"), statement)
    with pytest.raises(TypeError, match="so the lock it names"):
        portal.call(entered)
    wait_until(lambda: (collection.find_one(doc) or {})["lock"]["holders"] == [], timeout=5.0)


def test_an_unawaited_acquire_entered_takes_no_lock(async_subject: Subject, portal: Portal) -> None:
    locks = unwrapped(async_subject.locks)

    async def entered() -> list[warnings.WarningMessage]:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            with pytest.raises(TypeError, match="asynchronous context manager"):
                async with locks.acquire(async_subject.key, **tag_of(async_subject)):
                    pytest.fail("a lock was entered")
            gc.collect()
        return seen

    seen = portal.call(entered())
    assert any("never awaited" in str(w.message) for w in seen)
    assert is_free(async_subject)


def test_a_lock_entered_twice_is_released_once(subject: Subject, portal: Portal) -> None:
    lock = subject.locks.acquire(subject.key, **tag_of(subject))
    for told in ("so the lock it names", r"not a context manager: write"):
        with pytest.raises(TypeError, match=told):
            portal.call(enter(lock, "async with"))
    with pytest.raises(LockNotFound):
        subject.locks.release(subject.key, lock)


def test_how_to_release_stays_out_of_the_locks_value(subject: Subject) -> None:
    lock = subject.locks.acquire(subject.key, **tag_of(subject))
    copy = LockSchema().load(LockSchema().dump(lock))
    assert copy == lock
    assert hash(copy) == hash(lock)
    assert repr(copy) == repr(lock)
    assert pickle.loads(pickle.dumps(lock)) == lock
    assert isinstance(copy, Lock)
    for value in (copy, pickle.loads(pickle.dumps(lock)), copy_module.copy(lock)):
        with pytest.raises(TypeError, match=r"not a context manager: write"), value:  # type: ignore[union-attr]
            pytest.fail("a lock was entered")
    assert not is_free(subject)  # a value sent back by a client, or copied, releases nothing
    subject.locks.release(subject.key, lock)


def test_a_lock_entered_after_its_loss_says_its_release_failed(
    subject: Subject, portal: Portal
) -> None:
    lock = subject.locks.acquire(subject.key, **tag_of(subject))
    subject.steal()
    told = r"releasing the lock it names failed \((LockWasReacquired|LockNotFound):"
    with pytest.raises(TypeError, match=told):
        portal.call(enter(lock, "async with"))


def test_a_handed_out_lock_is_freed_without_the_garbage_collector(subject: Subject) -> None:
    # Its release must not hold the lock itself: a lock in a reference cycle waits for the
    # collector, on every acquisition. Saved by the collector, a cycle's Lock shows here.
    lock = subject.locks.acquire(subject.key, **tag_of(subject))
    subject.locks.release(subject.key, lock)
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        del lock
        gc.collect()
        assert [found for found in gc.garbage if isinstance(found, Lock)] == []
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
