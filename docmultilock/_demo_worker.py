"""The worker processes of ``docmultilock demo``: each races for read and write locks.

A worker has its own client and a :class:`~docmultilock.MultiLock` with the readers-writer
table. A writer changes its document in two separate guarded writes (``a``, then ``b``), so
anyone who could look between them would see ``a != b``; both sides count themselves in and
out of the document (``readers_inside``, ``writers_inside``), so every overlap the locks must
prevent is seen by whoever comes second. Workers run in a :class:`~docmultilock._workers.Pool`
and report a :class:`Tally` to the parent (``_demo``).
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pymongo import MongoClient, ReturnDocument
from pymongo.collection import Collection

from docmultilock import MultiLock
from docmultilock._lock import Lock
from docmultilock._workers import STARTUP_LIMIT, Link, Ready, unless_given
from docmultilock.errors import AssertiveLock, CooperativeLock, LockNotFound

__all__ = ["DATABASE", "Job", "Message", "Report", "Tally", "connect", "worker_main"]

DATABASE = "docmultilock_demo"
#: Long enough that no lock expires under a holder here: a lost lock means a stall.
LOCK_TIMEOUTS: Mapping[str, float] = {"read": 2.0, "write": 5.0}
READ_SHARE = 0.8
READ_HOLD = 0.005  # seconds a reader keeps its lock, at most, so writers meet readers
WRITE_PAUSE = 0.005  # seconds between a writer's two writes, at most
WAIT_TRIES = 100  # a pending writer asks again this often before giving up ...
WAIT_PAUSE = 0.01  # ... this many seconds apart: far within the 2 s a reader may hold
REPORT_EVERY = 0.25
CLIENT_TIMEOUT_MS = 10_000
KEPT_PROBLEMS = 10  # details sent per worker; the counts cover the rest ...
PROBLEM_WIDTH = 150  # pymongo's errors run to a whole topology description
FIELDS = {"a": 1, "b": 1, "readers_inside": 1, "writers_inside": 1}

Doc = dict[str, Any]


#: What a worker counts: the locks each tag was granted and refused, the assertive waits and
#: those given up, the locks each tag lost, violations and errors (both must stay 0).
Count = Literal[
    "read",
    "write",
    "read_conflicts",
    "write_conflicts",
    "waits",
    "gave_up",
    "read_lost",
    "write_lost",
    "violations",
    "errors",
]


class Tally(Counter[Count]):
    """What happened, summed over workers; ``violations`` and ``errors`` must stay 0."""

    @property
    def acquired(self) -> int:
        """Locks granted, both tags."""
        return self["read"] + self["write"]

    @property
    def conflicts(self) -> int:
        """Acquisitions refused by a cooperative tag, both tags."""
        return self["read_conflicts"] + self["write_conflicts"]

    @property
    def lost(self) -> int:
        """Locks found gone before their holder let go, both tags."""
        return self["read_lost"] + self["write_lost"]


@dataclass(frozen=True)
class Job:
    """What every worker does: where, for how long; each draws from ``seed:index``."""

    uri: str
    collection: str
    documents: int
    seconds: float
    seed: int


@dataclass(frozen=True)
class Report:
    worker: int
    tally: Tally
    problems: tuple[str, ...]
    final: bool


Message = Ready | Report


# -- the worker processes ---------------------------------------------------------------


class _Worker:
    """One worker process: takes locks in a loop, checks what it sees, reports its counts."""

    collection: Collection[Doc]
    locks: MultiLock

    def __init__(self, job: Job, link: Link) -> None:
        self.job = job
        self.link = link
        self.tally = Tally()
        self.rng = random.Random(f"{job.seed}:{link.index}")
        self._new: list[str] = []
        self._kept = 0
        self._sent_at = time.monotonic()

    def main(self) -> None:
        """Connect, say ready, race from the start signal until the time is up."""
        with connect(self.job.uri) as client:
            self.collection = client[DATABASE][self.job.collection]
            self.locks = MultiLock(self.collection, lock_timeouts=LOCK_TIMEOUTS)
            self.link.ready(client)
            if self.link.go.wait(STARTUP_LIMIT) and not self.link.stop.is_set():
                self.run()

    def run(self) -> None:
        deadline = time.monotonic() + self.job.seconds
        while time.monotonic() < deadline and not self.link.stop.is_set():
            where = {"_id": self.rng.randrange(self.job.documents)}
            if self.rng.random() < READ_SHARE:
                self.read(where)
            else:
                self.write(where)
            self.send(final=False)

    def read(self, where: Doc) -> None:
        try:
            lock = self.locks.acquire(where, tag="read")
        except CooperativeLock:
            self.tally["read_conflicts"] += 1
            return
        self.tally["read"] += 1
        self._inside(where, lock, self._reading)

    def write(self, where: Doc) -> None:
        lock = self._acquire_write(where)
        if lock is not None:
            self.tally["write"] += 1
            self._inside(where, lock, self._writing)

    def _inside(self, where: Doc, lock: Lock, body: Callable[[Doc, Lock, Doc, Doc], None]) -> None:
        """Count in under ``lock``, run ``body(where, lock, guard, seen)``, count out, release."""
        counter, doing = (
            ("readers_inside", "reading") if lock.tag == "read" else ("writers_inside", "writing")
        )
        try:
            guard = self.locks.guard(where, lock)
            seen: Doc | None = self.collection.find_one_and_update(
                guard, {"$inc": {counter: 1}}, FIELDS, return_document=ReturnDocument.AFTER
            )
            if seen is None:
                self.lost(lock, f"before {doing}")
                return
            try:
                body(where, lock, guard, seen)
            finally:
                # Unguarded: the count must come down even when the lock was lost meanwhile.
                self.collection.update_one(where, {"$inc": {counter: -1}})
        finally:
            self._release(where, lock)

    def _reading(self, where: Doc, lock: Lock, guard: Doc, seen: Doc) -> None:
        if seen["a"] != seen["b"] or seen["writers_inside"] != 0:
            self.violation(where, seen, "a reader found")
            return
        time.sleep(self.rng.uniform(0, READ_HOLD))
        again = self.collection.find_one(guard, FIELDS)
        if again is None:
            self.lost(lock, "while reading")
        elif (again["a"], again["b"], again["writers_inside"]) != (seen["a"], seen["b"], 0):
            self.violation(where, again, "changed under a read lock:")

    def _acquire_write(self, where: Doc) -> Lock | None:
        """Take the write lock, waiting a bounded while for readers to drain; None if refused."""
        try:
            return self.locks.acquire(where, tag="write")
        except CooperativeLock:
            self.tally["write_conflicts"] += 1
            return None
        except AssertiveLock as err:
            pending = err.lock
        self.tally["waits"] += 1
        for _ in range(WAIT_TRIES):
            time.sleep(WAIT_PAUSE)
            try:
                return self.locks.acquire(where, lock=pending)
            except AssertiveLock:
                continue
            except CooperativeLock:
                self.tally["write_conflicts"] += 1
                return None
            except LockNotFound:
                self.lost(pending, "while pending")
                return None
        self.tally["gave_up"] += 1
        self._release(where, pending)  # so the pending entry stops refusing readers now
        return None

    def _writing(self, where: Doc, lock: Lock, guard: Doc, seen: Doc) -> None:
        if seen["writers_inside"] != 1 or seen["readers_inside"] != 0:
            self.violation(where, seen, "a writer found")
        elif seen["a"] >= lock.fence:
            # Fences grow with every grant, so an earlier writer's value is smaller.
            self.violation(where, seen, f"fence {lock.fence} did not grow past")
        # Two separate writes: a reader let in between them would see a != b.
        if not self.collection.update_one(guard, {"$set": {"a": lock.fence}}).matched_count:
            self.lost(lock, "before writing a")
            return
        time.sleep(self.rng.uniform(0, WRITE_PAUSE))
        if not self.collection.update_one(guard, {"$set": {"b": lock.fence}}).matched_count:
            self.lost(lock, "before writing b")

    def _release(self, where: Doc, lock: Lock) -> None:
        try:
            self.locks.release(where, lock)
        except LockNotFound:
            self.lost(lock, "before release")

    def lost(self, lock: Lock, when: str) -> None:
        count: Count = "read_lost" if lock.tag == "read" else "write_lost"
        self.problem(count, f"{lock.tag} lock on document {lock.document_id} lost {when}")

    def violation(self, where: Doc, seen: Doc, what: str) -> None:
        state = ", ".join(f"{key}={seen.get(key)}" for key in FIELDS)
        self.problem("violations", f"{what} document {where['_id']} with {state}")

    def problem(self, count: Count, text: str) -> None:
        self.tally[count] += 1
        if self._kept < KEPT_PROBLEMS:
            self._kept += 1
            text = text if len(text) <= PROBLEM_WIDTH else text[: PROBLEM_WIDTH - 3] + "..."
            self._new.append(f"worker {self.link.index}: {text}")

    def send(self, *, final: bool) -> None:
        if not final and time.monotonic() - self._sent_at < REPORT_EVERY:
            return
        # The queue pickles in a background thread: send a copy, not the live tally.
        self.link.put(Report(self.link.index, self.tally.copy(), tuple(self._new), final))
        self._new = []
        self._sent_at = time.monotonic()


def worker_main(link: Link, job: Job) -> None:
    """Race until the time is up or the parent says stop; always send a final report.

    An error ends the race and is counted among the worker errors of that report.
    """
    worker = _Worker(job, link)
    with link.working(failed=lambda text: worker.problem("errors", text)):
        worker.main()
    worker.send(final=True)


# -- the parent ----------------------------------------------------------------------------


def connect(uri: str) -> MongoClient[Doc]:
    """Connect with every operation bounded in time, unless the URI sets its own bound."""
    return MongoClient(uri, **unless_given(uri, {"timeoutMS": CLIENT_TIMEOUT_MS}))
