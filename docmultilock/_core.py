"""The whole lock algorithm, without I/O: what to send for each operation, and what came back.

Invariants every builder here keeps:

* **One command per operation.** Acquire, release and extend are each a single
  ``findAndModify`` whose update pipeline decides and writes atomically on the server, and
  whose projection returns just enough to tell every outcome apart (a missing document is a
  ``None`` reply; a refusal is a reply without our entry). No read-then-write.
* **Server time only.** Expiry is judged against the server's ``$$NOW``, never the client's
  clock. Expired entries are dropped by every write, so no expired entry can sit next to a
  live one and let a conflicting holder in.
* **Only the lock field is touched.** The pipeline ``$set``s ``field`` and nothing else, and
  leaves it as it is when it holds something this layout did not write.

The stored layout (``docs/concepts.md`` documents it for users)::

    field: {
      v: 1,                 # layout version; any other value is refused, never overwritten
      fence: <int>,         # last fence granted on this document; never decreases
      expires: <date>,      # latest expiry among holders (time of the last write if none)
      holders: [{id, tag, pending, fence, acquired, expires, ttl}, ...]
    }

An entry's ``ttl`` is the lifetime (ms) it was taken or last extended with: renewals keep it
unless the call gives another, so a lock never takes its lifetime from what a client sends.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from docmultilock._expr import SERVER_NOW, Expr, each, field_or_null, is_non_empty, literal
from docmultilock._lock import Lock
from docmultilock._rules import TagRules
from docmultilock.errors import (
    AssertiveLock,
    CooperativeLock,
    DbError,
    IncompatibleLockField,
    LockAlreadyTaken,
    LockNotFound,
    LockWasReacquired,
    ResourceNotFound,
    TooManyHolders,
)

__all__ = [
    "DEFAULT_MAX_HOLDERS",
    "FENCES_PER_MS",
    "FENCE_LIMIT",
    "LAYOUT_VERSION",
    "Command",
    "LockCore",
]

LAYOUT_VERSION = 1

#: Live entries one lock field takes at most, unless a manager says otherwise: about
#: 150 KB of entries, far from MongoDB's 16 MiB document limit.
DEFAULT_MAX_HOLDERS = 1000

Filter = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Command:
    """One ``findAndModify``: the shells run it and hand the reply to the plan's ``read``."""

    filter: dict[str, Any]
    update: list[dict[str, Any]]
    projection: dict[str, Any]
    return_after: bool
    #: Create the document when missing (named locks: the lock document exists on demand).
    upsert: bool = False
    #: Delete the matched document instead of updating it (``update`` is then empty).
    delete: bool = False


#: Clock fences count this many grants per millisecond of server time (see ``_next_fence``).
FENCES_PER_MS = 1000

#: The smallest fence a clock-fenced grant may take at server time ``$$now``.
_CLOCK_FENCE: Expr = {"$multiply": [{"$toLong": "$$now"}, FENCES_PER_MS]}


def _next_fence(clock: bool) -> Expr:
    """The fence of a grant: the document's last plus one; with ``clock``, at least now.

    "Now" is the server's clock in fence units (``FENCES_PER_MS`` per millisecond). Named
    locks need it: their document is deleted by the last release or by the TTL index, and
    its counter with it. A clock fence still outranks every fence granted before the
    deletion, because a document is deleted only once the clock has passed its fence
    (``LockCore.release_by_delete``; ``_state`` keeps ``expires`` past it for the TTL
    index). This assumes the server's clock does not step back, and fewer than
    ``FENCES_PER_MS`` grants per millisecond on one name.
    """
    counter = {"$add": ["$$fence0", 1]}
    return {"$max": [counter, _CLOCK_FENCE]} if clock else counter


