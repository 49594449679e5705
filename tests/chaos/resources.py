"""What the chaos run locks, shared by the workers, the conductor and the checker.

Two kinds of resource, behind one small interface so each mode is a few lines:

* ``doc:<n>``: a document of the ``docs`` collection locked in document mode with a
  :class:`~docmultilock.MultiLock` (the readers-writer table). The counters it protects
  live in the locked document itself, written through ``guard()``: the write and the
  check that the lock is held are one atomic operation.
* ``name:<job>``: a named lock (:class:`~docmultilock.NamedLocks`, default exclusive table)
  kept in the ``locks`` collection. The counter it protects lives in the ``jobs``
  collection, a document the lock's ``guard()`` filter cannot reach, so the write is
  *fenced*: it applies only while no lock with a larger fence has written
  (``{fence: {$lte: lock.fence}}``), after a ``guard()`` check on the lock document.

Every protected write appends ``{s, l, k, f, at}`` (write id, lock id, tag letter, fence,
the server's ``$$NOW`` when applied) to the ``log`` array of the counter document and
increments ``n`` in the same update, so the document itself tells which writes were
applied, by which lock, and when. Writers also do a read-modify-write of ``rmw``: two
overlapping writers would lose an update.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from pymongo.collection import Collection
from pymongo.database import Database

from docmultilock import Lock, MultiLock, NamedLocks

Doc = dict[str, Any]

DB_NAME = "chaos"
DOCS = "docs"
LOCKS = "locks"
JOBS = "jobs"

#: Lifetimes in milliseconds: short, so expiry and dead holders matter within the run.
READ_MS = 1000
WRITE_MS = 1500
NAMED_MS = 1500

RW_TABLE = {
    "read": {"cooperative": ["write"]},
    "write": {"cooperative": ["write"], "assertive": ["read"]},
}

#: Pairs of tags that may never be granted at the same time on one resource.
CONFLICTS = frozenset({("write", "write"), ("write", "read"), ("read", "write")})

#: The fields every protected write may change; anything else is the user's.
COUNTER_FIELDS = frozenset({"lock", "n", "rmw", "log", "fence"})

#: Every operation's limit: short enough to ride out a server restart in a few tries.
OPERATION_TIMEOUT = 2.0

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def ms(value: datetime) -> int:
    """Milliseconds since the epoch of a BSON date (naive values are UTC)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return (value - _EPOCH) // timedelta(milliseconds=1)


def from_ms(value: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=value)


def user_fields(key: str) -> Doc:
    """The user's own data on a counter document: no operation may change it."""
    return {"title": f"record {key}", "items": [{"sku": "a", "qty": 1}], "total": 10}


@dataclass(frozen=True)
class Resource:
    """One lockable thing and the counter document its holders protect."""

    key: str
    locks: MultiLock | NamedLocks
    target: Any  # the filter (document mode) or the name (named mode)
    counter: Collection[Doc]  # where the protected counter lives
    counter_id: Any
    tags: tuple[str, ...]

    @property
    def named(self) -> bool:
        return isinstance(self.locks, NamedLocks)

    def guard(self, lock: Lock) -> Doc:
        """The lock's own guard filter (on the locked document, or on the lock document)."""
        return self.locks.guard(self.target, lock)

    def lock_collection(self) -> Collection[Doc]:
        return self.locks.collection


def resources(database: Database[Doc], documents: int, names: int) -> dict[str, Resource]:
    """Every resource of the run, by key; the same on every side."""
    docs = MultiLock(
        database[DOCS],
        lock_timeouts={"read": READ_MS / 1000, "write": WRITE_MS / 1000},
        lock_relationships=RW_TABLE,
        timeout=OPERATION_TIMEOUT,
    )
    jobs = NamedLocks(database, LOCKS, lock_timeout=NAMED_MS / 1000, timeout=OPERATION_TIMEOUT)
    found: dict[str, Resource] = {}
    for number in range(documents):
        key = f"doc:{number}"
        found[key] = Resource(key, docs, {"_id": number}, database[DOCS], number, ("read", "write"))
    for number in range(names):
        name = f"job-{number}"
        key = f"name:{name}"
        found[key] = Resource(key, jobs, name, database[JOBS], name, ("write",))
    return found


def lock_from(event: Mapping[str, Any]) -> Lock:
    """Rebuild the granted :class:`Lock` a journal ``grant`` event describes."""
    return Lock(
        id=event["id"],
        tag=event["tag"],
        document_id=event["doc"],
        acquired_at=from_ms(event["acq"]),
        expires_at=from_ms(event["exp"]),
        fence=event["fence"],
    )
