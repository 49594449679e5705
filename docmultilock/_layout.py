"""The stored layout of a lock field, and the frame every update pipeline is written in.

The layout (``docs/concepts.md`` documents it for users)::

    field: {
      v: 1,                 # layout version; any other value is refused, never overwritten
      fence: <int>,         # last fence granted on this document; never decreases
      expires: <date>,      # latest expiry among holders (time of the last write if none)
      holders: [{id, tag, pending, fence, acquired, expires, ttl}, ...],
      broken: {token, at, removed: [...]}   # only after break_lock, until the next write
    }

Here: the layout's version and fence limits, ``OURS`` (the server's judgement that a field
is ours to write) and the refusal of one that is not (:func:`foreign_field`), the
constants every body reads (``$$now``, ``$$st``, ``$$fence0``) and the one ``$set`` stage
that carries a body (:func:`update_stages`), and the small expression helpers the bodies
(``_pipeline``) are written with.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from docmultilock._expr import SERVER_NOW, Expr, field_or_null, literal

__all__ = [
    "FENCES_PER_MS",
    "FENCE_LIMIT",
    "LAYOUT",
    "LAYOUT_VERSION",
    "OURS",
    "STORED",
    "STORED_OR_NULL",
    "any_of",
    "first",
    "foreign_field",
    "is_entry",
    "let",
    "on_our_field",
    "ours",
    "update_stages",
]

LAYOUT_VERSION = 1

FENCES_PER_MS = 1000


def let(variables: dict[str, Expr], body: Expr) -> Expr:
    return {"$let": {"vars": variables, "in": body}}


def first(branches: list[tuple[Expr, Expr]], default: Expr) -> Expr:
    """The ``then`` of the first true case, else ``default`` (a ``$cond`` for one case)."""
    if not branches:
        return default
    if len(branches) == 1:
        ((case, then),) = branches
        return {"$cond": [case, then, default]}
    return {
        "$switch": {
            "branches": [{"case": case, "then": then} for case, then in branches],
            "default": default,
        }
    }


def any_of(cases: list[Expr]) -> Expr:
    return cases[0] if len(cases) == 1 else {"$or": cases}


#: Fences stay below this, so ``fence + 1`` and clock fences remain exact 64-bit integers
#: (MongoDB turns an overflowing ``long`` sum into an inexact double).
FENCE_LIMIT = 2**62

#: A stored fence we can grow: missing or null (none granted yet: ``$$fence0`` is then 0),
#: or a whole number of BSON type int or long from 0 to ``FENCE_LIMIT``. NaN, infinities,
#: decimals and doubles are not. Read through ``$$fence0``, which the bodies use anyway, so
#: that missing and null need no type of their own (the test server names the type of a
#: missing field of a variable differently, ``docs/server.md``); the deprecated BSON type
#: undefined counts as null there, as MongoDB's ``$ifNull`` takes it.
_FENCE_OK: list[Expr] = [
    {"$in": [{"$type": "$$fence0"}, ["int", "long"]]},
    {"$gte": ["$$fence0", 0]},
    {"$lt": ["$$fence0", FENCE_LIMIT]},
]

#: What ``OURS`` accepts besides null, in words, for the errors that refuse a field.
LAYOUT = (
    f"a version-{LAYOUT_VERSION} object whose holders are an array and whose fence is an "
    "int or long from 0 to 2**62"
)

#: True when ``$$st`` (the lock field, missing made null, with ``$$fence0`` its fence, as
#: :func:`_constants` and :func:`ours` bind them) is ours to write: null, or an
#: object with our layout version whose holders, if any, are an array, and whose fence we
#: can grow. Anything else is never written. The server alone judges it, in the pipeline
#: (and in ``inspect``'s and ``break_lock``'s projections, which read without writing), so
#: the client never judges a field on its own. (Only an object has a ``v`` equal to 1: an
#: array's ``"$$st.v"`` is a list, or missing on the test server.)
OURS: Expr = {
    "$or": [
        {"$eq": ["$$st", None]},
        {
            "$and": [
                {"$eq": ["$$st.v", LAYOUT_VERSION]},
                {"$isArray": {"$ifNull": ["$$st.holders", []]}},
                *_FENCE_OK,
            ]
        },
    ]
}

#: The stored entries, of a field that is ours (missing made empty).
STORED: Expr = {"$ifNull": ["$$st.holders", []]}

#: The stored entries as they are, where a missing list may read as null (``$map`` of it).
STORED_OR_NULL: Expr = "$$st.holders"


#: The words of a command refused because its lock field is not ours, written by
#: :func:`_refuse_foreign` and read back by :func:`foreign_field`.
_FOREIGN, _OF_TYPE = "docmultilock: field ", " holds data of type "
_FOREIGN_WORDS = re.compile(re.escape(_FOREIGN) + "(.*?)" + re.escape(_OF_TYPE) + r"(\w+)")


def _refuse_foreign(field: str) -> Expr:
    """An expression that fails the command, naming ``field`` and the type it holds.

    MongoDB has no operator that raises an error of one's choosing: converting a string that
    is not a number fails with ``ConversionFailure`` (code 241), and the server quotes the
    string in its message (:func:`foreign_field`). A failed command writes nothing, and
    with no reply the reader never has to tell a foreign field from a refusal: the layout
    check lives in the pipeline alone, not in every projection as well.
    """
    return {"$toInt": {"$concat": [f"{_FOREIGN}{field!r}{_OF_TYPE}", {"$type": "$$st"}]}}


def foreign_field(message: str) -> tuple[str, str] | None:
    """``(field, type)`` when a server's error ``message`` is :func:`_refuse_foreign`'s."""
    words = _FOREIGN_WORDS.search(message)
    return None if words is None else (words[1], words[2])


def on_our_field(field: str, variables: dict[str, Expr], body: Expr) -> Expr:
    """``body`` under ``variables``, on a field that is ours (``OURS``).

    A field that is not ours fails the command (:func:`_refuse_foreign`); ``variables``
    are bound only after the check, so they may walk the holders.
    """
    bound = let(variables, body) if variables else body
    return {"$cond": [OURS, bound, _refuse_foreign(field)]}


@functools.cache
def _constants(field: str) -> dict[str, Expr]:
    """What every body reads, bound once with the per-call bindings (one ``$let``, not three).

    ``$$now`` is the server's clock, ``$$st`` the field (missing made null) and ``$$fence0``
    the fence it holds (0 when none). ``$$fence0`` reads the field itself rather than
    ``$$st``, as variables of one ``$let`` cannot see each other. On a field that is not an
    object it means nothing, and ``OURS``, which also checks it, refuses such a field by
    its version anyway.
    """
    return {
        "now": SERVER_NOW,
        "st": field_or_null(field),
        "fence0": {"$ifNull": [f"${field}.fence", 0]},
    }


def ours(field: str) -> Expr:
    """``OURS`` standing alone (in a projection or a filter): true when ``field`` is ours."""
    constants = _constants(field)
    return let({"st": constants["st"], "fence0": constants["fence0"]}, OURS)


def update_stages(field: str, body: Expr, bindings: dict[str, Any]) -> list[dict[str, Any]]:
    """The one ``$set`` stage of ``field``: ``body`` under the per-call ``bindings``.

    ``body`` may be pre-encoded (a ``RawBSONDocument``): only the bindings are encoded
    per call.
    """
    variables = {**_constants(field), **bindings}
    return [{"$set": {field: {"$let": {"vars": variables, "in": body}}}}]


def is_entry(lock_id: str) -> Expr:
    """True for the array element ``$$this`` whose id is ``lock_id``."""
    return {"$eq": ["$$this.id", literal(lock_id)]}
