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
from datetime import datetime
from typing import Any

from docmultilock._command import Command
from docmultilock._core import LockCore
from docmultilock._expr import SERVER_NOW, literal
from docmultilock._layout import update_stages
from docmultilock._lock import as_utc
from docmultilock._pipeline import BREAK_MODES, break_body
from docmultilock._reply import document_id, is_image, lock_state
from docmultilock._snapshot import HolderSnapshot, LockSnapshot, holders_at
from docmultilock.errors import InvalidArgument

__all__ = ["BreakPlan", "InspectPlan", "ListPlan", "break_mode", "check_matchable"]

Filter = Mapping[str, Any]

#: Query operators an aggregation's ``$match`` refuses (inspecting is an aggregation).
NOT_IN_MATCH = frozenset({"$where", "$near", "$nearSphere"})


def check_matchable(user_filter: Filter) -> None:
    """Refuse a filter ``inspect`` cannot send: one using an operator ``$match`` refuses."""
    stack: list[object] = [user_filter]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            refused = sorted(NOT_IN_MATCH.intersection(item))
            if refused:
                raise InvalidArgument(
                    f"inspect cannot read a filter using {', '.join(refused)}: it reads with "
                    "an aggregation, whose $match refuses them; filter by _id or by other "
                    f"operators instead (filter: {dict(user_filter)!r})"
                )
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)


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
    for name, flag in (("all_expired", all_expired), ("everyone", everyone)):
        if not isinstance(flag, bool):
            raise InvalidArgument(f"{name} must be True or False, not {flag!r}")
    if len(chosen) != 1:
        raise InvalidArgument("give exactly one of lock_id=, all_expired=True or everyone=True")
    if lock_id is not None and not isinstance(lock_id, str):
        raise InvalidArgument(f"lock_id must be a string, not {type(lock_id).__name__}")
    return chosen[0]


def _picked(core: LockCore, mode: str, lock_id: str | None) -> dict[str, Any]:
    """The entries a break in ``mode`` removes, by the break's own condition (``BREAK_MODES``)."""
    picked = {"$filter": {"input": core.shape.holders, "as": "h", "cond": BREAK_MODES[mode]}}
    return {"$let": {"vars": {"now": SERVER_NOW, "id": literal(lock_id)}, "in": picked}}


@dataclass(frozen=True, slots=True)
class InspectPlan:
    """One read of a lock field with the server's time.

    For a preview, also what a break would remove, decided on the server by the break's
    own condition.
    """

    core: LockCore
    pipeline: list[dict[str, Any]]
    user_filter: Filter

    @classmethod
    def make(
        cls, core: LockCore, user_filter: Filter, *, breaking: tuple[str, str | None] | None = None
    ) -> InspectPlan:
        """Plan reading the first document matching ``user_filter``.

        ``breaking`` is ``(mode, lock_id)`` of a break to preview.
        """
        check_matchable(user_filter)
        field = core.field
        extra: dict[str, Any] = {"state": f"${field}"}
        if breaking is not None:
            extra["doomed"] = _picked(core, *breaking)
        pipeline: list[dict[str, Any]] = [
            {"$match": dict(user_filter)},
            {"$limit": 1},
            {"$facet": {"doc": [{"$project": core.shape.checked(**extra)}]}},
            # A $$NOW in a find projection is undefined on the test server; in an
            # aggregation it is the server's clock.
            {"$project": {"_id": 0, "now": SERVER_NOW, "doc": {"$first": "$doc"}}},
        ]
        return cls(core, pipeline, user_filter)

    def read(self, replies: Sequence[Mapping[str, Any]]) -> LockSnapshot:
        """The snapshot; raise ResourceNotFound for a missing document (not for a name)."""
        return self.read_preview(replies)[0]

    def read_preview(
        self, replies: Sequence[Mapping[str, Any]]
    ) -> tuple[LockSnapshot, tuple[HolderSnapshot, ...]]:
        """The snapshot, and the entries the previewed break would remove.

        None are, unless the plan was made with ``breaking``.
        """
        reply = replies[0]
        now = reply["now"]
        found = reply.get("doc")
        if found is None:
            self.core.judge.absent(self.user_filter)
            key = self.user_filter.get("_id")
            return LockSnapshot(key, 0, as_utc(now), (), exists=False), ()
        snapshot = _snapshot(self.core, found, now, self.user_filter)
        return snapshot, holders_at(found.get("doomed"), now)


