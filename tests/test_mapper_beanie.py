from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest
from beanie import BulkWriter, Document, PydanticObjectId, init_beanie
from bson.raw_bson import RawBSONDocument
from pydantic import ConfigDict, Field, ValidationError
from pymongo import AsyncMongoClient, MongoClient
from pymongo.results import UpdateResult

from docmultilock import (
    AsyncRecordLocks,
    InvalidArgument,
    InvalidConfiguration,
    LockNotFound,
    LockWasReacquired,
    ResourceNotFound,
)
from docmultilock.http import to_problem
from docmultilock.mappers.beanie import LockedDocument, multi_lock, write_lock
from docmultilock.pytest_plugin import CLIENT_OPTIONS
from tests.flavours import Portal
from tests.helpers import lock_bytes, raw_reader

T = TypeVar("T")


class Order(LockedDocument):
    number: int
    total: int = Field(ge=0)
    note: str | None = None

    class Settings:
        name = "orders"
        use_state_management = True
        validate_on_save = True


class Untracked(LockedDocument):
    total: int
    note: str | None = None

    class Settings:
        name = "orders"


class Loose(LockedDocument):
    """A model that keeps the fields it does not declare: the lock field is loaded too."""

    model_config = ConfigDict(extra="allow")
    total: int

    class Settings:
        name = "orders"
        use_state_management = True


class Plain(Document):
    total: int

    class Settings:
        name = "orders"


class Customer(LockedDocument):
    name: str

    class Settings:
        name = "customers"


class Beanie:
    """One test's database, initialised for Beanie; ``run`` runs a coroutine on the portal."""

    def __init__(self, portal: Portal, uri: str) -> None:
        self.portal = portal
        self.name = f"be_{uuid.uuid4().hex[:12]}"
        self.client: AsyncMongoClient[Any] = AsyncMongoClient(uri, **CLIENT_OPTIONS)

    def run(self, awaitable: Awaitable[T]) -> T:
        async def awaited() -> T:
            return await awaitable

        return self.portal.call(awaited())

    async def init(self) -> None:
        models = [Order, Untracked, Loose, Plain, Customer]
        await init_beanie(database=self.client[self.name], document_models=models)

    async def close(self) -> None:
        await self.client.drop_database(self.name)
        await self.client.close()


@pytest.fixture
def beanie(portal: Portal, uri: str) -> Iterator[Beanie]:
    made = Beanie(portal, uri)
    made.run(made.init())
    try:
        yield made
    finally:
        made.run(made.close())


@pytest.fixture
def orders(beanie: Beanie) -> AsyncRecordLocks[Order]:
    return write_lock(Order, lock_timeout=30.0)


@pytest.fixture
def order(beanie: Beanie) -> Order:
    return beanie.run(Order(number=7, total=10, note="new").insert())


@pytest.fixture
def raw(client: MongoClient[Any], beanie: Beanie) -> Callable[[Any], RawBSONDocument]:
    """The stored record, as bytes, read past the mapper."""
    return raw_reader(client[beanie.name]["orders"])


async def loaded(record: Order) -> Order:
    found = await Order.get(record.id)
    assert found is not None
    return found


def test_a_guarded_save_of_a_held_record_lands_and_keeps_the_lock_field_byte_for_byte(
    beanie: Beanie,
    orders: AsyncRecordLocks[Order],
    order: Order,
    raw: Callable[[Any], RawBSONDocument],
) -> None:
    lock = beanie.run(orders.acquire(order))
    before = lock_bytes(raw(order.id))
    record = beanie.run(loaded(order))
    record.total = 11

    beanie.run(orders.save(record, lock))

    after = raw(order.id)
    assert (after["total"], after["note"], after["number"]) == (11, "new", 7)
    assert lock_bytes(after) == before
    assert record.get_changes() == {}


def test_a_guarded_save_writes_only_the_changed_fields_under_state_management(
    beanie: Beanie, orders: AsyncRecordLocks[Order], order: Order, client: MongoClient[Any]
) -> None:
    lock = beanie.run(orders.acquire(order))
    record = beanie.run(loaded(order))
    client[beanie.name]["orders"].update_one({"_id": order.id}, {"$set": {"note": "theirs"}})
    record.total = 11

    beanie.run(orders.save(record, lock))

    stored = client[beanie.name]["orders"].find_one({"_id": order.id})
    assert stored is not None
    assert (stored["total"], stored["note"]) == (11, "theirs")


