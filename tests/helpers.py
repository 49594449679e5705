"""Plain helpers for the tests (fixtures live in conftest.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from pymongo import MongoClient, monitoring
from pymongo.collection import Collection

Doc = dict[str, Any]

#: The user's own data in the locked test document; no operation may change it.
USER_FIELDS: Doc = {"name": "original", "items": [{"sku": "a", "qty": 1}], "total": 10}


def user_fields(collection: Collection[Doc], _id: Any = 1) -> Doc:
    """The document without the lock field."""
    found = collection.find_one({"_id": _id}, {"lock": 0})
    assert found is not None
    return found


def stored_lock(collection: Collection[Doc], _id: Any = 1, field: str = "lock") -> Any:
    found = collection.find_one({"_id": _id}, {field: 1})
    assert found is not None
    return found.get(field)


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll ``predicate`` until true (for expiry, which follows the server's clock)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def server_now(client: MongoClient[Doc]) -> datetime:
    """The server's clock, read from ``hello``."""
    local: datetime = client.admin.command("hello")["localTime"]
    return local.replace(tzinfo=timezone.utc) if local.tzinfo is None else local


class CommandLog(monitoring.CommandListener):
    """Records the names of the commands a client sends (handshakes and heartbeats aside)."""

    IGNORED = frozenset({"hello", "ismaster", "isMaster", "ping", "endSessions", "buildInfo"})

    def __init__(self) -> None:
        self.names: list[str] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name not in self.IGNORED:
            self.names.append(event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass
