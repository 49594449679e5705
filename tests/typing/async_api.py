"""Public async usages that must type-check under mypy --strict (not run by pytest)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from pymongo import AsyncMongoClient
from pymongo.results import UpdateResult

from docmultilock import (
    AssertiveLock,
    AsyncHeldLock,
    AsyncMultiLock,
    AsyncNamedLocks,
    AsyncWriteLock,
    Lock,
    LockError,
    LockSchema,
)


async def usage(uri: str) -> None:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri)
    orders = client.shop.orders
    wl = AsyncWriteLock(orders, lock_timeout=timedelta(seconds=5))
    lock: Lock = await wl.acquire({"_id": 1}, timeout=2.0, w=1)
    lock = await wl.extend({"_id": 1}, lock, lock_timeout=10)
    guard: dict[str, Any] = wl.guard({"_id": 1}, lock)
    await orders.update_one(guard, {"$set": {"total": 3}})
    await wl.release({"_id": 1}, lock)

    ml = AsyncMultiLock(orders, lock_timeouts={"read": 2.0, "write": 20.0})
    try:
        lock = await ml.acquire({"_id": 1}, tag="write")
    except AssertiveLock as err:
        lock = await ml.acquire({"_id": 1}, lock=err.lock)
    loaded = LockSchema().load(LockSchema().dump(lock))
    assert isinstance(loaded, Lock)
    await ml.release({"_id": 1}, loaded)

    renders = AsyncNamedLocks(
        client.shop, "renders", lock_relationships={"render": {}}, lock_limits={"render": 3}
    )
    await renders.release("video-1", await renders.acquire("video-1", tag="render"))

    jobs = AsyncNamedLocks(client.shop, "locks", lock_timeout=300.0)
    await jobs.ensure_indexes(timeout=5.0)
    job: Lock = await jobs.acquire("nightly-report")
    await jobs.release("nightly-report", job)

    def on_lost(lost: Lock, error: LockError) -> None:
        print(lost.id, error.code)

    async with ml.hold(
        {"_id": 1}, tag="write", wait=timedelta(seconds=5), keepalive=True, on_lost=on_lost
    ) as held:
        holding: AsyncHeldLock = held
        current: Lock = holding.lock
        paid: UpdateResult = held.require(
            await orders.update_one(held.guard(), {"$set": {"total": current.fence}})
        )
        print(paid.modified_count)
        lost: asyncio.Event = held.lost
        if lost.is_set():
            return
    async with wl.hold({"_id": 1}, wait=2.0, backoff=(0.05, 1.0), timeout=2):
        pass
    await client.close()
