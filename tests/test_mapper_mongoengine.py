from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import mongoengine as me
import pytest
from bson import ObjectId
from bson.raw_bson import RawBSONDocument
from pymongo import MongoClient
from werkzeug.exceptions import Conflict

from docmultilock import (
    InvalidArgument,
    InvalidConfiguration,
    Lock,
    LockNotFound,
    LockWasReacquired,
    RecordLocks,
    ResourceNotFound,
)
from docmultilock.http import werkzeug_error
from docmultilock.mappers.mongoengine import LockedDocument, multi_lock, write_lock
from docmultilock.pytest_plugin import CLIENT_OPTIONS
from tests.helpers import lock_bytes, raw_reader


# Named apart from the docs' ``Order``: MongoEngine registers documents by class name, and
# disconnect() resets the cached collection only of the class registered under that name.
class ShopOrder(LockedDocument):
    number = me.IntField()
    total = me.IntField()
    note = me.StringField()
    meta = {"collection": "orders"}  # noqa: RUF012 - MongoEngine's declaration


class StrictOrder(me.Document):  # type: ignore[misc]  # MongoEngine ships no type hints
    total = me.IntField()
    meta = {"collection": "orders"}  # noqa: RUF012 - MongoEngine's declaration


class Customer(LockedDocument):
    name = me.StringField()
    meta = {"collection": "customers"}  # noqa: RUF012 - MongoEngine's declaration


@pytest.fixture
def database(uri: str) -> Iterator[str]:
    """A database of its own, on MongoEngine's default alias and on ``other``."""
    name = f"me_{uuid.uuid4().hex[:12]}"
    options = {**CLIENT_OPTIONS, "uuidRepresentation": "standard"}
    me.connect(name, host=uri, alias="default", **options)
    me.connect(f"{name}_other", host=uri, alias="other", **options)
    try:
        yield name
    finally:
        me.get_connection("default").drop_database(name)
        me.get_connection("other").drop_database(f"{name}_other")
        me.disconnect("default")
        me.disconnect("other")


@pytest.fixture
def orders(database: str) -> RecordLocks[ShopOrder]:
    return write_lock(ShopOrder, lock_timeout=30.0)


@pytest.fixture
def order(database: str) -> ShopOrder:
    made: ShopOrder = ShopOrder(number=7, total=10, note="new").save()
    return made


@pytest.fixture
def raw(client: MongoClient[Any], database: str) -> Callable[[Any], RawBSONDocument]:
    """The stored record, as bytes, read past the mapper."""
    return raw_reader(client[database]["orders"])


def test_a_guarded_save_of_a_held_record_lands_and_keeps_the_lock_field_byte_for_byte(
    orders: RecordLocks[ShopOrder], order: ShopOrder, raw: Callable[[Any], RawBSONDocument]
) -> None:
    lock = orders.acquire(order)
    before = lock_bytes(raw(order.pk))
    loaded = ShopOrder.objects.get(pk=order.pk)
    loaded.total = 11

    orders.save(loaded, lock)

    after = raw(order.pk)
    assert (after["total"], after["note"], after["number"]) == (11, "new", 7)
    assert lock_bytes(after) == before


def test_a_guarded_save_unsets_a_field_left_empty(
    orders: RecordLocks[ShopOrder], order: ShopOrder, raw: Callable[[Any], RawBSONDocument]
) -> None:
    lock = orders.acquire(order)
    order.note = None

    orders.save(order, lock)

    assert "note" not in raw(order.pk)


def test_a_guarded_save_leaves_a_field_the_model_does_not_declare_alone(
    orders: RecordLocks[ShopOrder], order: ShopOrder, client: MongoClient[Any], database: str
) -> None:
    client[database]["orders"].update_one({"_id": order.pk}, {"$set": {"audit": "kept"}})
    lock = orders.acquire(order)
    order.total = 11

    orders.save(order, lock)

    stored = client[database]["orders"].find_one({"_id": order.pk})
    assert stored is not None
    assert (stored["total"], stored["audit"]) == (11, "kept")


def test_a_guarded_save_of_a_record_loaded_with_only_unsets_the_fields_left_out(
    orders: RecordLocks[ShopOrder], order: ShopOrder, client: MongoClient[Any], database: str
) -> None:
    # Why the how-to says not to save a partly loaded record this way.
    lock = orders.acquire(order)
    partial = ShopOrder.objects.only("total").get(pk=order.pk)

    orders.save(partial, lock)

    stored = client[database]["orders"].find_one({"_id": order.pk})
    assert stored is not None
    assert "note" not in stored
    assert "lock" in stored


