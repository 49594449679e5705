"""A lock client driven over stdin/stdout, for running under a skewed clock (faketime).

Run as ``python -m tests._clock_worker URI DATABASE``. Each line read is a JSON request
``{"op": ..., "collection": name, ...}``; each line written is the JSON answer. Every lock
request acts on the document ``{"_id": 1}`` of the named collection. Locks travel as
:class:`~docmultilock.LockSchema` data, errors as ``{"error": <code>}``.

Requests:

* ``{"op": "clock"}``: this process's ``time.time()`` and ``datetime.now(timezone.utc)``.
* ``{"op": "acquire", "kind": "WriteLock" | "MultiLock", "lock_timeout": seconds}``
* ``{"op": "extend" | "release", "kind": ..., "lock": {...}}``
* ``{"op": "guarded_write", "kind": ..., "lock": {...}, "value": ...}``: ``update_one``
  through ``guard()``, setting ``written`` to ``value``; answers ``matched``.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime, timezone
from typing import Any

from pymongo import MongoClient

from docmultilock import LockError, LockSchema, MultiLock, WriteLock

Doc = dict[str, Any]
TARGET: Doc = {"_id": 1}
MANAGERS: dict[str, type[WriteLock | MultiLock]] = {"WriteLock": WriteLock, "MultiLock": MultiLock}


def serve(uri: str, database: str) -> None:
    client: MongoClient[Doc] = MongoClient(uri, timeoutMS=30_000)
    schema = LockSchema()
    for line in sys.stdin:
        request = json.loads(line)
        op = request["op"]
        answer: Doc
        if op == "clock":
            answer = {"time": time.time(), "now": datetime.now(timezone.utc).isoformat()}
        else:
            collection = client[database][request["collection"]]
            locks = MANAGERS[request["kind"]](collection)
            try:
                if op == "acquire":
                    lifetime = request["lock_timeout"]
                    lock = (
                        locks.acquire(TARGET, tag="write", lock_timeout=lifetime)
                        if isinstance(locks, MultiLock)
                        else locks.acquire(TARGET, lock_timeout=lifetime)
                    )
                    answer = {"lock": schema.dump(lock)}
                elif op == "extend":
                    extended = locks.extend(TARGET, schema.load(request["lock"]))
                    answer = {"lock": schema.dump(extended)}
                elif op == "release":
                    locks.release(TARGET, schema.load(request["lock"]))
                    answer = {"released": True}
                elif op == "guarded_write":
                    guarded = locks.guard(TARGET, schema.load(request["lock"]))
                    result = collection.update_one(guarded, {"$set": {"written": request["value"]}})
                    answer = {"matched": result.matched_count}
                else:
                    answer = {"error": f"unknown op {op!r}"}
            except LockError as err:
                answer = {"error": err.code}
        print(json.dumps(answer), flush=True)
    client.close()


if __name__ == "__main__":
    serve(*sys.argv[1:3])