def _state(holders: Expr, fence: Expr, *, clock: bool) -> Expr:
    """The whole lock subdocument, always in the same key order so unchanged state is a no-op."""
    idle: Expr = "$$now"
    if clock:
        # With no holder, the TTL index may delete the document once ``expires`` is past:
        # keep it beyond the millisecond of the last fence, so a later clock fence outranks it.
        fence_ms = {"$toLong": {"$trunc": [{"$divide": [fence, FENCES_PER_MS]}]}}
        idle = {"$max": ["$$now", {"$toDate": {"$add": [fence_ms, 1]}}]}
    return {
        "v": literal(LAYOUT_VERSION),
        "fence": fence,
        "expires": {"$cond": [is_non_empty(holders), {"$max": each(holders, "expires")}, idle]},
        "holders": holders,
    }


def _entry(tag: str, pending: bool, fence: Expr) -> Expr:
    return {
        "id": "$$id",
        "tag": literal(tag),
        "pending": pending,
        "fence": fence,
        "acquired": "$$now",
        "expires": {"$add": ["$$now", "$$ttl"]},
        "ttl": "$$ttl",
    }


def _is_ours(entry: str, tag: Expr) -> Expr:
    """True for our entry: our id *and* the tag the server stored for it.

    The id alone proves ownership, but a client can edit the tag of a lock it sends back;
    an entry whose stored tag differs is not the lock the caller describes, so it is
    neither continued nor extended under the other tag's rules or lifetime.
    """
    return {"$and": [{"$eq": [f"{entry}.id", "$$id"]}, {"$eq": [f"{entry}.tag", tag]}]}


#: The lifetime of a renewal: the call's own (``$$ttl``), else the one the entry was taken
#: with, else (an entry written before lifetimes were stored) the tag's default.
_LIFE: Expr = {"$ifNull": ["$$ttl", {"$ifNull": ["$$h.ttl", "$$dttl"]}]}


def _renew(tag: Expr, changes: Expr, *, granted_only: bool = False) -> Expr:
    """Map over ``$$live``: renew our own entry's expiry and merge ``changes`` into it.

    Keeps the order and keys of every entry. With ``granted_only``, a pending entry of ours
    is left as it is.
    """
    ours: Expr = _is_ours("$$h", tag)
    if granted_only:
        ours = {"$and": [ours, {"$eq": ["$$h.pending", False]}]}
    renewed = {
        "$let": {
            "vars": {"life": _LIFE},
            "in": {
                "$mergeObjects": [
                    "$$h",
                    {**changes, "expires": {"$add": ["$$now", "$$life"]}, "ttl": "$$life"},
                ]
            },
        }
    }
    return {"$map": {"input": "$$live", "as": "h", "in": {"$cond": [ours, renewed, "$$h"]}}}


#: Fences stay below this, so ``fence + 1`` and clock fences remain exact 64-bit integers
#: (MongoDB turns an overflowing ``long`` sum into an inexact double).
FENCE_LIMIT = 2**62

#: A stored fence we can grow: missing or null (none granted yet), or a whole number of BSON
#: type int or long from 0 to ``FENCE_LIMIT``. NaN, infinities, decimals and doubles are not.
_FENCE_OK: Expr = {
    "$let": {
        "vars": {"f": {"$ifNull": ["$$st.fence", 0]}},
        "in": {
            "$and": [
                {"$in": [{"$type": "$$f"}, ["int", "long"]]},
                {"$gte": ["$$f", 0]},
                {"$lt": ["$$f", FENCE_LIMIT]},
            ]
        },
    }
}

#: True when ``$$st`` (the lock field, missing made null) is ours to write: null, or an
#: object with our layout version whose holders, if any, are an array, and whose fence we
#: can grow. Anything else is left exactly as it is. The projection evaluates the same
#: expression, so the pipeline and the reader can never disagree about a field.
_OURS: Expr = {
    "$or": [
        {"$eq": ["$$st", None]},
        {
            "$and": [
                {"$eq": [{"$type": "$$st"}, "object"]},
                {"$eq": ["$$st.v", LAYOUT_VERSION]},
                {"$isArray": {"$ifNull": ["$$st.holders", []]}},
                _FENCE_OK,
            ]
        },
    ]
}


