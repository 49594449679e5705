"""The two flavours: the same API, no mix-ups, and one lock state shared by both."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable
from typing import Any

import pytest
from pymongo.collection import Collection

import docmultilock
from docmultilock import (
    AsyncHeldLock,
    AsyncHeldLocks,
    AsyncMultiLock,
    AsyncNamedLocks,
    AsyncWriteLock,
    HeldLock,
    HeldLocks,
    InvalidArgument,
    LockConflict,
    LockNotFound,
    MultiLock,
    NamedLocks,
    WriteLock,
)
from tests.flavours import MakeLock, Portal, Twins
from tests.helpers import stored_lock

Doc = dict[str, Any]

TWINS: list[tuple[type, type]] = [
    (WriteLock, AsyncWriteLock),
    (MultiLock, AsyncMultiLock),
    (NamedLocks, AsyncNamedLocks),
    (HeldLock, AsyncHeldLock),
    (HeldLocks, AsyncHeldLocks),
]


#: The only public methods that send no command: the same plain function in both flavours.
SENDS_NOTHING = frozenset({"guard", "hold", "hold_all", "holding", "require"})


def public(cls: type) -> dict[str, Any]:
    return {name: value for name, value in inspect.getmembers(cls) if not name.startswith("_")}


# -- one API ------------------------------------------------------------------------------


@pytest.mark.parametrize(("sync", "twin"), TWINS, ids=[s.__name__ for s, _ in TWINS])
def test_every_public_member_has_its_twin_with_the_same_parameters(sync: type, twin: type) -> None:
    mine, theirs = public(sync), public(twin)
    assert sorted(mine) == sorted(theirs)
    for name, member in mine.items():
        if not callable(member):
            continue
        ours = list(inspect.signature(member).parameters.values())
        twins = list(inspect.signature(theirs[name]).parameters.values())
        assert [(p.name, p.kind, p.default) for p in ours] == [
            (p.name, p.kind, p.default) for p in twins
        ], name


@pytest.mark.parametrize(("sync", "twin"), TWINS, ids=[s.__name__ for s, _ in TWINS])
def test_what_sends_a_command_is_a_coroutine_in_the_async_twin(sync: type, twin: type) -> None:
    for name, member in public(twin).items():
        if not callable(member) or inspect.isclass(member):
            continue
        sends = name not in SENDS_NOTHING
        assert inspect.iscoroutinefunction(member) is sends, name
        assert not inspect.iscoroutinefunction(getattr(sync, name)), name


def test_both_flavours_are_exported() -> None:
    for sync, twin in TWINS:
        assert sync.__name__ in docmultilock.__all__
        assert twin.__name__ in docmultilock.__all__


# -- no mix-ups ---------------------------------------------------------------------------


def _managers(collection: Any) -> list[Callable[[], object]]:
    return [
        lambda: WriteLock(collection),
        lambda: MultiLock(collection),
        lambda: NamedLocks(collection.database, collection.name),
    ]


def _async_managers(collection: Any) -> list[Callable[[], object]]:
    return [
        lambda: AsyncWriteLock(collection),
        lambda: AsyncMultiLock(collection),
        lambda: AsyncNamedLocks(collection.database, collection.name),
    ]


def test_a_sync_manager_refuses_an_async_collection(
    twins: Twins, collection: Collection[Doc]
) -> None:
    for build in _managers(twins.of(collection)):
        with pytest.raises(InvalidArgument, match="Async"):
            build()


def test_an_async_manager_refuses_a_sync_collection(collection: Collection[Doc]) -> None:
    for build in _async_managers(collection):
        with pytest.raises(InvalidArgument, match="needs a pymongo Async"):
            build()


def test_plain_with_on_an_async_hold_says_to_use_async_with(
    twins: Twins, collection: Collection[Doc], doc: Doc
) -> None:
    locks = AsyncWriteLock(twins.of(collection))
    with pytest.raises(TypeError, match="async with"), locks.hold(doc):
        pass
    assert "lock" not in (collection.find_one(doc) or {})


def test_async_with_on_a_sync_hold_says_to_use_with(
    portal: Portal, collection: Collection[Doc], doc: Doc
) -> None:
    locks = WriteLock(collection)

    async def enter() -> None:
        async with locks.hold(doc):
            pass

    with pytest.raises(TypeError, match=r"'with locks\.hold"):
        portal.call(enter())
    assert "lock" not in (collection.find_one(doc) or {})


# -- one lock state ---------------------------------------------------------------------


@pytest.fixture(params=["sync-then-async", "async-then-sync"])
def pair(request: pytest.FixtureRequest, twins: Twins) -> tuple[MakeLock, MakeLock]:
    """Two lock-manager factories of different flavours, in both orders."""
    from tests.flavours import flavoured

    sync = lambda cls, where, *a, **o: flavoured("sync", twins, cls, where, *a, **o)  # noqa: E731
    asynchronous = lambda cls, where, *a, **o: flavoured("async", twins, cls, where, *a, **o)  # noqa: E731
    if request.param == "sync-then-async":
        return sync, asynchronous
    return asynchronous, sync


def test_a_holder_of_one_flavour_blocks_the_other(
    pair: tuple[MakeLock, MakeLock], collection: Collection[Doc], doc: Doc
) -> None:
    first, second = (make(WriteLock, collection) for make in pair)
    lock = first.acquire(doc)
    with pytest.raises(LockConflict):
        second.acquire(doc)
    first.release(doc, lock)
    second.release(doc, second.acquire(doc))


def test_a_writer_of_one_flavour_waits_for_readers_of_the_other(
    pair: tuple[MakeLock, MakeLock], collection: Collection[Doc], doc: Doc
) -> None:
    readers, writers = (make(MultiLock, collection) for make in pair)
    reader = readers.acquire(doc, tag="read")
    with pytest.raises(docmultilock.AssertiveLock) as pending:
        writers.acquire(doc, tag="write")
    readers.release(doc, reader)
    granted = writers.acquire(doc, lock=pending.value.lock)
    assert granted.id == pending.value.lock.id
    assert not granted.pending


def test_fences_keep_growing_across_both_flavours(
    pair: tuple[MakeLock, MakeLock], collection: Collection[Doc], doc: Doc
) -> None:
    one, other = (make(WriteLock, collection) for make in pair)
    fences = []
    for locks in (one, other, one, other):
        lock = locks.acquire(doc)
        fences.append(lock.fence)
        locks.release(doc, lock)
    assert fences == sorted(set(fences))
    assert stored_lock(collection)["fence"] == fences[-1]


def test_a_named_lock_of_one_flavour_blocks_the_other(
    pair: tuple[MakeLock, MakeLock], collection: Collection[Doc]
) -> None:
    first, second = (make(NamedLocks, collection.database, collection.name) for make in pair)
    lock = first.acquire("nightly")
    with pytest.raises(LockConflict):
        second.acquire("nightly")
    first.release("nightly", lock)


# -- require(): a guarded write that matched nothing is the loss -------------------------


def test_require_hands_back_a_guarded_write_that_matched(
    make_lock: MakeLock, collection: Collection[Doc], doc: Doc
) -> None:
    with make_lock(WriteLock, collection).hold(doc) as held:
        result = collection.update_one(held.guard(), {"$set": {"paid": True}})
        assert held.require(result) is result
        assert not held.lost.is_set()


@pytest.mark.parametrize("write", ["update", "delete", "find_one_and_update"])
def test_require_turns_a_guarded_write_that_matched_nothing_into_the_loss(
    make_lock: MakeLock, collection: Collection[Doc], doc: Doc, write: str
) -> None:
    writes: dict[str, Callable[[Doc], object]] = {
        "update": lambda guard: collection.update_one(guard, {"$set": {"paid": True}}),
        "delete": lambda guard: collection.delete_one(guard),
        "find_one_and_update": lambda guard: collection.find_one_and_update(
            guard, {"$set": {"paid": True}}
        ),
    }
    with contextlib.ExitStack() as block:
        held = block.enter_context(make_lock(WriteLock, collection).hold(doc))
        collection.update_one(doc, {"$unset": {"lock": ""}})  # broken by hand
        result = writes[write](held.guard())
        with pytest.raises(LockNotFound):
            held.require(result)
        assert held.lost.is_set()
        with pytest.raises(LockNotFound):
            block.close()
    assert collection.count_documents({"paid": True}) == 0
