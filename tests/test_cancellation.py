"""An acquisition cancelled or interrupted before its reply leaves no entry behind.

Async: the server is made slow to apply the caller's acquisition (a fail point blocks it)
and the caller is cancelled meanwhile. Sync: the acquisition's flow is run by the driver
and interrupted where a signal would land, at the yield of its command.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from pymongo.collection import Collection

from docmultilock import AsyncMultiLock, MultiLock, WriteLock
from docmultilock._flows import SYSTEM_CLOCK
from docmultilock._lock_flows import acquire
from docmultilock._sync.driver import MongoIO
from docmultilock.pytest_plugin import CLIENT_OPTIONS
from tests.flavours import Portal
from tests.helpers import stored_lock

Doc = dict[str, Any]

#: The cancelled caller's client, which the fail point singles out.
SLOW_APP = "docmultilock-test-cancelled"
#: How long the server holds the caller's acquisition before applying it.
BLOCK_MS = 800

Enter = Callable[[AsyncMultiLock], Coroutine[Any, Any, None]]


async def _hold(locks: AsyncMultiLock) -> None:
    async with locks.hold({"_id": 1}, tag="write", wait=10.0):
        raise AssertionError("the block ran: the cancellation came too late")


async def _acquire(locks: AsyncMultiLock) -> None:
    await locks.acquire({"_id": 1}, tag="write")


ENTRIES = pytest.mark.parametrize("enter", [_hold, _acquire], ids=["hold", "acquire"])


def _cancel_in_flight(portal: Portal, uri: str, collection: Collection[Doc], enter: Enter) -> None:
    """Start ``enter`` on a slow client and cancel it while its command is out."""

    async def scene() -> None:
        client: AsyncMongoClient[Doc] = AsyncMongoClient(uri, appName=SLOW_APP, **CLIENT_OPTIONS)
        try:
            locks = AsyncMultiLock(client[collection.database.name][collection.name])
            task: asyncio.Task[None] = asyncio.get_running_loop().create_task(enter(locks))
            await asyncio.sleep(BLOCK_MS / 1000 / 3)  # the command is out, not yet applied
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            # Past the block: a command the server still held is applied by now.
            await asyncio.sleep(BLOCK_MS / 1000 + 0.3)
        finally:
            await client.close()

    return portal.call(scene())


def _entries(collection: Collection[Doc]) -> list[Doc]:
    """The entries on document 1 (none when it has no lock field)."""
    stored = stored_lock(collection)
    return [] if stored is None else list(stored["holders"])


@pytest.fixture
def slow(fail_point: Callable[..., None]) -> None:
    """The cancelled caller's next findAndModify waits ``BLOCK_MS`` before it is applied."""
    fail_point(blockConnection=True, blockTimeMS=BLOCK_MS, appName=SLOW_APP)


@ENTRIES
def test_a_cancelled_acquisition_of_a_free_document_leaves_no_entry(
    portal: Portal, uri: str, collection: Collection[Doc], doc: Doc, slow: None, enter: Enter
) -> None:
    _cancel_in_flight(portal, uri, collection, enter)
    assert _entries(collection) == []


@ENTRIES
def test_a_cancelled_acquisition_beside_a_reader_leaves_no_pending_entry(
    portal: Portal, uri: str, collection: Collection[Doc], doc: Doc, enter: Enter,
    fail_point: Callable[..., None],
) -> None:  # fmt: skip
    others = MultiLock(collection)
    reader = others.acquire(doc, tag="read")
    fail_point(blockConnection=True, blockTimeMS=BLOCK_MS, appName=SLOW_APP)
    _cancel_in_flight(portal, uri, collection, enter)
    assert [h["id"] for h in _entries(collection)] == [reader.id]
    others.release(doc, reader)
    others.release(doc, others.acquire(doc, tag="write"))  # no writer in line before it


def _interrupted(collection: Collection[Doc], key: Doc, applied: bool) -> None:
    """Run a WriteLock acquisition of ``key`` and interrupt it at its command, which the
    server applied (``applied``) or never got; the withdrawal it sends is performed."""
    io, clock = MongoIO(collection), SYSTEM_CLOCK
    parts = WriteLock(collection)._parts  # the flow a manager runs, run here by hand
    flow = acquire(parts, parts.parse.acquiring(key), clock=clock)
    command = next(flow)
    if applied:
        io.perform(command, clock)
    try:
        withdrawal = flow.throw(KeyboardInterrupt())
    except KeyboardInterrupt:  # a failure, not an interrupt of pytest itself
        pytest.fail("the interrupt went through with nothing withdrawn")
    io.perform(withdrawal, clock)
    with pytest.raises(KeyboardInterrupt):
        flow.send(None)


def test_an_interrupted_acquisition_that_was_applied_is_withdrawn_from_its_document(
    collection: Collection[Doc],
) -> None:
    collection.insert_many([{"_id": 1, "q": 1}, {"_id": 2, "q": 1}])
    _interrupted(collection, {"q": 1}, applied=True)
    assert stored_lock(collection, 1)["holders"] == []
    assert collection.find_one({"_id": 2}) == {"_id": 2, "q": 1}  # matched, never written


def test_an_interrupted_acquisition_that_never_reached_the_server_writes_nothing(
    collection: Collection[Doc], doc: Doc
) -> None:
    before = collection.find_one(doc)
    _interrupted(collection, doc, applied=False)
    assert collection.find_one(doc) == before
