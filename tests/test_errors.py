"""The error tree: status codes, data, printing and pickling."""

from __future__ import annotations

import json
import pickle
from datetime import datetime, timezone

import pytest
from bson import ObjectId
from pymongo.errors import OperationFailure

import docmultilock
from docmultilock import (
    AssertiveLock,
    CooperativeLock,
    DbError,
    DbTimeout,
    DocumentTooLarge,
    IncompatibleLockField,
    InvalidArgument,
    InvalidConfiguration,
    Lock,
    LockAlreadyTaken,
    LockConflict,
    LockConverted,
    LockError,
    LockNotFound,
    LocksLeftBehind,
    LockTimeout,
    LockWasReacquired,
    ResourceNotFound,
    TooManyHolders,
)
from docmultilock._failures import translate

LOCK = Lock(
    id="0" * 32,
    tag="write",
    document_id=ObjectId("5f0000000000000000000001"),
    acquired_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
    expires_at=datetime(2026, 1, 1, 0, 0, 10, tzinfo=timezone.utc),
    fence=0,
    pending=True,
)


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (ResourceNotFound, 404),
        (LockConflict, 409),
        (CooperativeLock, 409),
        (LockAlreadyTaken, 409),
        (AssertiveLock, 409),
        (LockNotFound, 409),
        (LockWasReacquired, 409),
        (LockConverted, 409),
        (LockTimeout, 409),
        (DbError, 500),
        (DbTimeout, 504),
        (LocksLeftBehind, 500),
        (IncompatibleLockField, 500),
        (TooManyHolders, 409),
        (DocumentTooLarge, 507),
    ],
)
def test_each_error_carries_its_http_status(error: type[LockError], status: int) -> None:
    assert error.status_code == status


def test_the_tree_lets_one_except_catch_both_lock_classes_refusals() -> None:
    assert issubclass(LockAlreadyTaken, CooperativeLock)
    assert issubclass(LockWasReacquired, LockNotFound)
    for conflict in (CooperativeLock, AssertiveLock, LockNotFound, LockTimeout):
        assert issubclass(conflict, LockConflict)
    assert issubclass(LockTimeout, TimeoutError)
    assert issubclass(DbTimeout, DbError)
    assert issubclass(DbTimeout, TimeoutError)
    assert issubclass(LocksLeftBehind, DbError)


def test_configuration_errors_are_value_errors_not_lock_errors() -> None:
    assert issubclass(InvalidConfiguration, ValueError)
    assert issubclass(InvalidArgument, TypeError)
    assert not issubclass(InvalidConfiguration, LockError)


def test_code_is_the_class_name() -> None:
    assert LockAlreadyTaken("x").code == "LockAlreadyTaken"


def test_an_error_prints_its_message() -> None:
    err = ResourceNotFound("no document matches", filter={"_id": 1})
    assert str(err) == "no document matches"
    assert repr(err) == "ResourceNotFound('no document matches')"


def test_to_dict_is_json_safe_with_bson_values() -> None:
    err = CooperativeLock(
        "held", filter={"_id": ObjectId("5f0000000000000000000001")}, blocking_tags=("write",)
    )
    data = err.to_dict()
    assert data == {
        "code": "CooperativeLock",
        "status_code": 409,
        "message": "held",
        "filter": {"_id": {"$oid": "5f0000000000000000000001"}},
        "blocking_tags": ["write"],
    }
    json.dumps(data)


def test_assertive_lock_to_dict_includes_the_pending_lock() -> None:
    data = AssertiveLock("wait", lock=LOCK, blocking_tags=("read",)).to_dict()
    assert data["lock"]["id"] == LOCK.id
    assert data["lock"]["pending"] is True
    json.dumps(data)


@pytest.mark.parametrize(
    "err",
    [
        ResourceNotFound("gone", filter={"_id": 1}),
        CooperativeLock("held", filter={"_id": 1}, blocking_tags=("write",)),
        LockAlreadyTaken("held", filter={"_id": 1}, blocking_tags=("write",)),
        AssertiveLock("wait", filter={"_id": 1}, lock=LOCK, blocking_tags=("read",)),
        LockWasReacquired("lost", filter={"_id": 1}, lock=LOCK),
        LockConverted("spent", filter={"_id": 1}, lock=LOCK, tag="read", fence=7),
        DbTimeout("slow", filter={"_id": 1}),
        TooManyHolders("full", filter={"_id": 1}, limit=1000),
        DocumentTooLarge("too large", filter={"_id": 1}),
        LockTimeout("gave up", filter={"_id": 1}, attempts=4, waited=1.5, blocking_tags=("write",)),
        LocksLeftBehind.after(
            LockTimeout("gave up", filter={"_id": 1}, attempts=1, waited=0.1),
            [({"_id": 1}, LOCK)],
            DbError("down"),
        ),
    ],
    ids=lambda e: type(e).__name__,
)
def test_errors_pickle_with_their_data(err: LockError) -> None:
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is type(err)
    assert again.to_dict() == err.to_dict()
    assert str(again) == str(err)


