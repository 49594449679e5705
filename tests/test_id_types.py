"""Documents whose ``_id`` is a UUID or matched by a pattern lock like any other.

A client's ``uuidRepresentation`` decides how pymongo encodes a ``uuid.UUID``; the library
compares, watches and serializes ids as that client does. Run over both flavours, both
document managers, and the standard and a legacy representation.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from bson.binary import UuidRepresentation
from pymongo import MongoClient
from pymongo.collection import Collection

from docmultilock import (
    InvalidArgument,
    LockSchema,
    ResourceNotFound,
    WriteLock,
)
from docmultilock.http import to_problem
from docmultilock.pytest_plugin import CLIENT_OPTIONS
from tests.flavours import MakeLock
from tests.subjects import Build, Subject

Doc = dict[str, Any]

REPRESENTATIONS = {
    "standard": UuidRepresentation.STANDARD,
    "pythonLegacy": UuidRepresentation.PYTHON_LEGACY,
}
DOCUMENT = uuid.UUID("12345678-1234-5678-1234-567812345678")


@pytest.fixture(params=list(REPRESENTATIONS))
def representation(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def uuids(uri: str, collection: Collection[Doc], representation: str) -> Iterator[Collection[Doc]]:
    """The test collection through a client with ``uuidRepresentation``, one UUID document in it."""
    client: MongoClient[Doc] = MongoClient(uri, uuidRepresentation=representation, **CLIENT_OPTIONS)
    try:
        seen = client[collection.database.name][collection.name]
        seen.insert_one({"_id": DOCUMENT, "total": 5})
        yield seen
    finally:
        client.close()


@pytest.fixture
def uuid_subject(document_build: Build, uuids: Collection[Doc]) -> Subject:
    """WriteLock or MultiLock over the collection seen with ``uuidRepresentation``."""
    return document_build(uuids)


@pytest.fixture
def manager(uuid_subject: Subject) -> Any:
    return uuid_subject.locks


@pytest.fixture
def tagged(uuid_subject: Subject) -> dict[str, str]:
    """The ``tag=`` an acquisition gives: none for WriteLock, ``write`` in MultiLock's table."""
    return {} if uuid_subject.tag is None else {"tag": uuid_subject.tag}


def _holders(manager: Any) -> list[Any]:
    return list(manager.inspect({"_id": DOCUMENT}).holders)


def test_a_uuid_document_is_locked_extended_guarded_and_released(
    manager: Any, tagged: dict[str, str], uuids: Collection[Doc]
) -> None:
    lock = manager.acquire({"_id": DOCUMENT}, **tagged)
    assert lock.document_id == DOCUMENT
    manager.extend({"_id": DOCUMENT}, lock)
    guarded = uuids.update_one(manager.guard({"_id": DOCUMENT}, lock), {"$set": {"total": 6}})
    assert guarded.matched_count == 1
    manager.release({"_id": DOCUMENT}, lock)
    assert _holders(manager) == []


def test_hold_on_a_uuid_document_releases_it_on_exit(manager: Any, tagged: dict[str, str]) -> None:
    with manager.hold({"_id": DOCUMENT}, **tagged):
        assert len(_holders(manager)) == 1
    assert _holders(manager) == []


def test_a_waiter_on_a_uuid_document_is_let_in_when_the_holder_releases(
    manager: Any, tagged: dict[str, str]
) -> None:
    first = manager.acquire({"_id": DOCUMENT}, **tagged)
    releaser = threading.Timer(0.3, manager.release, ({"_id": DOCUMENT}, first))
    releaser.start()
    try:
        with manager.hold({"_id": DOCUMENT}, wait=20.0, **tagged) as held:
            assert held.lock.id != first.id
    finally:
        releaser.join()
    assert _holders(manager) == []


def test_a_lock_on_a_uuid_document_survives_the_schema_round_trip(
    manager: Any, tagged: dict[str, str], representation: str
) -> None:
    schema = LockSchema(uuid_representation=REPRESENTATIONS[representation])
    lock = manager.acquire({"_id": DOCUMENT}, **tagged)
    loaded = schema.load(json.loads(json.dumps(schema.dump(lock))))
    manager.release({"_id": DOCUMENT}, loaded)
    assert _holders(manager) == []


def test_the_snapshot_of_a_uuid_document_is_json(manager: Any, tagged: dict[str, str]) -> None:
    manager.acquire({"_id": DOCUMENT}, **tagged)
    data = manager.inspect({"_id": DOCUMENT}).as_json()
    assert data["document_id"]["$binary"]["subType"] == "04"
    json.dumps(data)


def test_the_problem_of_an_error_about_a_uuid_filter_is_json(
    manager: Any, tagged: dict[str, str]
) -> None:
    with pytest.raises(ResourceNotFound) as caught:
        manager.acquire({"_id": uuid.uuid4()}, **tagged)
    problem = to_problem(caught.value)
    assert problem["status"] == 404
    json.dumps(problem)


def test_a_uuid_in_a_filter_on_a_client_without_a_representation_is_an_invalid_argument(
    make_lock: MakeLock, collection: Collection[Doc], doc: Doc
) -> None:
    locks = make_lock(WriteLock, collection)
    with pytest.raises(InvalidArgument, match="uuid"):
        locks.acquire({"_id": 1, "ref": uuid.uuid4()})
    assert collection.find_one({"_id": 1}, {"lock": 1}) == {"_id": 1}


@pytest.mark.parametrize("pattern", [re.compile("^order-4[0-9]$"), re.compile("order-42")])
def test_a_pattern_for_the_id_releases_extends_and_guards_the_lock_it_acquired(
    make_lock: MakeLock, collection: Collection[Doc], pattern: re.Pattern[str]
) -> None:
    collection.insert_one({"_id": "order-42"})
    locks = make_lock(WriteLock, collection)
    lock = locks.acquire({"_id": pattern})
    assert lock.document_id == "order-42"
    locks.extend({"_id": pattern}, lock)
    assert (
        collection.update_one(locks.guard({"_id": pattern}, lock), {"$set": {"a": 1}}).matched_count
        == 1
    )
    locks.release({"_id": pattern}, lock)
    assert collection.find_one({"_id": "order-42"}, {"_id": 0, "lock.holders": 1}) == {
        "lock": {"holders": []}
    }


def test_a_pattern_for_the_id_never_releases_a_lock_of_a_document_it_does_not_match(
    make_lock: MakeLock, collection: Collection[Doc]
) -> None:
    collection.insert_many([{"_id": "order-42"}, {"_id": "invoice-7"}])
    locks = make_lock(WriteLock, collection)
    lock = locks.acquire({"_id": "invoice-7"})
    with pytest.raises(ResourceNotFound):
        locks.release({"_id": re.compile("^order-")}, lock)
    assert len(locks.inspect({"_id": "invoice-7"}).holders) == 1