def test_a_guarded_save_without_state_management_writes_every_field_and_keeps_the_lock(
    beanie: Beanie, order: Order, raw: Callable[[Any], RawBSONDocument]
) -> None:
    untracked = write_lock(Untracked)
    record = beanie.run(Untracked.get(order.id))
    assert record is not None
    lock = beanie.run(untracked.acquire(record))
    before = lock_bytes(raw(order.id))
    record.total = 11

    beanie.run(untracked.save(record, lock))

    after = raw(order.id)
    assert (after["total"], after["number"]) == (11, 7)
    assert lock_bytes(after) == before


def test_a_guarded_save_of_a_model_that_loads_the_lock_field_leaves_it_alone(
    beanie: Beanie, order: Order, raw: Callable[[Any], RawBSONDocument]
) -> None:
    loose = write_lock(Loose)
    lock = beanie.run(loose.acquire(order.id))
    before = lock_bytes(raw(order.id))
    record = beanie.run(Loose.get(order.id))
    assert record is not None
    record.lock = {"stale": True}  # an extra field, kept by extra="allow"
    record.total = 11

    beanie.run(loose.save(record, lock))

    after = raw(order.id)
    assert after["total"] == 11
    assert lock_bytes(after) == before


def test_a_guarded_save_of_an_invalid_record_raises_pydantics_error_and_writes_nothing(
    beanie: Beanie,
    orders: AsyncRecordLocks[Order],
    order: Order,
    raw: Callable[[Any], RawBSONDocument],
) -> None:
    lock = beanie.run(orders.acquire(order))
    before = raw(order.id).raw
    order.total = -1  # assignments are not validated

    with pytest.raises(ValidationError):
        beanie.run(orders.save(order, lock))

    assert raw(order.id).raw == before


def test_a_guarded_save_after_the_lock_was_broken_raises_and_writes_nothing(
    beanie: Beanie,
    orders: AsyncRecordLocks[Order],
    order: Order,
    raw: Callable[[Any], RawBSONDocument],
) -> None:
    lock = beanie.run(orders.acquire(order))
    beanie.run(orders.locks.break_lock(orders.key(order), everyone=True))
    before = raw(order.id).raw
    order.total = 99

    with pytest.raises(LockWasReacquired) as caught:
        beanie.run(orders.save(order, lock))

    assert caught.value.lock == lock
    assert raw(order.id).raw == before


def test_a_guarded_save_after_the_lock_expired_raises_and_writes_nothing(
    beanie: Beanie,
    orders: AsyncRecordLocks[Order],
    order: Order,
    raw: Callable[[Any], RawBSONDocument],
) -> None:
    lock = beanie.run(orders.acquire(order, lock_timeout=0.3))
    beanie.run(asyncio.sleep(0.5))
    before = raw(order.id).raw
    order.total = 99

    with pytest.raises(LockWasReacquired):
        beanie.run(orders.save(order, lock))

    assert raw(order.id).raw == before


def test_a_guarded_save_of_a_deleted_record_raises_resource_not_found(
    beanie: Beanie, orders: AsyncRecordLocks[Order], order: Order
) -> None:
    lock = beanie.run(orders.acquire(order))
    beanie.run(order.delete())

    with pytest.raises(ResourceNotFound):
        beanie.run(orders.save(order, lock))


def test_a_stale_holder_cannot_save_over_the_next_holders_save(
    beanie: Beanie, orders: AsyncRecordLocks[Order], order: Order
) -> None:
    stale = beanie.run(orders.acquire(order, lock_timeout=0.3))
    beanie.run(asyncio.sleep(0.5))
    mine = beanie.run(loaded(order))
    fresh = beanie.run(orders.acquire(mine))
    mine.total = 20
    beanie.run(orders.save(mine, fresh))
    order.total = 30

    with pytest.raises(LockWasReacquired):
        beanie.run(orders.save(order, stale))

    assert fresh.fence > stale.fence
    assert beanie.run(loaded(order)).total == 20


def test_concurrent_writers_through_the_mapper_lose_no_update(
    beanie: Beanie, orders: AsyncRecordLocks[Order], order: Order
) -> None:
    async def add_one_five_times() -> None:
        for _ in range(5):
            async with orders.hold(order.id, wait=30.0) as held:
                record = await loaded(order)
                await asyncio.sleep(0)  # let the other writers run between load and save
                record.total += 1
                await orders.save(record, held.lock)

    async def three_writers() -> None:
        await asyncio.gather(*(add_one_five_times() for _ in range(3)))

    beanie.run(three_writers())

    assert beanie.run(loaded(order)).total == 10 + 15


