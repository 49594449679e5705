"""Public usages that must type-check under mypy --strict (not run by pytest)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pymongo import MongoClient

from docmultilock import (
    AssertiveLock,
    CooperativeLock,
    HeldLock,
    HolderSnapshot,
    Lock,
    LockError,
    LockEvent,
    LockListener,
    LockSchema,
    LocksLeftBehind,
    LockSnapshot,
    MultiLock,
    NamedLocks,
    TooManyHolders,
    WriteLock,
)
from docmultilock.options import HoldOptions
from docmultilock.testing import EmbeddedServer


class HttpError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)


def to_http(err: LockError) -> HttpError:
    return HttpError(err.status_code)


def usage() -> None:
    with EmbeddedServer() as server:
        client: MongoClient[dict[str, Any]] = MongoClient(server.uri)
        orders = client.shop.orders
        wl = WriteLock(orders, lock_timeout=timedelta(seconds=5), error_factory=to_http)
        lock: Lock = wl.acquire({"_id": 1}, timeout=2.0, w=1)
        lock = wl.extend({"_id": 1}, lock, lock_timeout=10)
        guard: dict[str, Any] = wl.guard({"_id": 1}, lock)
        orders.update_one(guard, {"$set": {"total": 3}})
        wl.release({"_id": 1}, lock)

        snapshot: LockSnapshot = wl.inspect({"_id": 1})
        left: list[float] = [holder.seconds_left for holder in snapshot.holders]
        busy: bool = wl.locked({"_id": 1}, "write") or snapshot.locked()
        removed: tuple[HolderSnapshot, ...] = wl.break_lock({"_id": 1}, all_expired=True)
        assert left or busy or removed

        ml = MultiLock(
            orders,
            lock_timeouts={"read": 2.0, "write": 20.0},
            lock_relationships={
                "read": {"cooperative": ["write"]},
                "write": {"cooperative": ["write"], "assertive": ["read"]},
            },
        )
        try:
            lock = ml.acquire({"_id": 1}, tag="write")
        except AssertiveLock as err:
            lock = ml.acquire({"_id": 1}, lock=err.lock)
        except CooperativeLock as err:
            blocking: tuple[str, ...] = err.blocking_tags
            print(blocking, err.to_dict())
            return
        data: dict[str, Any] = LockSchema().dump(lock)
        loaded = LockSchema().load(data)
        assert isinstance(loaded, Lock)
        ml.release({"_id": 1}, loaded)

        exports = MultiLock(orders, lock_relationships={"export": {}}, lock_limits={"export": 3})
        try:
            exports.acquire({"_id": 1}, tag="export")
        except TooManyHolders as err:
            limited: str | None = err.tag
            most: int = err.limit
            print(limited, most)

        try:
            taken: list[Lock] = ml.acquire_all([{"_id": 1}, {"_id": 2}], tag="write")
        except LocksLeftBehind as err:
            for key, left_lock in err.left_behind:
                ml.release(key, left_lock)
            refusal: BaseException | None = err.__cause__
            print(refusal, err.failure.code)
        else:
            ml.release_all([{"_id": 1}, {"_id": 2}], taken)

        jobs = NamedLocks(client.shop, "locks", lock_timeout=300.0, w="majority")
        jobs.ensure_indexes(timeout=5.0)
        job: Lock = jobs.acquire("nightly-report")
        job = jobs.extend("nightly-report", job, lock_timeout=600)
        fenced: int = job.fence
        named_guard: dict[str, Any] = jobs.guard("nightly-report", job)
        print(fenced, named_guard)
        jobs.release("nightly-report", job)

        def on_lost(lost: Lock, error: LockError) -> None:
            print(lost.id, error.code)

        with ml.hold(
            {"_id": 1}, tag="write", wait=timedelta(seconds=5), keepalive=True, on_lost=on_lost
        ) as held:
            current: Lock = held.lock
            orders.update_one(held.guard(), {"$set": {"total": current.fence}})
            if held.lost.is_set():
                return
        with wl.hold({"_id": 1}, wait=2.0, backoff=(0.05, 1.0), extend_every=1.0, timeout=2):
            pass
        client.close()


def web_usage() -> None:
    from fastapi import FastAPI
    from starlette.applications import Starlette

    from docmultilock.http import install_problem_handler, problem_response

    api = FastAPI()
    install_problem_handler(api)
    api.add_exception_handler(LockError, problem_response)
    install_problem_handler(Starlette(exception_handlers={LockError: problem_response}))


class OnlyGrants(LockListener):
    """A listener overriding one method: accepted by every manager's ``listener=``."""

    def on_granted(self, event: LockEvent) -> None:
        kind: str = event.kind
        print(kind, event.removed)


def listening(orders: Any) -> None:
    locks = MultiLock(orders, listener=OnlyGrants())
    removed: tuple[HolderSnapshot, ...] = locks.break_lock({"_id": 1}, everyone=True)
    snapshot, doomed = locks.preview_break({"_id": 1}, all_expired=True)
    print(removed, snapshot.fence, [holder.malformed for holder in doomed])


def typed_options(orders: Any) -> None:
    """The ``**options`` are typed: a keyword not declared, or a value of the wrong type, fails."""
    locks = MultiLock(orders, lock_timout=5.0)  # type: ignore[call-arg]
    WriteLock(orders, lock_limits={"write": 1})  # type: ignore[call-arg]
    locks.acquire({"_id": 1}, tg="write")  # type: ignore[call-arg]
    locks.hold({"_id": 1}, wait="soon")  # type: ignore[arg-type]
    locks.break_lock({"_id": 1}, everyone="yes")  # type: ignore[arg-type]
    options: HoldOptions = {"tag": "write", "wait": 5.0, "keepalive": True}
    with locks.hold({"_id": 1}, **options), locks.hold_all([{"_id": 2}], **options):
        pass


def waiting_and_decorating(orders: Any, client: MongoClient[Any]) -> None:
    """``acquire(wait=...)`` and the ``holding()`` decorator keep the function's types."""
    locks = MultiLock(orders)
    jobs = NamedLocks(client.app)
    lock: Lock = locks.acquire({"_id": 1}, tag="write", wait=5.0, backoff=(0.01, 0.5))
    taken: list[Lock] = locks.acquire_all([{"_id": 1}], tag="read", wait=1.0, fair=True)
    locks.acquire({"_id": 1}, keepalive=True)  # type: ignore[call-arg]
    print(lock, taken)

    @jobs.holding("nightly-report", wait=60.0, keepalive=True)
    def report(day: str) -> int:
        return len(day)

    @locks.holding(lambda order_id: {"_id": order_id}, tag="write", pass_held=True)
    def pay(held: HeldLock, order_id: int) -> str:
        return held.lock.id

    count: int = report("monday")
    paid: str = pay(42)
    report(3)  # type: ignore[arg-type]
    print(count, paid)
