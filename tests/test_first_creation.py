"""The first creation of the lock collection and its TTL index, by several processes at once.

Whoever comes second is told that the collection exists (NamespaceExists, 48; pymongo's
``CollectionInvalid`` when it saw it listed), that the index exists (IndexAlreadyExists,
68) or that the same index is being built (IndexBuildAlreadyInProgress, 285): each is as
good as done. The fail points answer a command with the code alone, before it runs, which
is what the loser of such a race is answered.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.collection import Collection
from pymongo.errors import OperationFailure

from docmultilock import DbError, NamedLocks
from docmultilock._doctor import clock_check, version_check
from docmultilock._indexes import TTL_INDEX
from docmultilock._sync.driver import server_hello
from docmultilock.pytest_plugin import CLIENT_OPTIONS
from tests.flavours import MakeLock
from tests.helpers import Doc

Arm = Callable[..., None]


@pytest.mark.parametrize(("command", "code"), [("create", 48), ("createIndexes", 285)])
def test_a_collection_or_index_made_by_another_process_meanwhile_is_as_good_as_done(
    make_lock: MakeLock, collection: Collection[Doc], fail_point: Arm, command: str, code: int
) -> None:
    named = make_lock(NamedLocks, collection.database, collection.name)
    fail_point(commands=(command,), errorCode=code)
    named.ensure_indexes()


def test_an_existing_index_answered_as_such_is_as_good_as_done(
    make_lock: MakeLock, collection: Collection[Doc], fail_point: Arm
) -> None:
    named = make_lock(NamedLocks, collection.database, collection.name)
    named.ensure_indexes()
    fail_point(commands=("createIndexes",), errorCode=68)
    named.ensure_indexes()
    assert TTL_INDEX in collection.index_information()


def test_another_creation_failure_still_reaches_the_caller(
    make_lock: MakeLock, collection: Collection[Doc], fail_point: Arm
) -> None:
    named = make_lock(NamedLocks, collection.database, collection.name)
    fail_point(commands=("createIndexes",), errorCode=13)  # Unauthorized
    with pytest.raises(DbError):
        named.ensure_indexes()


def test_processes_creating_the_lock_collection_at_once_all_succeed(
    uri: str, collection: Collection[Doc]
) -> None:
    # Each process its own client, all released at once onto a collection nobody made yet.
    clients: list[MongoClient[Doc]] = [MongoClient(uri, **CLIENT_OPTIONS) for _ in range(6)]
    start = threading.Barrier(len(clients))
    errors: list[BaseException] = []

    def create(client: MongoClient[Doc]) -> None:
        named = NamedLocks(client[collection.database.name], collection.name)
        start.wait()
        try:
            named.ensure_indexes()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=create, args=(client,)) for client in clients]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        for client in clients:
            client.close()
    assert errors == []
    assert collection.index_information()[TTL_INDEX]["expireAfterSeconds"] == 0


def test_the_library_falls_back_to_is_master_on_a_server_without_hello() -> None:

    class Admin:  # a server before 4.4.2: no hello (pure: no server is this old here)
        def __init__(self) -> None:
            self.asked: list[str] = []

        def command(self, name: str) -> Any:
            self.asked.append(name)
            if name == "hello":
                raise OperationFailure("no such command: 'hello'", code=59)
            return {"ismaster": True, "localTime": 0}

    class Client:
        admin = Admin()

    assert server_hello(Client())["ismaster"] is True  # type: ignore[arg-type]
    assert Client.admin.asked == ["hello", "isMaster"]


@pytest.mark.parametrize(("version", "parts"), [("4.2.24", [4, 2, 24, 0]), ("3.6.0", [3, 6, 0, 0])])
def test_doctor_reports_a_server_older_than_4_4_as_an_error(version: str, parts: list[int]) -> None:
    check = version_check(version, parts)
    assert (check.status, check.advisory) == ("error", False)
    assert "4.4 or later" in check.detail


@pytest.mark.parametrize(("version", "parts"), [("4.4.0", [4, 4, 0, 0]), ("8.2.11", [8, 2, 11, 0])])
def test_doctor_accepts_4_4_and_later(version: str, parts: list[int]) -> None:
    assert version_check(version, parts).status == "ok"


def test_doctor_names_a_router_and_which_clocks_must_agree() -> None:
    detail = clock_check(0.2, router=True).detail
    assert "mongos router is +0.200 s" in detail
    assert "shard primaries" in detail
    assert "router" not in clock_check(0.2, router=False).detail
