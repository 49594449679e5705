"""The read-side flows of one manager: inspect, locked, the preview of a break, and break.

Inspecting reads with one aggregation (the server's time comes with the field); breaking
is one ``findAndModify`` that keeps the fence (``_inspection`` plans both).
"""

from __future__ import annotations

import logging

from docmultilock._args import check_tag
from docmultilock._flows import Clock, Flow, aggregate, send
from docmultilock._inspection import BreakPlan, InspectPlan, break_mode
from docmultilock._operating import Operating, new_lock_id
from docmultilock._snapshot import HolderSnapshot, LockSnapshot
from docmultilock.options import Duration

__all__ = ["ReadFlows"]

log = logging.getLogger("docmultilock")


class ReadFlows(Operating):
    """Inspect, locked, preview_break and break_lock as flows."""

    def inspect(self, key: object, timeout: Duration | None, clock: Clock) -> Flow[LockSnapshot]:
        """Read ``key``'s lock field with the server's time; one read-only command."""
        user_filter = self.key_filter(key)
        plan = InspectPlan.make(self.core, user_filter)
        snapshot, _ = yield from self._read(plan, timeout, clock)
        return snapshot

    def locked(
        self, key: object, tag: object, timeout: Duration | None, clock: Clock
    ) -> Flow[bool]:
        """True when a granted, unexpired entry (of ``tag``: a declared one) holds ``key``."""
        wanted = None if tag is None else check_tag(tag, self.options.rules)
        snapshot = yield from self.inspect(key, timeout, clock)
        return snapshot.locked(wanted)

    def preview_break(
        self,
        key: object,
        lock_id: object,
        all_expired: bool,
        everyone: bool,
        timeout: Duration | None,
        clock: Clock,
    ) -> Flow[tuple[LockSnapshot, tuple[HolderSnapshot, ...]]]:
        """``key``'s snapshot and what ``break_lock`` would remove now; nothing is written.

        The server decides what would go with the break's own condition, at its own time.
        """
        mode = break_mode(lock_id, all_expired, everyone)
        plan = InspectPlan.make(
            self.core,
            self.key_filter(key),
            breaking=(mode, lock_id if isinstance(lock_id, str) else None),
        )
        return (yield from self._read(plan, timeout, clock))

    def _read(
        self, plan: InspectPlan, timeout: Duration | None, clock: Clock
    ) -> Flow[tuple[LockSnapshot, tuple[HolderSnapshot, ...]]]:
        replies = yield from aggregate(
            plan.pipeline,
            doing="inspect",
            filter=plan.user_filter,
            limit=self.limit(timeout),
            clock=clock,
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
        self,
        key: object,
        lock_id: object,
        all_expired: bool,
        everyone: bool,
        timeout: Duration | None,
        w: int | str | None,
        clock: Clock,
    ) -> Flow[tuple[HolderSnapshot, ...]]:
        """Remove entries from ``key``'s lock field, keeping its fence; one command."""
        mode = break_mode(lock_id, all_expired, everyone)
        user_filter = self.key_filter(key)
        plan = BreakPlan.make(
            self.core,
            user_filter,
            mode=mode,
            lock_id=lock_id if isinstance(lock_id, str) else None,
            token=new_lock_id(),
        )
        started = clock.monotonic()
        reply = yield from send(
            plan.command,
            doing="break",
            w=self.concern(w),
            limit=self.limit(timeout),
            clock=clock,
            on_retry=self.events.retrying(user_filter, None, started, clock.monotonic),
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