def test_a_multi_lock_save_after_the_loss_raises_lock_not_found_answered_409(
    beanie: Beanie, order: Order
) -> None:
    orders = multi_lock(Order)
    lock = beanie.run(orders.acquire(order, tag="write"))
    beanie.run(orders.release(order, lock))

    with pytest.raises(LockNotFound) as caught:
        beanie.run(orders.save(order, lock))

    assert type(caught.value) is LockNotFound
    assert to_problem(caught.value)["status"] == 409


async def save_total(record: Order) -> object:
    record.total = 12
    return await record.save()


async def save_changes(record: Order) -> object:
    record.total = 12
    return await record.save_changes()


async def bulk_save_changes(record: Order) -> None:
    async with BulkWriter() as writer:
        record.total = 12
        await record.save_changes(bulk_writer=writer)


async def save_new_instance(record: Order) -> object:
    return await Order(id=record.id, number=7, total=12).save()


@pytest.mark.parametrize(
    "write",
    [
        pytest.param(save_total, id="save"),
        pytest.param(save_changes, id="save_changes"),
        pytest.param(bulk_save_changes, id="bulk-save_changes"),
        pytest.param(lambda o: o.set({Order.total: 12}), id="set"),
        pytest.param(lambda o: o.update({"$set": {"total": 12}}), id="update"),
        pytest.param(
            lambda o: Order.find(Order.id == o.id).update({"$set": {"total": 12}}),
            id="find-update",
        ),
        pytest.param(save_new_instance, id="save-of-a-new-instance"),
    ],
)
def test_beanies_own_writes_of_a_locked_record_keep_the_lock_field(
    beanie: Beanie,
    orders: AsyncRecordLocks[Order],
    order: Order,
    raw: Callable[[Any], RawBSONDocument],
    write: Callable[[Order], Awaitable[object]],
) -> None:
    beanie.run(orders.acquire(order))
    before = lock_bytes(raw(order.id))

    async def written() -> None:
        await write(await loaded(order))

    beanie.run(written())

    after = raw(order.id)
    assert after["total"] == 12
    assert lock_bytes(after) == before


@pytest.mark.parametrize(
    "write",
    [
        pytest.param(lambda o: o.replace(), id="replace"),
        pytest.param(lambda o: Order.replace_many([o]), id="replace_many"),
    ],
)
def test_replace_of_a_locked_document_is_refused_and_writes_nothing(
    beanie: Beanie,
    orders: AsyncRecordLocks[Order],
    order: Order,
    raw: Callable[[Any], RawBSONDocument],
    write: Callable[[Order], Awaitable[object]],
) -> None:
    beanie.run(orders.acquire(order))
    before = raw(order.id).raw
    order.total = 12

    with pytest.raises(InvalidArgument, match="lock field"):
        beanie.run(write(order))

    assert raw(order.id).raw == before


def test_replace_of_a_plain_document_erases_the_lock_field(
    beanie: Beanie, order: Order, client: MongoClient[Any]
) -> None:
    # Why LockedDocument refuses replace(): Beanie's own writes the record without it.
    orders = client[beanie.name]["orders"]
    beanie.run(write_lock(Order).acquire(order))
    record = beanie.run(Plain.get(order.id))
    assert record is not None

    beanie.run(record.replace())

    stored = orders.find_one({"_id": order.id})
    assert stored is not None
    assert "lock" not in stored


def test_a_query_replace_is_not_intercepted_and_erases_the_lock_field(
    beanie: Beanie, orders: AsyncRecordLocks[Order], order: Order, client: MongoClient[Any]
) -> None:
    # Why the how-to says never to use it on a lockable model.
    beanie.run(orders.acquire(order))

    beanie.run(Order.find_one(Order.id == order.id).replace_one(order))

    stored = client[beanie.name]["orders"].find_one({"_id": order.id})
    assert stored is not None
    assert "lock" not in stored


