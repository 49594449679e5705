"""hold(): waiting, keep-alive, loss and release, over every lock manager."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.collection import Collection

from docmultilock import (
    AssertiveLock,
    DbError,
    DbTimeout,
    HeldLock,
    InvalidArgument,
    Lock,
    LockConflict,
    LockError,
    LockNotFound,
    LockTimeout,
    MultiLock,
    ResourceNotFound,
    WriteLock,
)
from docmultilock._async.keepalive import SLOTS, THREAD_NAME
from docmultilock._backoff import Backoff
from docmultilock._flows import Clock
from docmultilock.testing import EmbeddedServer
from tests.flavours import Portal, Twins, flavoured
from tests.helpers import CommandLog, stored_lock, wait_until
from tests.subjects import Build, Manager, Subject

Doc = dict[str, Any]


@dataclass
class FakePacing:
    """A clock that moves only when the waiting loop sleeps; records every delay drawn."""

    then: Callable[[int], None] = lambda n: None  # run after sleep number n (1, 2, ...)
    now: float = 0.0
    sleeps: list[float] = field(default_factory=list)
    bounds: list[tuple[float, float]] = field(default_factory=list)
    draw: Callable[[float, float], float] = lambda low, high: high

    def install(self, locks: Manager) -> None:
        locks._clock = Clock(lambda: self.now, self.sleep, self.asleep, self.uniform)

    async def asleep(self, seconds: float) -> None:
        # On a worker thread: ``then`` may call the async flavour, which runs on this loop.
        await asyncio.to_thread(self.sleep, seconds)

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        self.then(len(self.sleeps))

    def uniform(self, low: float, high: float) -> float:
        self.bounds.append((low, high))
        return self.draw(low, high)


def assert_cancelled_wait_releases_pending(portal: Portal, locks: Any, doc: Doc) -> None:
    """Cancel a task waiting in ``hold(tag="write", wait=...)`` while its entry is pending."""
    manager = locks.wrapped
    attempts: list[int] = []

    async def wait_in_hold() -> None:
        async with manager.hold(doc, tag="write", wait=30.0, backoff=(0.05, 0.05)):
            raise AssertionError("granted beside a reader")

    async def cancel_after_the_pending_entry() -> None:
        task = asyncio.get_running_loop().create_task(wait_in_hold())
        while len(attempts) < 2:  # registered pending, then continued once
            await asyncio.sleep(0.02)
            entries = stored_lock(locks.collection)["holders"]
            if any(h["pending"] for h in entries):
                attempts.append(1)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    portal.call(cancel_after_the_pending_entry())


def extender_threads() -> int:
    """Keep-alive coordinators: one per process at most."""
    return sum(thread.name == THREAD_NAME for thread in threading.enumerate())


def keepalive_threads() -> int:
    """Every keep-alive thread: the coordinator and its workers."""
    return sum(thread.name.startswith(THREAD_NAME) for thread in threading.enumerate())


# -- the plain case ---------------------------------------------------------------------


def test_hold_holds_the_lock_in_the_block_and_releases_it_after(subject: Subject) -> None:
    with subject.hold() as held:
        assert [h["id"] for h in subject.holders()] == [held.lock.id]
        assert subject.is_refused()
        assert not held.lost.is_set()
    assert subject.holders() == []


def test_the_only_declared_tag_is_the_default(write_lock: WriteLock, doc: Doc) -> None:
    with write_lock.hold(doc) as held:
        assert held.lock.tag == "write"


def test_tag_is_required_when_several_are_declared(rw_lock: MultiLock, doc: Doc) -> None:
    with pytest.raises(InvalidArgument, match="give tag="), rw_lock.hold(doc):
        pass


@pytest.mark.parametrize(
    ("arguments", "complaint"),
    [
        ({"tag": "admin"}, "undeclared tag"),
        ({"wait": 0}, "wait"),
        ({"wait": "5"}, "wait"),
        ({"backoff": (0.5, 0.1)}, "backoff"),
        ({"backoff": (0, 1)}, "backoff"),
        ({"backoff": 1.0}, "backoff"),
        ({"keepalive": 1}, "keepalive"),
        ({"extend_every": 10.0, "lock_timeout": 3.0}, "extend_every"),
        ({"extend_every": -1}, "extend_every"),
        ({"on_lost": "print"}, "on_lost"),
        ({"lock_timeout": 0}, "lock_timeout"),
        ({"timeout": True}, "timeout"),
        ({"w": 0}, "w must"),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_written(
    subject: Subject, arguments: Doc, complaint: str
) -> None:
    kwargs = {"tag": subject.tag, **arguments}
    with pytest.raises(InvalidArgument, match=complaint), subject.locks.hold(subject.key, **kwargs):
        pass
    assert subject.stored() is None


def test_a_bad_key_is_refused(subject: Subject) -> None:
    with pytest.raises(InvalidArgument), subject.hold(key=42):
        pass


# -- waiting ------------------------------------------------------------------------------


def test_without_wait_a_refusal_is_raised_after_one_attempt(
    build: Build, counted: tuple[Collection[Doc], CommandLog]
) -> None:
    collection, log = counted
    subject = build(collection)
    with subject.hold():
        log.names.clear()
        with pytest.raises(LockConflict) as exc, subject.hold(subject.manager()):
            pass
        assert log.names == ["findAndModify"]
    assert not isinstance(exc.value, LockTimeout)


def test_wait_retries_with_backoff_until_the_lock_is_free(
    build: Build, counted: tuple[Collection[Doc], CommandLog]
) -> None:
    collection, log = counted
    subject = build(collection)
    waiter = subject.manager()
    with contextlib.ExitStack() as holding:
        holding.enter_context(subject.hold())
        fake = FakePacing(then=lambda n: holding.close() if n == 3 else None)
        fake.install(waiter)
        log.names.clear()
        with subject.hold(waiter, wait=5.0, backoff=(0.1, 0.3), wake="poll") as held:
            # Refused three times, granted at the fourth (the holder's release is between).
            assert log.names == ["findAndModify"] * 5
            assert [h["id"] for h in subject.holders()] == [held.lock.id]
    assert fake.sleeps == [0.2, 0.3, 0.3]


def test_backoff_delays_grow_exponentially_within_full_jitter(subject: Subject) -> None:
    fake = FakePacing(draw=random.Random(7).uniform)
    waiter = subject.manager()
    fake.install(waiter)
    with subject.hold(), pytest.raises(LockTimeout), subject.hold(waiter, wait=2.0, wake="poll"):
        pass
    low, high = 0.01, 0.8
    assert fake.bounds == [(low, min(high, low * 2**n)) for n in range(1, len(fake.bounds) + 1)]
    for (a, b), slept in zip(fake.bounds[:-1], fake.sleeps[:-1], strict=True):
        assert a <= slept <= b
    assert fake.sleeps[-1] <= fake.bounds[-1][1]  # the last one is cut at the deadline
    assert sum(fake.sleeps) == pytest.approx(2.0)


def test_the_backoff_ceiling_doubles_up_to_max_and_never_overflows() -> None:
    backoff = Backoff(0.01, 0.8)
    assert [backoff.bounds(n)[1] for n in range(1, 9)] == pytest.approx(
        [0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 0.8, 0.8]
    )
    assert backoff.bounds(10_000) == (0.01, 0.8)


def test_wait_ends_in_lock_timeout_with_the_last_refusal(subject: Subject) -> None:
    fake = FakePacing()
    waiter = subject.manager()
    fake.install(waiter)
    with subject.hold() as held:
        with (
            pytest.raises(LockTimeout) as exc,
            subject.hold(waiter, wait=1.0, backoff=(0.1, 0.4), wake="poll"),
        ):
            pass
        assert [h["id"] for h in subject.holders()] == [held.lock.id]
    err = exc.value
    assert isinstance(err, TimeoutError)
    assert isinstance(err, LockConflict)
    assert err.status_code == 409
    assert err.attempts == 4  # at 0, 0.2, 0.6 and 1.0 seconds
    assert err.waited == pytest.approx(1.0)
    assert err.blocking_tags == ("write",)
    assert isinstance(err.__cause__, LockConflict)
    assert "4 attempts" in str(err)


def test_a_pending_assertive_lock_is_continued_not_restarted(rw_lock: MultiLock, doc: Doc) -> None:
    reader = rw_lock.acquire(doc, tag="read")
    seen: list[list[str]] = []

    def then(n: int) -> None:
        seen.append([h["id"] for h in stored_lock(rw_lock.collection)["holders"]])
        if n == 2:
            rw_lock.release(doc, reader)

    FakePacing(then=then).install(rw_lock)
    with rw_lock.hold(doc, tag="write", wait=5.0, wake="poll") as held:
        assert not held.lock.pending
    pending_id = seen[0][1]
    assert seen == [[reader.id, pending_id], [reader.id, pending_id]]
    assert held.lock.id == pending_id


def test_a_pending_assertive_lock_is_released_on_timeout(rw_lock: MultiLock, doc: Doc) -> None:
    reader = rw_lock.acquire(doc, tag="read")
    FakePacing().install(rw_lock)
    with pytest.raises(LockTimeout) as exc, rw_lock.hold(doc, tag="write", wait=1.0, wake="poll"):
        pass
    assert isinstance(exc.value.__cause__, AssertiveLock)
    assert exc.value.blocking_tags == ("read",)
    assert [h["id"] for h in stored_lock(rw_lock.collection)["holders"]] == [reader.id]


def test_a_pending_assertive_lock_is_released_when_the_wait_is_interrupted(
    collection: Collection[Doc], doc: Doc, flavour: str, twins: Twins
) -> None:
    # An interrupt in a thread is KeyboardInterrupt; in a task, its cancellation.
    locks = flavoured(flavour, twins, MultiLock, collection)
    reader = locks.acquire(doc, tag="read")
    if flavour == "async":
        assert_cancelled_wait_releases_pending(twins.portal, locks, doc)
        assert [h["id"] for h in stored_lock(collection)["holders"]] == [reader.id]
        return
    rw_lock = locks

    def interrupt(n: int) -> None:
        raise KeyboardInterrupt

    FakePacing(then=interrupt).install(rw_lock)
    with pytest.raises(KeyboardInterrupt), rw_lock.hold(doc, tag="write", wait=5.0, wake="poll"):
        pass
    assert [h["id"] for h in stored_lock(rw_lock.collection)["holders"]] == [reader.id]


def test_without_wait_a_pending_assertive_lock_is_released_and_raised(
    rw_lock: MultiLock, doc: Doc
) -> None:
    reader = rw_lock.acquire(doc, tag="read")
    with pytest.raises(AssertiveLock), rw_lock.hold(doc, tag="write"):
        pass
    assert [h["id"] for h in stored_lock(rw_lock.collection)["holders"]] == [reader.id]


# -- keep-alive ----------------------------------------------------------------------------


@pytest.mark.slow
def test_keepalive_keeps_the_lock_well_past_its_lifetime(subject: Subject) -> None:
    with subject.hold(keepalive=True, lock_timeout=0.6) as held:
        first = held.lock
        time.sleep(2.0)
        assert subject.is_refused()
        assert subject.collection.update_one(held.guard(), {"$set": {"total": 11}}).matched_count
        assert held.lock.id == first.id
        assert held.lock.expires_at > first.expires_at
        assert not held.lost.is_set()
    assert subject.holders() == []


def test_a_stolen_lock_sets_lost_and_calls_on_lost_once(subject: Subject) -> None:
    calls: list[tuple[Lock, LockError]] = []
    with contextlib.ExitStack() as block:
        held = block.enter_context(
            subject.hold(
                keepalive=True,
                lock_timeout=0.6,
                on_lost=lambda lock, err: calls.append((lock, err)),
            )
        )
        subject.steal()
        assert held.lost.wait(10.0)
        with pytest.raises(LockNotFound) as exc:
            block.close()
    assert calls == [(held.lock, exc.value)]
    assert held.error is exc.value


@pytest.mark.slow
@pytest.mark.embedded_only("starts a server of its own and stops it under a held lock")
def test_a_stopped_server_sets_lost_and_the_loss_is_raised(
    build: Build,
) -> None:
    calls: list[LockError] = []
    with EmbeddedServer() as server:
        # A short server selection: closing the client after the server stopped waits for it.
        client: MongoClient[Doc] = MongoClient(
            server.uri, timeoutMS=5_000, serverSelectionTimeoutMS=1_000
        )
        try:
            subject = build(client["docmultilock_test"]["stopped"])
            locks = subject.manager(timeout=1.0)
            with contextlib.ExitStack() as block:
                held = block.enter_context(
                    subject.hold(
                        locks,
                        keepalive=True,
                        lock_timeout=1.5,
                        on_lost=lambda lock, err: calls.append(err),
                    )
                )
                server.stop()
                assert held.lost.wait(10.0)
                with pytest.raises(DbError):
                    block.close()
        finally:
            client.close()
    assert len(calls) == 1
    assert isinstance(calls[0], DbError)


def test_a_stalled_extension_gives_up_and_the_lock_counts_as_lost(
    subject: Subject, fail_point: Callable[..., None]
) -> None:
    with contextlib.ExitStack() as block:
        held = block.enter_context(subject.hold(keepalive=True, lock_timeout=0.9))
        fail_point(blockConnection=True, blockTimeMS=4000)
        assert held.lost.wait(10.0)
        assert isinstance(held.error, DbTimeout)
        with pytest.raises(DbTimeout):
            block.close()


def test_an_exception_from_on_lost_is_logged_not_raised(
    subject: Subject, caplog: pytest.LogCaptureFixture
) -> None:
    def on_lost(lock: Lock, err: LockError) -> None:
        raise RuntimeError("on_lost broke")

    with contextlib.ExitStack() as block:
        held = block.enter_context(subject.hold(keepalive=True, lock_timeout=0.6, on_lost=on_lost))
        subject.steal()
        assert held.lost.wait(10.0)
        with pytest.raises(LockNotFound):
            block.close()
    assert any("on_lost raised" in r.message and r.exc_info for r in caplog.records)


@pytest.mark.slow
def test_threads_holding_different_locks_share_one_extender_thread(sync_subject: Subject) -> None:
    subject = sync_subject
    wait_until(lambda: keepalive_threads() == 0)
    keys = [subject.new_key(i) for i in range(2, 7)]
    all_held = threading.Barrier(len(keys) + 1)
    checked = threading.Barrier(len(keys) + 1)
    results: list[object] = []

    def work(key: Doc) -> None:
        try:
            with subject.hold(key=key, keepalive=True, lock_timeout=0.6) as held:
                all_held.wait(10)
                checked.wait(10)
                update = subject.collection.update_one(held.guard(), {"$set": {"total": 1}})
                results.append(update.matched_count == 1 and not held.lost.is_set())
        except BaseException as exc:  # reported by the main thread
            results.append(exc)
            all_held.abort()
            checked.abort()

    threads = [threading.Thread(target=work, args=(key,)) for key in keys]
    for thread in threads:
        thread.start()
    all_held.wait(10)
    assert extender_threads() == 1
    time.sleep(1.5)  # more than twice the locks' lifetime
    assert keepalive_threads() <= 1 + SLOTS  # the coordinator and a bounded pool
    checked.wait(10)
    for thread in threads:
        thread.join(10)
    assert results == [True] * len(keys)
    wait_until(lambda: keepalive_threads() == 0)


def test_the_extender_thread_stops_when_nothing_is_held_and_starts_again(
    sync_subject: Subject,
) -> None:
    for _ in range(2):
        with sync_subject.hold(keepalive=True):
            assert extender_threads() == 1
        wait_until(lambda: keepalive_threads() == 0)


def test_the_keepalive_task_ends_when_nothing_is_held_and_starts_again(
    async_subject: Subject, portal: Portal
) -> None:
    subject = async_subject

    def keepalive_tasks() -> int:
        async def count() -> int:
            return sum(t.get_name() == THREAD_NAME for t in asyncio.all_tasks())

        return portal.call(count())

    for _ in range(2):
        with subject.hold(keepalive=True):
            assert keepalive_tasks() == 1
        wait_until(lambda: keepalive_tasks() == 0)
    assert keepalive_threads() == 0


# -- loss and release ------------------------------------------------------------------------


def test_the_loss_is_raised_after_a_block_that_ended_normally(subject: Subject) -> None:
    with pytest.raises(LockNotFound) as exc, subject.hold() as held:
        subject.steal()
    assert held.lost.is_set()
    assert exc.value.lock.id == held.lock.id


def test_an_expired_lock_is_reported_after_the_block_even_if_nobody_took_it(
    subject: Subject,
) -> None:
    with pytest.raises(LockNotFound), subject.hold(lock_timeout=0.2) as held:
        time.sleep(0.4)
    assert held.lost.is_set()
    assert subject.holders() == []


class SuspendableClocks:
    """The process's clocks around a simulated suspend of the machine (Linux semantics).

    While "suspended" both clocks stand still, so no thread of this process sees time pass,
    as when the machine sleeps; the server's clock runs on. On resume ``CLOCK_BOOTTIME`` has
    counted the span and ``time.monotonic`` has not.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._monotonic = time.monotonic
        self._clock_gettime = time.clock_gettime
        self._guard = threading.Lock()
        self._hidden = 0.0  # suspended seconds that monotonic does not count
        self._frozen: tuple[float, float] | None = None  # (monotonic, boottime) at suspend
        monkeypatch.setattr(time, "monotonic", self.monotonic)
        monkeypatch.setattr(time, "clock_gettime", self.clock_gettime)

    def monotonic(self) -> float:
        with self._guard:
            base = self._monotonic() if self._frozen is None else self._frozen[0]
            return base - self._hidden

    def clock_gettime(self, clock: int) -> float:
        with self._guard:
            if clock == time.CLOCK_BOOTTIME and self._frozen is not None:
                return self._frozen[1]
        return self._clock_gettime(clock)

    def suspend(self, seconds: float) -> None:
        with self._guard:
            self._frozen = (self._monotonic(), self._clock_gettime(time.CLOCK_BOOTTIME))
        time.sleep(seconds)
        with self._guard:
            self._hidden += self._monotonic() - self._frozen[0]
            self._frozen = None


