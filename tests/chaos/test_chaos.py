"""The chaos test: locks under fail points, killed holders and a crashing server.

Several worker processes (``workers.py``) take random read/write locks on a few documents
(document mode, :class:`~docmultilock.MultiLock`) and exclusive named locks on a few job
names (:class:`~docmultilock.NamedLocks`), protecting counters with guarded (document
mode) or fenced (named mode) writes. The conductor (``conductor.py``) injects fail points,
drops replies to applied commands (the workers connect through ``tests/proxy.py``),
SIGKILLs random holders and kill -9s the server, restarting it on the same storage. The
checker (``checker.py``) then judges the run from the journals and the final documents.

The test runs on a server of its own (on-disk storage, ``sync_on_commit``, test commands,
a one-second TTL sweep, a fixed port), never on the session's shared one. ``CHAOS_SEED``
replays the conductor's and workers' random choices (timing still differs between runs).
"""

from __future__ import annotations

import os
import random
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from docmultilock import AssertiveLock, Lock, LockConflict, LockError
from docmultilock.testing import EmbeddedServer
from tests.chaos.checker import Report, check, load_journals
from tests.chaos.conductor import Conductor, Plan
from tests.chaos.resources import (
    DB_NAME,
    DOCS,
    JOBS,
    NAMED_MS,
    WRITE_MS,
    Resource,
    resources,
    user_fields,
)

Doc = dict[str, Any]

PLAN = Plan(
    workers=4,
    documents=3,
    names=2,
    seconds=40.0,
    restarts=(0.35, 0.7),
    kill_every=5.0,
    fault_every=1.0,
)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def seed_data(client: MongoClient[Doc], plan: Plan) -> dict[str, Resource]:
    found = resources(client[DB_NAME], plan.documents, plan.names)
    for key, resource in found.items():
        counter: Doc = {"_id": resource.counter_id, **user_fields(key), "n": 0, "log": []}
        if resource.named:
            counter["fence"] = 0
        else:
            counter["rmw"] = 0
        resource.counter.insert_one(counter)
    # The named locks' collection and TTL index exist before any worker upserts into it.
    next(r for r in found.values() if r.named).locks.ensure_indexes()  # type: ignore[union-attr]
    return found


def probe(resource: Resource, patience: float) -> str | None:
    """Take and give back a write lock once the run is over; None, or what went wrong."""
    give_up = time.monotonic() + patience
    pending: Lock | None = None
    while time.monotonic() < give_up:
        try:
            if pending is None:
                lock = resource.locks.acquire(resource.target, tag="write")
            else:
                lock = resource.locks.acquire(resource.target, lock=pending)
        except AssertiveLock as err:
            pending = err.lock
        except LockConflict:
            pending = None
        except LockError as err:
            return f"{resource.key}: {err.code}: {err}"
        else:
            resource.locks.release(resource.target, lock)
            return None
        time.sleep(0.05)
    return f"{resource.key}: still locked {patience} s after the run"


def run_chaos(tmp_path: Path, plan: Plan, seed: int) -> tuple[Report, Conductor]:
    storage = tmp_path / "storage"
    storage.mkdir()
    journals = tmp_path / "journals"
    journals.mkdir()
    # A TTL sweep every second also deletes idle named-lock documents during the run.
    server = EmbeddedServer(
        storage_path=storage,
        enable_test_commands=True,
        sync_on_commit=True,
        ttl_sweep_seconds=1,
        port=free_port(),
    )
    with server:
        conductor = Conductor(plan, server, journals, seed)
        try:
            found = seed_data(conductor.client, plan)
            stragglers = conductor.run()
            patience = max(WRITE_MS, NAMED_MS) / 1000 + 3
            stuck = [problem for r in found.values() if (problem := probe(r, patience))]
            database = conductor.client[DB_NAME]
            counters = {
                key: database[JOBS if r.named else DOCS].find_one({"_id": r.counter_id}) or {}
                for key, r in found.items()
            }
            # SecantusDB executes a write retried under an operation timeout again.
            embedded = "secantusVersion" in conductor.client.admin.command("buildInfo")
        finally:
            conductor.close()
    events, torn = load_journals(journals)
    report = check(
        events,
        counters,
        {key: user_fields(key) for key in counters},
        conductor.dead_holders,
        conductor.restarted_at,
        conductor.cutter.cuts,
        retries_reexecuted=embedded,
        server_kills=conductor.killed_at,
    )
    for problem in stuck:
        report.flag("stuck", problem)
    report.counts.update(conductor.faults)
    report.counts["faults injected"] = sum(conductor.faults.values())
    report.counts["workers started"] = sum(e["e"] == "start" for e in events)
    report.counts["stragglers killed"] = stragglers
    report.counts["torn journal lines"] = torn
    return report, conductor


@pytest.mark.slow
@pytest.mark.embedded_only("runs on a server of its own that it kills with -9 and restarts")
def test_locks_hold_their_guarantees_under_chaos(tmp_path: Path, record_property: Any) -> None:
    seed = int(os.environ.get("CHAOS_SEED") or random.randrange(1_000_000))
    started = time.monotonic()
    report, _ = run_chaos(tmp_path, PLAN, seed)
    summary = (
        f"chaos run (seed {seed}, {time.monotonic() - started:.1f} s, "
        f"{PLAN.workers} workers, {PLAN.documents} documents, {PLAN.names} names):\n"
        + report.summary()
    )
    print(summary)
    for key, value in sorted(report.counts.items()):
        record_property(f"chaos {key}", value)
    record_property("chaos violations", len(report.violations))
    assert report.counts["grants"] > 100, summary
    assert report.counts["grants named"] > 10, summary
    assert report.counts["restarts survived"] == len(PLAN.restarts), summary
    assert report.counts["SIGKILL of a holder"] > 0, summary
    assert report.counts["replies cut"] > 0, summary
    assert not report.violations, summary
