"""Named locks: a lock document per name, created on demand and removed when nobody holds it."""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.collection import Collection

import docmultilock._indexes
from docmultilock import (
    AssertiveLock,
    CooperativeLock,
    IncompatibleLockField,
    InvalidArgument,
    LockAlreadyTaken,
    LockConflict,
    LockError,
    LockNotFound,
    LockWasReacquired,
    NamedLocks,
    WriteLock,
)
from docmultilock._indexes import TTL_INDEX
from docmultilock.pytest_plugin import CLIENT_OPTIONS
from tests._workers import race_for_names
from tests.flavours import MakeLock
from tests.helpers import CommandLog, server_now, wait_until

Doc = dict[str, Any]

RW_TABLE = {
    "read": {"cooperative": ["write"]},
    "write": {"cooperative": ["write"], "assertive": ["read"]},
}


@pytest.fixture
def named(make_lock: MakeLock, collection: Collection[Doc]) -> NamedLocks:
    """The default, exclusive named locks, kept in the test's fresh collection."""
    return make_lock(NamedLocks, collection.database, collection.name, lock_timeout=10.0)


@pytest.fixture
def rw_named(make_lock: MakeLock, collection: Collection[Doc]) -> NamedLocks:
    return make_lock(NamedLocks, collection.database, collection.name, lock_relationships=RW_TABLE)


def stored(collection: Collection[Doc], name: str) -> Doc | None:
    return collection.find_one({"_id": name})


def stored_expiry(collection: Collection[Doc], name: str) -> datetime:
    """The ``expires`` the TTL index reads, as an aware datetime."""
    document = stored(collection, name)
    assert document is not None
    expires: datetime = document["lock"]["expires"]
    return expires.replace(tzinfo=timezone.utc) if expires.tzinfo is None else expires


def force_ttl_pass(client: MongoClient[Doc], is_embedded: bool) -> None:
    """Have the TTL monitor run now (embedded server) or wait for its next pass (MongoDB)."""
    if is_embedded:
        client.admin.command("secantusAdmin.pruneTtl")


# -- the lock document's life ----------------------------------------------------------------


def test_acquire_creates_the_lock_document_on_demand(
    named: NamedLocks, collection: Collection[Doc]
) -> None:
    lock = named.acquire("order-42")
    document = stored(collection, "order-42")
    assert document is not None
    assert [h["id"] for h in document["lock"]["holders"]] == [lock.id]
    assert lock.document_id == "order-42"
    assert not lock.pending


def test_a_held_name_is_refused_with_write_lock_errors(named: NamedLocks) -> None:
    named.acquire("order-42")
    with pytest.raises(LockAlreadyTaken) as refused:
        named.acquire("order-42")
    assert refused.value.status_code == 409
    assert refused.value.blocking_tags == ("write",)


def test_names_are_independent(named: NamedLocks) -> None:
    named.acquire("order-42")
    assert named.acquire("order-43").document_id == "order-43"


def test_the_last_exclusive_release_deletes_the_document(
    named: NamedLocks, collection: Collection[Doc]
) -> None:
    lock = named.acquire("order-42")
    wait_until(lambda: server_now(collection.database.client) > lock.acquired_at)
    named.release("order-42", lock)
    assert stored(collection, "order-42") is None


@pytest.mark.parametrize(
    "overwrite", [{"lock.v": 2}, {"lock.fence": 2.5}], ids=["version", "fence"]
)
def test_the_last_release_never_deletes_a_document_whose_field_is_not_ours(
    named: NamedLocks, collection: Collection[Doc], overwrite: Doc
) -> None:
    lock = named.acquire("job")
    collection.update_one({"_id": "job"}, {"$set": {**overwrite, "note": "kept"}})
    before = stored(collection, "job")
    with pytest.raises(IncompatibleLockField):
        named.release("job", lock)
    assert stored(collection, "job") == before


def test_a_released_name_can_be_acquired_again(named: NamedLocks) -> None:
    named.release("order-42", named.acquire("order-42"))
    assert not named.acquire("order-42").pending


def test_releasing_a_lost_lock_is_lock_was_reacquired_never_resource_not_found(
    named: NamedLocks,
) -> None:
    lock = named.acquire("order-42")
    named.release("order-42", lock)
    with pytest.raises(LockWasReacquired):
        named.release("order-42", lock)


def test_extending_a_lock_whose_document_is_gone_is_lock_was_reacquired(
    named: NamedLocks, collection: Collection[Doc]
) -> None:
    lock = named.acquire("order-42")
    collection.delete_one({"_id": "order-42"})
    with pytest.raises(LockWasReacquired):
        named.extend("order-42", lock)


def test_extend_pushes_the_expiry(named: NamedLocks) -> None:
    lock = named.acquire("order-42", lock_timeout=5.0)
    extended = named.extend("order-42", lock, lock_timeout=60.0)
    assert extended.expires_at > lock.expires_at
    assert extended.id == lock.id