def _snapshot(core: LockCore, found: Mapping[str, Any], now: datetime, key: Filter) -> LockSnapshot:
    """The snapshot of one document read with ``core.shape.checked(state=...)`` at ``now``.

    :raises IncompatibleLockField: its lock field holds data docmultilock does not own.
    """
    checked = core.judge.read_checked(found, key, "inspect")
    state = found.get("state") or {}
    return LockSnapshot(
        document_id=checked.document_id,
        fence=int(state.get("fence") or 0),
        server_time=as_utc(now),
        holders=holders_at(state.get("holders"), now),
    )


@dataclass(frozen=True, slots=True)
class ListPlan:
    """One read-only aggregation of every document whose lock field holds an entry.

    In ``_id`` order, each with the server's time, for ``docmultilock inspect --all``: the
    driver reads it through a cursor, a batch at a time, so a large collection is paged
    rather than loaded whole. Nothing is written.
    """

    core: LockCore
    pipeline: list[dict[str, Any]]

    @classmethod
    def make(cls, core: LockCore, *, limit: int | None = None) -> ListPlan:
        """Plan listing the locked documents of ``core``'s collection, ``limit`` at most."""
        field = core.field
        pipeline: list[dict[str, Any]] = [
            {"$match": {f"{field}.holders.0": {"$exists": True}}},
            {"$sort": {"_id": 1}},
            *([{"$limit": limit}] if limit is not None else []),
            {"$project": {**core.shape.checked(state=f"${field}"), "now": SERVER_NOW}},
        ]
        return cls(core, pipeline)

    def read(self, reply: Mapping[str, Any]) -> LockSnapshot:
        """One listed document's snapshot.

        :raises IncompatibleLockField: its lock field holds data docmultilock does not own.
        """
        return _snapshot(self.core, reply, reply["now"], {"_id": document_id(reply)})


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
        # Only this call's record: a retry after a lost reply finds its own (and reports
        # what that attempt removed); an earlier break's record is stale.
        mine = {"$eq": [f"${field}.broken.token", literal(token)]}
        command = Command(
            filter=dict(user_filter),
            update=update_stages(field, body, bindings),
            projection=core.shape.checked(broken={"$cond": [mine, f"${field}.broken", None]}),
            return_after=True,
        )
        return cls(core, command, user_filter, token)

    def read(self, reply: Mapping[str, Any] | None) -> tuple[HolderSnapshot, ...]:
        """The removed entries, judged at the server's time of the break (maybe none).

        Never raises once the break was applied: whatever the record holds is read
        tolerantly (``holders_at``).
        """
        if reply is None:
            self.core.judge.absent(self.user_filter)
            return ()  # nobody holds the name: its document is gone
        self.core.judge.read_checked(reply, self.user_filter, "break")
        if is_image(reply):
            # A retried break, answered with the post-image (``_reply``): it wrote, so the
            # field holds this call's record (the token tells it from an earlier one's).
            state = lock_state(reply, self.core.field)
            broken = state.get("broken") if isinstance(state, Mapping) else None
            if not isinstance(broken, Mapping) or broken.get("token") != self.token:
                return ()
        else:
            broken = reply.get("broken")
        if not isinstance(broken, Mapping) or not isinstance(broken.get("at"), datetime):
            return ()
        return holders_at(broken.get("removed"), broken["at"])
