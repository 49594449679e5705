"""Scenario 1: the commands each lock operation sends, counted with a ``CommandListener``.

Each probe is a few calls on a fresh key: all but the last prepare its situation (uncounted),
the last is the operation counted. The floor's operation of the same kind is counted beside it. The
counts are deterministic: ``tests/test_bench.py`` asserts them through :func:`count_commands`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import count
from typing import Any, Literal

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

#: The delete of an exclusive named lock's last release matches only once the server's
#: clock has left the millisecond of the grant; in the same millisecond the release falls
#: back to emptying the document (a second command). The probe waits that out.
_GRANT_MILLISECOND = 0.002


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


@dataclass(frozen=True)
class Step:
    """One call on a probe's lock manager and key.

    ``acquire`` passes ``tag``, the floor's ``upsert``, or (with ``of``) the pending lock
    number ``of`` to continue; ``release``, ``extend`` and ``convert`` (to ``tag``) act on
    lock number ``of`` (the latest by default); ``pause`` waits out the grant's millisecond
    (``_GRANT_MILLISECOND``).
    ``refused`` is the error the call must raise: the outcome it is counted for.
    """

    call: Literal["acquire", "release", "extend", "convert", "pause"]
    tag: str | None = None
    of: int | None = None
    refused: type[LockError] | None = None
    upsert: bool = False

    def bind(self, locks: Any, key: Any, held: list[Any]) -> Thunk:
        """The call, ready to run; each lock it gets (a pending one too) goes to ``held``."""

        def run() -> None:
            try:
                got = self._call(locks, key, held)
            except LockError as err:
                if self.refused is None or not isinstance(err, self.refused):
                    raise
                if isinstance(err, AssertiveLock):
                    held.append(err.lock)
                return
            if self.refused is not None:
                raise AssertionError(f"{self} did not raise {self.refused.__name__}")
            if self.call in ("acquire", "convert"):
                held.append(got)

        return run

    def _call(self, locks: Any, key: Any, held: list[Any]) -> Any:
        if self.call == "pause":
            return time.sleep(_GRANT_MILLISECOND)
        if self.call == "convert":
            return locks.convert(key, held[-1 if self.of is None else self.of], tag=self.tag)
        if self.call != "acquire":
            return getattr(locks, self.call)(key, held[-1 if self.of is None else self.of])
        options: dict[str, Any] = {"tag": self.tag} if self.tag else {}
        if self.of is not None:
            options["lock"] = held[self.of]
        if self.upsert:
            options["upsert"] = True
        return locks.acquire(key, **options)


ACQUIRE, RELEASE, EXTEND, PAUSE = Step("acquire"), Step("release"), Step("extend"), Step("pause")
READ, WRITE = Step("acquire", "read"), Step("acquire", "write")
PENDING_WRITE = Step("acquire", "write", refused=AssertiveLock)


@dataclass(frozen=True)
class Probe:
    """One operation to count on a fresh key: every step but the last prepares it (uncounted).

    ``key``: a ``document`` inserted on both sides, a new ``name``, a ``missing`` document,
    or a ``new`` document id (for the floor's upsert).
    """

    lock: str
    operation: str
    floor: str
    steps: tuple[Step, ...]
    key: Literal["document", "name", "missing", "new"] = "document"
    tagged: bool = False

    def prepare(self, stage: Stage) -> Thunk:
        """Make the lock manager and the key, run the preparing steps; return the last."""
        locks = _manager(stage.bed, self.lock, self.tagged)
        key = stage.key(self.key)
        held: list[Any] = []
        *before, counted = (step.bind(locks, key, held) for step in self.steps)
        for run in before:
            run()
        return counted


def _manager(bed: Bed, lock: str, tagged: bool) -> Any:
    if lock == "floor":
        return FloorLock(bed.floor)
    if lock != "NamedLocks":
        return {"WriteLock": WriteLock, "MultiLock": MultiLock}[lock](bed.locks)
    locks = NamedLocks(
        bed.named.database, bed.named.name, lock_relationships=READ_WRITE if tagged else None
    )
    locks.ensure_indexes()  # up front, so the lazy index creation is not counted
    return locks


@dataclass
class Stage:
    """Where a probe runs: the twin collections, and fresh keys for each probe."""

    bed: Bed
    ids: count[int]

    def key(self, kind: str) -> Any:
        """A fresh key of ``kind`` (see :class:`Probe`)."""
        if kind == "missing":
            return {"_id": "missing"}
        if kind == "name":
            return f"job-{next(self.ids)}"
        if kind == "new":
            return {"_id": f"new-{next(self.ids)}"}
        where = {"_id": next(self.ids)}
        self.bed.locks.insert_one(dict(where))
        self.bed.floor.insert_one(dict(where))
        return where


def _refused(error: type[LockError], tag: str | None = None) -> Step:
    return Step("acquire", tag, refused=error)


#: Every operation counted, each with the kind of the floor's operation set beside it.
PROBES = [
    Probe("WriteLock", "acquire (free)", "acquire", (ACQUIRE,)),
    Probe("WriteLock", "acquire (conflict)", "acquire-held",
          (ACQUIRE, _refused(LockAlreadyTaken))),
    Probe("WriteLock", "acquire (no such document)", "acquire-missing",
          (_refused(ResourceNotFound),), key="missing"),
    Probe("WriteLock", "release", "release", (ACQUIRE, RELEASE)),
    Probe("WriteLock", "extend", "extend", (ACQUIRE, EXTEND)),
    Probe("WriteLock", "convert write to write (a grant: the fence grows)", "extend",
          (ACQUIRE, Step("convert", "write"))),
    Probe("MultiLock", "acquire read (free)", "acquire", (READ,)),
    Probe("MultiLock", "acquire read (concurrent: beside a read)", "acquire", (READ, READ)),
    Probe("MultiLock", "acquire write (cooperative: refused)", "acquire-held",
          (WRITE, _refused(CooperativeLock, "write"))),
    Probe("MultiLock", "acquire read (refused by a pending write)", "acquire-held",
          (READ, PENDING_WRITE, _refused(CooperativeLock, "read"))),
    Probe("MultiLock", "acquire write (assertive: pending)", "acquire-held",
          (READ, PENDING_WRITE)),
    Probe("MultiLock", "acquire write (continue: granted)", "acquire",
          (READ, PENDING_WRITE, Step("release", of=0), Step("acquire", of=1))),
    Probe("MultiLock", "convert read to write (alone: granted)", "extend",
          (READ, Step("convert", "write"))),
    Probe("MultiLock", "convert read to write (beside a read: pending)", "extend",
          (READ, READ, Step("convert", "write", of=0, refused=AssertiveLock))),
    Probe("MultiLock", "convert write to read (downgrade)", "extend",
          (WRITE, Step("convert", "read"))),
    Probe("MultiLock", "release", "release", (READ, RELEASE)),
    Probe("MultiLock", "extend", "extend", (READ, EXTEND)),
    Probe("NamedLocks", "acquire (new document)", "acquire-new", (ACQUIRE,), key="name"),
    Probe("NamedLocks", "acquire (existing, held: conflict)", "acquire-held",
          (ACQUIRE, _refused(LockAlreadyTaken)), key="name"),
    Probe("NamedLocks", "acquire read (existing, beside a read)", "acquire",
          (READ, READ), key="name", tagged=True),
    Probe("NamedLocks", "release (last holder: deletes the document)", "release",
          (ACQUIRE, PAUSE, RELEASE), key="name"),
    Probe("NamedLocks", "release read (last holder: emptied for TTL)", "release",
          (READ, RELEASE), key="name", tagged=True),
    Probe("NamedLocks", "release read (not last holder)", "release",
          (READ, READ, Step("release", of=0)), key="name", tagged=True),
    Probe("NamedLocks", "extend", "extend", (ACQUIRE, EXTEND), key="name"),
]  # fmt: skip

#: The floor's operation of each kind, counted beside each probe of that kind.
FLOOR_OPERATIONS = {
    probe.floor: probe
    for probe in [
        Probe("floor", "acquire", "acquire", (ACQUIRE,)),
        Probe("floor", "acquire-held", "acquire-held", (ACQUIRE, ACQUIRE)),
        Probe("floor", "acquire-missing", "acquire-missing", (ACQUIRE,), key="missing"),
        Probe("floor", "acquire-new", "acquire-new", (Step("acquire", upsert=True),), key="new"),
        Probe("floor", "release", "release", (ACQUIRE, RELEASE)),
        Probe("floor", "extend", "extend", (ACQUIRE, EXTEND)),
    ]
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
        for probe in PROBES:
            mine = _counted(counter, probe.prepare(stage))
            floor = _counted(counter, FLOOR_OPERATIONS[probe.floor].prepare(stage))
            counts.append(Count(probe.lock, probe.operation, mine, floor))
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
