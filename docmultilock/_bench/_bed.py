"""The test bed: a client tuned for measuring, and twin collections for the two sides.

docmultilock and the floor each get a collection of their own holding the same documents
(same ``_id``s, same user payload), so that a collection scan costs both sides the same.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pymongo
from pymongo import AsyncMongoClient, MongoClient, monitoring
from pymongo.collection import Collection
from pymongo.errors import PyMongoError

from docmultilock._bench._report import Progress, Row
from docmultilock._workers import unless_given

__all__ = [
    "DATABASE",
    "Bed",
    "Context",
    "KeepAlive",
    "Outcome",
    "bed",
    "connect",
    "connect_async",
    "payload",
    "server_version",
]

DATABASE = "docmultilock_bench"

Doc = dict[str, Any]


@dataclass(frozen=True)
class KeepAlive:
    """The keep-alive capacity scenario's size: how many locks, of what lifetime, how long."""

    locks: int = 1000
    lifetime: float = 30.0
    seconds: float = 40.0


@dataclass(frozen=True)
class Context:
    """What every scenario gets: the server, its kind, the time to spend, the live line."""

    uri: str
    embedded: bool
    duration: float
    progress: Progress
    keepalive: KeepAlive = field(default_factory=KeepAlive)


@dataclass(frozen=True)
class Outcome:
    """What a scenario found: its rows, and the size of the collections it used."""

    rows: list[Row]
    collections: str


#: The measuring options, where the URI does not set them itself.
_MEASURING = {"retryWrites": False, "socketTimeoutMS": 60_000, "serverSelectionTimeoutMS": 30_000}


def connect(uri: str, listeners: Sequence[monitoring.CommandListener] = ()) -> MongoClient[Doc]:
    """A client for measuring: no retryable writes, and bounded waits.

    Retries are not under test, and on SecantusDB retryable writes make every write slower
    as a run goes on. The bounds are socket and selection timeouts rather than ``timeoutMS``,
    which would add a client-side deadline to the floor's calls as well.
    """
    return MongoClient(uri, event_listeners=list(listeners), **unless_given(uri, _MEASURING))


def connect_async(uri: str) -> AsyncMongoClient[Doc]:
    """An async client with the options of :func:`connect` (make it on the running loop)."""
    return AsyncMongoClient(uri, **unless_given(uri, _MEASURING))


def server_version(client: MongoClient[Doc]) -> tuple[str, bool]:
    """The server's name and version, and whether it is the embedded SecantusDB."""
    info = client.admin.command("buildInfo")
    if "secantusVersion" in info:
        return f"SecantusDB {info['secantusVersion']} (reports {info['version']})", True
    return f"MongoDB {info.get('version', '?')}", False


def payload(size: int) -> Doc:
    """User fields of about ``size`` bytes of BSON, which no lock operation may carry."""
    return {"name": "bench", "body": "x" * max(0, size - 40)}


@dataclass(frozen=True)
class Bed:
    """Twin collections, ``locks`` for docmultilock and ``floor`` for the floor.

    ``named`` is the lock collection of the named-lock probes (kept apart: its TTL index
    would delete the other documents).
    """

    locks: Collection[Doc]
    floor: Collection[Doc]
    named: Collection[Doc]

    def seed(self, count: int, size: int = 100, **fields: Any) -> None:
        """Insert documents ``_id`` 0 .. count-1 with ``size`` bytes of payload in both."""
        documents = [{"_id": i, **payload(size), **fields} for i in range(count)]
        for collection in (self.locks, self.floor):
            collection.insert_many(documents)

    def sizes(self) -> str:
        """The number of documents on each side, for the report."""
        named = self.named.count_documents({})
        return (
            f"{self.locks.count_documents({})} (docmultilock) + "
            f"{self.floor.count_documents({})} (floor) documents"
            + (f", {named} named-lock documents" if named else "")
        )


@contextlib.contextmanager
def bed(client: MongoClient[Doc]) -> Iterator[Bed]:
    """Fresh twin collections in the bench database, dropped afterwards."""
    suffix = secrets.token_hex(4)
    database = client[DATABASE]
    made = Bed(*(database[f"{side}_{suffix}"] for side in ("locks", "floor", "named")))
    try:
        yield made
    finally:
        for collection in (made.locks, made.floor, made.named):
            with contextlib.suppress(PyMongoError), pymongo.timeout(5.0):
                collection.drop()
