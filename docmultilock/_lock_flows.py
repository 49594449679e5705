"""The lock flows of one manager: acquire, release, extend and convert.

With them, the withdrawal of an acquisition interrupted before its reply. Each takes the
manager's parts (``_parts.Parts``) and a parsed call, and sends one command per operation
(``_core`` plans it, ``_sending.send_for`` sends it); the decisions between commands (the
release's lost-reply judgement, the withdrawal) are written here once for both flavours.
The sync and async managers, and ``hold()``, are thin shells that run these flows with
their driver.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from pymongo.errors import PyMongoError

from docmultilock._calls import Acquisition, Continued, Conversion, Fresh, Held
from docmultilock._command import Command
from docmultilock._events import EventKind
from docmultilock._failures import translate
from docmultilock._flows import (
    Clock,
    Flow,
    Sent,
    ServerTime,
)
from docmultilock._held_lock import Holding
from docmultilock._lock import Lock
from docmultilock._parts import Parts, index_once, new_lock_id
from docmultilock._plans import AcquirePlan, ConvertPlan
from docmultilock._sending import record_renewal, report_lost, send_for
from docmultilock._waiting import Tend, Waiter, wait_out
from docmultilock._wording import gave_up
from docmultilock.errors import (
    AssertiveLock,
    CooperativeLock,
    DbError,
    LockConflict,
    LockConverted,
    LockError,
    LockNotFound,
    LockTimeout,
)

__all__ = ["acquire", "convert", "extend", "release"]

log = logging.getLogger("docmultilock")


def acquire(parts: Parts, call: Acquisition, *, clock: Clock, fair: bool = False) -> Flow[Lock]:
    """Acquire ``call.tag`` on its key, or continue the pending ``call.lock``; one command.

    With ``fair`` (``hold(fair=True)``), a refusal holds a place in line: a pending
    entry, raised as :class:`AssertiveLock` to be continued.
    """
    user_filter = call.user_filter
    if isinstance(call, Continued):
        pending: Lock | None = call.lock
        target, lock_id = parts.target(call), call.lock.id
    else:
        pending, target, lock_id = None, user_filter, new_lock_id()
    name = call.tag
    plan = parts.core.acquire(
        target,
        user_filter=user_filter,
        tag=name,
        lock_id=lock_id,
        lifetime_ms=call.lifetime_ms,
        continuing=pending,
        fair=fair,
    )
    started = clock.monotonic()
    try:
        reply = yield from send_for(
            call,
            plan.command,
            events=parts.events,
            doing="acquire",
            tag=name,
            started=started,
            clock=clock,
            settle=pending is None,  # what _withdraw may follow
        )
        granted = _granted(parts, plan, reply, started, clock)
        if parts.home.on_demand:
            yield from index_once(parts.where, call.limit)
    except BaseException as exc:
        # Cancelled or interrupted with the command out, or before the caller saw its
        # grant: it may be applied, under an id nobody will ever hold. A continued
        # lock's caller keeps its id (and hold() releases it); a new one is withdrawn.
        if isinstance(call, Fresh) and _interrupted(exc):
            yield from _withdraw(parts, call, lock_id, clock=clock)
        raise
    return granted


def _granted(
    parts: Parts,
    plan: AcquirePlan | ConvertPlan,
    reply: Mapping[str, Any] | None,
    started: float,
    clock: Clock,
) -> Lock:
    """Read an acquisition's reply: the lock, recorded and told, or its error, told."""
    user_filter, name = plan.user_filter, plan.tag
    try:
        granted = plan.read(reply)
    except LockError as err:
        kind = _kind_of(err)
        if isinstance(err, AssertiveLock):
            parts.ledger.saw(err.lock, at=clock.monotonic())
        if kind is None:
            log.debug("acquire %r on %r: %s", name, user_filter, err.code)
        else:
            parts.events.emit(
                kind,
                user_filter,
                tag=name,
                lock=getattr(err, "lock", None) or plan.continuing,
                outcome=err.code,
                duration=clock.monotonic() - started,
                error=err,
            )
        raise
    read = clock.monotonic()
    parts.ledger.saw(granted, at=read)
    parts.events.emit("granted", user_filter, tag=name, lock=granted, duration=read - started)
    return granted


