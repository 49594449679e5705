"""The commands of ``inspect()`` and ``break_lock()``, and the readers of their replies (no I/O).

* **Inspecting** is one read-only ``aggregate``: the document's lock field and the server's
  ``$$NOW`` come back together, so every entry is judged by the server's clock at the
  moment it was read. ``$facet`` makes it answer one document even when none matched,
  so a name nobody holds still gets the server's time. Nothing is written, not even
  pruning.
* **Breaking** is one ``findAndModify`` with an update pipeline (``_pipeline.break_body``),
  like every other write of the lock field: it touches only that field and never lowers
  the fence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from docmultilock._core import Command, LockCore
from docmultilock._expr import SERVER_NOW, field_or_null, literal
from docmultilock._pipeline import OURS, break_body, update_stages
from docmultilock._snapshot import HolderSnapshot, LockSnapshot, as_utc, holders_at
from docmultilock.errors import InvalidArgument, ResourceNotFound

__all__ = ["BreakPlan", "InspectPlan", "break_mode", "doomed"]

Filter = Mapping[str, Any]


def _ours(field: str) -> dict[str, Any]:
    return {"$let": {"vars": {"st": field_or_null(field)}, "in": OURS}}


def break_mode(lock_id: object, all_expired: bool, everyone: bool) -> str:
    """The one mode a ``break_lock`` call asks for; refused unless exactly one is given."""
    chosen = [
        mode
        for mode, given in (
            ("lock_id", lock_id is not None),
            ("all_expired", all_expired),
            ("everyone", everyone),
        )
        if given
    ]
    if len(chosen) != 1:
        raise InvalidArgument("give exactly one of lock_id=, all_expired=True or everyone=True")
    if lock_id is not None and not isinstance(lock_id, str):
        raise InvalidArgument(f"lock_id must be a string, not {type(lock_id).__name__}")
    return chosen[0]


def doomed(snapshot: LockSnapshot, mode: str, lock_id: str | None) -> tuple[HolderSnapshot, ...]:
    """The entries of ``snapshot`` a break in ``mode`` would remove, for a preview.

    Mirrors ``_pipeline.BREAK_MODES`` at the snapshot's server time; the break itself
    decides again on the server, at its own time.
    """
    if mode == "everyone":
        return snapshot.holders
    return tuple(
        holder
        for holder in snapshot.holders
        if holder.expired or (mode == "lock_id" and holder.id == lock_id)
    )


@dataclass(frozen=True, slots=True)
class InspectPlan:
    """One read of a lock field with the server's time."""

    core: LockCore
    pipeline: list[dict[str, Any]]
    user_filter: Filter

    @classmethod
    def make(cls, core: LockCore, user_filter: Filter) -> InspectPlan:
        """Plan reading the first document matching ``user_filter``."""
        field = core.field
        shown = {
            "_id": 1,
            "ours": _ours(field),
            "t": {"$type": f"${field}"},
            "v": f"${field}.v",
            "state": f"${field}",
        }
        pipeline: list[dict[str, Any]] = [
            {"$match": dict(user_filter)},
            {"$limit": 1},
            {"$facet": {"doc": [{"$project": shown}]}},
            # A $$NOW in a find projection is undefined on the test server; in an
            # aggregation it is the server's clock.
            {"$project": {"_id": 0, "now": SERVER_NOW, "doc": {"$first": "$doc"}}},
        ]
        return cls(core, pipeline, user_filter)

    def read(self, replies: Sequence[Mapping[str, Any]]) -> LockSnapshot:
        """The snapshot; raise ResourceNotFound for a missing document (not for a name)."""
        reply = replies[0]
        now = reply["now"]
        found = reply.get("doc")
        if found is None:
            if not self.core.home.on_demand:
                raise ResourceNotFound(
                    f"no document matches the filter {dict(self.user_filter)!r}",
                    filter=self.user_filter,
                )
            key = self.user_filter.get("_id")
            return LockSnapshot(key, 0, as_utc(now), (), exists=False)
        self.core.read_reply(found, self.user_filter, None, "inspect")
        state = found.get("state") or {}
        return LockSnapshot(
            document_id=found["_id"],
            fence=int(state.get("fence") or 0),
            server_time=as_utc(now),
            holders=holders_at(state.get("holders"), now),
        )


@dataclass(frozen=True, slots=True)
class BreakPlan:
    """One ``findAndModify`` removing entries; the reply is the document after it."""

    core: LockCore
    command: Command
    user_filter: Filter
    token: str

    @classmethod
    def make(
        cls, core: LockCore, user_filter: Filter, *, mode: str, lock_id: str | None, token: str
    ) -> BreakPlan:
        """Plan removing the entries ``mode`` picks from the document of ``user_filter``."""
        field = core.field
        body = break_body(field, mode, clock=core.home.on_demand)
        bindings = {"id": literal(lock_id), "token": literal(token)}
        mine = {"$eq": [f"${field}.broken.token", literal(token)]}
        command = Command(
            filter=dict(user_filter),
            update=update_stages(field, body, bindings),
            projection={
                "_id": 1,
                "ours": _ours(field),
                "t": {"$type": f"${field}"},
                "v": f"${field}.v",
                "broken": {"$cond": [mine, f"${field}.broken", None]},
            },
            return_after=True,
        )
        return cls(core, command, user_filter, token)

    def read(self, reply: Mapping[str, Any] | None) -> tuple[HolderSnapshot, ...]:
        """The removed entries, judged at the server's time of the break (maybe none)."""
        if reply is None:
            if self.core.home.on_demand:
                return ()  # nobody holds the name: its document is gone
            raise ResourceNotFound(
                f"no document matches the filter {dict(self.user_filter)!r}",
                filter=self.user_filter,
            )
        self.core.read_reply(reply, self.user_filter, None, "break")
        broken = reply.get("broken")
        if not isinstance(broken, Mapping):
            return ()
        return holders_at(broken.get("removed"), broken["at"])
