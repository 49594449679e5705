"""Lock sets without I/O: their canonical order, and taking or releasing them all or nothing.

A set is taken one lock at a time in one canonical order, whatever order the caller gives:
by the ``_id`` of each key's document in MongoDB's comparison order (so names, which are
string ids, in code point order). Two holders of overlapping sets then never wait for
each other in a cycle: whoever holds a set's lowest common key is the only one who can be
waiting for its later keys. A waiter keeps what it holds (a release and retake could
livelock) and renews it between attempts (:func:`take_all_flow`), so no lock of the set
expires while it waits for the next. Any refusal or error releases, in reverse order,
every lock this call took, then raises the refused key's own error; a release that fails
is retried within its lock's lifetime, and a lock still held then is named in the error
(``_cleanup``).

The shells (``_async/held.py`` and its generated twin) run these flows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, TypeVar

from bson.codec_options import CodecOptions

from docmultilock._bson_identity import order_key
from docmultilock._calls import Acquisition, Held
from docmultilock._cleanup import Taken, give_back_all
from docmultilock._flows import Clock, Flow
from docmultilock._held_lock import Holding, HoldSpec
from docmultilock._holding import (
    plan_hold,
    tend_flow,
    wait_flow,
)
from docmultilock._lock_flows import release
from docmultilock._parsing import Parser
from docmultilock._parts import Parts
from docmultilock._wording import set_member
from docmultilock.errors import InvalidArgument, LockError

__all__ = [
    "LockSet",
    "at_each",
    "canonical",
    "key_sequence",
    "plan_set",
    "release_all_flow",
    "take_all_flow",
]


@dataclasses.dataclass(frozen=True, slots=True)
class LockSet:
    """One checked set: its holds in canonical order, and where each key stands in the caller's.

    :ivar ordered: each key's :class:`HoldSpec`, in the order the locks are taken.
    :ivar places: for each of ``ordered``, the key's index in the caller's sequence.
    :ivar keys: each key's order key, in the caller's order (to find a key's lock again).
    """

    ordered: tuple[HoldSpec, ...]
    places: tuple[int, ...]
    keys: tuple[tuple[Any, ...], ...]

    def in_callers_order(self, values: Sequence[Any]) -> list[Any]:
        """``values``, given in canonical order, put back in the caller's."""
        out: list[Any] = [None] * len(values)
        for place, value in zip(self.places, values, strict=True):
            out[place] = value
        return out

    def place_of(self, parse: Parser, key: object) -> int:
        """Where ``key`` stands in the caller's sequence; refused when it is not in the set."""
        wanted = identify(parse, key)
        try:
            return self.keys.index(wanted)
        except ValueError:
            raise InvalidArgument(f"{key!r} is not one of this lock set's keys") from None


def identify(parse: Parser, key: object) -> tuple[Any, ...]:
    """The order key of ``key``'s document: a filter's ``_id`` equality, or a name."""
    return _identity(key, parse.key_filter(key), parse.codec_options)


def _identity(
    key: object, user_filter: Mapping[str, Any], codec: CodecOptions[Any]
) -> tuple[Any, ...]:
    named = user_filter.get("_id", _MISSING)
    if named is _MISSING or (
        isinstance(named, Mapping) and any(str(field).startswith("$") for field in named)
    ):
        raise InvalidArgument(
            f"each key of a lock set must select one document by _id equality "
            f"(such as {{'_id': 42}}), not {key!r}: the set is taken in _id order"
        )
    return order_key(named, codec)


#: A call of one key of a set: its acquisition, or its release.
C = TypeVar("C", Acquisition, Held)

_MISSING = object()


def canonical(
    calls: Sequence[Acquisition | Held], codec_options: CodecOptions[Any]
) -> tuple[list[tuple[Any, ...]], list[int]]:
    """Each call's order key (in the caller's order), and the canonical order of the calls.

    The keys were parsed once, into ``calls``; their filters are read from there.

    :raises InvalidArgument: two keys select one document, or a filter does not select
        its document by ``_id`` equality.
    """
    identified = [_identity(c.key, c.user_filter, codec_options) for c in calls]
    seen: dict[tuple[Any, ...], int] = {}
    for index, identity in enumerate(identified):
        if identity in seen:
            first = seen[identity]
            raise InvalidArgument(
                f"keys {calls[first].key!r} and {calls[index].key!r} (at {first} and "
                f"{index}) select the same document: a lock set takes each lock once"
            )
        seen[identity] = index
    return identified, sorted(range(len(identified)), key=identified.__getitem__)


def key_sequence(keys: object) -> Sequence[Any]:
    """``keys``, when it is a non-empty sequence of keys (not a string or a single filter)."""
    if isinstance(keys, (str, bytes)) or not isinstance(keys, Sequence):
        raise InvalidArgument(
            f"keys must be a sequence (a list or a tuple) of keys, not {type(keys).__name__}"
        )
    if not keys:
        raise InvalidArgument("a lock set needs at least one key; keys is empty")
    return keys


def at_each(keys: Sequence[Any], parse: Callable[[Any], C]) -> list[C]:
    """Each key's call, parsed by ``parse``; a refused key is named by its place in ``keys``."""
    calls = []
    for place, key in enumerate(keys):
        try:
            calls.append(parse(key))
        except InvalidArgument as err:
            raise InvalidArgument(f"keys[{place}] of the set: {err}") from err
    return calls


def plan_set(
    parse: Parser,
    keys: object,
    *,
    acquiring: Mapping[str, Any],
    holding: Mapping[str, Any] | None = None,
) -> LockSet:
    """The set of ``keys``, each acquired as ``acquiring`` says and held as ``holding`` does.

    ``acquiring`` are the options of one acquisition, ``holding`` the rest of ``hold()``'s
    (as :func:`~docmultilock._holding.split_hold` parts them; none: the set is tried once).

    :raises InvalidArgument: ``keys`` is empty or not a sequence, as :func:`canonical`
        does, or for any argument, before anything is written.
    """
    calls = at_each(key_sequence(keys), lambda key: parse.acquiring(key, **acquiring))
    spec = plan_hold(parse.rules, calls[0], holding or {})
    identified, order = canonical(calls, parse.codec_options)
    size = len(calls)
    return LockSet(
        ordered=tuple(
            dataclasses.replace(spec, call=calls[index], member=set_member(index, size))
            for index in order
        ),
        places=tuple(order),
        keys=tuple(identified),
    )


def take_all_flow(parts: Parts, locks: LockSet, clock: Clock) -> Flow[list[Holding]]:
    """Take every lock of the set in canonical order; their holdings, in that order.

    ``wait`` is the set's: each key waits for what is left of it. While it waits for a
    later key, the locks already taken are extended as they fall due (``tend``), so none
    expires meanwhile; their estimates stay conservative as in ``hold()``.

    :raises LockError: the first key refused (or whose wait ran out), with that key's own
        error (its pending entry withdrawn), after every lock taken here was released.
    :raises LocksLeftBehind: as ``_cleanup`` says, when a release still failed at the end
        of its lock's lifetime; the refusal is its ``__cause__``.
    """
    started = clock.monotonic()
    taken: list[Holding] = []
    tend = partial(tend_flow, parts, taken, clock)
    try:
        for spec in locks.ordered:
            wait = spec.wait
            if wait is not None:
                wait = max(0.0, wait - (clock.monotonic() - started))
            lock, sent = yield from wait_flow(
                parts, dataclasses.replace(spec, wait=wait), clock, tend=tend
            )
            taken.append(Holding(spec, lock, sent, read=clock.monotonic()))
    except BaseException as refusal:
        # Also for a cancellation thrown in: never leave part of a set held.
        given = [Taken(h.spec.call, h.lock, h.expires) for h in reversed(taken)]
        yield from give_back_all(parts, given, refusal, clock=clock)
        raise
    return taken


def release_all_flow(
    parts: Parts, calls: Sequence[Held], *, order: Sequence[int], clock: Clock
) -> Flow[None]:
    """Release each of ``calls`` (the caller's order), in the reverse of canonical ``order``.

    Each release is tried, whatever the others answer; then the error of the first key, in
    the caller's order, whose release failed is raised.
    """
    errors: dict[int, LockError] = {}
    for place in reversed(order):
        call = calls[place]
        try:
            yield from release(parts, call, clock=clock)
        except LockError as err:
            errors[place] = err
    if errors:
        raise errors[min(errors)]
