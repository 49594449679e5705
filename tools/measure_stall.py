"""What one stalled keep-alive batch costs: N kept locks of L s, one ``update`` blocked B s.

An on-demand measurement (too slow for CI at 1,000 locks; ``tests/test_batches.py`` runs
250 locks of 6 s). One process holds ``--locks`` ``WriteLock`` holds with
``keepalive=True`` on as many documents of one collection (one manager: its locks are
renewed in batches), waits one lifetime, then has the server block the next ``update`` of
that client for ``--block`` seconds (fail point ``blockConnection``, once). For two
lifetimes it reads the raw documents every ``--every`` seconds and counts the locks whose
entry is no longer unexpired by the server's clock while its hold is open. It reports
those, the locks told lost, and the keep-alive's statistics of the window (batches, the
batches sent again, lone renewals, the least time left before an estimate when a renewal
succeeded), and the load average.

    python tools/measure_stall.py --locks 1000 --lifetime 20 --block 4

A fresh embedded server (fail points on) is started unless ``--uri`` names one that
accepts ``configureFailPoint``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from collections.abc import Iterator
from typing import Any

from pymongo import MongoClient
from pymongo.collection import Collection

from docmultilock import WriteLock
from docmultilock._expr import SERVER_NOW
from docmultilock._sync.keepalive import Extender
from docmultilock.testing import mongodb_uri

APP = "docmultilock-measure-stall"
Doc = dict[str, Any]


def unexpired(collection: Collection[Doc]) -> dict[Any, set[str]]:
    """Each document's unexpired lock ids, by the server's clock."""
    entries = {"$ifNull": ["$lock.holders", []]}
    live = {"$filter": {"input": entries, "cond": {"$gt": ["$$this.expires", SERVER_NOW]}}}
    pipeline = [{"$project": {"ids": {"$map": {"input": live, "in": "$$this.id"}}}}]
    return {found["_id"]: set(found["ids"]) for found in collection.aggregate(pipeline)}


@contextlib.contextmanager
def server(uri: str | None) -> Iterator[str]:
    """``uri``, or a fresh embedded server's for the span of the block."""
    if uri is not None:
        yield uri
        return
    with mongodb_uri(enable_test_commands=True) as started:
        yield started


def measure(uri: str, locks: int, lifetime: float, block: float, every: float) -> str:
    """Run the measurement on ``uri``; the report's line."""
    admin: MongoClient[Doc] = MongoClient(uri, timeoutMS=30_000)
    client: MongoClient[Doc] = MongoClient(uri, appName=APP, timeoutMS=30_000)
    collection = admin["docmultilock_measure"][f"stall_{os.getpid()}"]
    collection.drop()
    collection.insert_many([{"_id": i} for i in range(locks)])
    manager = WriteLock(client[collection.database.name][collection.name])
    try:
        with contextlib.ExitStack() as holds:
            started = time.monotonic()
            helds = [
                holds.enter_context(manager.hold({"_id": i}, keepalive=True, lock_timeout=lifetime))
                for i in range(locks)
            ]
            setup = time.monotonic() - started
            time.sleep(lifetime)
            Extender.current().reset_stats()
            admin.admin.command(
                "configureFailPoint",
                "failCommand",
                mode={"times": 1},
                data={
                    "failCommands": ["update"],
                    "appName": APP,
                    "blockConnection": True,
                    "blockTimeMS": round(block * 1000),
                },
            )
            ids = {held.lock.document_id: held.lock.id for held in helds}
            expired: set[Any] = set()
            ends = time.monotonic() + 2 * lifetime
            while time.monotonic() < ends:
                live = unexpired(collection)
                expired |= {key for key, lock_id in ids.items() if lock_id not in live.get(key, ())}
                time.sleep(every)
            seen = Extender.current().reset_stats()
            told = sum(held.lost.is_set() for held in helds)
    finally:
        admin.admin.command("configureFailPoint", "failCommand", mode="off")
        collection.drop()
        client.close()
        admin.close()
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    return (
        f"{locks} locks of {lifetime:g} s, one update blocked {block:g} s "
        f"({locks} documents; setup {setup:.1f} s): {len(expired)} expired on the server, "
        f"{told} told lost; {seen.batches} batches ({seen.resent} sent again), "
        f"{seen.commands - seen.batches} lone renewals; least time left when a renewal "
        f"succeeded {seen.least_left:.2f} s; load average {load}"
    )


def main() -> None:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--locks", type=int, default=1000)
    parser.add_argument("--lifetime", type=float, default=20.0)
    parser.add_argument("--block", type=float, default=4.0)
    parser.add_argument("--every", type=float, default=0.25, help="seconds between reads")
    parser.add_argument("--uri", help="a server with fail points (default: a fresh embedded)")
    args = parser.parse_args()
    with server(args.uri) as uri:
        print(measure(uri, args.locks, args.lifetime, args.block, args.every))


if __name__ == "__main__":
    main()
