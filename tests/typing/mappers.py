"""Public usages of the mapper integrations that must type-check under mypy --strict."""

from __future__ import annotations

from typing import Any

from beanie import PydanticObjectId
from mongoengine import IntField

from docmultilock import AsyncRecordLocks, Lock, RecordLocks
from docmultilock.mappers import beanie, mongoengine
from docmultilock.mappers import django as django_models


class BeanieOrder(beanie.LockedDocument):
    total: int


class EngineOrder(mongoengine.LockedDocument):
    total = IntField()


async def beanie_usage(order: BeanieOrder, order_id: PydanticObjectId) -> None:
    orders: AsyncRecordLocks[BeanieOrder] = beanie.write_lock(BeanieOrder, lock_timeout=30.0)
    lock: Lock = await orders.acquire(order)
    await orders.save(order, lock)
    lock = await orders.extend(order_id, lock, lock_timeout=60)
    await orders.release(str(order_id), lock)
    async with orders.hold(order, wait=5.0) as held:
        await orders.save(order, held.lock)
    tagged = beanie.multi_lock(BeanieOrder, lock_timeouts={"read": 2.0, "write": 20.0})
    await tagged.acquire(order, tag="read")


def mongoengine_usage(order: EngineOrder) -> None:
    orders: RecordLocks[EngineOrder] = mongoengine.write_lock(EngineOrder, alias="shop")
    lock: Lock = orders.acquire(order, lock_timeout=5.0)
    orders.save(order, lock)
    orders.release(order.pk, lock)
    with orders.hold(order, wait=5.0) as held:
        orders.save(order, held.lock)
    orders.locks.hold_all(orders.keys([order]), wait=1.0)


def django_usage(model: type[Any], order: Any) -> None:
    """Django's models are Any to mypy (Django ships no type hints)."""
    orders: django_models.ModelLocks[Any] = django_models.write_lock(
        model, using="default", lock_timeout=10.0
    )
    as_records: RecordLocks[Any] = orders
    lock: Lock = as_records.acquire(order)
    orders.release(order.pk, lock)
    with orders.edit(order, wait=2.0) as held:
        held.record.status = "paid"
        held.save()
        later: Lock = held.lock
    orders.save(order, later)
    tagged = django_models.multi_lock(model, lock_timeouts={"read": 2.0, "write": 20.0})
    with tagged.edit(order.pk, tag="write") as written:
        written.save()
