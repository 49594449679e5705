"""The mistakes of a first hour explain themselves, and the errors name what a user typed.

A second release, a ``hold()`` used without entering it, a lock entered as if it were a
hold, a typo in a collection's name: each error says what happened and what to write.
"""

from __future__ import annotations

import pytest
from pymongo.collection import Collection

from docmultilock import (
    AsyncWriteLock,
    LockNotFound,
    ResourceNotFound,
    WriteLock,
)
from tests.flavours import MakeLock, Portal, Twins
from tests.helpers import Doc
from tests.subjects import Subject


def test_a_second_release_says_the_lock_may_already_have_been_released(subject: Subject) -> None:
    locks, key = subject.locks, subject.key
    lock = subject.acquire()
    locks.release(key, lock)
    with pytest.raises(LockNotFound, match="already released"):
        locks.release(key, lock)


def test_a_missing_document_names_the_collection_searched(
    make_lock: MakeLock, collection: Collection[Doc]
) -> None:
    with pytest.raises(ResourceNotFound) as missing:
        make_lock(WriteLock, collection).acquire({"_id": 404})
    assert f"no document in {collection.full_name} matches" in str(missing.value)


def test_a_hold_used_without_with_says_to_enter_it(collection: Collection[Doc], doc: Doc) -> None:
    held = WriteLock(collection).hold(doc)
    with pytest.raises(AttributeError, match=r"write 'with locks.hold\(\.\.\.\) as held:'"):
        held.guard()  # type: ignore[attr-defined]


def test_an_async_hold_used_without_async_with_says_to_enter_it(
    twins: Twins, collection: Collection[Doc], doc: Doc
) -> None:
    held = AsyncWriteLock(twins.of(collection)).hold(doc)
    with pytest.raises(AttributeError, match=r"'async with locks.hold\(\.\.\.\) as held:'"):
        held.lock  # type: ignore[attr-defined]  # noqa: B018


def test_an_awaited_hold_says_to_enter_it_instead(
    portal: Portal, twins: Twins, collection: Collection[Doc], doc: Doc
) -> None:
    locks = AsyncWriteLock(twins.of(collection))

    async def awaited() -> None:
        await locks.hold(doc)  # type: ignore[misc]

    with pytest.raises(TypeError, match=r"'await locks.hold\(\.\.\.\)' takes no lock"):
        portal.call(awaited())


def test_a_lock_entered_as_a_context_manager_says_to_use_hold(
    collection: Collection[Doc], doc: Doc
) -> None:
    locks = WriteLock(collection)
    lock = locks.acquire(doc)
    with pytest.raises(TypeError, match="a Lock is not a context manager"), lock:  # type: ignore[attr-defined]
        pass


def test_a_lock_entered_with_async_with_says_to_use_hold(
    portal: Portal, twins: Twins, collection: Collection[Doc], doc: Doc
) -> None:
    locks = AsyncWriteLock(twins.of(collection))

    async def entered() -> None:
        async with await locks.acquire(doc):  # type: ignore[attr-defined]
            pass

    with pytest.raises(TypeError, match=r"async with locks\.hold"):
        portal.call(entered())


def test_a_hold_keeps_its_own_attributes(collection: Collection[Doc], doc: Doc) -> None:
    hold = WriteLock(collection).hold(doc)
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        hold.nothing  # type: ignore[attr-defined]  # noqa: B018
