"""Static rows: how big each operation's command is, counted without a server.

The embedded server checks every node of an expression when it parses a command, whether
its branch runs or not, and walks an array once per array operator that runs; the client
encodes every byte. These rows count, for each lock's acquire, release and extend, the
command a call builds (``LockCore``'s plans, as the managers make them) beside the
floor's (``_floor``):

* **expression nodes** of the filter and update pipeline (every operator document, array,
  field path, variable and constant), with the projection's counted apart in the note;
* **BSON bytes** of filter, update and projection, as pymongo puts them on the wire;
* **array operators** (``$filter``, ``$map``, ``$in`` over an array, ...) in the whole
  command, every branch included: an upper bound on the passes over the holders that
  one command makes.

A pre-encoded part (a ``RawBSONDocument``) is counted as what it encodes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import bson
from bson.raw_bson import RawBSONDocument
from pymongo import MongoClient

from docmultilock import Lock
from docmultilock._bench import _floor
from docmultilock._bench._report import Bound, Row
from docmultilock._command import DOCUMENTS, NAMES, Command, Home
from docmultilock._core import LockCore
from docmultilock._kinds import MULTI_LOCK, NAMED_LOCKS, WRITE_LOCK, ManagerKind, manager_setup
from docmultilock._parts import Parts

__all__ = ["NODES_PER_WRITE_CYCLE", "Shape", "array_operators", "cycle", "nodes", "rows", "shapes"]

#: Issue 14's target: expression nodes in a WriteLock acquire+release (filter and update).
NODES_PER_WRITE_CYCLE = 280

#: Operators that walk an array when they run.
_WALKERS = frozenset(
    {
        "$filter",
        "$map",
        "$reduce",
        "$concatArrays",
        "$setUnion",
        "$setIntersection",
        "$allElementsTrue",
        "$anyElementTrue",
    }
)

Doc = dict[str, Any]


def _plain(value: Any) -> Any:
    """``value`` with every pre-encoded part decoded, for counting."""
    if isinstance(value, RawBSONDocument):
        return _plain(bson.decode(value.raw))
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def nodes(value: Any) -> int:
    """Every node of an expression tree: documents, arrays and the values in them."""
    if isinstance(value, Mapping):
        return 1 + sum(nodes(item) for item in value.values())
    if isinstance(value, list):
        return 1 + sum(nodes(item) for item in value)
    return 1


def array_operators(value: Any) -> int:
    """Array-walking operators in an expression, every branch included.

    ``$in`` and ``$max`` count when their array is computed (not a literal list).
    """
    if isinstance(value, list):
        return sum(array_operators(item) for item in value)
    if not isinstance(value, Mapping):
        return 0
    found = 0
    for key, item in value.items():
        computed = key in ("$in", "$max") and not isinstance(
            item[1] if key == "$in" else item, list
        )
        if key in _WALKERS or computed:
            found += 1
        found += array_operators(item)
    return found


@dataclass(frozen=True)
class Shape:
    """The size of one command."""

    nodes: int
    projection_nodes: int
    bytes: int
    array_operators: int

    @classmethod
    def of(cls, filter: Doc, update: list[Doc], projection: Doc) -> Shape:  # noqa: A002
        plain = _plain({"filter": filter, "update": update, "projection": projection})
        return cls(
            nodes=nodes(plain["filter"]) + nodes(plain["update"]),
            projection_nodes=nodes(plain["projection"]),
            bytes=len(bson.encode({"filter": filter, "update": update, "fields": projection})),
            array_operators=array_operators(plain),
        )

    def __add__(self, other: Shape) -> Shape:
        return Shape(
            self.nodes + other.nodes,
            self.projection_nodes + other.projection_nodes,
            self.bytes + other.bytes,
            self.array_operators + other.array_operators,
        )


def _shape(command: Command) -> Shape:
    return Shape.of(command.filter, command.update, command.projection)


_AT = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _lock(tag: str, document_id: Any) -> Lock:
    return Lock(
        id="a" * 32, tag=tag, document_id=document_id, acquired_at=_AT, expires_at=_AT, fence=1
    )


def _ours(core: LockCore, tag: str, key: Doc) -> dict[str, Shape]:
    """The commands of a cycle's acquire and release, and of an extend, for ``tag``."""
    lock = _lock(tag, key["_id"])
    acquire = core.acquire(key, user_filter=key, tag=tag, lock_id="b" * 32, lifetime_ms=None)
    deleting = core.release_by_delete(key, lock=lock)
    release = deleting.command if deleting is not None else None
    if release is None:
        release = core.release(key, user_filter=key, lock=lock).command
    extend = core.extend(key, user_filter=key, lock=lock, lifetime_ms=None)
    return {
        "acquire": _shape(acquire.command),
        "release": _shape(release),
        "extend": _shape(extend.command),
    }


