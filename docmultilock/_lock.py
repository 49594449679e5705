"""The :class:`Lock` value a caller holds, and :class:`LockSchema` to send it over the wire."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import bson
import marshmallow
from bson import json_util
from bson.binary import UuidRepresentation
from bson.code import Code
from bson.dbref import DBRef
from bson.errors import BSONError
from bson.objectid import ObjectId
from bson.regex import Regex

from docmultilock._flavour import NotAHold

__all__ = [
    "CANONICAL_JSON",
    "MAX_DEPTH",
    "Lock",
    "LockSchema",
    "as_utc",
    "document_id_problem",
    "nests_deeper_than",
]

#: 32 lowercase hex digits, nothing before or after (``$`` would allow a final newline).
LOCK_ID_PATTERN = re.compile(r"\A[0-9a-f]{32}\Z")


def as_utc(value: datetime) -> datetime:
    """``value`` as an aware UTC datetime, the only kind docmultilock hands out.

    pymongo returns naive datetimes (UTC) by default, and aware ones in the client's
    ``tzinfo`` when it was given one: both become the same instant in UTC.
    """
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


#: MongoDB nests BSON documents and arrays at most 100 levels deep. Deeper input is
#: refused before encoding, which would otherwise exhaust Python's recursion limit.
MAX_DEPTH = 100


def nests_deeper_than(value: object, limit: int) -> bool:
    """True when documents and arrays nest deeper than ``limit`` in ``value`` (no recursion).

    A ``DBRef`` is a document, and a ``Code`` with a scope holds one: both count.
    """
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        elif isinstance(item, DBRef):
            children = item.as_doc().values()
        elif isinstance(item, Code) and item.scope is not None:
            children = (item.scope,)
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


#: ``_id`` types that are always fine (and ints within 64 bits), checked first.
_PLAIN_IDS = frozenset({str, ObjectId, float, type(None)})


def document_id_problem(value: Any) -> str | None:
    """Why ``value`` cannot be a document's ``_id`` matched by equality, or ``None``.

    A lock's ``document_id`` is put into the command's filter. A mapping with a ``$`` key
    would be read there as a query operator (``{"$ne": null}`` matches other documents),
    and MongoDB never stores an array, a regular expression or an integer beyond 64 bits
    as an ``_id``.
    """
    kind = type(value)
    if kind in _PLAIN_IDS or (kind is int and -(2**63) <= value < 2**63):
        return None
    if isinstance(value, Mapping) and any(str(key).startswith("$") for key in value):
        return "is a query operator, not an _id"
    if isinstance(value, (list, tuple, Regex, re.Pattern)):
        return f"cannot be an _id ({type(value).__name__})"
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
        return "is an integer beyond 64 bits"
    if nests_deeper_than(value, MAX_DEPTH):
        return f"nests deeper than MongoDB's {MAX_DEPTH} levels"
    return None


@dataclass(frozen=True, slots=True)
class Lock(NotAHold):
    """A lock held (or awaited) on one document; immutable, compared by value.

    :ivar id: 128 random bits as 32 hex digits; the only proof of ownership.
    :ivar tag: the lock's tag (``"write"`` for a :class:`~docmultilock.WriteLock`).
    :ivar document_id: ``_id`` of the locked document; release, extend and guard act on it.
    :ivar acquired_at: when the server granted it (or registered it, while pending); UTC.
    :ivar expires_at: when it stops being held unless extended, by the server's clock; UTC.
    :ivar fence: grows with every grant on the document; 0 while pending.
    :ivar pending: true while an assertive lock still waits for other tags to drain.
    """

    id: str
    tag: str
    document_id: Any
    acquired_at: datetime
    expires_at: datetime
    fence: int
    pending: bool = False


#: Canonical Extended JSON, a ``uuid.UUID`` written as the standard binary (subtype 4).
CANONICAL_JSON = json_util.CANONICAL_JSON_OPTIONS.with_options(
    uuid_representation=UuidRepresentation.STANDARD
)

#: Extended JSON wraps a value in at most two levels of its own (``{"$binary": {...}}``).
_WRAPPING = 2


class _ExtendedJson(marshmallow.fields.Field[Any]):
    """Any BSON value as canonical Extended JSON data, so ``_id`` types survive a round trip.

    A ``uuid.UUID`` is written in the schema's ``uuid_representation``; loading keeps the
    binary as written (``bson.Binary``), which matches the same stored bytes.
    """

    def _serialize(self, value: Any, attr: str | None, obj: Any, **kwargs: Any) -> Any:
        options = getattr(self.root, "json_options", CANONICAL_JSON)
        return json.loads(json_util.dumps(value, json_options=options))

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        # Checked before any recursive code sees it: a client's deeply nested JSON must be
        # a ValidationError, not a RecursionError.
        if nests_deeper_than(value, MAX_DEPTH + _WRAPPING):
            raise marshmallow.ValidationError(f"nests deeper than MongoDB's {MAX_DEPTH} levels")
        try:
            loaded = json_util.loads(json.dumps(value))
        except (TypeError, ValueError, OverflowError, BSONError, RecursionError) as exc:
            raise marshmallow.ValidationError("not valid Extended JSON") from exc
        problem = document_id_problem(loaded)
        if problem is not None:
            raise marshmallow.ValidationError(problem)
        try:
            bson.encode({"_id": loaded})  # e.g. an integer beyond 64 bits deep inside
        except (BSONError, OverflowError, ValueError) as exc:
            raise marshmallow.ValidationError("cannot be sent to MongoDB") from exc
        return loaded


class LockSchema(marshmallow.Schema):
    """Dump a :class:`Lock` to JSON-safe data and load it back (unknown keys are refused).

    ``document_id`` is canonical Extended JSON (``{"$oid": ...}``, ``{"$numberInt": "1"}``),
    so the loaded lock names the very same document. Loading refuses one that cannot be an
    ``_id`` (an operator such as ``{"$ne": null}``, an array, a regular expression, an
    integer beyond 64 bits): a client must not smuggle a query operator into the filter
    through it::

        data = LockSchema().dump(lock)          # hand it to the client
        lock = LockSchema().load(data)          # take it back in a later request

    A ``uuid.UUID`` ``_id`` is written as BSON stores it under ``uuid_representation``:
    the standard one (binary subtype 4) unless the client's ``uuidRepresentation`` is a
    legacy one, which is then given here (``LockSchema(uuid_representation=...)``).
    """

    class Meta:
        unknown = marshmallow.RAISE

    def __init__(
        self, *args: Any, uuid_representation: int = UuidRepresentation.STANDARD, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.uuid_representation = uuid_representation
        #: How ``document_id`` is written: made once per schema, not per dump.
        self.json_options = CANONICAL_JSON.with_options(uuid_representation=uuid_representation)

    id = marshmallow.fields.String(
        required=True, validate=marshmallow.validate.Regexp(LOCK_ID_PATTERN)
    )
    tag = marshmallow.fields.String(
        required=True, validate=marshmallow.validate.Length(min=1, max=256)
    )
    document_id = _ExtendedJson(required=True, allow_none=True)
    acquired_at = marshmallow.fields.AwareDateTime(required=True)
    expires_at = marshmallow.fields.AwareDateTime(required=True)
    fence = marshmallow.fields.Integer(
        required=True, strict=True, validate=marshmallow.validate.Range(min=0)
    )
    pending = marshmallow.fields.Boolean(required=True)

    @marshmallow.post_load
    def _make_lock(self, data: dict[str, Any], **kwargs: Any) -> Lock:
        for name in ("acquired_at", "expires_at"):
            try:
                data[name] = data[name].astimezone(timezone.utc)
            except OverflowError as exc:  # e.g. year 1 at +01:00: no such UTC date
                raise marshmallow.ValidationError("out of the range of dates", name) from exc
        return Lock(**data)
