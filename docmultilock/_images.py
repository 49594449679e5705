"""Replies that are a document's stored image rather than the command's projection.

A ``findAndModify`` that pymongo retries after a dropped connection or a fail-over (same
``lsid`` and ``txnNumber``) and whose first attempt was applied is not run again on a
MongoDB replica set: the server answers from its oplog, and the ``value`` it sends is the
**full stored pre- or post-image** of the document, without the command's projection
(``parseOplogEntryForFindAndModify`` in mongodb/mongo
``src/mongo/db/query/write_ops/write_ops_retryability.cpp``, formerly
``src/mongo/db/ops/``: ``result.setValue(extractPreOrPostImage(...))`` for an update or
delete, ``oplogEntry.getObject()`` for an upsert's insert). An update that changed nothing
writes no oplog entry, so its retry runs again and is answered with the projection as
usual.

Every projection docmultilock sends leaves ``_id`` out and carries the document's id as
:data:`DOCUMENT_ID` instead, while every stored document has an ``_id``: a reply with an
``_id`` is an image, whatever top-level names the user's documents hold. An image is read
from the lock field itself, which is exactly what the projection would have been computed
from, so both kinds of reply lead to the same decision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["DOCUMENT_ID", "document_id", "entries", "is_image", "lock_state"]

#: The projected key that carries the document's ``_id`` (``_id`` itself is left out).
DOCUMENT_ID = "i"

#: The projection's head: no ``_id``, the id under :data:`DOCUMENT_ID`.
HEAD: dict[str, Any] = {"_id": 0, DOCUMENT_ID: "$_id"}


def is_image(reply: Mapping[str, Any]) -> bool:
    """True when ``reply`` is a stored document (a retried command's answer), not projected."""
    return "_id" in reply


def document_id(reply: Mapping[str, Any]) -> Any:
    """The id of the document a reply (projected, or an image) is about."""
    return reply["_id"] if is_image(reply) else reply[DOCUMENT_ID]


def lock_state(image: Mapping[str, Any], field: str) -> Any:
    """The lock field of an image as stored (``None`` when missing)."""
    return image.get(field)


def entries(image: Mapping[str, Any], field: str) -> Sequence[Mapping[str, Any]]:
    """The stored entries of an image's lock field (none for a missing or foreign field)."""
    state = lock_state(image, field)
    holders = state.get("holders") if isinstance(state, Mapping) else None
    if not isinstance(holders, list):
        return ()
    return [entry for entry in holders if isinstance(entry, Mapping)]