def test_a_guarded_save_of_an_invalid_record_raises_mongoengines_error_and_writes_nothing(
    orders: RecordLocks[ShopOrder], order: ShopOrder, raw: Callable[[Any], RawBSONDocument]
) -> None:
    lock = orders.acquire(order)
    before = raw(order.pk).raw
    order.total = "many"

    with pytest.raises(me.ValidationError):
        orders.save(order, lock)

    assert raw(order.pk).raw == before


def test_a_guarded_save_after_the_lock_was_broken_raises_and_writes_nothing(
    orders: RecordLocks[ShopOrder], order: ShopOrder, raw: Callable[[Any], RawBSONDocument]
) -> None:
    lock = orders.acquire(order)
    orders.locks.break_lock(orders.key(order), everyone=True)
    before = raw(order.pk).raw
    order.total = 99

    with pytest.raises(LockWasReacquired) as caught:
        orders.save(order, lock)

    assert caught.value.lock == lock
    assert raw(order.pk).raw == before


def test_a_guarded_save_after_the_lock_expired_raises_and_writes_nothing(
    orders: RecordLocks[ShopOrder], order: ShopOrder, raw: Callable[[Any], RawBSONDocument]
) -> None:
    lock = orders.acquire(order, lock_timeout=0.3)
    time.sleep(0.5)
    before = raw(order.pk).raw
    order.total = 99

    with pytest.raises(LockWasReacquired):
        orders.save(order, lock)

    assert raw(order.pk).raw == before


def test_a_guarded_save_with_nothing_changed_still_raises_after_the_loss(
    orders: RecordLocks[ShopOrder], order: ShopOrder
) -> None:
    lock = orders.acquire(order)
    orders.release(order, lock)

    with pytest.raises(LockWasReacquired):
        orders.save(order, lock)


def test_a_guarded_save_of_a_deleted_record_raises_resource_not_found(
    orders: RecordLocks[ShopOrder], order: ShopOrder
) -> None:
    lock = orders.acquire(order)
    ShopOrder.objects(pk=order.pk).delete()

    with pytest.raises(ResourceNotFound):
        orders.save(order, lock)


def test_a_stale_holder_cannot_save_over_the_next_holders_save(
    orders: RecordLocks[ShopOrder], order: ShopOrder
) -> None:
    stale = orders.acquire(order, lock_timeout=0.3)
    time.sleep(0.5)
    mine = ShopOrder.objects.get(pk=order.pk)
    fresh = orders.acquire(mine)
    mine.total = 20
    orders.save(mine, fresh)
    order.total = 30

    with pytest.raises(LockWasReacquired):
        orders.save(order, stale)

    assert fresh.fence > stale.fence
    assert ShopOrder.objects.get(pk=order.pk).total == 20


def test_concurrent_writers_through_the_mapper_lose_no_update(
    orders: RecordLocks[ShopOrder], order: ShopOrder
) -> None:
    def add_one_five_times() -> None:
        for _ in range(5):
            with orders.hold(order.pk, wait=30.0) as held:
                record = ShopOrder.objects.get(pk=order.pk)
                record.total += 1
                orders.save(record, held.lock)

    with ThreadPoolExecutor(3) as pool:
        for done in [pool.submit(add_one_five_times) for _ in range(3)]:
            done.result()

    assert ShopOrder.objects.get(pk=order.pk).total == 10 + 15


def test_a_multi_lock_save_after_the_loss_raises_lock_not_found(
    database: str, order: ShopOrder
) -> None:
    orders = multi_lock(ShopOrder)
    lock = orders.acquire(order, tag="write")
    orders.release(order, lock)

    with pytest.raises(LockNotFound) as caught:
        orders.save(order, lock)

    assert type(caught.value) is LockNotFound


def test_a_save_after_the_loss_is_raised_through_the_error_factory(
    database: str, order: ShopOrder
) -> None:
    orders = write_lock(ShopOrder, error_factory=werkzeug_error)
    lock = orders.acquire(order)
    orders.release(order, lock)

    with pytest.raises(Conflict) as caught:
        orders.save(order, lock)

    assert isinstance(caught.value.__cause__, LockWasReacquired)
    assert caught.value.get_response().status_code == 409


def save_total(record: ShopOrder) -> object:
    record.total = 12
    return record.save()