def _with_live_state(field: str, decide: Expr) -> Expr:
    """Bind ``$$live`` (unexpired holders) and ``$$fence0``, or keep a foreign field as it is."""
    live = {
        "$filter": {
            "input": {"$ifNull": ["$$st.holders", []]},
            "as": "h",
            "cond": {"$gt": ["$$h.expires", "$$now"]},
        }
    }
    return {
        "$let": {
            "vars": {"st": field_or_null(field)},
            "in": {
                "$cond": [
                    _OURS,
                    {
                        "$let": {
                            "vars": {"live": live, "fence0": {"$ifNull": ["$$st.fence", 0]}},
                            "in": decide,
                        }
                    },
                    "$$st",
                ]
            },
        }
    }


def _capped(rules: TagRules, tag: str) -> bool:
    """True when ``tag`` may join other live entries, so the holder cap can refuse it.

    A tag cooperative with every tag (WriteLock's ``write``) is refused by any live entry
    before the cap could matter: its pipeline leaves the cap out.
    """
    return rules.cooperative[tag] != rules.tags


def _acquire_body(field: str, rules: TagRules, tag: str, *, clock: bool, max_holders: int) -> Expr:
    """The decision for acquiring (or continuing) ``tag``, in the order the reader mirrors.

    Each branch yields only the new holders (``h``) and fence (``f``); the lock state is
    assembled from them once, after the decision, which keeps the pipeline small.
    """
    unchanged = {"h": "$$live", "f": "$$fence0"}
    stored_tag = literal(tag)
    wait = {
        "h": {
            "$cond": [
                "$$has_mine",
                _renew(stored_tag, {}),
                {"$concatArrays": ["$$live", [_entry(tag, True, 0)]]},
            ]
        },
        "f": "$$fence0",
    }
    grant = {
        "$let": {
            "vars": {"granted": _next_fence(clock)},
            "in": {
                "h": {
                    "$cond": [
                        "$$has_mine",
                        _renew(
                            stored_tag,
                            {"pending": False, "fence": "$$granted", "acquired": "$$now"},
                        ),
                        {"$concatArrays": ["$$live", [_entry(tag, False, "$$granted")]]},
                    ]
                },
                "f": "$$granted",
            },
        }
    }
    # A new entry beyond ``max_holders`` is refused, recording nothing: the field (and the
    # user's document with it) must not grow until it hits MongoDB's 16 MiB limit.
    full = {"$and": [{"$not": ["$$has_mine"]}, {"$gte": [{"$size": "$$live"}, max_holders]}]}
    branches = [
        # Already held (a continued lock that was granted meanwhile): unchanged.
        {"case": "$$held", "then": unchanged},
        # A cooperative tag is live: refuse, dropping our pending entry if we had one.
        {
            "case": _meets("$$otags", rules.cooperative[tag]),
            "then": {"h": "$$others", "f": "$$fence0"},
        },
        # Continuing a lock that is gone (or whose stored tag is another): record nothing.
        {"case": {"$and": [{"$not": ["$$has_mine"]}, {"$not": ["$$create"]}]}, "then": unchanged},
        # As many entries as allowed: record nothing.
        {"case": full if _capped(rules, tag) else False, "then": unchanged},
        # An assertive tag is live (held or pending): register, or renew, as pending.
        {"case": _meets("$$otags", rules.assertive[tag]), "then": wait},
    ]
    # A tag with no cooperative or assertive partner has a constant-false case: leave the
    # branch out, so the server evaluates (and parses) less.
    branches = [branch for branch in branches if branch["case"] is not False]
    ours = _is_ours("$$h", stored_tag)
    others = {"$filter": {"input": "$$live", "as": "h", "cond": {"$not": [ours]}}}
    mine = {"$filter": {"input": "$$live", "as": "h", "cond": ours}}
    decide = {
        "$let": {
            "vars": {"others": others, "mine": mine},
            "in": {
                "$let": {
                    "vars": {
                        "otags": each("$$others", "tag"),
                        "has_mine": is_non_empty("$$mine"),
                        "held": {"$in": [False, each("$$mine", "pending")]},
                    },
                    # Nothing in the way: grant, with the next fence.
                    "in": {"$switch": {"branches": branches, "default": grant}},
                }
            },
        }
    }
    outcome = {"$let": {"vars": {"r": decide}, "in": _state("$$r.h", "$$r.f", clock=clock)}}
    return _with_live_state(field, outcome)


