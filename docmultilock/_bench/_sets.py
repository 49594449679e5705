"""Scenario 14: lock sets: 8 processes locking random overlapping pairs of 10 documents.

Each process takes ``hold_all`` of a random set of documents, given in a random order, and
inside the block checks that it is alone on each (an ``inside`` counter bumped through the
set's guard must read 1). A deadlock would show as sets that time out; a livelock as a
process with no grant. The multi-process test runs the same worker (``lock_sets``).
"""

from __future__ import annotations

import multiprocessing
import random
import time
from typing import Any, Literal

from pymongo import ReturnDocument

from docmultilock._bench._bed import Context, Outcome, connect
from docmultilock._bench._report import Bound, Row
from docmultilock._sync.managers import WriteLock
from docmultilock.errors import LockTimeout

__all__ = ["PROCESSES", "lock_sets", "run_sets", "sets"]

PROCESSES = 8
DOCUMENTS = 10
ZERO = Bound("==", 0.0, of="docmultilock")
#: How long one set may wait: far beyond any fair wait, so a timeout means a deadlock.
SET_WAIT = 30.0

Doc = dict[str, Any]


def lock_sets(
    uri: str,
    where: tuple[str, str],
    seconds: float,
    seed: int,
    sizes: tuple[int, int],
    wake: Literal["changes", "poll"] = "changes",
) -> dict[str, int]:
    """Hold random sets of ``sizes`` (min, max) documents for ``seconds``; count what happens.

    Counts ``grants``, ``violations`` (a document found held by another inside the block)
    and ``timeouts`` (a set not granted within :data:`SET_WAIT`).
    """
    rng = random.Random(seed)
    counts = {"grants": 0, "violations": 0, "timeouts": 0}
    client = connect(uri)
    try:
        collection = client[where[0]][where[1]]
        locks = WriteLock(collection, lock_timeout=10.0)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            ids = rng.sample(range(DOCUMENTS), rng.randint(*sizes))  # in a random order
            keys = [{"_id": i} for i in ids]
            try:
                with locks.hold_all(keys, wait=SET_WAIT, backoff=(0.005, 0.1), wake=wake) as held:
                    for key in keys:
                        inside = held.require(
                            collection.find_one_and_update(
                                held.guard(key),
                                {"$inc": {"inside": 1}},
                                return_document=ReturnDocument.AFTER,
                            )
                        )
                        counts["violations"] += inside is None or inside["inside"] != 1
                    for key in keys:
                        collection.update_one(key, {"$inc": {"inside": -1}})
            except LockTimeout:
                counts["timeouts"] += 1
            else:
                counts["grants"] += 1
    finally:
        client.close()
    return counts


def run_sets(
    uri: str,
    where: tuple[str, str],
    seconds: float,
    sizes: tuple[int, int],
    wake: Literal["changes", "poll"] = "changes",
) -> list[dict[str, int]]:
    """Run :func:`lock_sets` in :data:`PROCESSES` processes on fresh documents; their counts."""
    with connect(uri) as client:
        collection = client[where[0]][where[1]]
        collection.drop()
        collection.insert_many([{"_id": i, "inside": 0} for i in range(DOCUMENTS)])
    args = [(uri, where, seconds, seed, sizes, wake) for seed in range(PROCESSES)]
    with multiprocessing.get_context("spawn").Pool(PROCESSES) as pool:
        return pool.starmap(lock_sets, args)


def sets(context: Context) -> Outcome:
    """Scenario 14: random overlapping pairs of 10 documents, 8 processes, each wake mode."""
    where = ("docmultilock_bench", "lock_sets")
    seconds = context.duration / 2
    rows: list[Row] = []
    for wake in ("changes", "poll"):
        context.progress.show(f"{PROCESSES} processes, wake={wake}, {seconds:g} s ...", force=True)
        results = run_sets(context.uri, where, seconds, (2, 2), wake)
        rows += _rows(f"pairs of {DOCUMENTS} documents, wake={wake}", results, seconds)
    with connect(context.uri) as client:
        client[where[0]][where[1]].drop()
    return Outcome(rows, f"{DOCUMENTS} documents of {{_id, inside}}")


def _rows(what: str, results: list[dict[str, int]], seconds: float) -> list[Row]:
    grants = [r["grants"] for r in results]
    return [
        Row.make(14, f"{what}: sets granted", "/s", sum(grants) / seconds, None),
        Row.make(
            14,
            f"{what}: least grants of a process",
            "",
            min(grants),
            None,
            Bound(">", 0.0, of="docmultilock"),
            detail="grants per process " + " ".join(map(str, grants)),
        ),
    ] + [
        Row.make(14, f"{what}: {label}", "", sum(r[count] for r in results), None, ZERO)
        for label, count in (
            (f"sets timed out after {SET_WAIT:g} s (a deadlock)", "timeouts"),
            ("two holders of one document at once", "violations"),
        )
    ]