@pytest.mark.skipif(not hasattr(time, "CLOCK_BOOTTIME"), reason="a Linux clock")
@pytest.mark.parametrize("keepalive", [False, True], ids=["plain", "keepalive"])
def test_a_lock_that_expired_while_the_machine_slept_is_reported_lost(
    subject: Subject, keepalive: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    clocks = SuspendableClocks(monkeypatch)
    calls: list[LockError] = []
    with contextlib.ExitStack() as block:
        held = block.enter_context(
            subject.hold(
                keepalive=keepalive, lock_timeout=1.0, on_lost=lambda lock, err: calls.append(err)
            )
        )
        clocks.suspend(2.5)  # past the lock's expiry by the server's clock
        late = subject.collection.update_one(held.guard(), {"$set": {"total": 2}})
        assert late.matched_count == 0
        with pytest.raises(LockError) as exc:
            block.close()
    assert held.lost.is_set()
    assert calls == [exc.value]


def test_guard_makes_a_write_after_the_loss_match_nothing(subject: Subject) -> None:
    with contextlib.ExitStack() as block:
        held = block.enter_context(subject.hold())
        assert subject.collection.update_one(held.guard(), {"$set": {"total": 1}}).matched_count
        subject.steal()
        late = subject.collection.update_one(held.guard(), {"$set": {"total": 2}})
        assert late.matched_count == 0
        with pytest.raises(LockNotFound):
            block.close()


def test_a_release_after_the_loss_does_not_mask_the_blocks_exception(
    subject: Subject, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[HeldLock] = []

    def block() -> None:
        with subject.hold() as held:
            seen.append(held)
            subject.steal()
            _ = 1 / 0

    with caplog.at_level(logging.WARNING, "docmultilock"), pytest.raises(ZeroDivisionError):
        block()
    assert seen[0].lost.is_set()
    assert any(seen[0].lock.id in r.getMessage() for r in caplog.records)


def test_the_block_can_raise_anything_and_the_lock_is_released(subject: Subject) -> None:
    with pytest.raises(KeyboardInterrupt), subject.hold(keepalive=True):
        raise KeyboardInterrupt
    assert subject.holders() == []
    assert not subject.is_refused()


# -- error_factory ----------------------------------------------------------------------------


class Translated(Exception):
    pass


@pytest.fixture
def translated(subject: Subject) -> Manager:
    return subject.manager(error_factory=lambda err: Translated(err.code))


def test_error_factory_applies_to_holds_own_errors(subject: Subject, translated: Manager) -> None:
    with subject.hold(), pytest.raises(Translated) as refused, subject.hold(translated):
        pass
    assert isinstance(refused.value.__cause__, LockConflict)
    with pytest.raises(Translated) as lost, subject.hold(translated):
        subject.steal()
    assert isinstance(lost.value.__cause__, LockNotFound)


def test_error_factory_leaves_the_blocks_exceptions_alone(
    subject: Subject, translated: Manager
) -> None:
    mine = ResourceNotFound("the block's own")
    with pytest.raises(ResourceNotFound) as exc, subject.hold(translated):
        raise mine
    assert exc.value is mine