def _meets(tags: Expr, wanted: frozenset[str]) -> Expr:
    if not wanted:
        return False
    return is_non_empty({"$setIntersection": [tags, literal(sorted(wanted))]})


def _release_body(field: str, *, clock: bool) -> Expr:
    # Drops our entry whether live or expired: an expired lock nobody displaced is still
    # ours to remove quietly (a displacing write would already have pruned it).
    keep = {"$filter": {"input": "$$live", "as": "h", "cond": {"$ne": ["$$h.id", "$$id"]}}}
    return _with_live_state(field, _state(keep, "$$fence0", clock=clock))


def _extend_body(field: str, *, clock: bool) -> Expr:
    # Only a live, granted entry of the stored tag is renewed; an expired one was just
    # pruned with the rest.
    renewed = _renew("$$tag", {}, granted_only=True)
    return _with_live_state(field, _state(renewed, "$$fence0", clock=clock))


def _pipeline(field: str, body: Expr, bindings: dict[str, Any]) -> list[dict[str, Any]]:
    variables = {"now": SERVER_NOW, **bindings}
    return [{"$set": {field: {"$let": {"vars": variables, "in": body}}}}]


def _to_utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


@dataclass(frozen=True, slots=True)
class _Reply:
    """What the projection returned, checked against the layout."""

    document_id: Any
    mine: Mapping[str, Any] | None
    tags: frozenset[str]


