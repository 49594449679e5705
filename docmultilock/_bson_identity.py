"""When MongoDB holds two BSON values the same, and in which order it puts them.

Python's equality is not MongoDB's: Python calls ``1`` and ``True`` equal, and
``{"a": 1, "b": 2}`` and ``{"b": 2, "a": 1}``, where MongoDB tells both pairs apart; MongoDB
calls ``1``, ``Int64(1)``, ``1.0`` and ``Decimal128("1")`` the same ``_id``, where their
BSON bytes differ. Every comparison of ``_id``s the library makes is one of these three, and
each takes the collection's ``codec_options``, as pymongo encodes with them (a
``uuid.UUID`` by its ``uuid_representation``, a custom type by its ``type_registry``):

* :func:`stored_key`: the value's BSON bytes, a hashable key for ids read back from the
  server (a change stream's document key, a batch's read, a held lock's document): typed as
  stored, so the same stored value gives the same bytes.
* :func:`same_bson_value`: equality as a filter matches a value (an ``_id`` the caller names
  against a lock's document), numbers by value across types.
* :func:`order_key`: MongoDB's comparison order of ``_id``s, which also equates them as
  MongoDB does (a lock set's canonical order).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import bson
import bson.errors
from bson.binary import Binary
from bson.code import Code
from bson.codec_options import DEFAULT_CODEC_OPTIONS, CodecOptions, DatetimeConversion
from bson.datetime_ms import DatetimeMS
from bson.decimal128 import Decimal128
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.timestamp import Timestamp

from docmultilock.errors import InvalidArgument

__all__ = ["order_key", "same_bson_value", "stored_key"]


def stored_key(value: Any, codec_options: CodecOptions[Any]) -> bytes:
    """``value`` as BSON bytes: equal where two ids read back from the server are one ``_id``.

    For values typed as stored (decoded with the collection's ``codec_options``, which
    encode them back): a caller's own value may differ in type from what is stored.
    """
    return bson.encode({"_id": value}, codec_options=codec_options)


def _number(value: object) -> Decimal | None:
    """``value`` as an exact decimal when BSON stores it as a number (a bool is not one)."""
    if isinstance(value, Decimal128):
        return value.to_decimal()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Decimal(value)
    return None


#: Types whose values match in MongoDB exactly when they are equal in Python (strings that
#: UTF-8 can encode: ASCII ones are checked here, the rest take the encoding path).
_EXACT = frozenset({str, int, ObjectId})


def same_bson_value(
    a: object, b: object, codec_options: CodecOptions[Any] = DEFAULT_CODEC_OPTIONS
) -> bool:
    """Equality as MongoDB matches a value (an ``_id`` in a filter against a lock's document).

    Numbers compare by value across BSON types (int, long, double, decimal), documents
    field by field *in order*, arrays element by element, everything else as the same
    BSON bytes (:func:`stored_key`), encoded with ``codec_options``.
    """
    if type(a) is type(b) and type(a) in _EXACT and (type(a) is not str or a.isascii()):
        return bool(a == b)  # the same BSON type, whose Python equality is MongoDB's
    number_a, number_b = _number(a), _number(b)
    if number_a is not None or number_b is not None:
        if number_a is None or number_b is None:
            return False
        if number_a.is_nan() or number_b.is_nan():
            return number_a.is_nan() and number_b.is_nan()
        return number_a == number_b
    if isinstance(a, Mapping) or isinstance(b, Mapping):
        return (
            isinstance(a, Mapping)
            and isinstance(b, Mapping)
            and list(a) == list(b)
            and all(same_bson_value(a[key], b[key], codec_options) for key in a)
        )
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return (
            isinstance(a, (list, tuple))
            and isinstance(b, (list, tuple))
            and len(a) == len(b)
            and all(same_bson_value(x, y, codec_options) for x, y in zip(a, b, strict=True))
        )
    try:
        return stored_key(a, codec_options) == stored_key(b, codec_options)
    except (bson.errors.BSONError, OverflowError, ValueError):
        return False


#: How the ids are read back to be ordered: dates as milliseconds (any BSON date fits),
#: binary data of every subtype as ``Binary``, numbers as they are stored.
_READ_BACK: CodecOptions[Any] = CodecOptions(datetime_conversion=DatetimeConversion.DATETIME_MS)

# MongoDB's order of BSON types when comparing values of different types
# (https://www.mongodb.com/docs/manual/reference/bson-type-comparison-order/).
_MIN_KEY, _NULL, _NUMBER, _STRING, _OBJECT = 1, 2, 3, 4, 5
_BINARY, _OBJECT_ID, _BOOLEAN, _DATE, _TIMESTAMP, _MAX_KEY = 7, 8, 9, 10, 11, 13


def order_key(value: Any, codec_options: CodecOptions[Any]) -> tuple[Any, ...]:
    """A sort key of an ``_id`` that orders and equates ids as MongoDB compares them.

    The value is first encoded as pymongo sends it (``codec_options``: the collection's, so
    a ``uuid.UUID`` or a custom type is ordered as what is stored), then read back. Numbers
    compare by value across int, long, double and decimal (``1`` and ``1.0`` name one
    document); strings by their UTF-8 bytes, which is code point order.

    :raises InvalidArgument: a value that cannot be an ``_id`` one can order (an array, a
        regular expression, JavaScript code).
    """
    try:
        stored = bson.decode(stored_key(value, codec_options), _READ_BACK)
    except Exception as exc:  # what bson refuses, in whichever way it refuses
        raise InvalidArgument(f"cannot encode the _id {value!r}: {exc}") from exc
    return _order(stored["_id"], value)


def _order(value: Any, given: Any) -> tuple[Any, ...]:
    if isinstance(value, MinKey):
        return (_MIN_KEY,)
    if value is None:
        return (_NULL,)
    if isinstance(value, bool):
        return (_BOOLEAN, value)
    if isinstance(value, (int, float, Decimal128)):
        number = value.to_decimal() if isinstance(value, Decimal128) else Decimal(value)
        # NaN sorts below every other number, and equals itself (as MongoDB has it).
        return (_NUMBER, 0) if number.is_nan() else (_NUMBER, 1, number)
    if isinstance(value, str) and not isinstance(value, Code):  # Code is a str, not a string
        return (_STRING, value.encode("utf-8"))
    if isinstance(value, Mapping):
        # Field by field, in order: each value's type, then the field's name, then the value.
        fields = ((name, _order(field, given)) for name, field in value.items())
        return (_OBJECT, tuple((key[0], name.encode("utf-8"), key) for name, key in fields))
    if isinstance(value, (bytes, Binary)):
        subtype = value.subtype if isinstance(value, Binary) else 0
        return (_BINARY, len(value), subtype, bytes(value))
    if isinstance(value, ObjectId):
        return (_OBJECT_ID, value.binary)
    if isinstance(value, DatetimeMS):
        return (_DATE, int(value))
    if isinstance(value, Timestamp):
        return (_TIMESTAMP, value.time, value.inc)
    if isinstance(value, MaxKey):
        return (_MAX_KEY,)
    raise InvalidArgument(f"a lock set cannot order the _id {given!r} ({type(given).__name__})")
