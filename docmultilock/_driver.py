"""The pymongo boundary shared by the shells: write-concern views, deadlines, error mapping."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import pymongo
from pymongo.collection import Collection
from pymongo.errors import PyMongoError
from pymongo.write_concern import WriteConcern

from docmultilock.errors import DbError, DbTimeout

__all__ = ["WriteConcernViews", "deadline", "translate"]


class WriteConcernViews:
    """One view of the user's collection per write concern, made once and reused."""

    def __init__(self, collection: Collection[Any]) -> None:
        self._collection = collection
        self._views: dict[int | str, Collection[Any]] = {}

    def __call__(self, w: int | str) -> Collection[Any]:
        view = self._views.get(w)
        if view is None:
            view = self._collection.with_options(write_concern=WriteConcern(w=w))
            self._views[w] = view
        return view


@contextlib.contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Bound every operation inside by pymongo's client-side operation timeout."""
    if seconds is None:
        yield
        return
    with pymongo.timeout(seconds):
        yield


def translate(exc: PyMongoError, doing: str, filter: Mapping[str, Any] | None) -> DbError:  # noqa: A002
    """The one place a pymongo error becomes a docmultilock error (raise it ``from exc``)."""
    error = DbTimeout if exc.timeout else DbError
    return error(f"{doing} failed: {type(exc).__name__}: {exc}", filter=filter)
