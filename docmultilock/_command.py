"""What the lock commands are made of: the command itself, and where the lock state lives.

:class:`Command` is one ``findAndModify`` as a value; :class:`Home` says where a lock's state
lives (the user's own document, or a lock document per name) and :class:`Verdicts` which
errors a refusal and a loss raise. Values the core (``_core``), the reply readers
(``_reply``, ``_plans``) and the drivers share, with no logic of their own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple, cast

from bson import encode
from bson.raw_bson import RawBSONDocument

from docmultilock._args import check_filter, check_name
from docmultilock.errors import (
    CooperativeLock,
    LockAlreadyTaken,
    LockNotFound,
    LockWasReacquired,
)

__all__ = [
    "DEFAULT_MAX_HOLDERS",
    "DOCUMENTS",
    "EXCLUSIVE",
    "NAMES",
    "SHARED",
    "SIMPLE_COLLATION",
    "Command",
    "Filter",
    "Home",
    "ManyCommand",
    "Verdicts",
    "encoded",
    "new_command",
]

#: Live entries one lock field takes at most, unless a manager says otherwise: about
#: 150 KB of entries, far from MongoDB's 16 MiB document limit.
DEFAULT_MAX_HOLDERS = 1000

Filter = Mapping[str, Any]

#: The collation every command on a lock field is sent with: binary comparison of strings.
#: A collection's default collation applies to any operation that names none, its query
#: and its expressions alike (MongoDB manual, "Collation": "If no collation is specified
#: for the operation, the operation uses the collection's default collation"), so under a
#: case-insensitive one the tags ``read`` and ``READ``, or the ids ``"a"`` and ``"A"``,
#: would compare equal. The same collation makes a filter select byte for byte.
SIMPLE_COLLATION: dict[str, str] = {"locale": "simple"}


class Command(NamedTuple):
    """One ``findAndModify``: a driver sends it and hands the reply to the plan's ``read``.

    This and the plans (``_plans``) are built for every command: named tuples, immutable and about
    three times cheaper to make than frozen dataclasses (which set each field through
    ``object.__setattr__``).
    """

    filter: dict[str, Any]
    update: list[dict[str, Any]]
    projection: dict[str, Any]
    return_after: bool
    #: Create the document when missing (named locks: the lock document exists on demand).
    upsert: bool = False
    #: Delete the matched document instead of updating it (``update`` is then empty).
    delete: bool = False
    #: The caller's filter, when ``filter`` adds to it (the lock's ``_id``).
    user_filter: Filter | None = None

    @property
    def named(self) -> Filter:
        """The filter an error names: the caller's."""
        return self.filter if self.user_filter is None else self.user_filter


#: ``new_command((filter, update, projection, return_after, upsert, delete, user_filter))``:
#: a :class:`Command` made by ``tuple.__new__`` itself, every field given in order. Calling
#: a named tuple's class runs its Python-level ``__new__`` (about 2,000 instructions);
#: commands are made on the hot path, two per acquire+release cycle (``_calls`` does the same).
new_command = cast(Callable[[tuple[Any, ...]], Command], partial(tuple.__new__, Command))


class ManyCommand(NamedTuple):
    """One ``update_many``: the keep-alive's batch renewal (``_batch_rules``)."""

    filter: dict[str, Any]
    update: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Home:
    """Where a lock's state lives, and everything that follows from that.

    :ivar noun: what a key names, in messages (``"document"``, ``"name"``).
    :ivar key_filter: checks a caller's key and returns the filter of the state's document.
    :ivar on_demand: the state's document is created by the first acquire (an upsert) and
        deleted when nobody holds it, so a missing document means a lost lock, never
        :class:`~docmultilock.ResourceNotFound`; fences then come from the server's clock so
        that they survive the deletion (``_pipeline.next_fence``).
    """

    noun: str
    key_filter: Callable[[object], dict[str, Any]]
    on_demand: bool


#: The state lives in the user's own document, found by the caller's filter.
DOCUMENTS = Home("document", check_filter, on_demand=False)
#: The state lives in a lock document of its own, ``{_id: name}``.
NAMES = Home("name", lambda key: {"_id": check_name(key)}, on_demand=True)


@dataclass(frozen=True, slots=True)
class Verdicts:
    """Which errors a refusal and a loss raise, and whether the table is exclusive."""

    refused: type[CooperativeLock]
    lost: type[LockNotFound]
    exclusive: bool


#: WriteLock's (and default NamedLocks') errors: one holder at a time.
EXCLUSIVE = Verdicts(LockAlreadyTaken, LockWasReacquired, exclusive=True)
#: MultiLock's errors, for a table of tags.
SHARED = Verdicts(CooperativeLock, LockNotFound, exclusive=False)


def encoded(expression: Mapping[str, Any]) -> RawBSONDocument:
    """``expression`` encoded to BSON once; pymongo copies its bytes into every command."""
    return RawBSONDocument(encode(expression))
