"""How an error leaves the process: its data as JSON, and its rebuilding from a pickle.

:class:`~docmultilock.LockError` offers ``to_dict()`` (filters and keys as relaxed Extended
JSON) and pickles with every attribute, whatever keywords its ``__init__`` requires.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from bson import json_util
from bson.binary import UuidRepresentation

E = TypeVar("E", bound=BaseException)

__all__ = ["relaxed", "restore"]

#: Relaxed Extended JSON, a ``uuid.UUID`` written as the standard binary (subtype 4).
RELAXED_UUID = json_util.RELAXED_JSON_OPTIONS.with_options(
    uuid_representation=UuidRepresentation.STANDARD
)


def relaxed(value: Any) -> Any:
    """Turn BSON values (ObjectId, datetime, UUID...) into JSON-safe relaxed Extended JSON."""
    return json.loads(json_util.dumps(value, json_options=RELAXED_UUID))


def restore(cls: type[E], message: str, state: dict[str, Any]) -> E:
    """Rebuild a pickled error from its message and data, without calling ``__init__``."""
    error = cls.__new__(cls, message)
    error.args = (message,)
    error.__dict__.update(state)
    return error
