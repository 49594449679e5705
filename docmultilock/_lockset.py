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

The shells (``_async/hold.py`` and its generated twin) run these flows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from functools import partial
from typing import Any, TypeVar

import bson
from bson.binary import Binary
from bson.code import Code
from bson.codec_options import CodecOptions, DatetimeConversion
from bson.datetime_ms import DatetimeMS
from bson.decimal128 import Decimal128
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.timestamp import Timestamp

from docmultilock._calls import Acquisition, Held
from docmultilock._cleanup import Taken, give_back_all
from docmultilock._flows import Clock, Flow
from docmultilock._holding import (
    Holding,
    HoldSpec,
    plan_hold,
    tend_flow,
    wait_flow,
)
from docmultilock._lock_flows import LockOperations
from docmultilock._wording import set_member
from docmultilock.errors import InvalidArgument, LockError

__all__ = [
    "LockSet",
    "at_each",
    "canonical",
    "key_sequence",
    "order_key",
    "plan_set",
    "release_all_flow",
    "take_all_flow",
]

#: How the ids are read back to be ordered: dates as milliseconds (any BSON date fits),
#: binary data of every subtype as ``Binary``, numbers as they are stored.
_READ_BACK: CodecOptions[Any] = CodecOptions(datetime_conversion=DatetimeConversion.DATETIME_MS)

# MongoDB's order of BSON types when comparing values of different types
# (https://www.mongodb.com/docs/manual/reference/bson-type-comparison-order/).
_MIN_KEY, _NULL, _NUMBER, _STRING, _OBJECT = 1, 2, 3, 4, 5
_BINARY, _OBJECT_ID, _BOOLEAN, _DATE, _TIMESTAMP, _MAX_KEY = 7, 8, 9, 10, 11, 13


def order_key(value: Any, codec_options: CodecOptions[Any]) -> tuple[Any, ...]:
    """A sort key of an ``_id`` that orders and equates ids as MongoDB compares them.

    The value is first encoded as pymongo sends it (``codec_options``: the collection's, so
    a ``uuid.UUID`` or a custom type is ordered as what is stored), then read back. Numbers
    compare by value across int, long, double and decimal (``1`` and ``1.0`` name one
    document); strings by their UTF-8 bytes, which is code point order.

    :raises InvalidArgument: a value that cannot be an ``_id`` one can order (an array, a
        regular expression, JavaScript code).
    """
    try:
        stored = bson.decode(bson.encode({"v": value}, codec_options=codec_options), _READ_BACK)
    except Exception as exc:  # what bson refuses, in whichever way it refuses
        raise InvalidArgument(f"cannot encode the _id {value!r}: {exc}") from exc
    return _key(stored["v"], value)


def _key(value: Any, given: Any) -> tuple[Any, ...]:
    if isinstance(value, MinKey):
        return (_MIN_KEY,)
    if value is None:
        return (_NULL,)
    if isinstance(value, bool):
        return (_BOOLEAN, value)
    if isinstance(value, (int, float, Decimal128)):
        number = value.to_decimal() if isinstance(value, Decimal128) else Decimal(value)
        # NaN sorts below every other number, and equals itself (as MongoDB has it).
        return (_NUMBER, 0) if number.is_nan() else (_NUMBER, 1, number)
    if isinstance(value, str) and not isinstance(value, Code):  # Code is a str, not a string
        return (_STRING, value.encode("utf-8"))
    if isinstance(value, Mapping):
        # Field by field, in order: each value's type, then the field's name, then the value.
        fields = ((name, _key(field, given)) for name, field in value.items())
        return (_OBJECT, tuple((key[0], name.encode("utf-8"), key) for name, key in fields))
    if isinstance(value, (bytes, Binary)):
        subtype = value.subtype if isinstance(value, Binary) else 0
        return (_BINARY, len(value), subtype, bytes(value))
    if isinstance(value, ObjectId):
        return (_OBJECT_ID, value.binary)
    if isinstance(value, DatetimeMS):
        return (_DATE, int(value))
    if isinstance(value, Timestamp):
        return (_TIMESTAMP, value.time, value.inc)
    if isinstance(value, MaxKey):
        return (_MAX_KEY,)
    raise InvalidArgument(f"a lock set cannot order the _id {given!r} ({type(given).__name__})")


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

    def place_of(self, ops: LockOperations, key: object) -> int:
        """Where ``key`` stands in the caller's sequence; refused when it is not in the set."""
        wanted = identify(ops, key)
        try:
            return self.keys.index(wanted)
        except ValueError:
            raise InvalidArgument(f"{key!r} is not one of this lock set's keys") from None


def identify(ops: LockOperations, key: object) -> tuple[Any, ...]:
    """The order key of ``key``'s document: a filter's ``_id`` equality, or a name."""
    return _identity(key, ops.key_filter(key), ops.codec_options)


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
    ops: LockOperations,
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
    calls = at_each(key_sequence(keys), lambda key: ops.acquiring(key, **acquiring))
    spec = plan_hold(ops, calls[0], holding or {})
    identified, order = canonical(calls, ops.codec_options)
    size = len(calls)
    return LockSet(
        ordered=tuple(
            dataclasses.replace(spec, call=calls[index], member=set_member(index, size))
            for index in order
        ),
        places=tuple(order),
        keys=tuple(identified),
    )


def take_all_flow(ops: LockOperations, locks: LockSet, clock: Clock) -> Flow[list[Holding]]:
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
    tend = partial(tend_flow, ops, taken, clock)
    try:
        for spec in locks.ordered:
            wait = spec.wait
            if wait is not None:
                wait = max(0.0, wait - (clock.monotonic() - started))
            lock, sent = yield from wait_flow(
                ops, dataclasses.replace(spec, wait=wait), clock, tend=tend
            )
            taken.append(Holding(spec, lock, sent))
    except BaseException as refusal:
        # Also for a cancellation thrown in: never leave part of a set held.
        given = [Taken(h.spec.call, h.lock, h.expires) for h in reversed(taken)]
        yield from give_back_all(ops, given, refusal, clock=clock)
        raise
    return taken


def release_all_flow(
    ops: LockOperations, calls: Sequence[Held], *, order: Sequence[int], clock: Clock
) -> Flow[None]:
    """Release each of ``calls`` (the caller's order), in the reverse of canonical ``order``.

    Each release is tried, whatever the others answer; then the error of the first key, in
    the caller's order, whose release failed is raised.
    """
    errors: dict[int, LockError] = {}
    for place in reversed(order):
        call = calls[place]
        try:
            yield from ops.release(call, clock=clock)
        except LockError as err:
            errors[place] = err
    if errors:
        raise errors[min(errors)]
