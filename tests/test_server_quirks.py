"""Where the embedded server departs from MongoDB, pinned so a fix shows up.

Each ``test_mongodb_*`` asserts MongoDB's documented behaviour; on the embedded server it is
a strict xfail, so the day SecantusDB fixes the departure the xfail passes, the suite fails,
and the workaround in ``docmultilock/_expr.py`` can be reconsidered. Each ``test_workaround_*``
checks that the form the library uses is right on whichever server runs the suite.

Retried writes: a reply lost after the server applied the command is made by a proxy
(``tests/proxy.py``) that forwards the command and drops its reply. MongoDB answers
pymongo's retry of it with the first execution's result; SecantusDB does so only when the
retry is the same command, and executes it again when its ``maxTimeMS`` changed, as it does
under an operation timeout (``docs/server.md``). The other tests of that part check, on
whichever server runs, what does not depend on the departure.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from pymongo import ReturnDocument
from pymongo.collection import Collection
from pymongo.errors import AutoReconnect

from docmultilock import DocumentTooLarge, LockNotFound, NamedLocks, WriteLock
from docmultilock._expr import SERVER_NOW, each, field_or_null
from docmultilock._lock import Lock
from tests.helpers import Proxied, require_dropped, server_now, wait_until
from tests.proxy import ReplyCutter

Doc = dict[str, Any]
TakeLock = Callable[[Collection[Doc]], tuple[WriteLock | NamedLocks, Any, Lock]]
PAST = datetime(2000, 1, 1)
FUTURE = datetime(2999, 1, 1)


def evaluate(collection: Collection[Doc], expression: Any, document: Doc | None = None) -> Any:
    collection.insert_one(document or {"_id": 1})
    found = list(collection.aggregate([{"$project": {"_id": 0, "r": expression}}]))
    return found[0].get("r", "<missing>")


@pytest.fixture
def embedded_departure(request: pytest.FixtureRequest, is_embedded: bool) -> None:
    if is_embedded:
        request.applymarker(pytest.mark.xfail(strict=True, reason="SecantusDB departure"))


@pytest.mark.usefixtures("embedded_departure")
def test_mongodb_compares_a_stored_date_with_now(collection: Collection[Doc]) -> None:
    assert evaluate(collection, {"$lt": ["$at", "$$NOW"]}, {"_id": 1, "at": PAST}) is True


@pytest.mark.usefixtures("embedded_departure")
def test_mongodb_resolves_a_field_path_through_an_array_of_documents(
    collection: Collection[Doc],
) -> None:
    document = {"_id": 1, "a": [{"t": "x"}, {"t": "y"}]}
    assert evaluate(collection, "$a.t", document) == ["x", "y"]


@pytest.mark.usefixtures("embedded_departure")
def test_mongodb_reports_a_let_variable_bound_to_a_missing_field_as_missing(
    collection: Collection[Doc],
) -> None:
    expression = {"$let": {"vars": {"v": "$nothing"}, "in": {"$type": "$$v"}}}
    assert evaluate(collection, expression) == "missing"


@pytest.mark.usefixtures("embedded_departure")
def test_mongodb_reports_a_missing_field_of_a_let_variable_as_missing(
    collection: Collection[Doc],
) -> None:
    expression = {"$let": {"vars": {"v": "$lock"}, "in": {"$type": "$$v.fence"}}}
    assert evaluate(collection, expression, {"_id": 1, "lock": {"v": 1}}) == "missing"


@pytest.mark.parametrize(("at", "expected"), [(PAST, True), (FUTURE, False)])
def test_workaround_server_now_compares_correctly(
    collection: Collection[Doc], at: datetime, expected: bool
) -> None:
    assert evaluate(collection, {"$lt": ["$at", SERVER_NOW]}, {"_id": 1, "at": at}) is expected


def test_workaround_server_now_is_within_a_second_of_now(collection: Collection[Doc]) -> None:
    both = evaluate(collection, {"a": SERVER_NOW, "b": "$$NOW"})
    assert abs(both["a"] - both["b"]) < timedelta(seconds=1)


def test_workaround_each_lists_a_field_of_every_element(collection: Collection[Doc]) -> None:
    document = {"_id": 1, "a": [{"t": "x"}, {"t": "y"}]}
    assert evaluate(collection, each("$a", "t"), document) == ["x", "y"]


def test_workaround_field_or_null_binds_a_missing_field_as_null(
    collection: Collection[Doc],
) -> None:
    expression = {"$let": {"vars": {"v": field_or_null("nothing")}, "in": {"$type": "$$v"}}}
    assert evaluate(collection, expression) == "null"


# -- Retried writes ---------------------------------------------------------------------


@pytest.fixture
def reexecuted_retry(request: pytest.FixtureRequest, is_embedded: bool) -> None:
    # Only the departure may fail these tests: a broken proxy or a timeout is an error.
    if is_embedded:
        request.applymarker(
            pytest.mark.xfail(
                strict=True,
                raises=(AssertionError, LockNotFound),
                reason="SecantusDB executes a write retried under an operation timeout "
                "again (docs/server.md, 'Retried writes')",
            )
        )


def increment_with_its_reply_dropped(counters: Collection[Doc], cutter: ReplyCutter) -> Any:
    """``$inc`` a counter once, its reply dropped (pymongo retries); the document after."""
    counters.insert_one({"_id": 1, "n": 0})
    cutter.cut_replies({"update"})
    counters.update_one({"_id": 1}, {"$inc": {"n": 1}})
    require_dropped(cutter, "update")
    return counters.find_one({"_id": 1})


def test_the_proxy_drops_a_reply_after_the_server_applied_the_command(
    proxied: Proxied, cutter: ReplyCutter
) -> None:
    # Without pymongo's retry the cut reaches the caller: the write was applied, once.
    counters = proxied(retryWrites=False)
    counters.insert_one({"_id": 1, "n": 0})
    cutter.cut_replies({"update"})
    with pytest.raises(AutoReconnect):
        counters.update_one({"_id": 1}, {"$inc": {"n": 1}})
    require_dropped(cutter, "update")
    assert counters.find_one({"_id": 1}) == {"_id": 1, "n": 1}


def test_a_write_retried_without_an_operation_timeout_is_applied_once(
    proxied: Proxied, cutter: ReplyCutter
) -> None:
    # Both attempts are the same command: both servers answer the retry with the first
    # result. (socketTimeoutMS still bounds a hang, and sends no maxTimeMS.)
    counters = proxied(timeoutMS=None, socketTimeoutMS=30_000)
    assert increment_with_its_reply_dropped(counters, cutter) == {"_id": 1, "n": 1}


@pytest.mark.usefixtures("reexecuted_retry")
def test_mongodb_applies_a_write_retried_under_an_operation_timeout_once(
    proxied: Proxied, cutter: ReplyCutter
) -> None:
    # The retry carries a smaller maxTimeMS than the first attempt; MongoDB recognises it
    # by its session and transaction number alone.
    assert increment_with_its_reply_dropped(proxied(), cutter) == {"_id": 1, "n": 1}


@pytest.mark.usefixtures("reexecuted_retry")
def test_mongodb_answers_a_find_and_modify_retried_under_a_timeout_with_its_first_result(
    proxied: Proxied, cutter: ReplyCutter
) -> None:
    counters = proxied()
    counters.insert_one({"_id": 1, "n": 0})
    cutter.cut_replies({"findAndModify"})
    before = counters.find_one_and_update(
        {"_id": 1}, {"$inc": {"n": 1}}, return_document=ReturnDocument.BEFORE
    )
    require_dropped(cutter, "findAndModify")
    assert before == {"_id": 1, "n": 0}


@pytest.fixture(params=["document", "named"])
def release_case(
    request: pytest.FixtureRequest,
) -> TakeLock:
    """``take(collection)``: a lock taken through it, as ``(manager, key, lock)``.

    A document lock is released by one update; an exclusive named lock by deleting its
    document (once the server's clock has passed the grant, see ``release_by_delete``).
    """

    def take(collection: Collection[Doc]) -> tuple[WriteLock | NamedLocks, Any, Lock]:
        if request.param == "document":
            collection.insert_one({"_id": 1})
            locks: WriteLock | NamedLocks = WriteLock(collection)
            key: Any = {"_id": 1}
            lock = locks.acquire(key)
        else:
            locks = NamedLocks(collection.database, collection.name)
            key = "job"
            lock = locks.acquire(key)
            client = collection.database.client
            wait_until(lambda: server_now(client) > lock.acquired_at)
        return locks, key, lock

    return take


def has_entry(collection: Collection[Doc], lock: Lock) -> bool:
    """True while ``lock``'s entry is stored (a deleted named-lock document has none)."""
    found = collection.find_one({"_id": lock.document_id}, {"lock": 1}) or {}
    return any(h["id"] == lock.id for h in found.get("lock", {}).get("holders", []))


def test_a_release_whose_reply_was_lost_after_it_applied_succeeds_without_retryable_writes(
    proxied: Proxied,
    cutter: ReplyCutter,
    collection: Collection[Doc],
    release_case: TakeLock,
) -> None:
    # pymongo passes the cut on; docmultilock retries, finds its entry gone while the lock
    # is unexpired, and reports the release done (its lost-reply logic, on any server).
    locks, key, lock = release_case(proxied(retryWrites=False))
    cutter.cut_replies({"findAndModify"})
    locks.release(key, lock)
    require_dropped(cutter, "findAndModify")
    assert not has_entry(collection, lock)


@pytest.mark.usefixtures("reexecuted_retry")
def test_mongodb_lets_a_release_whose_reply_was_lost_succeed_under_retryable_writes(
    proxied: Proxied,
    cutter: ReplyCutter,
    collection: Collection[Doc],
    release_case: TakeLock,
) -> None:
    # pymongo retries the release itself, so docmultilock never sees the lost reply. MongoDB
    # answers the retry with the first result (our entry was there); SecantusDB runs the
    # release again (docmultilock's timeout is an operation timeout), finds the entry gone,
    # and the release reports the lock lost.
    locks, key, lock = release_case(proxied())
    cutter.cut_replies({"findAndModify"})
    locks.release(key, lock)
    require_dropped(cutter, "findAndModify")
    assert not has_entry(collection, lock)


@pytest.mark.usefixtures("embedded_departure")
def test_mongodb_refuses_a_lock_entry_past_16_mib_as_too_large(
    collection: Collection[Doc],
) -> None:
    # MongoDB answers BSONObjectTooLarge (10334), which docmultilock reports as
    # DocumentTooLarge; the embedded server answers a findAndModify pipeline update that
    # outgrows the limit with a bare InternalError (code 1), which stays a DbError.
    collection.insert_one({"_id": 1, "blob": "x" * (16 * 1024 * 1024 - 200)})
    with pytest.raises(DocumentTooLarge):
        WriteLock(collection).acquire({"_id": 1})
