"""The listener and the DEBUG log: every decision reported, and neither breaks a lock."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.collection import Collection

from docmultilock import (
    AssertiveLock,
    CooperativeLock,
    LockEvent,
    LockListener,
    LockNotFound,
    MultiLock,
    NamedLocks,
)
from docmultilock.pytest_plugin import CLIENT_OPTIONS
from tests.flavours import MakeLock

Doc = dict[str, Any]


class Recorder(LockListener):
    def __init__(self) -> None:
        self.events: list[LockEvent] = []

    def on_granted(self, event: LockEvent) -> None:
        self.events.append(event)

    def on_refused(self, event: LockEvent) -> None:
        self.events.append(event)

    def on_pending(self, event: LockEvent) -> None:
        self.events.append(event)

    def on_extended(self, event: LockEvent) -> None:
        self.events.append(event)

    def on_released(self, event: LockEvent) -> None:
        self.events.append(event)

    def on_lost(self, event: LockEvent) -> None:
        self.events.append(event)

    def on_retry(self, event: LockEvent) -> None:
        self.events.append(event)

    def kinds(self) -> list[tuple[str, str]]:
        return [(event.kind, event.outcome) for event in self.events]


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def rw(make_lock: MakeLock, collection: Collection[Doc], recorder: Recorder) -> MultiLock:
    made: MultiLock = make_lock(MultiLock, collection, listener=recorder)
    return made


def test_a_lock_cycle_reports_grant_extension_and_release(
    rw: MultiLock, doc: Doc, recorder: Recorder
) -> None:
    lock = rw.acquire(doc, tag="write")
    extended = rw.extend(doc, lock)
    rw.release(doc, extended)

    assert recorder.kinds() == [
        ("granted", "granted"),
        ("extended", "extended"),
        ("released", "released"),
    ]
    granted = recorder.events[0]
    assert granted.filter == doc
    assert granted.tag == "write"
    assert granted.lock == lock
    assert recorder.events[1].lock == extended
    assert all(0 <= event.duration < 10 for event in recorder.events)


def test_refusals_and_pending_locks_are_reported(
    rw: MultiLock, doc: Doc, recorder: Recorder
) -> None:
    rw.acquire(doc, tag="read")
    with pytest.raises(AssertiveLock):
        rw.acquire(doc, tag="write")
    with pytest.raises(CooperativeLock):
        rw.acquire(doc, tag="read")

    assert recorder.kinds()[1:] == [("pending", "AssertiveLock"), ("refused", "CooperativeLock")]
    refused = recorder.events[2]
    assert refused.tag == "read"
    assert isinstance(refused.error, CooperativeLock)
    assert refused.error.blocking_tags == ("write",)


def test_a_loss_is_reported(rw: MultiLock, doc: Doc, recorder: Recorder) -> None:
    lock = rw.acquire(doc, tag="write")
    rw.break_lock(doc, everyone=True)
    with pytest.raises(LockNotFound):
        rw.extend(doc, lock)
    with pytest.raises(LockNotFound):
        rw.release(doc, lock)

    assert recorder.kinds()[1:] == [("lost", "LockNotFound"), ("lost", "LockNotFound")]
    assert recorder.events[1].lock == lock


def test_a_retry_is_reported(
    make_lock: MakeLock,
    uri: str,
    collection: Collection[Doc],
    doc: Doc,
    recorder: Recorder,
    fail_point: Callable[..., None],
) -> None:
    # Without pymongo's own retry of writes, the transient error reaches docmultilock's.
    plain: MongoClient[Doc] = MongoClient(uri, retryWrites=False, **CLIENT_OPTIONS)
    try:
        there = plain[collection.database.name][collection.name]
        rw: MultiLock = make_lock(MultiLock, there, listener=recorder)
        fail_point(errorCode=91)  # shutting down: transient
        rw.acquire(doc, tag="write")
    finally:
        plain.close()

    assert recorder.kinds() == [("retry", "NotPrimaryError"), ("granted", "granted")]


def test_named_locks_take_a_listener(
    make_lock: MakeLock, collection: Collection[Doc], recorder: Recorder
) -> None:
    named: NamedLocks = make_lock(
        NamedLocks, collection.database, collection.name, listener=recorder
    )
    lock = named.acquire("job")
    named.release("job", lock)

    assert recorder.kinds() == [("granted", "granted"), ("released", "released")]
    assert recorder.events[0].filter == {"_id": "job"}


class Broken(LockListener):
    def on_granted(self, event: LockEvent) -> None:
        raise RuntimeError("listener bug")


def test_a_listener_that_raises_never_breaks_the_operation(
    make_lock: MakeLock, collection: Collection[Doc], doc: Doc, caplog: pytest.LogCaptureFixture
) -> None:
    rw: MultiLock = make_lock(MultiLock, collection, listener=Broken())

    with caplog.at_level(logging.WARNING, "docmultilock"):
        lock = rw.acquire(doc, tag="write")
    rw.release(doc, lock)

    (record,) = caplog.records
    assert "raised on granted" in record.getMessage()
    assert record.exc_info is not None


def test_a_listener_may_implement_only_some_methods(
    make_lock: MakeLock, collection: Collection[Doc], doc: Doc
) -> None:
    seen: list[str] = []

    class Grants(LockListener):
        def on_granted(self, event: LockEvent) -> None:
            seen.append(event.kind)

    rw: MultiLock = make_lock(MultiLock, collection, listener=Grants())
    rw.release(doc, rw.acquire(doc, tag="write"))

    assert seen == ["granted"]


def test_every_decision_is_logged_at_debug_and_nothing_above(
    make_lock: MakeLock, collection: Collection[Doc], doc: Doc, caplog: pytest.LogCaptureFixture
) -> None:
    rw: MultiLock = make_lock(MultiLock, collection)

    with caplog.at_level(logging.DEBUG, "docmultilock"):
        reader = rw.acquire(doc, tag="read")
        with pytest.raises(AssertiveLock):
            rw.acquire(doc, tag="write")
        rw.release(doc, reader)

    assert all(record.levelno == logging.DEBUG for record in caplog.records)
    messages = [record.getMessage() for record in caplog.records]
    assert messages[0].startswith(f"granted read {reader.id} on {{'_id': 1}}: granted in ")
    assert messages[1].startswith("pending write ")
    assert "AssertiveLock (blocking: read)" in messages[1]
    assert messages[2].startswith(f"released read {reader.id}")


def test_a_retry_is_logged_at_debug_without_a_listener(
    make_lock: MakeLock,
    uri: str,
    collection: Collection[Doc],
    doc: Doc,
    fail_point: Callable[..., None],
    caplog: pytest.LogCaptureFixture,
) -> None:
    plain: MongoClient[Doc] = MongoClient(uri, retryWrites=False, **CLIENT_OPTIONS)
    try:
        there = plain[collection.database.name][collection.name]
        rw: MultiLock = make_lock(MultiLock, there)
        fail_point(errorCode=91)  # shutting down: transient
        with caplog.at_level(logging.DEBUG, "docmultilock"):
            rw.acquire(doc, tag="write")
    finally:
        plain.close()

    messages = [record.getMessage() for record in caplog.records]
    assert messages[0].startswith("retry acquire on {'_id': 1}: NotPrimaryError")
    assert messages[1].startswith("granted write ")


class AsyncByMistake(LockListener):
    async def on_granted(self, event: LockEvent) -> None:  # type: ignore[override]
        raise AssertionError("never run")


def test_an_async_listener_method_is_closed_unrun_with_one_warning(
    make_lock: MakeLock, collection: Collection[Doc], doc: Doc, caplog: pytest.LogCaptureFixture
) -> None:
    rw: MultiLock = make_lock(MultiLock, collection, listener=AsyncByMistake())

    with caplog.at_level(logging.WARNING, "docmultilock"):
        rw.release(doc, rw.acquire(doc, tag="write"))
        rw.release(doc, rw.acquire(doc, tag="write"))

    # filterwarnings = error: a coroutine never awaited would have failed the test.
    (record,) = caplog.records
    assert "must be plain functions" in record.getMessage()
