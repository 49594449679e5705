"""How the embedded server slows down as retryable writes accumulate (docs/server.md).

Starts a fresh embedded server, and measures raw pymongo ``find_one_and_update`` calls per
second from one client on a one-document collection: when fresh, after 5,000 writes,
after 10,200 (past the server's cap of 10,000 kept records, where it also sorts them),
and then with ``retryWrites=false``::

    python tools/server_wear.py [SECONDS_PER_WINDOW]
"""

from __future__ import annotations

import sys
import time
from typing import Any

from pymongo import MongoClient
from pymongo.collection import Collection

from docmultilock.testing import EmbeddedServer

#: The writes the server has seen at each measurement.
STEPS = (0, 5_000, 10_200)


def rate(collection: Collection[dict[str, Any]], seconds: float) -> tuple[int, float]:
    """``find_one_and_update`` calls made in ``seconds``, and their rate."""
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        collection.find_one_and_update({"_id": 1}, {"$inc": {"n": 1}})
        count += 1
    return count, count / (time.perf_counter() - start)


def main(seconds: float) -> None:
    """Print the rate at each step of ``STEPS``, each measured for ``seconds``."""
    with EmbeddedServer() as server:
        client: MongoClient[dict[str, Any]] = MongoClient(server.uri)
        collection = client.wear.one
        collection.insert_one({"_id": 1, "n": 0})
        done = 1
        for step in STEPS:
            while done < step:
                collection.update_one({"_id": 1}, {"$inc": {"m": 1}})
                done += 1
            count, per_second = rate(collection, seconds)
            print(f"after {done:,} writes: {per_second:,.0f} findAndModify/s", flush=True)
            done += count
        plain: MongoClient[dict[str, Any]] = MongoClient(server.uri, retryWrites=False)
        _, per_second = rate(plain.wear.one, seconds)
        print(f"after {done:,} writes, retryWrites=false: {per_second:,.0f}/s", flush=True)
        plain.close()
        client.close()


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 3.0)
