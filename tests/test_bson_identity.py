"""When two ``_id``s are one: as stored, as a filter matches, as MongoDB orders (no server)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from bson.binary import Binary, UuidRepresentation
from bson.codec_options import CodecOptions
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.objectid import ObjectId
from bson.regex import Regex

from docmultilock._bson_identity import order_key, same_bson_value, stored_key

PLAIN: CodecOptions[Any] = CodecOptions()
STANDARD: CodecOptions[Any] = CodecOptions(uuid_representation=UuidRepresentation.STANDARD)
OID = ObjectId("65a1b2c3d4e5f60718293a4b")


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (1, True),
        (1, 1.0),
        (1, Int64(1)),
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}),
        ("a", b"a"),
    ],
)
def test_stored_keys_differ_where_bson_types_or_field_order_differ(a: Any, b: Any) -> None:
    assert stored_key(a, PLAIN) != stored_key(b, PLAIN)


@pytest.mark.parametrize(
    "value",
    [1, Int64(1), 1.5, "é", OID, {"a": [1, {"b": None}]}, Regex("^a"), Decimal128("1.0")],
)
def test_a_stored_value_has_one_stored_key(value: Any) -> None:
    assert stored_key(value, PLAIN) == stored_key(value, PLAIN)


def test_stored_key_encodes_a_uuid_as_the_collection_does() -> None:
    value = uuid.UUID(int=7)
    assert stored_key(value, STANDARD) == stored_key(Binary.from_uuid(value), PLAIN)


def test_stored_key_refuses_a_uuid_the_codec_cannot_encode() -> None:
    with pytest.raises(ValueError, match="uuid"):
        stored_key(uuid.UUID(int=7), PLAIN)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (1, 1.0),
        (1, Int64(1)),
        (1, Decimal128("1.00")),
        (float("nan"), Decimal128("NaN")),
        ({"a": 1}, {"a": 1.0}),
        ([1, "x"], (1.0, "x")),
        ("é", "é"),
        (OID, OID),
    ],
)
def test_same_bson_value_matches_as_a_filter_does(a: Any, b: Any) -> None:
    assert same_bson_value(a, b)
    assert same_bson_value(b, a)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (1, True),
        (0, False),
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}),
        ([1, 2], [2, 1]),
        ([1], 1),
        ("1", 1),
        ("a", b"a"),
        (1, float("nan")),
    ],
)
def test_same_bson_value_tells_apart_what_mongodb_does(a: Any, b: Any) -> None:
    assert not same_bson_value(a, b)
    assert not same_bson_value(b, a)


def test_same_bson_value_encodes_with_the_collections_codec() -> None:
    value = uuid.UUID(int=7)
    assert same_bson_value(value, Binary.from_uuid(value), STANDARD)
    assert not same_bson_value(value, Binary.from_uuid(value))  # unencodable: no match


@pytest.mark.parametrize(("a", "b"), [(1, 1.0), (1, Int64(1)), ({"a": 1}, {"a": 1.0})])
def test_values_that_match_share_an_order_key(a: Any, b: Any) -> None:
    assert same_bson_value(a, b)
    assert order_key(a, PLAIN) == order_key(b, PLAIN)
