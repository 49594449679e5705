"""Scenario 1: the commands each lock operation sends, counted with a ``CommandListener``.

Each probe prepares its situation (uncounted) on a fresh document and returns the one
operation to count. The floor's operation of the same kind is counted beside it. The
counts are deterministic: ``tests/test_bench.py`` asserts them through :func:`count_commands`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import count
from typing import Any

import bson
from pymongo import monitoring

from docmultilock import MultiLock, NamedLocks, WriteLock
from docmultilock._bench._bed import Bed, bed, connect
from docmultilock._bench._floor import FloorLock
from docmultilock._bench._report import Bound, Row
from docmultilock._rules import READ_WRITE
from docmultilock.errors import (
    AssertiveLock,
    CooperativeLock,
    LockAlreadyTaken,
    LockError,
    ResourceNotFound,
)

__all__ = ["CommandCounter", "Count", "count_commands", "rows"]

Doc = dict[str, Any]
Thunk = Callable[[], object]


class CommandCounter(monitoring.CommandListener):
    """Records each command a client sends, with the BSON bytes sent and received."""

    IGNORED = frozenset({"hello", "ismaster", "isMaster", "ping", "endSessions", "buildInfo"})

    def __init__(self) -> None:
        self.names: list[str] = []
        self.sent = 0
        self.received = 0

    def clear(self) -> None:
        self.names, self.sent, self.received = [], 0, 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name not in self.IGNORED:
            self.names.append(event.command_name)
            self.sent += len(bson.encode(event.command))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        if event.command_name not in self.IGNORED:
            self.received += len(bson.encode(event.reply))

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def expect(error: type[LockError], call: Callable[..., object], *args: Any) -> Thunk:
    """An operation that must raise ``error`` (the outcome it is counted for)."""

    def run() -> None:
        try:
            call(*args)
        except error:
            return
        raise AssertionError(f"{call.__qualname__} did not raise {error.__name__}")

    return run


@dataclass
class Stage:
    """Where a probe runs: the twin collections and a fresh document for each probe."""

    bed: Bed
    ids: count[int]

    def document(self) -> Doc:
        """Insert a fresh document on both sides; return its filter."""
        where = {"_id": next(self.ids)}
        self.bed.locks.insert_one(dict(where))
        self.bed.floor.insert_one(dict(where))
        return where


# -- the probes: (lock, operation, floor kind, prepare) ------------------------------------

Prepare = Callable[[Stage], Thunk]


def _write_lock(stage: Stage) -> tuple[WriteLock, Doc]:
    return WriteLock(stage.bed.locks), stage.document()


def _wl_free(stage: Stage) -> Thunk:
    locks, where = _write_lock(stage)
    return lambda: locks.acquire(where)


def _wl_conflict(stage: Stage) -> Thunk:
    locks, where = _write_lock(stage)
    locks.acquire(where)
    return expect(LockAlreadyTaken, locks.acquire, where)


def _wl_missing(stage: Stage) -> Thunk:
    locks = WriteLock(stage.bed.locks)
    return expect(ResourceNotFound, locks.acquire, {"_id": "missing"})


def _wl_release(stage: Stage) -> Thunk:
    locks, where = _write_lock(stage)
    lock = locks.acquire(where)
    return lambda: locks.release(where, lock)


def _wl_extend(stage: Stage) -> Thunk:
    locks, where = _write_lock(stage)
    lock = locks.acquire(where)
    return lambda: locks.extend(where, lock)


def _multi_lock(stage: Stage) -> tuple[MultiLock, Doc]:
    return MultiLock(stage.bed.locks), stage.document()


def _ml_free(stage: Stage) -> Thunk:
    locks, where = _multi_lock(stage)
    return lambda: locks.acquire(where, tag="read")


def _ml_concurrent(stage: Stage) -> Thunk:
    locks, where = _multi_lock(stage)
    locks.acquire(where, tag="read")
    return lambda: locks.acquire(where, tag="read")


def _ml_cooperative(stage: Stage) -> Thunk:
    locks, where = _multi_lock(stage)
    locks.acquire(where, tag="write")
    return expect(CooperativeLock, lambda: locks.acquire(where, tag="write"))


def _ml_refused_by_pending(stage: Stage) -> Thunk:
    locks, where = _multi_lock(stage)
    locks.acquire(where, tag="read")
    expect(AssertiveLock, lambda: locks.acquire(where, tag="write"))()
    return expect(CooperativeLock, lambda: locks.acquire(where, tag="read"))


def _ml_assertive(stage: Stage) -> Thunk:
    locks, where = _multi_lock(stage)
    locks.acquire(where, tag="read")
    return expect(AssertiveLock, lambda: locks.acquire(where, tag="write"))


def _ml_continue(stage: Stage) -> Thunk:
    locks, where = _multi_lock(stage)
    reader = locks.acquire(where, tag="read")
    try:
        locks.acquire(where, tag="write")
    except AssertiveLock as err:
        pending = err.lock
    locks.release(where, reader)
    return lambda: locks.acquire(where, lock=pending)


def _ml_release(stage: Stage) -> Thunk:
    locks, where = _multi_lock(stage)
    lock = locks.acquire(where, tag="read")
    return lambda: locks.release(where, lock)


def _ml_extend(stage: Stage) -> Thunk:
    locks, where = _multi_lock(stage)
    lock = locks.acquire(where, tag="read")
    return lambda: locks.extend(where, lock)


def _named(stage: Stage, *, tagged: bool = False) -> tuple[NamedLocks, str]:
    """Named locks (tagged: the readers-writer table) and a fresh name."""
    collection = stage.bed.named
    locks = NamedLocks(
        collection.database, collection.name, lock_relationships=READ_WRITE if tagged else None
    )
    locks.ensure_indexes()  # up front, so the lazy index creation is not counted
    return locks, f"job-{next(stage.ids)}"


#: The delete of an exclusive named lock's last release matches only once the server's
#: clock has left the millisecond of the grant; in the same millisecond the release falls
#: back to emptying the document (a second command). The probe waits that out.
_GRANT_MILLISECOND = 0.002


def _nl_new(stage: Stage) -> Thunk:
    locks, name = _named(stage)
    return lambda: locks.acquire(name)


def _nl_existing(stage: Stage) -> Thunk:
    locks, name = _named(stage)
    locks.acquire(name)
    return expect(LockAlreadyTaken, locks.acquire, name)


def _nl_existing_read(stage: Stage) -> Thunk:
    locks, name = _named(stage, tagged=True)
    locks.acquire(name, tag="read")
    return lambda: locks.acquire(name, tag="read")


def _nl_release_last(stage: Stage) -> Thunk:
    locks, name = _named(stage)
    lock = locks.acquire(name)
    time.sleep(_GRANT_MILLISECOND)
    return lambda: locks.release(name, lock)


def _nl_release_last_tagged(stage: Stage) -> Thunk:
    locks, name = _named(stage, tagged=True)
    lock = locks.acquire(name, tag="read")
    return lambda: locks.release(name, lock)


def _nl_release_not_last(stage: Stage) -> Thunk:
    locks, name = _named(stage, tagged=True)
    lock = locks.acquire(name, tag="read")
    locks.acquire(name, tag="read")
    return lambda: locks.release(name, lock)


def _nl_extend(stage: Stage) -> Thunk:
    locks, name = _named(stage)
    lock = locks.acquire(name)
    return lambda: locks.extend(name, lock)


PROBES: list[tuple[str, str, str, Prepare]] = [
    ("WriteLock", "acquire (free)", "acquire", _wl_free),
    ("WriteLock", "acquire (conflict)", "acquire-held", _wl_conflict),
    ("WriteLock", "acquire (no such document)", "acquire-missing", _wl_missing),
    ("WriteLock", "release", "release", _wl_release),
    ("WriteLock", "extend", "extend", _wl_extend),
    ("MultiLock", "acquire read (free)", "acquire", _ml_free),
    ("MultiLock", "acquire read (concurrent: beside a read)", "acquire", _ml_concurrent),
    ("MultiLock", "acquire write (cooperative: refused)", "acquire-held", _ml_cooperative),
    ("MultiLock", "acquire read (refused by a pending write)", "acquire-held",
     _ml_refused_by_pending),
    ("MultiLock", "acquire write (assertive: pending)", "acquire-held", _ml_assertive),
    ("MultiLock", "acquire write (continue: granted)", "acquire", _ml_continue),
    ("MultiLock", "release", "release", _ml_release),
    ("MultiLock", "extend", "extend", _ml_extend),
    ("NamedLocks", "acquire (new document)", "acquire-new", _nl_new),
    ("NamedLocks", "acquire (existing, held: conflict)", "acquire-held", _nl_existing),
    ("NamedLocks", "acquire read (existing, beside a read)", "acquire", _nl_existing_read),
    ("NamedLocks", "release (last holder: deletes the document)", "release", _nl_release_last),
    ("NamedLocks", "release read (last holder: emptied for TTL)", "release",
     _nl_release_last_tagged),
    ("NamedLocks", "release read (not last holder)", "release", _nl_release_not_last),
    ("NamedLocks", "extend", "extend", _nl_extend),
]  # fmt: skip


# -- the floor's operations of each kind ---------------------------------------------------


def _floor(stage: Stage) -> tuple[FloorLock, Doc]:
    return FloorLock(stage.bed.floor), stage.document()


def _floor_acquire(stage: Stage) -> Thunk:
    floor, where = _floor(stage)
    return lambda: floor.acquire(where)


def _floor_held(stage: Stage) -> Thunk:
    floor, where = _floor(stage)
    floor.acquire(where)
    return lambda: floor.acquire(where)


def _floor_missing(stage: Stage) -> Thunk:
    floor = FloorLock(stage.bed.floor)
    return lambda: floor.acquire({"_id": "missing"})


def _floor_new(stage: Stage) -> Thunk:
    floor = FloorLock(stage.bed.floor)
    where = {"_id": f"new-{next(stage.ids)}"}
    return lambda: floor.acquire(where, upsert=True)


def _floor_release(stage: Stage) -> Thunk:
    floor, where = _floor(stage)
    lock_id = floor.acquire(where)
    assert lock_id is not None
    return lambda: floor.release(where, lock_id)


def _floor_extend(stage: Stage) -> Thunk:
    floor, where = _floor(stage)
    lock_id = floor.acquire(where)
    assert lock_id is not None
    return lambda: floor.extend(where, lock_id)


FLOOR_OPERATIONS: dict[str, Prepare] = {
    "acquire": _floor_acquire,
    "acquire-held": _floor_held,
    "acquire-missing": _floor_missing,
    "acquire-new": _floor_new,
    "release": _floor_release,
    "extend": _floor_extend,
}


# -- counting -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Count:
    """The commands one operation sent, and those of the floor's operation of its kind."""

    lock: str
    operation: str
    docmultilock: tuple[str, ...]
    floor: tuple[str, ...]


def _counted(counter: CommandCounter, thunk: Thunk) -> tuple[str, ...]:
    counter.clear()
    thunk()
    return tuple(counter.names)


def count_commands(uri: str) -> tuple[list[Count], str]:
    """Count every probe's commands on the server at ``uri``; also return the collection sizes."""
    counter = CommandCounter()
    with connect(uri, [counter]) as client, bed(client) as twins:
        stage = Stage(twins, count(1))
        counts = []
        for lock, operation, kind, prepare in PROBES:
            mine = _counted(counter, prepare(stage))
            floor = _counted(counter, FLOOR_OPERATIONS[kind](stage))
            counts.append(Count(lock, operation, mine, floor))
        return counts, twins.sizes()


def rows(counts: list[Count]) -> list[Row]:
    """Scenario 1's rows: every count should be exactly 1."""
    return [
        Row.make(
            1,
            f"{c.lock} {c.operation}",
            "commands",
            len(c.docmultilock),
            len(c.floor),
            Bound("==", 1, of="docmultilock"),
            detail="" if c.docmultilock == ("findAndModify",) else " ".join(c.docmultilock),
        )
        for c in counts
    ]
