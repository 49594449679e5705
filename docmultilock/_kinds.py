"""The kinds of lock manager: the options each constructor takes, and how they load.

A constructor hands its ``**options`` and its kind to :func:`manager_setup`, which refuses
a keyword the kind does not take, fills in the defaults and validates the rest
(:func:`~docmultilock._schema.load_options`), so the three managers and their async twins
share one reading of their options.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from docmultilock._command import EXCLUSIVE, SHARED, Verdicts
from docmultilock._events import LockListener
from docmultilock._parts import NAMED_FIELD
from docmultilock._rules import READ_WRITE, WRITE_ONLY
from docmultilock._schema import load_options
from docmultilock.options import (
    LockOptions,
    MultiLockOptions,
    NamedLocksOptions,
    WriteLockOptions,
    take_keywords,
)

__all__ = [
    "MULTI_LOCK",
    "NAMED_LOCKS",
    "WRITE_LOCK",
    "ManagerKind",
    "ManagerSetup",
    "manager_setup",
]


@dataclass(frozen=True, slots=True)
class ManagerKind:
    """A kind of lock manager: the options it takes, its default table and lifetime."""

    #: The typed dict that declares the constructor's keywords.
    accepted: type
    #: The relationship table when ``lock_relationships`` is not given.
    table: Mapping[str, Mapping[str, Sequence[str]]]
    #: The verdicts (errors) of that default table; a table given has the shared ones.
    verdicts: Verdicts
    #: The lifetime of a lock whose tag has none of its own, unless ``lock_timeout``.
    lock_timeout: float = 10.0
    #: The lock field, unless ``field`` (only document locks take it).
    field: str = "lock"


MULTI_LOCK = ManagerKind(MultiLockOptions, READ_WRITE, SHARED)
WRITE_LOCK = ManagerKind(WriteLockOptions, WRITE_ONLY, EXCLUSIVE)
NAMED_LOCKS = ManagerKind(
    NamedLocksOptions, WRITE_ONLY, EXCLUSIVE, lock_timeout=30.0, field=NAMED_FIELD
)


class ManagerSetup(NamedTuple):
    """A constructor's options, loaded: what its operations are built from."""

    options: LockOptions
    verdicts: Verdicts
    listener: LockListener | None


def manager_setup(kind: ManagerKind, given: Mapping[str, Any], where: str) -> ManagerSetup:
    """Check and load a ``kind`` constructor's ``**options``, each left out at its default.

    :raises TypeError: a keyword ``where`` does not take.
    :raises InvalidConfiguration: naming every problem with the options.
    """
    take_keywords(given, kind.accepted, where)
    raw: dict[str, Any] = {
        "lock_timeout": kind.lock_timeout,
        "timeout": 10.0,
        "w": "majority",
        "field": kind.field,
    }
    raw.update(given)
    listener = raw.get("listener")
    shared = given.get("lock_relationships") is not None
    return ManagerSetup(
        load_options(kind.table, **raw), SHARED if shared else kind.verdicts, listener
    )
