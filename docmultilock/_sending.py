"""Every command's one path out, and what a manager records and tells of what came back.

:func:`send_for` sends a command within a call's limit and write concern and tells the
listener of each retry: every ``findAndModify`` of every flow goes out by it. Two outcomes
are recorded and told in one place each, whoever met them: a loss (:func:`report_lost`)
and a renewal (:func:`record_renewal`: a lone extension, or a keep-alive batch's).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from docmultilock._calls import AnyCall
from docmultilock._command import Command
from docmultilock._events import Emitter
from docmultilock._flows import CLEANUP_LIMIT, Clock, Flow, Sent, send
from docmultilock._held_lock import Holding
from docmultilock._ledger import Ledger
from docmultilock._lock import Lock
from docmultilock.errors import LockError

__all__ = ["record_renewal", "report_lost", "send_for"]


def send_for(
    call: AnyCall,
    command: Command,
    *,
    events: Emitter,
    doing: str,
    tag: str | None,
    started: float,
    clock: Clock,
    sent: Sent | None = None,
    settle: bool = False,
    cleanup: bool = False,
) -> Flow[Mapping[str, Any] | None]:
    """Send ``command`` within ``call``'s limit and concern: every command's one path.

    ``events`` hears of retries, unless ``cleanup`` (a withdrawal on the way out, bounded
    by ``CLEANUP_LIMIT`` even without an operation timeout). ``sent`` and ``settle`` are
    :func:`~docmultilock._flows.send`'s.
    """
    limit = call.limit
    on_retry = None
    if cleanup:
        if limit is None:
            limit = CLEANUP_LIMIT
    elif events.listener is not None:  # else the retry loop logs each retry itself
        on_retry = events.retrying(call.user_filter, tag, started, clock.monotonic)
    # Not a generator itself: ``send``'s own flow is returned, one frame less per yield.
    return send(
        command,
        doing=doing,
        w=call.concern,
        limit=limit,
        clock=clock,
        sent=sent,
        on_retry=on_retry,
        settle=settle,
    )


def report_lost(
    events: Emitter,
    user_filter: Mapping[str, Any],
    lock: Lock,
    *,
    started: float,
    clock: Clock,
    error: LockError,
) -> None:
    """Tell the listener that ``lock`` is lost (the flow raises ``error``, or hands it on)."""
    events.emit(
        "lost",
        user_filter,
        tag=lock.tag,
        lock=lock,
        outcome=error.code,
        duration=clock.monotonic() - started,
        error=error,
    )


def record_renewal(
    user_filter: Mapping[str, Any],
    lock: Lock,
    *,
    ledger: Ledger,
    events: Emitter,
    sent: float,
    read: float,
    duration: float,
    holding: Holding | None = None,
    batch_life: float | None = None,
) -> Lock:
    """Record a renewal of ``lock`` sent at ``sent`` and answered at ``read``; the lock it leaves.

    What "renewed" means, written once for a lone extension and a keep-alive batch: the
    held lock's state moves on (``holding``, when a hold holds the lock: its estimate and
    ``lock``), the ledger learns the new expiry (a release whose reply is lost is judged
    by it), and the listener is told ``extended``. ``lock`` is the server's answer; with
    ``batch_life`` (the seconds a batch renewed it for), the reply held a count, not the
    entry: ``lock`` is the one renewed, and its expiry moves on as a lower bound.
    """
    if holding is not None:
        lock = holding.renewed(sent, read=read, lock=lock if batch_life is None else None)
    if batch_life is None:
        ledger.saw(lock, at=read)
    else:
        ledger.renewed(lock.id, sent=sent, life=batch_life)
    events.emit("extended", user_filter, tag=lock.tag, lock=lock, duration=duration)
    return lock
