"""The read-side flows of one manager: inspect, locked, the preview of a break, and break.

Inspecting reads with one aggregation (the server's time comes with the field); breaking
is one ``findAndModify`` that keeps the fence (``_inspection`` plans both).
"""

from __future__ import annotations

import logging

from docmultilock._calls import Read
from docmultilock._flows import Clock, Flow, aggregate
from docmultilock._inspection import BreakPlan, InspectPlan
from docmultilock._operating import Operating, new_lock_id
from docmultilock._snapshot import HolderSnapshot, LockSnapshot

__all__ = ["ReadFlows"]

log = logging.getLogger("docmultilock")


class ReadFlows(Operating):
    """Inspect, locked, preview_break and break_lock as flows."""

    def inspect(self, call: Read, *, clock: Clock) -> Flow[LockSnapshot]:
        """Read the call's lock field with the server's time; one read-only command."""
        plan = InspectPlan.make(self.core, call.user_filter)
        snapshot, _ = yield from self._read(plan, limit=call.limit, clock=clock)
        return snapshot

    def locked(self, call: Read, *, clock: Clock) -> Flow[bool]:
        """True when a granted, unexpired entry (of ``call.tag``, if given) holds its key."""
        snapshot = yield from self.inspect(call, clock=clock)
        return snapshot.locked(call.tag)

    def preview_break(
        self, call: Read, *, mode: str, lock_id: str | None, clock: Clock
    ) -> Flow[tuple[LockSnapshot, tuple[HolderSnapshot, ...]]]:
        """The key's snapshot and what ``break_lock`` would remove now; nothing is written.

        The server decides what would go with the break's own condition, at its own time.
        """
        plan = InspectPlan.make(self.core, call.user_filter, breaking=(mode, lock_id))
        return (yield from self._read(plan, limit=call.limit, clock=clock))

    def _read(
        self, plan: InspectPlan, *, limit: float | None, clock: Clock
    ) -> Flow[tuple[LockSnapshot, tuple[HolderSnapshot, ...]]]:
        replies = yield from aggregate(
            plan.pipeline, doing="inspect", filter=plan.user_filter, limit=limit, clock=clock
        )
        snapshot, doomed = plan.read_preview(replies)
        log.debug(
            "inspected %r: fence %d, %d entries",
            snapshot.document_id,
            snapshot.fence,
            len(snapshot.holders),
        )
        return snapshot, doomed

    def break_lock(
        self, call: Read, *, mode: str, lock_id: str | None, clock: Clock
    ) -> Flow[tuple[HolderSnapshot, ...]]:
        """Remove entries from the key's lock field, keeping its fence; one command."""
        user_filter = call.user_filter
        plan = BreakPlan.make(
            self.core, user_filter, mode=mode, lock_id=lock_id, token=new_lock_id()
        )
        started = clock.monotonic()
        reply = yield from self.send_for(
            call, plan.command, doing="break", tag=None, started=started, clock=clock
        )
        removed = plan.read(reply)
        self.events.emit(
            "broken",
            user_filter,
            tag=None,
            duration=clock.monotonic() - started,
            removed=removed,
        )
        return removed
