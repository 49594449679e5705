"""The worker processes of the contended scenarios: try once, release on success.

A worker of a :class:`~docmultilock._workers.Pool` connects, says it is ready, then runs
each :class:`Phase` its parent sends (one side, docmultilock or the floor, for a given time
from a given wall-clock start) and answers with a :class:`Result`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from docmultilock import WriteLock
from docmultilock._bench._bed import DATABASE, connect
from docmultilock._bench._floor import FloorLock
from docmultilock._workers import Link
from docmultilock.errors import LockAlreadyTaken

__all__ = ["Job", "Phase", "Result", "worker_main"]

Doc = dict[str, Any]


@dataclass(frozen=True)
class Job:
    """Where every worker runs: the server, and the two sides' collections."""

    uri: str
    locks: str
    floor: str


@dataclass(frozen=True)
class Phase:
    """One side's turn; each worker draws its documents from ``seed:index``."""

    side: str
    seconds: float
    start_at: float  # time.time(): the same clock in every process
    documents: int
    seed: str


@dataclass
class Result:
    """One worker's phase: wins, attempts, its wall time, and each call's latency (s)."""

    worker: int
    side: str
    wins: int = 0
    attempts: int = 0
    wall: float = 0.0
    acquire: list[float] = field(default_factory=list)
    release: list[float] = field(default_factory=list)


TryLock = tuple[Callable[[Doc], Any], Callable[[Doc, Any], object]]


def _tries(job: Job, client: Any) -> dict[str, TryLock]:
    """Each side as (try to acquire, returning None when refused; release)."""
    locks = WriteLock(client[DATABASE][job.locks])
    floor = FloorLock(client[DATABASE][job.floor])

    def try_lock(where: Doc) -> Any:
        try:
            return locks.acquire(where)
        except LockAlreadyTaken:
            return None

    return {
        "docmultilock": (try_lock, lambda where, lock: locks.release(where, lock)),
        "floor": (floor.acquire, floor.release),
    }


def _run(index: int, phase: Phase, tries: dict[str, TryLock]) -> Result:
    acquire, release = tries[phase.side]
    rng = random.Random(f"{phase.seed}:{index}")
    result = Result(index, phase.side)
    time.sleep(max(0.0, phase.start_at - time.time()))
    clock = time.perf_counter
    start = now = clock()
    end = start + phase.seconds
    while now < end:
        where = {"_id": rng.randrange(phase.documents)}
        handle = acquire(where)
        acquired = clock()
        result.acquire.append(acquired - now)
        result.attempts += 1
        now = acquired
        if handle is not None:
            release(where, handle)
            now = clock()
            result.release.append(now - acquired)
            result.wins += 1
    result.wall = now - start
    return result


def worker_main(link: Link, job: Job) -> None:
    """Connect, say ready, run phases until told to stop; report any error and stop."""
    with link.working(), connect(job.uri) as client:
        tries = _tries(job, client)
        link.ready(client)
        for phase in link.orders():
            link.put(_run(link.index, phase, tries))