def test_locks_left_behind_names_each_lock_and_its_key() -> None:
    refusal = LockTimeout("gave up", filter={"_id": 1}, attempts=1, waited=0.1)
    key = {"_id": ObjectId("5f0000000000000000000001")}
    err = LocksLeftBehind.after(refusal, [(key, LOCK)], DbError("down"))
    assert err.filter == {"_id": 1}
    for told in (LOCK.id, "gave up", "down"):
        assert told in str(err)
    [left] = err.to_dict()["left_behind"]
    assert left["key"] == {"_id": {"$oid": "5f0000000000000000000001"}}
    assert (left["lock"]["id"], left["lock"]["pending"]) == (LOCK.id, True)
    json.dumps(err.to_dict())


def test_lock_timeout_carries_how_long_it_waited() -> None:
    err = LockTimeout("gave up after 1.5 s", attempts=4, waited=1.5, blocking_tags=("read",))
    assert str(err) == "gave up after 1.5 s"
    assert repr(err) == "LockTimeout('gave up after 1.5 s')"
    assert err.to_dict() == {
        "code": "LockTimeout",
        "status_code": 409,
        "message": "gave up after 1.5 s",
        "filter": None,
        "attempts": 4,
        "waited": 1.5,
        "blocking_tags": ["read"],
    }
    again = pickle.loads(pickle.dumps(err))
    assert (again.attempts, again.waited, again.blocking_tags) == (4, 1.5, ("read",))
    assert isinstance(again, TimeoutError)


def test_invalid_configuration_names_every_problem_and_pickles() -> None:
    err = InvalidConfiguration({"lock_timeout": ["must be positive"], "w": ["bad"]})
    assert str(err) == "invalid configuration: lock_timeout: ['must be positive']; w: ['bad']"
    again = pickle.loads(pickle.dumps(err))
    assert again.problems == err.problems


def test_the_public_api_is_sorted_and_importable() -> None:
    names = docmultilock.__all__
    assert list(names) == sorted(names)
    for name in names:
        assert hasattr(docmultilock, name)


def test_too_many_holders_is_a_refusal_hold_waits_on() -> None:
    err = TooManyHolders("full", filter={"_id": 1}, limit=3)
    assert isinstance(err, CooperativeLock)
    assert err.to_dict()["limit"] == 3


@pytest.mark.parametrize("code", [10334, 17419, 17420])
def test_a_reply_too_large_for_a_document_becomes_document_too_large(code: int) -> None:
    message = "Resulting document after update is larger than 16777216"
    failure = OperationFailure(message, code, {"ok": 0, "code": code, "errmsg": message})
    err = translate(failure, "acquire", {"_id": 1})
    assert type(err) is DocumentTooLarge
    assert err.filter == {"_id": 1}


def _conversion_failure(quoted: str) -> OperationFailure:
    """The server's error for a string ``$toInt`` could not convert (MongoDB's wording)."""
    message = (
        f"Failed to parse number '{quoted}' in $convert with no onError value: Did not "
        "consume whole string."
    )
    return OperationFailure(message, 241, {"ok": 0, "code": 241, "errmsg": message})


def test_a_command_failed_on_a_foreign_lock_field_becomes_incompatible_lock_field() -> None:
    failure = _conversion_failure("docmultilock: field 'lock' holds data of type string")
    err = translate(failure, "acquire", {"_id": 1})
    assert type(err) is IncompatibleLockField
    assert err.filter == {"_id": 1}
    assert "field 'lock'" in str(err)
    assert "of type string" in str(err)


def test_a_conversion_failure_of_another_expression_stays_a_database_error() -> None:
    err = translate(_conversion_failure("abc"), "acquire", {"_id": 1})
    assert type(err) is DbError
