"""How worn an embedded test server is: the writes it has seen, and what they cost.

The embedded server (SecantusDB) keeps every retryable write for 30 minutes and rescans
them all on each write, so it answers more slowly the more writes it has seen: from one
client, ``findAndModify`` ran about 5 to 18 times slower after 10,200 writes than when
fresh (docs/server.md, "It slows down as writes accumulate"). ``bench``, ``server`` and
``doctor`` say so when that is the server, so that a figure taken on a long-running one is
not read as the library's. MongoDB keeps one record per session and has no such cost.
"""

from __future__ import annotations

from typing import Any

from pymongo import MongoClient
from pymongo.errors import PyMongoError

__all__ = ["SLOWDOWN", "writes_seen"]

#: One sentence on the slowdown, with its figures, for the commands that report it.
SLOWDOWN = (
    "the embedded server slows down as writes accumulate (it keeps each retryable write "
    "for 30 minutes and rescans them all on every write: findAndModify ran about 5 to 18 "
    "times slower after 10,200 writes than when fresh, docs/server.md); restart it before "
    "measuring"
)


def writes_seen(client: MongoClient[dict[str, Any]]) -> int | None:
    """The insert, update (``findAndModify`` among them) and delete commands the server ran.

    From ``serverStatus``'s ``opcounters``; ``None`` when the server does not say.
    """
    try:
        counters = client.admin.command("serverStatus").get("opcounters") or {}
    except PyMongoError:
        return None
    if not counters:
        return None
    return sum(int(counters.get(kind, 0)) for kind in ("insert", "update", "delete"))
