"""Where the embedded server departs from MongoDB, pinned so a fix shows up.

Each ``test_mongodb_*`` asserts MongoDB's documented behaviour; on the embedded server it is
a strict xfail, so the day SecantusDB fixes the departure the xfail passes, the suite fails,
and the workaround in ``docmultilock/_expr.py`` can be reconsidered. Each ``test_workaround_*``
checks that the form the library uses is right on whichever server runs the suite.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from pymongo.collection import Collection

from docmultilock import DocumentTooLarge, WriteLock
from docmultilock._expr import SERVER_NOW, each, field_or_null

Doc = dict[str, Any]
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
