"""LockSchema: a Lock handed to a web client and taken back in a later request."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import marshmallow
import pytest
from bson import Int64, ObjectId
from pymongo.collection import Collection

from docmultilock import Lock, LockSchema, MultiLock
from tests.helpers import nested

Doc = dict[str, Any]

LOCK = Lock(
    id="0123456789abcdef0123456789abcdef",
    tag="write",
    document_id=ObjectId("5f0000000000000000000001"),
    acquired_at=datetime(2026, 1, 1, 12, 0, 0, 123000, tzinfo=timezone.utc),
    expires_at=datetime(2026, 1, 1, 12, 0, 10, 123000, tzinfo=timezone.utc),
    fence=7,
    pending=False,
)


def round_trip(lock: Lock) -> Lock:
    wire = json.dumps(LockSchema().dump(lock))
    loaded = LockSchema().load(json.loads(wire))
    assert isinstance(loaded, Lock)
    return loaded


def test_a_lock_survives_a_json_round_trip() -> None:
    assert round_trip(LOCK) == LOCK


@pytest.mark.parametrize("document_id", [1, Int64(2**40), "order-42", 1.5, {"a": 1}, None])
def test_document_ids_keep_their_bson_type(document_id: Any) -> None:
    lock = Lock(**{**vars_of(LOCK), "document_id": document_id})
    loaded = round_trip(lock)
    assert loaded.document_id == document_id
    assert type(loaded.document_id) is type(document_id)


def test_the_dump_is_plain_json_data() -> None:
    data = LockSchema().dump(LOCK)
    assert data["document_id"] == {"$oid": "5f0000000000000000000001"}
    assert data["expires_at"] == "2026-01-01T12:00:10.123000+00:00"


def test_unknown_keys_are_refused() -> None:
    data = {**LockSchema().dump(LOCK), "admin": True}
    with pytest.raises(marshmallow.ValidationError, match="admin"):
        LockSchema().load(data)


@pytest.mark.parametrize(
    ("key", "bad"),
    [
        ("id", "not-hex"),
        ("id", "0" * 31),
        ("fence", -1),
        ("fence", "7"),
        ("id", "0" * 32 + "\n"),
        ("expires_at", "2026-01-01T12:00:00"),  # naive: refused
        ("tag", ""),
        ("document_id", {"$ref": "orders", "$id": nested(150)}),  # a DBRef is a document
        ("document_id", nested(5_000)),  # refused before any recursive code sees it
    ],
)
def test_forged_or_broken_fields_are_refused(key: str, bad: Any) -> None:
    data = {**LockSchema().dump(LOCK), key: bad}
    with pytest.raises(marshmallow.ValidationError):
        LockSchema().load(data)


def test_a_loaded_lock_releases_on_the_server(collection: Collection[Doc], doc: Doc) -> None:
    locks = MultiLock(collection)
    lock = locks.acquire(doc, tag="write")
    locks.release(doc, round_trip(lock))


def vars_of(lock: Lock) -> dict[str, Any]:
    return {name: getattr(lock, name) for name in Lock.__dataclass_fields__}