class LockCore:
    """The lock algorithm for one lock field and tag table; builds commands, reads replies.

    Pure: it never talks to the server. ``exclusive`` selects the WriteLock error names
    (:class:`LockAlreadyTaken`, :class:`LockWasReacquired`) over the MultiLock ones.
    ``named`` keeps the state in a lock document of its own instead of the user's: it is
    created by the first acquire (an upsert), deleted by the last exclusive release or the
    TTL index, and fenced by the server's clock so fences survive that deletion.
    """

    def __init__(
        self,
        field: str,
        rules: TagRules,
        *,
        exclusive: bool,
        named: bool = False,
        max_holders: int = DEFAULT_MAX_HOLDERS,
    ) -> None:
        self.field = field
        self.rules = rules
        self.named = named
        self.max_holders = max_holders
        self._noun = "name" if named else "document"
        self._delete_on_release = named and exclusive
        self._refused: type[CooperativeLock] = LockAlreadyTaken if exclusive else CooperativeLock
        self._lost: type[LockNotFound] = LockWasReacquired if exclusive else LockNotFound
        # The pipeline bodies depend only on the field and the table; only the small
        # ``$let`` bindings (id, lifetime, ...) change per call.
        self._acquire = {
            tag: _acquire_body(field, rules, tag, clock=named, max_holders=max_holders)
            for tag in rules.tags
        }
        self._release = _release_body(field, clock=named)
        self._extend = _extend_body(field, clock=named)
        # A foreign field may hold anything; only ever iterate over an actual array.
        holders = {"$cond": [{"$isArray": f"${field}.holders"}, f"${field}.holders", []]}
        self._holders = holders
        self._ours = {"$let": {"vars": {"st": field_or_null(field)}, "in": _OURS}}
        self._acquire_tags = {"$setUnion": [each(holders, "tag")]}

    # -- building -------------------------------------------------------------------

    @staticmethod
    def _is_mine(lock_id: str) -> Expr:
        return {"$eq": ["$$this.id", literal(lock_id)]}

    def _projection(self, lock_id: str, *, with_tags: bool) -> dict[str, Any]:
        projection: dict[str, Any] = {
            "_id": 1,
            "ours": self._ours,
            "t": {"$type": f"${self.field}"},
            "v": f"${self.field}.v",
            "mine": {"$filter": {"input": self._holders, "cond": self._is_mine(lock_id)}},
        }
        if with_tags:
            projection["tags"] = self._acquire_tags
        return projection

    def acquire(
        self,
        target: Filter,
        *,
        user_filter: Filter,
        tag: str,
        lock_id: str,
        lifetime_ms: int | None,
        continuing: Lock | None = None,
    ) -> AcquirePlan:
        """Plan an acquisition of ``tag`` under a new ``lock_id``, or go on with ``continuing``.

        ``lifetime_ms`` of ``None`` means the tag's default for a new lock, and the lifetime
        it was taken with for a continued one.
        """
        default = self.rules.lifetime_ms[tag]
        if continuing is not None:
            lock_id = continuing.id
        elif lifetime_ms is None:
            lifetime_ms = default
        bindings = {
            "id": literal(lock_id),
            "ttl": lifetime_ms,
            "dttl": default,
            "create": continuing is None,
        }
        command = Command(
            filter=dict(target),
            update=_pipeline(self.field, self._acquire[tag], bindings),
            projection=self._projection(lock_id, with_tags=True),
            return_after=True,
            # A pending lock is continued only on its existing document.
            upsert=self.named and continuing is None,
        )
        return AcquirePlan(self, command, user_filter, tag, continuing)

    def release_by_delete(self, target: Filter, *, lock: Lock) -> DeletePlan | None:
        """Plan deleting an exclusive named lock's document (``None`` for other managers).

        The document is deleted only while ``lock`` is its one live entry and the server's
        clock has passed its fence (see ``_next_fence``). When that does not match (the lock
        is gone, or it is released within the millisecond of a grant), the shell falls back
        to the ordinary :meth:`release`, which empties the document for the TTL index.
        """
        if not self._delete_on_release:
            return None
        ours_or_expired = {
            "$or": [self._is_mine(lock.id), {"$lte": ["$$this.expires", SERVER_NOW]}]
        }
        deletable = {
            "$and": [
                {"$in": [literal(lock.id), each(self._holders, "id")]},
                {"$allElementsTrue": [{"$map": {"input": self._holders, "in": ours_or_expired}}]},
                {
                    "$lt": [
                        f"${self.field}.fence",
                        {"$multiply": [{"$toLong": SERVER_NOW}, FENCES_PER_MS]},
                    ]
                },
            ]
        }
        command = Command(
            filter={**target, "$expr": deletable},
            update=[],
            projection={"_id": 1},
            return_after=False,
            delete=True,
        )
        return DeletePlan(command)

    def release(self, target: Filter, *, user_filter: Filter, lock: Lock) -> ReleasePlan:
        """Plan the removal of ``lock``'s entry (pruning expired ones on the way)."""
        command = Command(
            filter=dict(target),
            update=_pipeline(self.field, self._release, {"id": literal(lock.id)}),
            projection=self._projection(lock.id, with_tags=False),
            return_after=False,  # the entry's presence *before* the write tells the outcome
        )
        return ReleasePlan(self, command, user_filter, lock)

    def extend(
        self, target: Filter, *, user_filter: Filter, lock: Lock, lifetime_ms: int | None
    ) -> ExtendPlan:
        """Plan pushing ``lock``'s expiry to server-now plus ``lifetime_ms``.

        ``None`` renews by the lifetime the lock was taken (or last extended) with.
        """
        bindings = {
            "id": literal(lock.id),
            "tag": literal(lock.tag),
            "ttl": lifetime_ms,
            "dttl": self.rules.lifetime_ms[lock.tag],
        }
        command = Command(
            filter=dict(target),
            update=_pipeline(self.field, self._extend, bindings),
            projection=self._projection(lock.id, with_tags=False),
            return_after=True,
        )
        return ExtendPlan(self, command, user_filter, lock)

    def guard(self, target: Filter, lock: Lock) -> dict[str, Any]:
        """A filter matching the document only while ``lock`` is granted and unexpired.

        The stored entry must carry ``lock``'s tag: a reader's lock edited to say ``write``
        guards nothing.
        """
        held = {
            "$anyElementTrue": [
                {
                    "$map": {
                        "input": self._holders,
                        "in": {
                            "$and": [
                                self._is_mine(lock.id),
                                {"$eq": ["$$this.tag", literal(lock.tag)]},
                                {"$eq": ["$$this.pending", False]},
                                {"$gt": ["$$this.expires", SERVER_NOW]},
                            ]
                        },
                    }
                }
            ]
        }
        if "$expr" in target:
            return {"$and": [dict(target), {"$expr": held}]}
        return {**target, "$expr": held}

    # -- reading --------------------------------------------------------------------

    def read_reply(
        self, reply: Mapping[str, Any] | None, user_filter: Filter, lock: Lock | None, doing: str
    ) -> _Reply:
        """Check a projected reply against the layout; ``None`` means no document matched.

        A named lock's document is missing only once nobody holds the name, so for ``lock``
        that is a loss, never :class:`ResourceNotFound`.
        """
        if reply is None:
            if self.named and lock is not None:
                raise self.lost(lock, user_filter, doing)
            raise ResourceNotFound(
                f"no document matches the filter {dict(user_filter)!r}", filter=user_filter
            )
        if not reply.get("ours"):
            raise IncompatibleLockField(
                f"field {self.field!r} of document {reply.get('_id')!r} holds data "
                f"docmultilock does not own (type {reply.get('t')!r}, version "
                f"{reply.get('v')!r}; docmultilock writes a version-{LAYOUT_VERSION} object "
                f"whose holders are an array and whose fence is an int or long from 0 to "
                f"2**62); nothing was written",
                filter=user_filter,
            )
        mine = reply.get("mine") or []
        return _Reply(reply["_id"], mine[0] if mine else None, frozenset(reply.get("tags") or ()))

    def to_lock(self, entry: Mapping[str, Any], document_id: Any) -> Lock:
        """Turn our stored entry into a :class:`Lock`."""
        return Lock(
            id=entry["id"],
            tag=entry["tag"],
            document_id=document_id,
            acquired_at=_to_utc(entry["acquired"]),
            expires_at=_to_utc(entry["expires"]),
            fence=int(entry["fence"]),
            pending=bool(entry["pending"]),
        )

    def lost(self, lock: Lock, user_filter: Filter, doing: str) -> LockNotFound:
        """The error for a lock that is no longer on its document."""
        return self._lost(
            f"cannot {doing}: lock {lock.id} ({lock.tag!r}) is no longer held on {self._noun} "
            f"{lock.document_id!r}; it expired or was displaced",
            filter=user_filter,
            lock=lock,
        )