def test_releasing_a_displaced_lock_leaves_the_new_holder_alone(
    named: NamedLocks, collection: Collection[Doc]
) -> None:
    old = named.acquire("order-42", lock_timeout=0.2)
    wait_until(lambda: server_now(collection.database.client) > old.expires_at)
    new = named.acquire("order-42")
    with pytest.raises(LockWasReacquired):
        named.release("order-42", old)
    document = stored(collection, "order-42")
    assert document is not None
    assert [h["id"] for h in document["lock"]["holders"]] == [new.id]


def test_an_expired_lock_nobody_displaced_is_released_quietly(
    named: NamedLocks, collection: Collection[Doc]
) -> None:
    lock = named.acquire("order-42", lock_timeout=0.1)
    wait_until(lambda: server_now(collection.database.client) > lock.expires_at)
    named.release("order-42", lock)
    assert stored(collection, "order-42") is None


def test_a_shared_release_leaves_the_document_for_the_ttl_index(
    rw_named: NamedLocks, collection: Collection[Doc]
) -> None:
    reader = rw_named.acquire("report-7", tag="read")
    rw_named.release("report-7", reader)
    document = stored(collection, "report-7")
    assert document is not None
    assert document["lock"]["holders"] == []


def test_the_ttl_index_removes_an_emptied_document_and_keeps_a_held_one(
    rw_named: NamedLocks,
    collection: Collection[Doc],
    client: MongoClient[Doc],
    is_embedded: bool,
) -> None:
    rw_named.release("emptied", rw_named.acquire("emptied", tag="read"))
    rw_named.acquire("held", tag="read", lock_timeout=600.0)
    wait_until(lambda: server_now(client) > stored_expiry(collection, "emptied"))

    def emptied_is_gone() -> bool:
        force_ttl_pass(client, is_embedded)
        return stored(collection, "emptied") is None

    wait_until(emptied_is_gone, timeout=10.0 if is_embedded else 150.0)
    assert stored(collection, "held") is not None


def test_the_ttl_index_removes_the_document_of_a_holder_that_never_released(
    named: NamedLocks, collection: Collection[Doc], client: MongoClient[Doc], is_embedded: bool
) -> None:
    lock = named.acquire("crashed-job", lock_timeout=0.2)
    wait_until(lambda: server_now(client) > lock.expires_at)

    def gone() -> bool:
        force_ttl_pass(client, is_embedded)
        return stored(collection, "crashed-job") is None

    wait_until(gone, timeout=10.0 if is_embedded else 150.0)


# -- fences across deletion ------------------------------------------------------------------


def test_the_fence_grows_across_deletion_by_release(
    named: NamedLocks, collection: Collection[Doc]
) -> None:
    fences = []
    for _ in range(5):
        lock = named.acquire("order-42")
        fences.append(lock.fence)
        named.release("order-42", lock)
    assert fences == sorted(set(fences))


def test_the_fence_grows_across_deletion_by_the_ttl_index(
    named: NamedLocks, collection: Collection[Doc], client: MongoClient[Doc], is_embedded: bool
) -> None:
    first = named.acquire("order-42", lock_timeout=0.1)
    wait_until(lambda: server_now(client) > first.expires_at)

    def gone() -> bool:
        force_ttl_pass(client, is_embedded)
        return stored(collection, "order-42") is None

    wait_until(gone, timeout=10.0 if is_embedded else 150.0)
    assert named.acquire("order-42").fence > first.fence


def test_the_fence_grows_across_deletion_of_a_document_by_hand(
    named: NamedLocks, collection: Collection[Doc]
) -> None:
    first = named.acquire("order-42")
    collection.delete_one({"_id": "order-42"})
    assert named.acquire("order-42").fence > first.fence


def test_a_document_whose_fence_is_ahead_of_the_clock_is_emptied_not_deleted(
    named: NamedLocks, collection: Collection[Doc], client: MongoClient[Doc]
) -> None:
    # As after many grants within one millisecond: deleting now could let a later grant
    # take a fence at or below this one, so the release leaves the document to the TTL
    # index, whose expiry is kept past the fence's millisecond.
    ahead_ms = int((server_now(client) + timedelta(hours=1)).timestamp() * 1000)
    collection.insert_one(
        {"_id": "order-42", "lock": {"v": 1, "fence": ahead_ms * 1000, "holders": []}}
    )
    lock = named.acquire("order-42")
    named.release("order-42", lock)
    document = stored(collection, "order-42")
    assert document is not None
    assert document["lock"]["holders"] == []
    assert stored_expiry(collection, "order-42").timestamp() * 1000 > ahead_ms
    assert named.acquire("order-42").fence > lock.fence


