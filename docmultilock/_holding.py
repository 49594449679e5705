"""``hold()`` without I/O: its checked arguments, the waiting flow, and the holder's estimate.

What ``hold()`` adds to the raw operations, decided here once for both flavours:

* **Waiting** (:func:`wait_flow`). ``wait=`` retries refusals with exponential backoff and
  full jitter until a deadline. An assertive lock is continued with its pending entry, never
  restarted, and a pending entry is released on every way out (timeout, error,
  KeyboardInterrupt, an asyncio cancellation thrown in). Between attempts it waits on a
  change stream of the refusing document (``Watch``/``WaitChange``, run by ``_wakeup``),
  the backoff being a slower safety net; with ``fair``, a refusal holds a place in line.
* **Knowing when the lock is lost**: the held lock's state (``_held_lock.Holding``) says
  "surely still held" or "perhaps expired" without a clock shared with the server; the
  server decides the rest (:func:`renew_flow`, :func:`release_flow`).

The shells (``_async/held.py`` and its generated twin) run these flows and keep the lock
alive through ``_keepalive``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from docmultilock._backoff import check_backoff
from docmultilock._calls import Acquisition, Conversion
from docmultilock._changes import Blockers
from docmultilock._cleanup import Taken, give_back_all
from docmultilock._flows import Clock, Flow, Watch
from docmultilock._held_lock import Holding, HoldSpec
from docmultilock._lock import Lock
from docmultilock._lock_flows import acquire, convert, extend, release
from docmultilock._parts import Parts
from docmultilock._rules import TagRules
from docmultilock._waiting import Tend, Waiter, wait_out
from docmultilock._wording import gave_up, reworded
from docmultilock.errors import (
    CooperativeLock,
    InvalidArgument,
    LockConflict,
    LockError,
    LockNotFound,
    LockTimeout,
)
from docmultilock.options import (
    HoldOptions,
    NewLockOptions,
    parse_duration,
    take_keywords,
)

__all__ = [
    "SAFETY_NET",
    "WAKE_MODES",
    "HoldSpec",
    "Holding",
    "convert_flow",
    "extend_flow",
    "plan_hold",
    "release_flow",
    "renew_flow",
    "split_hold",
    "tend_flow",
    "wait_flow",
]

log = logging.getLogger("docmultilock")


#: How ``hold(wake=...)`` waits between attempts: woken by change streams, or polling.
WAKE_MODES = ("changes", "poll")

#: ``hold(backoff=...)``'s default: ``(min, max)`` seconds between attempts.
DEFAULT_BACKOFF = (0.01, 0.8)

#: The options of :class:`HoldOptions` that are not the acquisition's: how to wait, and hold.
_WAITING = HoldOptions.__optional_keys__ - NewLockOptions.__optional_keys__

#: With change streams, the safety-net retry comes after ``backoff``'s max times 1 to this.
SAFETY_NET = 4.0


def split_hold(
    options: Mapping[str, Any], where: str, accepted: type = HoldOptions
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The options of ``where`` (declared by ``accepted``) as its acquisition's, and the rest.

    The rest are how to wait (``acquire``, ``acquire_all``), and to hold (``hold()``).

    :raises TypeError: a keyword ``where`` does not take, as Python would.
    """
    take_keywords(options, accepted, where)
    acquiring = {name: value for name, value in options.items() if name not in _WAITING}
    return acquiring, {name: options[name] for name in options.keys() & _WAITING}


