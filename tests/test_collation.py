"""A collection's default collation never changes a lock decision.

Every command on the lock field is sent with the simple collation (``_core.SIMPLE_COLLATION``):
under a collection's case-insensitive default, MongoDB would otherwise compare tags and
filter values without regard to case. The embedded server ignores default collations
(pinned below), so there the command log is what shows the collation; on MongoDB the
behaviour tests show it too.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.collation import Collation
from pymongo.collection import Collection

from docmultilock import CooperativeLock, MultiLock, NamedLocks, WriteLock
from docmultilock.pytest_plugin import CLIENT_OPTIONS
from tests.flavours import MakeLock
from tests.helpers import CommandLog, Doc

CASE_INSENSITIVE = Collation(locale="en", strength=2)
SIMPLE = {"locale": "simple"}

#: Two tags that differ only by case, each exclusive with itself alone.
CASED_TAGS: dict[str, Any] = {
    "lock_relationships": {
        "edit": {"cooperative": ["edit"]},
        "EDIT": {"cooperative": ["EDIT"]},
    }
}


@pytest.fixture
def folded(collection: Collection[Doc]) -> Collection[Doc]:
    """The test collection, created with a case-insensitive default collation."""
    collection.database.create_collection(collection.name, collation=CASE_INSENSITIVE)
    return collection


@pytest.fixture
def logged(uri: str, folded: Collection[Doc]) -> Iterator[tuple[Collection[Doc], CommandLog]]:
    """The folded collection through a client that logs every command it sends."""
    log = CommandLog()
    client: MongoClient[Doc] = MongoClient(uri, event_listeners=[log], **CLIENT_OPTIONS)
    try:
        yield client[folded.database.name][folded.name], log
    finally:
        client.close()


def lock_commands(log: CommandLog) -> list[Doc]:
    return [c for c in log.commands if next(iter(c)) in {"findAndModify", "aggregate", "find"}]


def test_every_command_on_a_documents_lock_is_sent_with_the_simple_collation(
    make_lock: MakeLock, logged: tuple[Collection[Doc], CommandLog]
) -> None:
    collection, log = logged
    collection.insert_one({"_id": 1})
    locks = make_lock(MultiLock, collection, **CASED_TAGS)
    lock = locks.acquire({"_id": 1}, tag="edit")
    lock = locks.extend({"_id": 1}, lock)
    locks.inspect({"_id": 1})
    locks.release({"_id": 1}, lock)
    locks.acquire({"_id": 1}, tag="EDIT")
    locks.break_lock({"_id": 1}, everyone=True)
    sent = lock_commands(log)
    assert [next(iter(c)) for c in sent] == [
        "findAndModify",
        "findAndModify",
        "aggregate",
        "findAndModify",
        "findAndModify",
        "findAndModify",
    ]
    assert all(c.get("collation") == SIMPLE for c in sent), sent


def test_every_command_on_a_named_lock_is_sent_with_the_simple_collation(
    make_lock: MakeLock, logged: tuple[Collection[Doc], CommandLog]
) -> None:
    collection, log = logged
    names = make_lock(NamedLocks, collection.database, collection.name)
    lock = names.acquire("job")
    names.release("job", lock)
    sent = lock_commands(log)
    assert sent
    assert all(c.get("collation") == SIMPLE for c in sent), sent


def test_tags_that_differ_only_by_case_stay_distinct(
    make_lock: MakeLock, folded: Collection[Doc]
) -> None:
    folded.insert_one({"_id": 1})
    locks = make_lock(MultiLock, folded, **CASED_TAGS)
    locks.acquire({"_id": 1}, tag="edit")
    assert locks.acquire({"_id": 1}, tag="EDIT").tag == "EDIT"  # not refused as "edit"
    with pytest.raises(CooperativeLock):
        locks.acquire({"_id": 1}, tag="edit")


def test_a_filter_selects_byte_for_byte_under_a_case_insensitive_default(
    make_lock: MakeLock, folded: Collection[Doc]
) -> None:
    folded.insert_many([{"_id": 1, "name": "ALICE"}, {"_id": 2, "name": "alice"}])
    lock = make_lock(WriteLock, folded).acquire({"name": "alice"})
    assert lock.document_id == 2


def test_names_that_differ_only_by_case_are_distinct_locks(
    make_lock: MakeLock, folded: Collection[Doc]
) -> None:
    names = make_lock(NamedLocks, folded.database, folded.name)
    names.acquire("report")
    assert names.acquire("REPORT").document_id == "REPORT"


@pytest.fixture
def ignored_collation(request: pytest.FixtureRequest, is_embedded: bool) -> None:
    if is_embedded:
        request.applymarker(
            pytest.mark.xfail(
                strict=True,
                reason="SecantusDB ignores a collection's default collation (docs/server.md)",
            )
        )


@pytest.mark.usefixtures("ignored_collation")
def test_mongodb_applies_a_collections_default_collation(folded: Collection[Doc]) -> None:
    # Why the lock commands name the simple collation: without one, MongoDB uses the
    # collection's default, in the query and in expressions alike.
    folded.insert_one({"_id": 1, "name": "alice"})
    assert folded.find_one({"name": "ALICE"}) is not None