# -- tags in named mode ----------------------------------------------------------------------


def test_readers_share_a_name(rw_named: NamedLocks) -> None:
    rw_named.acquire("report-7", tag="read")
    assert not rw_named.acquire("report-7", tag="read").pending


def test_a_writer_waits_for_readers_of_a_name_with_multilock_errors(rw_named: NamedLocks) -> None:
    reader = rw_named.acquire("report-7", tag="read")
    with pytest.raises(AssertiveLock) as waiting:
        rw_named.acquire("report-7", tag="write")
    with pytest.raises(CooperativeLock) as refused:
        rw_named.acquire("report-7", tag="read")
    assert type(refused.value) is CooperativeLock
    rw_named.release("report-7", reader)
    granted = rw_named.acquire("report-7", lock=waiting.value.lock)
    assert not granted.pending


def test_continuing_a_pending_lock_whose_document_is_gone_is_lock_not_found(
    rw_named: NamedLocks, collection: Collection[Doc]
) -> None:
    rw_named.acquire("report-7", tag="read")
    with pytest.raises(AssertiveLock) as waiting:
        rw_named.acquire("report-7", tag="write")
    collection.delete_one({"_id": "report-7"})
    with pytest.raises(LockNotFound):
        rw_named.acquire("report-7", lock=waiting.value.lock)
    assert stored(collection, "report-7") is None  # continuing never creates a document


def test_a_table_with_several_tags_needs_tag(rw_named: NamedLocks) -> None:
    with pytest.raises(InvalidArgument, match="give tag="):
        rw_named.acquire("report-7")


# -- the first acquirers' race ---------------------------------------------------------------


@pytest.mark.slow
def test_of_many_processes_racing_for_a_new_name_exactly_one_wins(
    uri: str, collection: Collection[Doc]
) -> None:
    processes, names = 6, [f"race-{i}" for i in range(20)]
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        start = manager.Event()
        with context.Pool(processes) as pool:
            pending = pool.starmap_async(
                race_for_names,
                [(uri, collection.database.name, collection.name, names, start)] * processes,
            )
            start.set()
            results = pending.get(timeout=120)
    winners = [name for result in results for name in result["won"]]
    errors = {error for result in results for error in result["errors"]}
    assert sorted(winners) == sorted(names)  # each name won exactly once
    assert errors <= {"LockAlreadyTaken"}
    assert sum(len(result["errors"]) for result in results) == (processes - 1) * len(names)


# -- one command per operation ---------------------------------------------------------------


@pytest.fixture
def counted_named(
    make_lock: MakeLock,
    counted: tuple[Collection[Doc], CommandLog],
) -> tuple[NamedLocks, NamedLocks, CommandLog]:
    coll, log = counted
    exclusive = make_lock(NamedLocks, coll.database, coll.name)
    shared = make_lock(NamedLocks, coll.database, coll.name, lock_relationships=RW_TABLE)
    exclusive.ensure_indexes()
    log.names.clear()
    return exclusive, shared, log


def test_every_named_operation_is_exactly_one_command(
    counted_named: tuple[NamedLocks, NamedLocks, CommandLog], client: MongoClient[Doc]
) -> None:
    exclusive, shared, log = counted_named

    def commands(operation: Any) -> list[str]:
        log.names.clear()
        with contextlib.suppress(LockConflict):
            operation()
        return list(log.names)

    one = ["findAndModify"]
    created: list[Any] = []
    assert commands(lambda: created.append(exclusive.acquire("job"))) == one  # new document
    assert commands(lambda: exclusive.acquire("job")) == one  # conflict
    assert commands(lambda: created.append(exclusive.extend("job", created[0]))) == one
    wait_until(lambda: server_now(client) > created[0].acquired_at)
    assert commands(lambda: exclusive.release("job", created[0])) == one  # last holder
    first = shared.acquire("report", tag="read")
    assert commands(lambda: created.append(shared.acquire("report", tag="read"))) == one
    assert commands(lambda: shared.release("report", first)) == one  # not last
    assert commands(lambda: shared.release("report", created[-1])) == one  # last, shared


def test_the_ttl_index_is_created_after_the_first_acquire(
    make_lock: MakeLock, uri: str, collection: Collection[Doc]
) -> None:
    log = CommandLog()
    fresh: MongoClient[Doc] = MongoClient(uri, event_listeners=[log], **CLIENT_OPTIONS)
    try:
        named = make_lock(NamedLocks, fresh[collection.database.name], collection.name)
        named.acquire("a")
        named.acquire("b")
        assert log.names.count("createIndexes") == 1
        assert log.names.index("findAndModify") < log.names.index("createIndexes")
    finally:
        fresh.close()
    index = collection.index_information()[TTL_INDEX]
    assert index["key"] == [("lock.expires", 1)]
    assert index["expireAfterSeconds"] == 0


