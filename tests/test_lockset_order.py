"""The canonical order of a lock set's keys: MongoDB's comparison order of their ``_id``s."""

from __future__ import annotations

import re
import uuid
from datetime import datetime, timezone
from typing import Any

import pytest
from bson.binary import Binary, UuidRepresentation
from bson.code import Code
from bson.codec_options import CodecOptions
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.timestamp import Timestamp

from docmultilock import InvalidArgument
from docmultilock._bson_identity import order_key

PLAIN: CodecOptions[Any] = CodecOptions()


def ordered(*values: Any, codec_options: CodecOptions[Any] = PLAIN) -> list[Any]:
    return sorted(values, key=lambda value: order_key(value, codec_options))


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (1, 1.0),
        (1, Int64(1)),
        (1, Decimal128("1.00")),
        (0.0, -0.0),
        (float("nan"), Decimal128("NaN")),
        ({"a": 1}, {"a": 1.0}),
    ],
)
def test_values_mongodb_matches_as_equal_have_one_key(a: Any, b: Any) -> None:
    assert order_key(a, PLAIN) == order_key(b, PLAIN)


def test_numbers_order_by_value_across_types_with_nan_first() -> None:
    numbers = ordered(3, Decimal128("2.5"), Int64(-7), 2**62 + 1, 1e300, float("nan"))
    assert str(numbers[0]) == "nan"
    assert numbers[1:] == [
        Int64(-7),
        Decimal128("2.5"),
        3,
        2**62 + 1,
        1e300,
    ]


def test_types_order_as_mongodb_brackets_them() -> None:
    oid = ObjectId()
    when = datetime(2026, 1, 1, tzinfo=timezone.utc)
    values = [MaxKey(), Timestamp(1, 1), when, True, oid, b"x", {"a": 1}, "s", 5, None, MinKey()]
    assert ordered(*values) == values[::-1]


def test_strings_order_by_code_point() -> None:
    assert ordered("b", "a", "é", "Z", "😀", "ﬀ") == ["Z", "a", "b", "é", "ﬀ", "😀"]


def test_documents_order_field_by_field() -> None:
    assert ordered({"a": 2}, {"a": 1, "b": 0}, {"a": 1}, {"b": 0}) == [
        {"a": 1},
        {"a": 1, "b": 0},
        {"a": 2},
        {"b": 0},
    ]


def test_binary_data_orders_by_length_then_subtype_then_bytes() -> None:
    assert ordered(Binary(b"b", 5), b"zz", b"a", Binary(b"a", 5)) == [
        b"a",
        Binary(b"a", 5),
        Binary(b"b", 5),
        b"zz",
    ]


def test_a_uuid_is_ordered_as_the_collection_stores_it() -> None:
    standard: CodecOptions[Any] = CodecOptions(uuid_representation=UuidRepresentation.STANDARD)
    value = uuid.UUID(int=1)
    assert order_key(value, standard) == order_key(Binary.from_uuid(value), PLAIN)


@pytest.mark.parametrize(
    "value",
    [[1, 2], re.compile("x"), Code("f()"), uuid.UUID(int=1)],
    ids=["array", "regex", "code", "uuid without a representation"],
)
def test_an_id_that_cannot_be_ordered_is_refused(value: Any) -> None:
    with pytest.raises(InvalidArgument):
        order_key(value, PLAIN)