def plan_hold(rules: TagRules, call: Acquisition, holding: Mapping[str, Any]) -> HoldSpec:
    """Check the rest of ``hold()``'s options (``call``, its acquisition's, is checked).

    ``rules``: the manager's table, which gives the tag's default lifetime.

    ``holding`` are the options of :class:`HoldOptions` that are not an acquisition's;
    one left out takes the default that class states. Raises :class:`InvalidArgument`
    before any write.
    """
    wait = holding.get("wait")
    keepalive = holding.get("keepalive", False)
    extend_every = holding.get("extend_every")
    on_lost = holding.get("on_lost")
    wake = holding.get("wake", "changes")
    fair = holding.get("fair", False)
    if wake not in WAKE_MODES:
        raise InvalidArgument(f"wake must be one of {', '.join(WAKE_MODES)}, not {wake!r}")
    if not isinstance(fair, bool):
        raise InvalidArgument(f"fair must be True or False, not {fair!r}")
    lifetime_ms = call.lifetime_ms
    if lifetime_ms is None:
        lifetime_ms = rules.lifetime_ms[call.tag]
    lifetime = lifetime_ms / 1000
    if not isinstance(keepalive, bool):
        raise InvalidArgument(f"keepalive must be True or False, not {keepalive!r}")
    every = lifetime / 3
    if extend_every is not None:
        every = parse_duration(extend_every, "extend_every")
        if every >= lifetime:
            raise InvalidArgument(
                f"extend_every ({every} s) must be shorter than the lock's lifetime "
                f"({lifetime} s), or the lock expires between extensions"
            )
    if on_lost is not None and not callable(on_lost):
        raise InvalidArgument(f"on_lost must be callable or None, not {type(on_lost).__name__}")
    return HoldSpec(
        call=call,
        wait=None if wait is None else parse_duration(wait, "wait"),
        backoff=check_backoff(holding.get("backoff", DEFAULT_BACKOFF)),
        keepalive=keepalive,
        every=every,
        lifetime=lifetime,
        on_lost=on_lost,
        wake=wake == "changes",
        # A single try (wait=None) has no line to stand in: it refuses as ever.
        fair=fair and wait is not None,
    )


def wait_flow(
    parts: Parts, spec: HoldSpec, clock: Clock, *, tend: Tend | None = None
) -> Flow[tuple[Lock, float]]:
    """Acquire, retrying refusals until ``spec.wait`` runs out; the lock and when it was sent.

    The waiting loop is ``_waiting``'s; here, what an acquisition waits out and how. ``tend``
    (a lock set renews there the locks it already holds) is :func:`~docmultilock._waiting.
    wait_out`'s. With ``spec.wake``, change streams wake the waiter (the backoff, at the
    slower :data:`SAFETY_NET` cadence, is the safety net); without, it polls.

    :raises LockTimeout: out of time (the last refusal is ``__cause__``).
    :raises LockConflict: refused, with ``wait=None``.
    :raises LocksLeftBehind: the pending entry's withdrawal failed throughout its lifetime
        (``_cleanup``); the refusal is its ``__cause__``.
    """
    call, tag = spec.call, spec.tag

    def attempt(pending: Lock | None) -> Flow[Lock]:
        # A pending entry is continued under its own id, parsed already.
        attempt = call if pending is None else call.continued(pending)
        return acquire(parts, attempt, clock=clock, fair=spec.fair)

    def timed_out(last: LockConflict, waited: float, attempts: int) -> LockTimeout:
        return gave_up(f"for a {tag!r} lock on {spec.key!r}", last, waited, attempts)

    def give_up(pending: Lock, renewed: float, refusal: BaseException) -> Flow[None]:
        withdrawn = Taken(call, pending, renewed + spec.lifetime)
        return give_back_all(parts, [withdrawn], refusal, clock=clock)

    def watching(document_id: Any, entry: str | None) -> Watch:
        rules = parts.rules
        blockers = _blockers(rules, parts.max_holders, tag)
        exclusive = rules.refuses_itself(tag)
        return Watch(document_id, parts.field, exclusive, blockers, entry, spec.fair)

    high = spec.backoff.high
    waiter = Waiter(
        attempt=attempt,
        waits_out=_waited_out,
        timed_out=timed_out,
        give_up=give_up,
        wait=spec.wait,
        delays=spec.backoff.bounds,
        renew_within=spec.lifetime / 3,
        watching=watching if spec.wake else None,
        safety_net=(high, high * SAFETY_NET),
    )
    return (yield from wait_out(waiter, clock, tend=tend))


def _waited_out(refusal: LockConflict, pending: Lock | None) -> bool:
    """What an acquisition waits out: a refusal, its pending entry lapsed (registered anew)."""
    if isinstance(refusal, CooperativeLock):
        return True
    return isinstance(refusal, LockNotFound) and pending is not None