def test_beanies_save_of_a_model_that_loads_the_lock_field_writes_back_a_stale_copy(
    beanie: Beanie, order: Order, client: MongoClient[Any]
) -> None:
    # Why the how-to says not to let a lockable model keep the fields it does not declare.
    loose = write_lock(Loose)
    lock = beanie.run(loose.acquire(order.id, lock_timeout=30.0))
    record = beanie.run(Loose.get(order.id))
    assert record is not None
    beanie.run(loose.extend(order.id, lock, lock_timeout=600.0))

    beanie.run(record.save())

    stored = client[beanie.name]["orders"].find_one({"_id": order.id})
    assert stored is not None
    assert stored["lock"]["expires"] == lock.expires_at.replace(tzinfo=None)


def test_records_are_locked_by_the_record_its_id_or_its_id_as_a_string(
    beanie: Beanie, orders: AsyncRecordLocks[Order], order: Order
) -> None:
    lock = beanie.run(orders.acquire(order))

    assert orders.key(str(order.id)) == orders.key(order) == {"_id": order.id}
    assert isinstance(orders.key(str(order.id))["_id"], PydanticObjectId)
    assert beanie.run(orders.locked(str(order.id)))
    beanie.run(orders.release(order.id, lock))
    assert not beanie.run(orders.locked(order))


@pytest.mark.parametrize(
    "key",
    [
        pytest.param(lambda: "not-an-id", id="malformed-id"),
        pytest.param(lambda: None, id="none"),
        pytest.param(lambda: Customer(name="x"), id="another-model"),
        pytest.param(lambda: Order(number=1, total=1), id="never-inserted"),
    ],
)
def test_a_key_that_is_not_one_of_the_models_records_is_refused(
    beanie: Beanie, orders: AsyncRecordLocks[Order], key: Callable[[], object]
) -> None:
    with pytest.raises(InvalidArgument):
        beanie.run(orders.acquire(key()))


def test_a_lock_of_another_record_is_refused_before_anything_is_written(
    beanie: Beanie,
    orders: AsyncRecordLocks[Order],
    order: Order,
    raw: Callable[[Any], RawBSONDocument],
) -> None:
    other = beanie.run(Order(number=8, total=5).insert())
    lock = beanie.run(orders.acquire(other))
    before = raw(order.id).raw
    order.total = 99

    with pytest.raises(InvalidArgument):
        beanie.run(orders.save(order, lock))

    assert raw(order.id).raw == before


def test_a_model_that_is_not_a_locked_document_is_refused(beanie: Beanie) -> None:
    with pytest.raises(InvalidConfiguration, match="LockedDocument"):
        write_lock(Plain)


def test_a_model_init_beanie_has_not_set_up_is_refused() -> None:
    class Unset(LockedDocument):
        total: int

    with pytest.raises(InvalidConfiguration, match="init_beanie"):
        write_lock(Unset)


def test_a_model_defined_after_init_beanie_set_up_another_keeps_its_fields(
    beanie: Beanie,
) -> None:
    # The fixture's init_beanie set up LockedDocument too, as Beanie sets up a model's bases.
    class Late(LockedDocument):
        total: int = 0

        class Settings:
            name = "late"

    async def lock_one() -> bool:
        await init_beanie(database=beanie.client[beanie.name], document_models=[Late])
        late = await Late(total=3).insert()
        locks = write_lock(Late, lock_timeout=30.0)
        lock = await locks.acquire(late)
        held = await locks.locked(late)
        await locks.release(late, lock)
        return held

    assert Late().id is None
    assert beanie.run(lock_one())


def test_the_guard_filters_beanies_own_query_updates(
    beanie: Beanie, orders: AsyncRecordLocks[Order], order: Order
) -> None:
    lock = beanie.run(orders.acquire(order))
    guard = orders.guard(order, lock)

    async def guarded_update(total: int) -> int:
        result = await Order.find_one(guard).update({"$set": {"total": total}})
        assert isinstance(result, UpdateResult)
        return result.matched_count

    assert beanie.run(guarded_update(12)) == 1
    beanie.run(orders.release(order, lock))
    assert beanie.run(guarded_update(13)) == 0
    assert beanie.run(loaded(order)).total == 12


def test_hold_takes_a_record_and_saves_under_it(
    beanie: Beanie, orders: AsyncRecordLocks[Order], order: Order
) -> None:
    async def edit() -> None:
        async with orders.hold(order) as held:
            order.total = 40
            await orders.save(order, held.lock)

    beanie.run(edit())

    assert beanie.run(loaded(order)).total == 40
    assert not beanie.run(orders.locked(order))
