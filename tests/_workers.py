"""Worker processes for the multi-process tests (importable, as ``spawn`` requires)."""

from __future__ import annotations

import random
import time
from typing import Any

from pymongo import MongoClient, ReturnDocument

from docmultilock import AssertiveLock, CooperativeLock, MultiLock, NamedLocks

Doc = dict[str, Any]


def contend(uri: str, db: str, coll: str, seconds: float, seed: int) -> dict[str, int]:
    """Take random read/write locks on one document; count exclusion violations.

    Inside a write lock the worker bumps ``w_in`` and checks it alone is inside (``w_in``
    1, ``r_in`` 0), and increments ``n`` by a read-modify-write that loses updates if two
    writers overlap. Inside a read lock it checks no writer is inside.
    """
    rng = random.Random(seed)
    counts = {"read": 0, "write": 0, "refused": 0, "waits": 0, "violations": 0}
    client: MongoClient[Doc] = MongoClient(uri, timeoutMS=30_000)
    try:
        collection = client[db][coll]
        locks = MultiLock(collection, lock_timeouts={"read": 10.0, "write": 10.0})
        target = {"_id": 1}
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            tag = "write" if rng.random() < 0.4 else "read"
            try:
                lock = locks.acquire(target, tag=tag)
            except CooperativeLock:
                counts["refused"] += 1
                continue
            except AssertiveLock as exc:
                lock = exc.lock
                while lock.pending:
                    counts["waits"] += 1
                    time.sleep(0.002)
                    try:
                        lock = locks.acquire(target, lock=lock)
                    except AssertiveLock as again:
                        lock = again.lock
            mine, other = ("w_in", "r_in") if tag == "write" else ("r_in", "w_in")
            inside = collection.find_one_and_update(
                target, {"$inc": {mine: 1}}, return_document=ReturnDocument.AFTER
            )
            assert inside is not None
            if inside.get(other, 0) != 0 or (tag == "write" and inside[mine] != 1):
                counts["violations"] += 1
            if tag == "write":
                current = collection.find_one(target, {"n": 1})
                assert current is not None
                collection.update_one(target, {"$set": {"n": current.get("n", 0) + 1}})
            collection.update_one(target, {"$inc": {mine: -1}})
            locks.release(target, lock)
            counts[tag] += 1
    finally:
        client.close()
    return counts


def hold_read_lock(uri: str, db: str, coll: str, lifetime: float, ready: Any) -> None:
    """Take a read lock, say so, then hang until killed: a reader that dies holding it."""
    client: MongoClient[Doc] = MongoClient(uri, timeoutMS=30_000)
    MultiLock(client[db][coll], lock_timeouts={"read": lifetime}).acquire({"_id": 1}, tag="read")
    ready.set()
    time.sleep(3600)


def race_for_names(uri: str, db: str, coll: str, names: list[str], start: Any) -> dict[str, Any]:
    """Wait for ``start``, then try each name once: the first acquirers of fresh names race.

    Returns the names won and the type name of every exception seen (only the documented
    conflict may come out; a raw pymongo error would be a failure).
    """
    client: MongoClient[Doc] = MongoClient(uri, timeoutMS=30_000)
    won: list[str] = []
    errors: list[str] = []
    try:
        named = NamedLocks(client[db], coll)
        start.wait()
        for name in names:
            try:
                named.acquire(name)
            except Exception as exc:  # the test checks what came out
                errors.append(type(exc).__name__)
            else:
                won.append(name)
    finally:
        client.close()
    return {"won": won, "errors": errors}