@pytest.fixture
def logged(uri: str) -> Iterator[tuple[MongoClient[Doc], CommandLog]]:
    """A client of its own (so no TTL index is known made yet) that logs its commands."""
    log = CommandLog()
    fresh: MongoClient[Doc] = MongoClient(uri, event_listeners=[log], **CLIENT_OPTIONS)
    try:
        yield fresh, log
    finally:
        fresh.close()


def cycles(named: NamedLocks, count: int) -> None:
    for _ in range(count):
        named.release("job", named.acquire("job"))


def test_a_refused_ttl_index_is_not_tried_again_by_every_acquire(
    make_lock: MakeLock,
    logged: tuple[MongoClient[Doc], CommandLog],
    collection: Collection[Doc],
    fail_point: Callable[..., None],
    caplog: pytest.LogCaptureFixture,
) -> None:
    fresh, log = logged
    fail_point(times=100, commands=("createIndexes",), errorCode=13)  # Unauthorized
    named = make_lock(NamedLocks, fresh[collection.database.name], collection.name)
    with caplog.at_level(logging.DEBUG, logger="docmultilock"):
        cycles(named, 5)
    assert log.names.count("createIndexes") == 1
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert "TTL index" in warnings[0].getMessage()
    assert warnings[0].exc_info is None


def test_a_refused_ttl_index_is_tried_again_after_the_retry_delay(
    make_lock: MakeLock,
    logged: tuple[MongoClient[Doc], CommandLog],
    collection: Collection[Doc],
    fail_point: Callable[..., None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fresh, log = logged
    monkeypatch.setattr(docmultilock._indexes, "INDEX_RETRY_SECONDS", 0.0)
    fail_point(times=1, commands=("createIndexes",), errorCode=13)
    named = make_lock(NamedLocks, fresh[collection.database.name], collection.name)
    cycles(named, 3)
    assert log.names.count("createIndexes") == 2  # refused once, then made, then known
    assert TTL_INDEX in collection.index_information()


def test_ensure_indexes_creates_the_ttl_index_up_front_and_is_idempotent(
    named: NamedLocks, collection: Collection[Doc]
) -> None:
    named.ensure_indexes()
    named.ensure_indexes()
    assert collection.index_information()[TTL_INDEX]["expireAfterSeconds"] == 0


# -- arguments -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["", "x" * 513, 42, None, b"bytes", {"$ne": None}, "\ud800"])
def test_a_bad_name_is_refused_before_anything_is_written(
    named: NamedLocks, collection: Collection[Doc], name: Any
) -> None:
    with pytest.raises(InvalidArgument):
        named.acquire(name)
    assert collection.name not in collection.database.list_collection_names()


def test_a_name_of_512_characters_is_accepted(named: NamedLocks) -> None:
    assert named.acquire("x" * 512).document_id == "x" * 512


def test_a_lock_of_another_name_is_refused(named: NamedLocks) -> None:
    lock = named.acquire("order-42")
    with pytest.raises(InvalidArgument, match="belongs to"):
        named.release("order-43", lock)


def test_a_write_lock_from_a_document_is_refused(
    make_lock: MakeLock, named: NamedLocks, collection: Collection[Doc]
) -> None:
    collection.database["other"].insert_one({"_id": "order-42"})
    lock = make_lock(WriteLock, collection.database["other"]).acquire({"_id": "order-42"})
    collection.database["other"].drop()
    named.acquire("order-42")
    with pytest.raises(LockWasReacquired):
        named.release("order-42", lock)  # same tag and name: only the id tells, and it differs


def test_guard_matches_the_lock_document_only_while_held(
    named: NamedLocks, collection: Collection[Doc]
) -> None:
    lock = named.acquire("order-42")
    guard = named.guard("order-42", lock)
    assert collection.count_documents(guard) == 1
    collection.update_one({"_id": "order-42"}, {"$set": {"lock.holders": []}})
    assert collection.count_documents(guard) == 0


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"database": "app"}, "Database"),
        ({"collection": ""}, "collection"),
        ({"collection": "a$b"}, "collection"),
        ({"collection": 7}, "collection"),
        ({"lock_timeout": -1}, "lock_timeout"),
    ],
)
def test_bad_construction_is_refused(
    collection: Collection[Doc], arguments: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message):
        NamedLocks(**{"database": collection.database, **arguments})


def test_error_factory_replaces_named_lock_errors(
    make_lock: MakeLock, collection: Collection[Doc]
) -> None:
    class Refused(Exception):
        pass

    def to_refused(error: LockError) -> Refused:
        return Refused(error.code)

    named = make_lock(NamedLocks, collection.database, collection.name, error_factory=to_refused)
    named.acquire("order-42")
    with pytest.raises(Refused, match="LockAlreadyTaken"):
        named.acquire("order-42")