@pytest.mark.parametrize(
    "write",
    [
        pytest.param(save_total, id="save"),
        pytest.param(lambda o: o.update(set__total=12), id="update"),
        pytest.param(lambda o: o.modify(total=12), id="modify"),
        pytest.param(
            lambda o: ShopOrder.objects(pk=o.pk).update(set__total=12), id="objects-update"
        ),
        pytest.param(
            lambda o: ShopOrder.objects(pk=o.pk).update_one(set__total=12), id="objects-update_one"
        ),
        pytest.param(
            lambda o: ShopOrder.objects(pk=o.pk).modify(set__total=12), id="objects-modify"
        ),
    ],
)
def test_mongoengines_own_writes_of_a_loaded_record_keep_the_lock_field(
    orders: RecordLocks[ShopOrder],
    order: ShopOrder,
    raw: Callable[[Any], RawBSONDocument],
    write: Callable[[ShopOrder], object],
) -> None:
    orders.acquire(order)
    before = lock_bytes(raw(order.pk))

    write(ShopOrder.objects.get(pk=order.pk))

    after = raw(order.pk)
    assert after["total"] == 12
    assert lock_bytes(after) == before


def test_a_new_instance_with_a_stored_records_id_is_refused_and_the_lock_kept(
    orders: RecordLocks[ShopOrder], order: ShopOrder, raw: Callable[[Any], RawBSONDocument]
) -> None:
    orders.acquire(order)
    before = raw(order.pk).raw

    with pytest.raises(me.NotUniqueError):
        ShopOrder(pk=order.pk, total=1).save()

    assert raw(order.pk).raw == before


def test_a_strict_model_cannot_load_a_locked_record(
    orders: RecordLocks[ShopOrder], order: ShopOrder
) -> None:
    orders.acquire(order)

    with pytest.raises(me.FieldDoesNotExist):
        StrictOrder.objects.get(pk=order.pk)


def test_records_are_locked_by_the_record_its_id_or_its_id_as_a_string(
    orders: RecordLocks[ShopOrder], order: ShopOrder
) -> None:
    lock = orders.acquire(order)

    assert orders.key(order.pk) == orders.key(str(order.pk)) == {"_id": order.pk}
    assert orders.locked(str(order.pk))
    orders.release(order.pk, lock)
    assert not orders.locked(order)


@pytest.mark.parametrize(
    "key",
    [
        pytest.param("not-an-id", id="malformed-id"),
        pytest.param(Customer(name="x"), id="another-model"),
        pytest.param(ShopOrder(total=1), id="never-saved"),
    ],
)
def test_a_key_that_is_not_one_of_the_models_records_is_refused(
    orders: RecordLocks[ShopOrder], key: object
) -> None:
    with pytest.raises(InvalidArgument):
        orders.acquire(key)


def test_a_lock_of_another_record_is_refused_before_anything_is_written(
    orders: RecordLocks[ShopOrder], order: ShopOrder, raw: Callable[[Any], RawBSONDocument]
) -> None:
    other = ShopOrder(total=5).save()
    lock = orders.acquire(other)
    before = raw(order.pk).raw
    order.total = 99

    with pytest.raises(InvalidArgument):
        orders.save(order, lock)

    assert raw(order.pk).raw == before


def test_a_model_that_is_not_a_locked_document_is_refused(database: str) -> None:
    with pytest.raises(InvalidConfiguration, match="LockedDocument"):
        write_lock(StrictOrder)


def test_locks_follow_a_connection_alias(database: str, client: MongoClient[Any]) -> None:
    with me.context_managers.switch_db(ShopOrder, "other") as Other:
        stored = Other(total=1).save()
    orders = write_lock(ShopOrder, alias="other")

    lock = orders.acquire(stored)

    other = client[f"{database}_other"]["orders"].find_one({"_id": stored.pk})
    assert other is not None
    assert other["lock"]["holders"][0]["id"] == lock.id
    assert client[database]["orders"].count_documents({}) == 0


def test_the_guard_filters_mongoengines_own_query_updates(
    orders: RecordLocks[ShopOrder], order: ShopOrder
) -> None:
    lock = orders.acquire(order)
    guarded = ShopOrder.objects(__raw__=orders.guard(order, lock))

    assert guarded.update_one(set__total=12) == 1
    orders.release(order, lock)
    assert guarded.update_one(set__total=13) == 0
    assert ShopOrder.objects.get(pk=order.pk).total == 12


def test_hold_takes_a_record_and_saves_under_it(
    orders: RecordLocks[ShopOrder], order: ShopOrder
) -> None:
    with orders.hold(order) as held:
        order.total = 40
        orders.save(order, held.lock)
        assert isinstance(held.lock, Lock)

    assert ShopOrder.objects.get(pk=order.pk).total == 40
    assert not orders.locked(order)


def test_an_id_of_the_right_type_is_used_as_is(orders: RecordLocks[ShopOrder]) -> None:
    _id = ObjectId()

    assert orders.key(_id) == {"_id": _id}
