"""An async caller cancelled while its acquisition is out leaves no entry behind.

The server is made slow to apply the acquisition (a fail point blocks it): the cancellation
arrives before the command is applied, so a cleanup sent at once would reach the server
first. The caller must see its command through, then withdraw what it may have left.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from pymongo.collection import Collection

from docmultilock import AsyncMultiLock, MultiLock
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
        finally:
            await client.close()

    return portal.call(scene())


@pytest.fixture
def slow(fail_point: Callable[..., None]) -> None:
    """The cancelled caller's next findAndModify waits ``BLOCK_MS`` before it is applied."""
    fail_point(blockConnection=True, blockTimeMS=BLOCK_MS, appName=SLOW_APP)


@ENTRIES
def test_a_cancelled_acquisition_of_a_free_document_leaves_no_entry(
    portal: Portal, uri: str, collection: Collection[Doc], doc: Doc, slow: None, enter: Enter
) -> None:
    _cancel_in_flight(portal, uri, collection, enter)
    assert stored_lock(collection)["holders"] == []


@ENTRIES
def test_a_cancelled_acquisition_beside_a_reader_leaves_no_pending_entry(
    portal: Portal, uri: str, collection: Collection[Doc], doc: Doc, enter: Enter,
    fail_point: Callable[..., None],
) -> None:  # fmt: skip
    others = MultiLock(collection)
    reader = others.acquire(doc, tag="read")
    fail_point(blockConnection=True, blockTimeMS=BLOCK_MS, appName=SLOW_APP)
    _cancel_in_flight(portal, uri, collection, enter)
    assert [h["id"] for h in stored_lock(collection)["holders"]] == [reader.id]
    others.release(doc, reader)
    others.release(doc, others.acquire(doc, tag="write"))  # no writer in line before it
