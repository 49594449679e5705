"""Small aggregation-expression builders shared by every server-side decision.

This is the one place that knows how the test server (SecantusDB) departs from MongoDB.
Each helper below means the same on MongoDB 4.4+ as the plain form would, and is also
correct on SecantusDB:

* ``SERVER_NOW``: SecantusDB compares stored dates with ``$$NOW`` wrongly (``$lt`` never
  true, ``$gte`` always true). Round-tripping ``$$NOW`` through ``$toLong``/``$toDate``
  yields an ordinary date that compares correctly on both servers.
* :func:`each`: SecantusDB evaluates ``"$array.field"`` over an array of documents to
  *missing* (MongoDB gives the list of values). ``$map`` means the same on both.
* :func:`field_or_null`: a ``$let`` variable bound to a missing field reports ``$type``
  ``"object"`` on SecantusDB (MongoDB: ``"missing"``). Binding ``$ifNull: [field, null]``
  turns missing into null on both servers, and the lock treats missing and null alike.

One helper is a matter of cost, not of meaning: :func:`contains` tests membership with
``$indexOfArray``, which means what ``$in`` means for a string, and which SecantusDB runs
as one native equality per element where its ``$in`` makes two BSON-order comparisons in
Python (a pass over 1,000 holders costs about as much as the rest of the command).

``tests/test_server_quirks.py`` pins these departures, so a SecantusDB release that fixes
them shows up as a failing (strict) xfail there.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SERVER_NOW", "contains", "each", "field_or_null", "is_non_empty", "literal"]

Expr = Any

#: The server's clock at the time of the command, as a date that compares correctly.
SERVER_NOW: Expr = {"$toDate": {"$toLong": "$$NOW"}}


def each(array: Expr, name: str) -> Expr:
    """The list of ``name`` values of an array of documents (``"$array.name"`` on MongoDB)."""
    return {"$map": {"input": array, "in": f"$$this.{name}"}}


def contains(array: Expr, text: Expr) -> Expr:
    """True when the list ``array`` holds the string ``text`` (``$in``, for strings only).

    Only for a string: SecantusDB's ``$indexOfArray`` compares with Python's ``==``, which
    takes ``true`` for ``1``, where MongoDB tells BSON types apart.
    """
    return {"$gte": [{"$indexOfArray": [array, text]}, 0]}


def field_or_null(name: str) -> Expr:
    """A top-level field's value for binding in ``$let``, with *missing* made ``null``."""
    return {"$ifNull": [f"${name}", None]}


def is_non_empty(array: Expr) -> Expr:
    """True when ``array`` has at least one element."""
    return {"$gt": [{"$size": array}, 0]}


def literal(value: Any) -> Expr:
    """A user-supplied value (a tag name) that must never be read as a field path."""
    return {"$literal": value}