@dataclass(frozen=True, slots=True)
class AcquirePlan:
    """An acquisition: its command, and how to read the reply (mirrors the pipeline's order)."""

    core: LockCore
    command: Command
    user_filter: Filter
    tag: str
    continuing: Lock | None

    def read(self, reply: Mapping[str, Any] | None) -> Lock:
        """Return the granted lock, or raise the error that describes the outcome."""
        core = self.core
        if reply is None and core.named and self.continuing is None:
            # Only after an upsert that lost a race (see ``_driver.upsert_reply``) and a
            # document deleted again before it could be read: a grant or a pending entry of
            # ours would have kept it, so the holder we met released meanwhile.
            raise core._refused(
                f"cannot lock {self.tag!r} on name {self.user_filter.get('_id')!r}: another "
                "holder had it (and has released it since; try again)",
                filter=self.user_filter,
                blocking_tags=(),
            )
        state = core.read_reply(reply, self.user_filter, self.continuing, "continue")
        if state.mine is not None and state.mine.get("tag") != self.tag:
            # Only a continued lock can meet its id under another tag: one a client edited.
            raise core.lost(self.continuing or _unreachable(), self.user_filter, "continue")
        if state.mine is not None:
            lock = core.to_lock(state.mine, state.document_id)
            if not lock.pending:
                return lock
            waiting = tuple(sorted(state.tags & core.rules.assertive[self.tag]))
            raise AssertiveLock(
                f"lock {lock.id} ({self.tag!r}) is pending on {core._noun} {state.document_id!r} "
                f"until these tags drain: {', '.join(waiting)}; call acquire(filter, lock=...) "
                "again to keep waiting",
                filter=self.user_filter,
                lock=lock,
                blocking_tags=waiting,
            )
        blocking = tuple(sorted(state.tags & core.rules.cooperative[self.tag]))
        if blocking:
            raise core._refused(
                f"cannot lock {self.tag!r} on {core._noun} {state.document_id!r}: held or pending "
                f"by {', '.join(blocking)}",
                filter=self.user_filter,
                blocking_tags=blocking,
            )
        if self.continuing is not None:
            raise core.lost(self.continuing, self.user_filter, "continue")
        if _capped(core.rules, self.tag):
            raise TooManyHolders(
                f"cannot lock {self.tag!r} on {core._noun} {state.document_id!r}: it already "
                f"has {core.max_holders} holders and pending locks, the most it takes",
                filter=self.user_filter,
                limit=core.max_holders,
            )
        raise DbError(  # pragma: no cover - the pipeline always records a fresh acquisition
            f"the server answered an acquisition on {core._noun} {state.document_id!r} without "
            "recording it or naming a conflict",
            filter=self.user_filter,
        )