def _floor_shapes() -> dict[str, Shape]:
    """The floor's three commands, captured from :class:`~_floor.FloorLock` itself."""
    sent: list[Shape] = []

    class Capture(_floor.FloorLock):
        def _send(self, where: Mapping[str, Any], update: list[Doc], **options: Any) -> None:
            sent.append(Shape.of(dict(where), update, _floor._PROJECTION))

    floor = Capture(_client().db.floor)
    floor.acquire({"_id": 0})
    floor.release({"_id": 0}, "a" * 32)
    floor.extend({"_id": 0}, "a" * 32)
    return dict(zip(("acquire", "release", "extend"), sent, strict=True))


def _client() -> MongoClient[Doc]:
    # Never connects: only the managers' cores and the floor's commands are built.
    return MongoClient("mongodb://127.0.0.1:1/?directConnection=true", connect=False)


def _core(kind: ManagerKind, home: Home, collection: Any) -> LockCore:
    """The core of a ``kind`` manager with its default options, made as the manager makes it."""
    setup = manager_setup(kind, {}, "bench")
    parts = Parts.on(
        collection, setup.options, home=home, verdicts=setup.verdicts, listener=setup.listener
    )
    return parts.core


#: The locks measured, each as (name, tag, how to make its core, the key of a call).
_LOCKS: list[tuple[str, str, Callable[[MongoClient[Doc]], LockCore], Doc]] = [
    ("WriteLock", "write", lambda c: _core(WRITE_LOCK, DOCUMENTS, c.db.locks), {"_id": 0}),
    ("MultiLock", "read", lambda c: _core(MULTI_LOCK, DOCUMENTS, c.db.locks), {"_id": 0}),
    ("NamedLocks", "write", lambda c: _core(NAMED_LOCKS, NAMES, c.db.named), {"_id": "job"}),
]


def shapes() -> tuple[dict[tuple[str, str], Shape], dict[str, Shape]]:
    """``({(lock, operation): shape}, {operation: the floor's shape})``."""
    client = _client()
    try:
        ours = {
            (name, operation): shape
            for name, tag, make, key in _LOCKS
            for operation, shape in _ours(make(client), tag, key).items()
        }
        return ours, _floor_shapes()
    finally:
        client.close()


def cycle(
    ours: Mapping[tuple[str, str], Shape], floor: Mapping[str, Shape], lock: str
) -> tuple[Shape, Shape]:
    """``lock``'s acquire and release summed into one shape, and the floor's (of :func:`shapes`)."""
    return ours[lock, "acquire"] + ours[lock, "release"], floor["acquire"] + floor["release"]


def rows(scenario: int) -> list[Row]:
    """Nodes per operation and per WriteLock cycle (targeted), bytes, array operators."""
    ours, floor = shapes()
    table = []
    for (lock, operation), shape in ours.items():
        base = floor[operation]
        table.append(
            Row.make(
                scenario,
                f"expression nodes, {lock} {operation}",
                "nodes",
                shape.nodes,
                base.nodes,
                detail=(
                    f"projection {shape.projection_nodes} and {base.projection_nodes} nodes; "
                    f"{shape.bytes} and {base.bytes} bytes of BSON; "
                    f"{shape.array_operators} and {base.array_operators} array operators"
                ),
            )
        )
    mine, base = cycle(ours, floor, "WriteLock")
    table.append(
        Row.make(
            scenario,
            "expression nodes per WriteLock acquire+release (filter and update)",
            "nodes",
            mine.nodes,
            base.nodes,
            Bound("<=", NODES_PER_WRITE_CYCLE, of="docmultilock"),
            detail=(
                f"with projections {mine.nodes + mine.projection_nodes} "
                f"and {base.nodes + base.projection_nodes}"
            ),
        )
    )
    table.append(
        Row.make(
            scenario,
            "BSON bytes per WriteLock acquire+release (filter, update, projection)",
            "bytes",
            mine.bytes,
            base.bytes,
        )
    )
    return table