def _withdraw(
    parts: Parts,
    call: Fresh | Conversion,
    lock_id: str,
    *,
    clock: Clock,
    command: Command | None = None,
) -> Flow[None]:
    """Remove entry ``lock_id``, if there, after its acquisition was interrupted.

    Best effort, never raising a LockError: the entry lapses with its lifetime anyway.
    An interrupted command still queued on the server can be applied after this (it
    cannot be waited for: the caller is going away), and its entry then holds until
    its lifetime runs out, as a crashed holder's does. ``command``: another removal
    (a pending upgrade's, ``LockCore.upgrade_withdrawal``).
    """
    if command is None:
        command = parts.core.withdrawal(
            call.user_filter, user_filter=call.user_filter, lock_id=lock_id
        )
    try:
        # Bounded even without an operation timeout: the caller is on its way out.
        reply = yield from send_for(
            call,
            command,
            events=parts.events,
            doing="release",
            tag=None,
            started=0.0,
            clock=clock,
            cleanup=True,
        )
    except LockError as err:
        log.warning("could not withdraw the interrupted acquisition %s: %s", lock_id, err)
        return
    if reply is None:
        log.debug("the interrupted acquisition %s left no entry", lock_id)
    else:
        log.debug("withdrew the entry of the interrupted acquisition %s", lock_id)


def convert(
    parts: Parts,
    call: Conversion,
    *,
    clock: Clock,
    wait: float | None = None,
    delays: Callable[[int], tuple[float, float]] | None = None,
    tend: Tend | None = None,
) -> Flow[tuple[Lock, float]]:
    """Convert ``call.lock`` to ``call.tag``, one command per attempt (``_converting``).

    A pending upgrade raises :class:`AssertiveLock` at once, unless ``wait``: then it
    is continued (``_waiting``), sleeping a uniform draw from ``delays(attempt)`` (and
    short enough to renew it) between attempts, until granted; when ``wait`` runs out,
    the pending upgrade is withdrawn, the lock given is kept, and :class:`LockTimeout`
    is raised. A refusal is raised at once, waiting or not: the entry in the way
    (another holder's pending upgrade) may itself be waiting for the caller's lock to
    drain. ``tend``: as :func:`~docmultilock._waiting.wait_out`'s (a hold renews there
    the lock it converts). Returns the converted lock and when its command was sent.
    """
    if wait is None:
        sent = clock.monotonic()
        return (yield from _convert_once(parts, call, clock)), sent
    held, tag = call.lock, call.tag

    def timed_out(last: LockConflict, waited: float, attempts: int) -> LockTimeout:
        waiting = f"to convert lock {held.id} to {tag!r} on {call.key!r}"
        still = f", and the {held.tag!r} lock is still held"
        return gave_up(waiting, last, waited, attempts, also=still)

    def give_up(pending: Lock, _renewed: float, _error: BaseException) -> Flow[None]:
        # Never leave a pending upgrade behind: it refuses every new reader.
        command = parts.core.upgrade_withdrawal(
            parts.target(call), user_filter=call.user_filter, pending=pending
        )
        return _withdraw(parts, call, pending.id, clock=clock, command=command)

    life = call.lifetime_ms or parts.rules.lifetime_ms[tag]
    waiter = Waiter(
        # The server continues the pending upgrade of the lock converted: one command.
        attempt=lambda _pending: _convert_once(parts, call, clock),
        waits_out=_never,
        timed_out=timed_out,
        give_up=give_up,
        wait=wait,
        delays=_default_delays if delays is None else delays,
        renew_within=life / 3000,
    )
    return (yield from wait_out(waiter, clock, tend=tend))


def _convert_once(parts: Parts, call: Conversion, clock: Clock) -> Flow[Lock]:
    """One conversion command: the lock converted, recorded and told, or its error."""
    held, tag = call.lock, call.tag
    plan = parts.core.convert(
        parts.target(call),
        user_filter=call.user_filter,
        lock=held,
        tag=tag,
        lifetime_ms=call.lifetime_ms,
        call=new_lock_id(),  # its retries are the same call: they send the same id
    )
    started = clock.monotonic()
    reply = yield from send_for(
        call,
        plan.command,
        events=parts.events,
        doing="convert",
        tag=tag,
        started=started,
        clock=clock,
    )
    return _granted(parts, plan, reply, started, clock)


