"""The keep-alive's threads: one stalled extension costs its own lock only, and its loss is on time.

The decisions themselves are tested without threads in ``test_renewals.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from pymongo import AsyncMongoClient, MongoClient
from pymongo.collection import Collection

from docmultilock import AsyncWriteLock, DbError, LockAlreadyTaken, WriteLock, _clock
from docmultilock._async.keepalive import EXTENSION_NAME, THREAD_NAME, AsyncExtender, AsyncJob
from docmultilock._sync.keepalive import Extender, Job
from docmultilock.pytest_plugin import CLIENT_OPTIONS
from tests.helpers import server_now, wait_until

Doc = dict[str, Any]

STALLED_APP = "docmultilock-test-stalled"


def keepalive_threads() -> int:
    return sum(thread.name.startswith(THREAD_NAME) for thread in threading.enumerate())


class Stuck:
    """A job whose extension hangs until released, recording what happened meanwhile."""

    def __init__(self, lifetime: float) -> None:
        self.released = threading.Event()
        self.in_flight = threading.Event()
        self.lost = threading.Event()
        self.lost_in_flight = False
        self.job = Job(self.extend, self.lose, lead=lifetime * 0.9)

    def extend(self, limit: float) -> float | None:
        self.in_flight.set()
        self.released.wait(30.0)
        self.in_flight.clear()
        return None

    def lose(self) -> None:
        self.lost_in_flight = self.in_flight.is_set()
        self.lost.set()


class Healthy:
    """A job whose extensions succeed at once."""

    def __init__(self, lifetime: float, every: float) -> None:
        self.lifetime = lifetime
        self.extensions = 0
        self.lost = threading.Event()
        self.job = Job(self.extend, self.lost.set, lead=lifetime - every)

    def extend(self, limit: float) -> float | None:
        self.extensions += 1
        return _clock.now() + self.lifetime


@pytest.fixture
def extender() -> Iterator[Extender]:
    """An extender of the test's own, with two slots."""
    wait_until(lambda: keepalive_threads() == 0)  # none left by an earlier test
    yield Extender(slots=2)
    wait_until(lambda: keepalive_threads() == 0)


def test_the_loss_is_told_at_the_estimate_while_the_extension_still_hangs(
    extender: Extender,
) -> None:
    stuck, healthy = Stuck(lifetime=1.0), Healthy(lifetime=1.0, every=0.2)
    extender.add(stuck.job, _clock.now() + 1.0)
    extender.add(healthy.job, _clock.now() + 1.0)
    assert stuck.lost.wait(10.0)
    assert stuck.lost_in_flight
    assert healthy.extensions >= 2
    assert not healthy.lost.is_set()
    stuck.released.set()
    extender.remove(healthy.job)
    extender.remove(stuck.job)


def test_remove_returns_only_once_the_extension_in_flight_returned(extender: Extender) -> None:
    stuck = Stuck(lifetime=10.0)
    extender.add(stuck.job, _clock.now() + 1.0)
    assert stuck.in_flight.wait(10.0)
    removing = threading.Thread(target=extender.remove, args=(stuck.job,))
    removing.start()
    removing.join(0.3)
    assert removing.is_alive()
    stuck.released.set()
    removing.join(10.0)
    assert not removing.is_alive()
    assert not stuck.in_flight.is_set()


def test_an_extender_with_nothing_to_keep_ends_its_threads(extender: Extender) -> None:
    healthy = Healthy(lifetime=0.5, every=0.1)
    extender.add(healthy.job, _clock.now() + 0.5)
    wait_until(lambda: healthy.extensions >= 2)
    assert keepalive_threads() >= 2  # the coordinator and a worker
    extender.remove(healthy.job)
    wait_until(lambda: keepalive_threads() == 0)


class AsyncStuck:
    """An async job whose extension hangs until cancelled; counts its extensions."""

    def __init__(self, lead: float = 0.9) -> None:
        self.started = 0
        self.lost = False
        self.job = AsyncJob(self.extend, self.lose, lead=lead)

    async def extend(self, limit: float) -> float | None:
        self.started += 1
        await asyncio.sleep(30.0)
        return None

    def lose(self) -> None:
        self.lost = True


def _extensions() -> list[asyncio.Task[Any]]:
    return [task for task in asyncio.all_tasks() if task.get_name() == EXTENSION_NAME]


def test_remove_returns_when_the_extension_in_flight_is_cancelled() -> None:
    async def main() -> None:
        extender, stuck = AsyncExtender(), AsyncStuck()
        extender.add(stuck.job, _clock.now() + 1.0)
        while not stuck.started:
            await asyncio.sleep(0.01)
        for task in _extensions():
            task.cancel()
        removing = asyncio.ensure_future(extender.remove(stuck.job))
        await asyncio.wait_for(removing, 5.0)

    asyncio.run(main())


