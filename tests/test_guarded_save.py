"""The guarded save of a mapper's record without a server: its update, its checks, its flow."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest
from pymongo import AsyncMongoClient, MongoClient

from docmultilock import (
    AsyncMultiLock,
    InvalidArgument,
    Lock,
    LockNotFound,
    LockWasReacquired,
    MultiLock,
    ResourceNotFound,
    WriteLock,
)
from docmultilock.mappers._guarded import Exists, GuardedSave, Update, plan_save, save_flow

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
LOCK = Lock(id="a" * 32, tag="write", document_id=1, acquired_at=NOW, expires_at=NOW, fence=1)


@pytest.fixture(scope="module")
def locks() -> WriteLock:
    # Never connects: a guarded save is planned without the server.
    client: MongoClient[Any] = MongoClient(connect=False)
    return WriteLock(client.db.orders, field="lock")


def test_a_save_sets_and_unsets_the_fields_filtered_by_the_key_and_the_guard(
    locks: WriteLock,
) -> None:
    plan = plan_save(locks, {"_id": 1}, LOCK, set_fields={"total": 2}, unset_fields=["note"])

    assert plan.update == {"$set": {"total": 2}, "$unset": {"note": ""}}
    assert plan.guarded == locks.guard({"_id": 1}, LOCK)
    assert plan.key == {"_id": 1}


@pytest.mark.parametrize("path", ["lock", "lock.holders", "_id", "_id.x", "$set", "", "a\0b", 3])
@pytest.mark.parametrize("how", ["set", "unset"])
def test_a_save_refuses_the_lock_field_the_id_and_what_is_not_a_field_path(
    locks: WriteLock, path: Any, how: str
) -> None:
    fields: dict[str, Any] = (
        {"set_fields": {path: 1}}
        if how == "set"
        else {
            "set_fields": {},
            "unset_fields": [path],
        }
    )
    with pytest.raises(InvalidArgument):
        plan_save(locks, {"_id": 1}, LOCK, **fields)


def test_a_save_refuses_a_field_both_set_and_unset(locks: WriteLock) -> None:
    with pytest.raises(InvalidArgument, match="both set and unset: note"):
        plan_save(locks, {"_id": 1}, LOCK, set_fields={"note": 1}, unset_fields=["note"])


def test_a_save_refuses_a_lock_of_another_document(locks: WriteLock) -> None:
    with pytest.raises(InvalidArgument, match="belongs to document 1"):
        plan_save(locks, {"_id": 2}, LOCK, set_fields={"total": 1})


def test_a_save_of_a_renamed_lock_field_refuses_that_field() -> None:
    client: MongoClient[Any] = MongoClient(connect=False)
    locks = WriteLock(client.db.orders, field="held_by")

    with pytest.raises(InvalidArgument, match="held_by"):
        plan_save(locks, {"_id": 1}, LOCK, set_fields={"held_by.x": 1})
    assert plan_save(locks, {"_id": 1}, LOCK, set_fields={"lock": 1}).update == {
        "$set": {"lock": 1}
    }


def test_the_loss_error_is_the_managers_own() -> None:
    client: MongoClient[Any] = MongoClient(connect=False)
    aclient: AsyncMongoClient[Any] = AsyncMongoClient(connect=False)
    shared = plan_save(MultiLock(client.db.o), {"_id": 1}, LOCK, set_fields={"a": 1})
    async_shared = plan_save(AsyncMultiLock(aclient.db.o), {"_id": 1}, LOCK, set_fields={"a": 1})
    exclusive = plan_save(WriteLock(client.db.o), {"_id": 1}, LOCK, set_fields={"a": 1})

    assert (shared.lost, async_shared.lost, exclusive.lost) == (
        LockNotFound,
        LockNotFound,
        LockWasReacquired,
    )


def run(plan: GuardedSave, replies: list[object]) -> list[object]:
    """Run the save's flow on scripted replies; return the effects it yielded."""
    flow = save_flow(plan)
    effects: list[object] = [next(flow)]
    for reply in replies:
        try:
            effects.append(flow.send(reply))
        except StopIteration:
            break
    return effects


def test_a_save_that_matched_is_one_update(locks: WriteLock) -> None:
    plan = plan_save(locks, {"_id": 1}, LOCK, set_fields={"total": 2})

    assert run(plan, [1]) == [Update(plan.guarded, plan.update)]


def test_a_save_that_matched_nothing_reads_once_and_raises_the_loss(locks: WriteLock) -> None:
    plan = plan_save(locks, {"_id": 1}, LOCK, set_fields={"total": 2})

    with pytest.raises(LockWasReacquired, match="nothing was written") as caught:
        run(plan, [0, True])

    assert caught.value.lock == LOCK


def test_a_save_of_a_record_that_is_gone_raises_resource_not_found(locks: WriteLock) -> None:
    plan = plan_save(locks, {"_id": 1}, LOCK, set_fields={"total": 2})

    with pytest.raises(ResourceNotFound):
        run(plan, [0, False])


def test_a_save_with_nothing_to_write_reads_whether_the_lock_is_held(locks: WriteLock) -> None:
    plan = plan_save(locks, {"_id": 1}, LOCK, set_fields={})

    assert run(plan, [True]) == [Exists(plan.guarded)]
    with pytest.raises(LockWasReacquired):
        run(plan, [False, True])