def _blockers(rules: TagRules, max_holders: int, tag: str) -> Blockers:
    """What keeps a waiter of ``tag`` out: the table's tags, its limit, the holder cap."""
    return Blockers.of_tag(rules, tag, max_holders if rules.capped(tag) else None)


def extend_flow(
    parts: Parts, holding: Holding, *, timeout: float | None, clock: Clock
) -> Flow[LockError | None]:
    """Extend once, recorded in ``holding``; the error that tells the lock is lost, if any."""
    call = holding.spec.call.held(holding.lock)._replace(limit=timeout)
    try:
        yield from extend(parts, call, clock=clock, holding=holding)
    except LockError as err:
        return err
    return None


def tend_flow(parts: Parts, taken: Sequence[Holding], clock: Clock) -> Flow[float]:
    """Extend each of ``taken`` that is due; seconds until the next one is due.

    What a lock set runs while it waits for its next key, and a held lock while it waits
    to convert (the keep-alive stands aside meanwhile).

    Due as the keep-alive has it: ``every`` seconds after its last extension was sent.
    A lock found lost ends the wait with that lock's error.
    """
    soonest = float("inf")
    for holding in taken:
        spec = holding.spec
        due = holding.expires - spec.lifetime + spec.every
        if clock.monotonic() >= due:
            error = yield from extend_flow(parts, holding, timeout=spec.call.limit, clock=clock)
            if error is not None:
                raise error
            due = holding.expires - spec.lifetime + spec.every
        soonest = min(soonest, due - clock.monotonic())
    return max(soonest, 0.001)


def convert_flow(
    parts: Parts, holding: Holding, call: Conversion, *, wait: float | None, clock: Clock
) -> Flow[tuple[Lock, float]]:
    """The conversion of a held lock, ``call`` (parsed as ``convert()``'s), as a hold makes it.

    With the hold's lifetime (its estimate and schedule are made for it), backoff, timeout
    and write concern. While an upgrade waits, the locks a keep-alive would renew are
    renewed between attempts (:func:`tend_flow`): the keep-alive stands aside meanwhile.
    """
    spec = holding.spec
    call = call._replace(
        lifetime_ms=round(spec.lifetime * 1000), limit=spec.call.limit, concern=spec.call.concern
    )
    tend = partial(tend_flow, parts, [holding], clock) if spec.keepalive else None
    return convert(parts, call, clock=clock, wait=wait, delays=spec.backoff.bounds, tend=tend)


def renew_flow(
    parts: Parts, holding: Holding, *, limit: float, clock: Clock
) -> Flow[LockError | None]:
    """One keep-alive extension, within ``limit`` seconds (what is left of the estimate).

    Past the estimate the answer cannot save the lock, so a stalled server costs this lock
    and holds the keep-alive no longer.
    """
    spec = holding.spec
    if spec.call.limit is not None:
        limit = min(limit, spec.call.limit)
    error = yield from extend_flow(parts, holding, timeout=limit, clock=clock)
    return reworded(error, parts.home.noun, "keep alive", spec.member)


def release_flow(
    parts: Parts, holding: Holding, *, quiet: bool, clock: Clock
) -> Flow[LockError | None]:
    """Release at the end of the block; the loss found on the way, if any.

    Past the estimate the lock may have expired, and a release removes an expired entry
    quietly: so first ask the server whether it is still live (an extension refuses an
    expired one). Unless ``quiet`` (the block raised), a failed release is raised.
    """
    spec = holding.spec
    lost: LockError | None = None
    if not quiet and holding.error is None and clock.monotonic() >= holding.expires:
        lost = yield from extend_flow(parts, holding, timeout=spec.call.limit, clock=clock)
    try:
        yield from release(parts, spec.call.held(holding.lock), clock=clock)
    except LockNotFound as err:
        lost = lost or err
    except LockError as err:
        if not quiet and holding.error is None and lost is None:
            raise
        log.warning("could not release lock %s on %r: %s", holding.lock.id, spec.key, err)
    return reworded(lost, parts.home.noun, "end of block", spec.member)
