"""The read-side flows of one manager: inspect, locked, the preview of a break, and break.

Inspecting reads with one aggregation (the server's time comes with the field); breaking
is one ``findAndModify`` that keeps the fence (``_inspection`` plans both). Each takes the
manager's parts (``_parts.Parts``) and a parsed :class:`~docmultilock._calls.Read`.
"""

from __future__ import annotations

import logging

from docmultilock._calls import Read
from docmultilock._core import LockCore
from docmultilock._flows import Clock, Flow, aggregate
from docmultilock._inspection import BreakPlan, InspectPlan
from docmultilock._parts import Parts, new_lock_id
from docmultilock._sending import send_for
from docmultilock._snapshot import HolderSnapshot, LockSnapshot

__all__ = ["break_lock", "inspect", "locked", "preview_break"]

log = logging.getLogger("docmultilock")


def inspect(core: LockCore, call: Read, *, clock: Clock) -> Flow[LockSnapshot]:
    """Read the call's lock field with the server's time; one read-only command."""
    plan = InspectPlan.make(core, call.user_filter)
    snapshot, _ = yield from _read(plan, limit=call.limit, clock=clock)
    return snapshot


def locked(core: LockCore, call: Read, *, clock: Clock) -> Flow[bool]:
    """True when a granted, unexpired entry (of ``call.tag``, if given) holds its key."""
    snapshot = yield from inspect(core, call, clock=clock)
    return snapshot.locked(call.tag)


def preview_break(
    core: LockCore, call: Read, *, mode: str, lock_id: str | None, clock: Clock
) -> Flow[tuple[LockSnapshot, tuple[HolderSnapshot, ...]]]:
    """The key's snapshot and what ``break_lock`` would remove now; nothing is written.

    The server decides what would go with the break's own condition, at its own time.
    """
    plan = InspectPlan.make(core, call.user_filter, breaking=(mode, lock_id))
    return (yield from _read(plan, limit=call.limit, clock=clock))


def _read(
    plan: InspectPlan, *, limit: float | None, clock: Clock
) -> Flow[tuple[LockSnapshot, tuple[HolderSnapshot, ...]]]:
    # Not by ``send_for``: an aggregation is no findAndModify (no write concern, no
    # command to re-read), and a read decides nothing, so the listener, told of every
    # decision and of the retries of the commands that make one, hears nothing of it.
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
    parts: Parts, call: Read, *, mode: str, lock_id: str | None, clock: Clock
) -> Flow[tuple[HolderSnapshot, ...]]:
    """Remove entries from the key's lock field, keeping its fence; one command."""
    user_filter = call.user_filter
    plan = BreakPlan.make(parts.core, user_filter, mode=mode, lock_id=lock_id, token=new_lock_id())
    started = clock.monotonic()
    reply = yield from send_for(
        call,
        plan.command,
        events=parts.events,
        doing="break",
        tag=None,
        started=started,
        clock=clock,
    )
    removed = plan.read(reply)
    parts.events.emit(
        "broken",
        user_filter,
        tag=None,
        duration=clock.monotonic() - started,
        removed=removed,
    )
    return removed
