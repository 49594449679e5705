"""The floor: the lock a user would write by hand with one raw ``find_one_and_update``.

Every figure ``docmultilock bench`` prints is set beside this one. The floor keeps one
holder in the document's ``lock`` field as ``{id, expires}`` (or null) and each operation is
a single-document conditional update pipeline, with the lock field as the only projection:

* acquire: ``$set`` the field to a new entry when it is null or expired, else leave it;
  the reply *after* the write tells whether our entry is there.
* release: ``$set`` the field to null when the entry is ours; the reply *before* tells.
* extend: push the expiry when the entry is ours and unexpired; the reply *after* tells.

It compares dates with the same server-now form docmultilock uses (SecantusDB compares
stored dates with a bare ``$$NOW`` wrongly), and writes with the same write concern.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

from pymongo import ReturnDocument
from pymongo.collection import Collection
from pymongo.write_concern import WriteConcern

from docmultilock._expr import SERVER_NOW, Expr

__all__ = ["FIELD", "FloorLock"]

FIELD = "lock"
_PROJECTION = {"_id": 0, FIELD: 1}
_ENTRY_ID = f"${FIELD}.id"
_EXPIRES = f"${FIELD}.expires"

Doc = dict[str, Any]


def _set_if(condition: Expr, value: Expr) -> list[Doc]:
    """One ``$set`` of the lock field: ``value`` when ``condition`` holds, else unchanged."""
    return [{"$set": {FIELD: {"$cond": [condition, value, f"${FIELD}"]}}}]


def _entry(lock_id: str, ttl_ms: int) -> Expr:
    return {"id": {"$literal": lock_id}, "expires": {"$add": ["$$NOW", ttl_ms]}}


def _is(lock_id: str) -> Expr:
    return {"$eq": [_ENTRY_ID, {"$literal": lock_id}]}


class FloorLock:
    """One exclusive holder per document, one ``find_one_and_update`` per operation."""

    def __init__(
        self, collection: Collection[Doc], *, ttl_ms: int = 10_000, w: int | str = "majority"
    ) -> None:
        self.collection = collection.with_options(write_concern=WriteConcern(w=w))
        self.ttl_ms = ttl_ms

    def _send(self, where: Mapping[str, Any], update: list[Doc], **options: Any) -> Doc | None:
        reply: Doc | None = self.collection.find_one_and_update(
            where, update, projection=_PROJECTION, **options
        )
        return reply

    @staticmethod
    def _holds(reply: Doc | None, lock_id: str) -> bool:
        state = reply.get(FIELD) if reply else None
        return isinstance(state, dict) and state.get("id") == lock_id

    def acquire(self, where: Mapping[str, Any], *, upsert: bool = False) -> str | None:
        """Return the new lock id, or ``None`` when the lock is held (or no document matched)."""
        lock_id = secrets.token_hex(16)
        free = {"$or": [{"$eq": [{"$ifNull": [f"${FIELD}", None]}, None]},
                        {"$lte": [_EXPIRES, SERVER_NOW]}]}  # fmt: skip
        reply = self._send(
            where,
            _set_if(free, _entry(lock_id, self.ttl_ms)),
            upsert=upsert,
            return_document=ReturnDocument.AFTER,
        )
        return lock_id if self._holds(reply, lock_id) else None

    def release(self, where: Mapping[str, Any], lock_id: str) -> bool:
        """Clear the field when the entry is ``lock_id``; return whether it was."""
        reply = self._send(
            where, _set_if(_is(lock_id), None), return_document=ReturnDocument.BEFORE
        )
        return self._holds(reply, lock_id)

    def extend(self, where: Mapping[str, Any], lock_id: str) -> bool:
        """Push the expiry of a live ``lock_id``; return whether it was renewed."""
        live = {"$and": [_is(lock_id), {"$gt": [_EXPIRES, SERVER_NOW]}]}
        reply = self._send(
            where, _set_if(live, _entry(lock_id, self.ttl_ms)), return_document=ReturnDocument.AFTER
        )
        return self._holds(reply, lock_id)