def release(parts: Parts, call: Held, *, clock: Clock) -> Flow[None]:
    """Release ``call.lock``; a release whose earlier reply was lost is judged by the ledger.

    Its two commands (a delete where the lock may take its document with it, then the
    release proper) go out by ``send_for``, sharing one record of lost replies.
    """
    held = call.lock
    user_filter, target = call.user_filter, parts.target(call)
    ledger, events = parts.ledger, parts.events
    sent = Sent(unsure=ledger.was_unsure(held.id))
    started = clock.monotonic()
    try:
        deleting = parts.core.release_by_delete(target, lock=held)
        deleted = False
        if deleting is not None:
            reply = yield from send_for(
                call,
                deleting.command,
                events=events,
                doing="release",
                tag=held.tag,
                started=started,
                clock=clock,
                sent=sent,
            )
            deleted = deleting.read(reply)
        if not deleted:
            plan = parts.core.release(target, user_filter=user_filter, lock=held)
            reply = yield from send_for(
                call,
                plan.command,
                events=events,
                doing="release",
                tag=held.tag,
                started=started,
                clock=clock,
                sent=sent,
            )
            plan.read(reply)
    except DbError:
        ledger.release_unsure(held.id)
        raise
    except LockConverted:
        raise  # nothing was removed: the lock is held, under the value convert() returned
    except LockNotFound as err:
        # Our entry is gone. If an earlier attempt's reply was lost, that attempt may have
        # removed it: while the lock is unexpired by the server's clock nobody else can
        # (pruning takes only expired entries), so the release did happen. An operator's
        # break_lock may also have removed it meanwhile: reporting success is harmless
        # then, since the lock is gone either way.
        if not (sent.unsure and (yield from _unexpired(parts, held.id, call.limit))):
            ledger.forget(held.id)
            report_lost(events, user_filter, held, started=started, clock=clock, error=err)
            raise
        log.debug("release of %s was applied by an attempt whose reply was lost", held.id)
    ledger.forget(held.id)
    events.emit(
        "released", user_filter, tag=held.tag, lock=held, duration=clock.monotonic() - started
    )


def _unexpired(parts: Parts, lock_id: str, limit: float | None) -> Flow[bool]:
    """True while the server's clock is before the expiry this manager saw it stamp.

    One ``hello``; ``False`` at once for a lock this manager never saw granted (a lock
    a client sends back carries an ``expires_at`` nobody can vouch for).
    """
    expires_at = parts.ledger.expiry(lock_id)
    if expires_at is None:
        return False
    try:
        now = yield ServerTime(limit)
    except PyMongoError as exc:
        parts.ledger.release_unsure(lock_id)
        raise translate(exc, "release", None) from exc
    return bool(now < expires_at)


def extend(parts: Parts, call: Held, *, clock: Clock, holding: Holding | None = None) -> Flow[Lock]:
    """Push ``call.lock``'s expiry to server-now plus its lifetime (or ``call``'s).

    The renewal is recorded (``_sending.record_renewal``), in ``holding`` too when a hold
    holds the lock.
    """
    held = call.lock
    user_filter = call.user_filter
    plan = parts.core.extend(
        parts.target(call), user_filter=user_filter, lock=held, lifetime_ms=call.lifetime_ms
    )
    started = clock.monotonic()
    reply = yield from send_for(
        call,
        plan.command,
        events=parts.events,
        doing="extend",
        tag=held.tag,
        started=started,
        clock=clock,
    )
    try:
        extended = plan.read(reply)
    except LockConverted:
        raise  # nothing was renewed: the lock is held, under the value convert() returned
    except LockNotFound as err:
        report_lost(parts.events, user_filter, held, started=started, clock=clock, error=err)
        raise
    read = clock.monotonic()
    return record_renewal(
        user_filter,
        extended,
        ledger=parts.ledger,
        events=parts.events,
        sent=started,
        read=read,
        duration=read - started,
        holding=holding,
    )


def _never(_refusal: LockConflict, _pending: Lock | None) -> bool:
    """A conversion waits out no refusal but its pending upgrade (see ``convert``)."""
    return False


def _default_delays(_attempt: int) -> tuple[float, float]:
    """``convert(wait=...)``'s delays when none are given: 50 ms to 1 s."""
    return (0.05, 1.0)


def _interrupted(exc: BaseException) -> bool:
    """True for a cancellation or an interrupt (not an error, nor a flow being closed)."""
    return not isinstance(exc, (Exception, GeneratorExit))


def _kind_of(err: LockError) -> EventKind | None:
    """The event an acquisition's error reports: pending, lost or refused (else none)."""
    if isinstance(err, AssertiveLock):
        return "pending"
    if isinstance(err, LockConverted):
        return None  # a spent value: the lock is not lost
    if isinstance(err, LockNotFound):
        return "lost"
    return "refused" if isinstance(err, CooperativeLock) else None