@dataclass(frozen=True, slots=True)
class ReleasePlan:
    """A release: the reply is the state *before* the write."""

    core: LockCore
    command: Command
    user_filter: Filter
    lock: Lock

    def read(self, reply: Mapping[str, Any] | None) -> None:
        """Return quietly if our entry was there (live or expired); raise the loss otherwise."""
        state = self.core.read_reply(reply, self.user_filter, self.lock, "release")
        if state.mine is None:
            raise self.core.lost(self.lock, self.user_filter, "release")


@dataclass(frozen=True, slots=True)
class ExtendPlan:
    """An extension: the reply is the state after the write."""

    core: LockCore
    command: Command
    user_filter: Filter
    lock: Lock

    def read(self, reply: Mapping[str, Any] | None) -> Lock:
        """Return the lock with its new expiry, or raise the loss when it is not held."""
        state = self.core.read_reply(reply, self.user_filter, self.lock, "extend")
        mine = state.mine
        if mine is None or mine.get("pending") or mine.get("tag") != self.lock.tag:
            raise self.core.lost(self.lock, self.user_filter, "extend")
        return self.core.to_lock(mine, state.document_id)


def _unreachable() -> Lock:  # pragma: no cover - a fresh lock id is never stored already
    raise DbError("the server answered a fresh acquisition with an entry of another tag")


@dataclass(frozen=True, slots=True)
class DeletePlan:
    """Deleting a named lock's document as its release: the reply is the deleted document."""

    command: Command

    def read(self, reply: Mapping[str, Any] | None) -> bool:
        """True when the document was deleted (released); false to fall back to an update."""
        return reply is not None
