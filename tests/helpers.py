"""Plain helpers for the tests (fixtures live in conftest.py)."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import pytest
from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument
from pymongo import MongoClient, monitoring
from pymongo.collection import Collection

from docmultilock._flows import Clock
from tests.proxy import ReplyCutter

Doc = dict[str, Any]


def _never(seconds: float) -> None:
    raise AssertionError(f"slept {seconds} s: the backoff was reached")


async def _anever(seconds: float) -> None:
    _never(seconds)


#: A clock whose backoff sleep fails the test: a waiter must be woken before reaching it
#: (give it to a manager as ``locks._clock``).
NO_SLEEP = Clock(sleep=_never, asleep=_anever)

#: The user's own data in the locked test document; no operation may change it.
USER_FIELDS: Doc = {"name": "original", "items": [{"sku": "a", "qty": 1}], "total": 10}


class Waiter:
    """``hold(wait=...)`` on a thread; records when it was granted, the lock, what it raised."""

    def __init__(self, locks: Any, key: Any, hold_for: float = 0.0, **kwargs: Any) -> None:
        self.granted: float | None = None
        self.lock: Any = None  # the Lock held, once granted
        self.error: BaseException | None = None
        self._args = (locks, key, hold_for, kwargs)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        locks, key, hold_for, kwargs = self._args
        try:
            with locks.hold(key, **kwargs) as held:
                self.granted, self.lock = time.monotonic(), held.lock
                time.sleep(hold_for)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def join(self) -> None:
        self.thread.join(60)
        assert not self.thread.is_alive()
        if self.error is not None:
            raise self.error


def user_fields(collection: Collection[Doc], _id: Any = 1) -> Doc:
    """The document without the lock field."""
    found = collection.find_one({"_id": _id}, {"lock": 0})
    assert found is not None
    return found


def stored_lock(collection: Collection[Doc], _id: Any = 1, field: str = "lock") -> Any:
    found = collection.find_one({"_id": _id}, {field: 1})
    assert found is not None
    return found.get(field)


def raw_reader(collection: Collection[Any]) -> Callable[[Any], RawBSONDocument]:
    """``read(_id)``: the stored document, as its bytes, read past any mapper."""
    raw: Collection[RawBSONDocument] = collection.with_options(
        codec_options=CodecOptions(RawBSONDocument)
    )

    def read(_id: Any) -> RawBSONDocument:
        found = raw.find_one({"_id": _id})
        assert found is not None
        return found

    return read


def lock_bytes(document: RawBSONDocument, field: str = "lock") -> bytes:
    """The bytes of ``document``'s lock field, to compare byte for byte."""
    value = document[field]
    assert isinstance(value, RawBSONDocument)
    return bytes(value.raw)


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
    """Records the commands a client sends, and their names (handshakes and heartbeats aside)."""

    IGNORED = frozenset({"hello", "ismaster", "isMaster", "ping", "endSessions", "buildInfo"})

    def __init__(self) -> None:
        self.names: list[str] = []
        self.commands: list[Doc] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name not in self.IGNORED:
            self.names.append(event.command_name)
            self.commands.append(dict(event.command))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def skewed_clock(offset: str) -> list[str]:
    """The command prefix that runs a process with its wall clock ``offset`` (``"+1h"``).

    libfaketime's thread-safe build (``-m``: pymongo monitors in threads), the monotonic
    clock left alone, as on a real machine whose clock is off: timeouts keep measuring
    real durations. Without ``faketime`` the test skips, except in CI (``CI`` set), where
    it fails: there the clock-skew tests must run (``.ci/run`` installs it).
    """
    faketime = shutil.which("faketime")
    if faketime is None:
        if not os.environ.get("CI"):
            pytest.skip("faketime not installed")
        pytest.fail(
            "faketime is not installed: in CI the clock-skew tests must run "
            "(apt-get install faketime; .ci/run installs it)"
        )
    return [faketime, "-m", "--exclude-monotonic", "-f", offset]


def nested(depth: int) -> Any:
    """``{"a": {"a": ... 1}}``, ``depth`` documents deep."""
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


#: ``proxied(**options)``: the test collection seen through the reply-dropping proxy.
Proxied = Callable[..., Collection[Doc]]


def require_dropped(cutter: ReplyCutter, command: str) -> None:
    """Fail unless the proxy dropped one reply, to ``command``.

    ``pytest.fail``, not an assertion: a strict xfail expects an AssertionError from the
    departure, and a proxy that cut nothing must not pass for it.
    """
    names = [cut.name for cut in cutter.cuts]
    if names != [command]:
        pytest.fail(f"the proxy dropped replies to {names}, not to one {command}")