def test_a_cancelled_extension_is_started_again_while_its_lock_is_kept() -> None:
    async def main() -> None:
        extender, stuck = AsyncExtender(), AsyncStuck(lead=2.9)
        extender.add(stuck.job, _clock.now() + 3.0)
        while not stuck.started:
            await asyncio.sleep(0.01)
        for task in _extensions():
            task.cancel()
        deadline = _clock.now() + 5.0
        while stuck.started < 2 and _clock.now() < deadline:
            await asyncio.sleep(0.01)
        assert stuck.started == 2
        assert not stuck.lost
        for task in _extensions():
            task.cancel()
        await asyncio.wait_for(extender.remove(stuck.job), 5.0)

    asyncio.run(main())


def test_an_event_loop_that_ends_while_an_extension_is_in_flight_ends() -> None:
    async def main() -> None:
        extender, stuck = AsyncExtender(), AsyncStuck()
        extender.add(stuck.job, _clock.now() + 1.0)

        async def holder() -> None:
            try:
                await asyncio.sleep(100)
            finally:  # as hold() leaves its block: the extender lets go of the lock
                await extender.remove(stuck.job)

        holding = asyncio.ensure_future(holder())
        while not stuck.started:
            await asyncio.sleep(0.01)
        assert not holding.done()
        # main returns: asyncio.run cancels the holder and the extension at once

    # On a thread of its own, so that a hang fails the test instead of stalling the suite.
    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    thread.join(10.0)
    assert not thread.is_alive()


@pytest.fixture
def stalled_collection(uri: str, collection: Collection[Doc]) -> Iterator[Collection[Doc]]:
    """The test collection through a client of its own, which a fail point can single out."""
    client: MongoClient[Doc] = MongoClient(uri, appName=STALLED_APP, **CLIENT_OPTIONS)
    try:
        yield client[collection.database.name][collection.name]
    finally:
        client.close()


@pytest.mark.slow
def test_a_stalled_extension_delays_neither_the_other_locks_nor_its_own_loss(
    client: MongoClient[Doc],
    collection: Collection[Doc],
    stalled_collection: Collection[Doc],
    fail_point: Callable[..., None],
) -> None:
    collection.insert_many([{"_id": i} for i in range(6)])
    with contextlib.ExitStack() as block:
        a = block.enter_context(
            WriteLock(stalled_collection).hold({"_id": 0}, keepalive=True, lock_timeout=6.0)
        )
        healthy = WriteLock(collection)
        bs = [
            block.enter_context(healthy.hold({"_id": i}, keepalive=True, lock_timeout=2.0))
            for i in range(1, 6)
        ]
        # A's first renewal (due 2 s after its grant) hangs past A's expiry; B's lifetimes
        # are shorter than that hang, so each B needs renewals while A's is stuck.
        fail_point(appName=STALLED_APP, blockConnection=True, blockTimeMS=6_000)
        a_expires = a.lock.expires_at
        for _ in range(8):  # 4 s: two B lifetimes, while A's renewal hangs
            time.sleep(0.5)
            for b in bs:
                guarded = collection.update_one(b.guard(), {"$inc": {"writes": 1}})
                assert guarded.matched_count == 1, f"{b} expired behind a stalled extension"
        assert not any(b.lost.is_set() for b in bs)
        assert a.lost.wait(10.0)
        assert server_now(client) < a_expires + timedelta(seconds=1)
        with pytest.raises(DbError):
            block.close()
    assert a.error is not None
    assert all(b.error is None for b in bs)


# -- a hold dropped without its exit ---------------------------------------------------------


def _free(collection: Collection[Doc]) -> bool:
    """True once no live entry holds document 1 (a new write lock is granted)."""
    probe = WriteLock(collection, lock_timeout=5.0)
    try:
        lock = probe.acquire({"_id": 1})
    except LockAlreadyTaken:
        return False
    probe.release({"_id": 1}, lock)
    return True


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_hold_dropped_without_its_exit_stops_being_renewed(
    collection: Collection[Doc],
    uri: str,
    flavour: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # python-redis-lock's test_auto_renewal_stops_after_gc, ported: a hold(keepalive=True)
    # entered and then garbage-collected without its exit must not keep its lock for ever.
    collection.insert_one({"_id": 1})
    if flavour == "sync":
        hold: Any = WriteLock(collection, lock_timeout=1.0).hold({"_id": 1}, keepalive=True)
        hold.__enter__()
        del hold
        gc.collect()
        wait_until(lambda: _free(collection), timeout=15.0)
    else:

        async def drop() -> None:
            client: AsyncMongoClient[Doc] = AsyncMongoClient(uri, **CLIENT_OPTIONS)
            try:
                locks = AsyncWriteLock(
                    client[collection.database.name][collection.name], lock_timeout=1.0
                )
                hold: Any = locks.hold({"_id": 1}, keepalive=True)
                await hold.__aenter__()
                del hold
                gc.collect()
                deadline = time.monotonic() + 15.0
                while not _free(collection):
                    assert time.monotonic() < deadline, "the dropped hold is still renewed"
                    await asyncio.sleep(0.1)
            finally:
                await client.close()

        asyncio.run(drop())
    assert "garbage-collected without leaving its block" in caplog.text
