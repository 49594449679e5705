"""The :class:`Lock` value a caller holds, and :class:`LockSchema` to send it over the wire."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import marshmallow
from bson import json_util

__all__ = ["Lock", "LockSchema"]

LOCK_ID_PATTERN = re.compile(r"^[0-9a-f]{32}$")


@dataclass(frozen=True, slots=True)
class Lock:
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


class _ExtendedJson(marshmallow.fields.Field[Any]):
    """Any BSON value as canonical Extended JSON data, so ``_id`` types survive a round trip."""

    def _serialize(self, value: Any, attr: str | None, obj: Any, **kwargs: Any) -> Any:
        return json.loads(json_util.dumps(value, json_options=json_util.CANONICAL_JSON_OPTIONS))

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        try:
            return json_util.loads(json.dumps(value))
        except (TypeError, ValueError) as exc:
            raise marshmallow.ValidationError("not valid Extended JSON") from exc


class LockSchema(marshmallow.Schema):
    """Dump a :class:`Lock` to JSON-safe data and load it back (unknown keys are refused).

    ``document_id`` is canonical Extended JSON (``{"$oid": ...}``, ``{"$numberInt": "1"}``),
    so the loaded lock names the very same document::

        data = LockSchema().dump(lock)          # hand it to the client
        lock = LockSchema().load(data)          # take it back in a later request
    """

    class Meta:
        unknown = marshmallow.RAISE

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
        data["acquired_at"] = data["acquired_at"].astimezone(timezone.utc)
        data["expires_at"] = data["expires_at"].astimezone(timezone.utc)
        return Lock(**data)
