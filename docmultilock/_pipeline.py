"""What the server evaluates: the update pipelines of every operation, and the stored layout.

Every builder here returns an aggregation expression; nothing is sent. ``_core`` assembles
them into commands and reads the replies. The stored layout (``docs/concepts.md``
documents it for users)::

    field: {
      v: 1,                 # layout version; any other value is refused, never overwritten
      fence: <int>,         # last fence granted on this document; never decreases
      expires: <date>,      # latest expiry among holders (time of the last write if none)
      holders: [{id, tag, pending, fence, acquired, expires, ttl}, ...],
      broken: {token, at, removed: [...]}   # only after break_lock, until the next write
    }

An entry's ``ttl`` is the lifetime (ms) it was taken or last extended with: renewals keep it
unless the call gives another, so a lock never takes its lifetime from what a client sends.

Invariants every body keeps:

* **Server time only.** Expiry is judged against the server's ``$$NOW``, never the client's
  clock, by every decision and every reader. Expired entries are dropped by every write
  that records something; a refusal that records nothing (a lone tag's) leaves the field
  exactly as it was, expired entries included.
* **Only the lock field is touched.** The pipeline ``$set``s ``field`` and nothing else.
  When the field holds something this layout did not write (``OURS``), acquire, release and
  extend fail the whole command (:func:`foreign_field`), so nothing is written and their
  replies need no layout check; ``break_lock`` leaves such a field as it is.
* **The stored entry decides.** Our entry is the one with our id *and* the tag the server
  stored for it; its rights and lifetime come from the server, not from the caller.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from docmultilock._expr import (
    SERVER_NOW,
    Expr,
    contains,
    each,
    field_or_null,
    is_non_empty,
    literal,
)
from docmultilock._rules import TagRules

__all__ = [
    "BREAK_MODES",
    "FENCES_PER_MS",
    "FENCE_LIMIT",
    "LAYOUT",
    "LAYOUT_VERSION",
    "acquire_body",
    "break_body",
    "capped",
    "extend_body",
    "foreign_field",
    "lone",
    "ours",
    "release_body",
    "update_stages",
]

LAYOUT_VERSION = 1

FENCES_PER_MS = 1000

#: The smallest fence a clock-fenced grant may take at server time ``$$now``.
_CLOCK_FENCE: Expr = {"$multiply": [{"$toLong": "$$now"}, FENCES_PER_MS]}

# The server checks every node of a pipeline when it parses it, whether its branch runs or
# not, and walks the holders array once per array operator that runs: each body below is
# built for one operation from the parts it can reach, and binds what it uses twice.


def _let(variables: dict[str, Expr], body: Expr) -> Expr:
    return {"$let": {"vars": variables, "in": body}}


def _first(branches: list[tuple[Expr, Expr]], default: Expr) -> Expr:
    """The ``then`` of the first true case, else ``default`` (a ``$cond`` for one case)."""
    if not branches:
        return default
    if len(branches) == 1:
        ((case, then),) = branches
        return {"$cond": [case, then, default]}
    return {
        "$switch": {
            "branches": [{"case": case, "then": then} for case, then in branches],
            "default": default,
        }
    }


def _any(cases: list[Expr]) -> Expr:
    return cases[0] if len(cases) == 1 else {"$or": cases}


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


def _latest(holders: Expr) -> Expr:
    """The latest expiry among ``holders``: null when there is no list, or no entry has one."""
    return {"$max": each(holders, "expires")}


def _state(holders: str, fence: Expr, *, clock: bool) -> Expr:
    """The whole lock subdocument, always in the same key order so unchanged state is a no-op.

    ``holders`` is a variable (``"$$name"``): the list is evaluated once, however often the
    state uses it. ``$max`` of no entries is null, which ``$ifNull`` turns into the idle
    expiry.
    """
    idle: Expr = "$$now"
    if clock:
        # With no holder, the TTL index may delete the document once ``expires`` is past:
        # keep it beyond the millisecond of the last fence, so a later clock fence outranks it.
        fence_ms = {"$toLong": {"$trunc": [{"$divide": [fence, FENCES_PER_MS]}]}}
        idle = {"$max": ["$$now", {"$toDate": {"$add": [fence_ms, 1]}}]}
    return {
        "v": literal(LAYOUT_VERSION),
        "fence": fence,
        "expires": {"$ifNull": [_latest(holders), idle]},
        "holders": holders,
    }


def _state_of(holders: Expr, fence: Expr, *, clock: bool) -> Expr:
    """:func:`_state` of a computed list of holders, bound once as ``$$kept``."""
    return _let({"kept": holders}, _state("$$kept", fence, clock=clock))


def _entry(pending: bool, fence: Expr) -> Expr:
    """A new entry of ours, tagged ``$$tag`` (bound per call, as a literal)."""
    return {
        "id": "$$id",
        "tag": "$$tag",
        "pending": pending,
        "fence": fence,
        "acquired": "$$now",
        "expires": {"$add": ["$$now", "$$ttl"]},
        "ttl": "$$ttl",
    }


def _is_ours(entry: str) -> Expr:
    """True for our entry: our id *and* the tag the server stored for it (``$$tag``).

    The id alone proves ownership, but a client can edit the tag of a lock it sends back;
    an entry whose stored tag differs is not the lock the caller describes, so it is
    neither continued nor extended under the other tag's rules or lifetime.
    """
    return {"$and": [{"$eq": [f"{entry}.id", "$$id"]}, {"$eq": [f"{entry}.tag", "$$tag"]}]}


#: The lifetime of a renewal: the call's own (``$$ttl``), else the one the entry was taken
#: with, else (an entry written before lifetimes were stored) the tag's default.
_LIFE: Expr = {"$ifNull": ["$$ttl", {"$ifNull": ["$$h.ttl", "$$dttl"]}]}


def _renew(changes: Expr, *, granted_only: bool = False) -> Expr:
    """Map over ``$$live``: renew our own entry's expiry and merge ``changes`` into it.

    Keeps the order and keys of every entry. With ``granted_only``, a pending entry of ours
    is left as it is.
    """
    ours: Expr = _is_ours("$$h")
    if granted_only:
        ours = {"$and": [ours, {"$eq": ["$$h.pending", False]}]}
    renewed = _let(
        {"life": _LIFE},
        {
            "$mergeObjects": [
                "$$h",
                {**changes, "expires": {"$add": ["$$now", "$$life"]}, "ttl": "$$life"},
            ]
        },
    )
    return {"$map": {"input": "$$live", "as": "h", "in": {"$cond": [ours, renewed, "$$h"]}}}


#: Fences stay below this, so ``fence + 1`` and clock fences remain exact 64-bit integers
#: (MongoDB turns an overflowing ``long`` sum into an inexact double).
FENCE_LIMIT = 2**62

#: A stored fence we can grow: missing or null (none granted yet: ``$$fence0`` is then 0),
#: or a whole number of BSON type int or long from 0 to ``FENCE_LIMIT``. NaN, infinities,
#: decimals and doubles are not. Read through ``$$fence0``, which the bodies use anyway, so
#: that missing and null need no type of their own (the test server names the type of a
#: missing field of a variable differently, ``docs/server.md``); the deprecated BSON type
#: undefined counts as null there, as MongoDB's ``$ifNull`` takes it.
_FENCE_OK: list[Expr] = [
    {"$in": [{"$type": "$$fence0"}, ["int", "long"]]},
    {"$gte": ["$$fence0", 0]},
    {"$lt": ["$$fence0", FENCE_LIMIT]},
]

#: What ``OURS`` accepts besides null, in words, for the errors that refuse a field.
LAYOUT = (
    f"a version-{LAYOUT_VERSION} object whose holders are an array and whose fence is an "
    "int or long from 0 to 2**62"
)

#: True when ``$$st`` (the lock field, missing made null, with ``$$fence0`` its fence, as
#: :func:`_constants` and :func:`ours` bind them) is ours to write: null, or an
#: object with our layout version whose holders, if any, are an array, and whose fence we
#: can grow. Anything else is never written. The server alone judges it, in the pipeline
#: (and in ``inspect``'s and ``break_lock``'s projections, which read without writing), so
#: the client never judges a field on its own. (Only an object has a ``v`` equal to 1: an
#: array's ``"$$st.v"`` is a list, or missing on the test server.)
OURS: Expr = {
    "$or": [
        {"$eq": ["$$st", None]},
        {
            "$and": [
                {"$eq": ["$$st.v", LAYOUT_VERSION]},
                {"$isArray": {"$ifNull": ["$$st.holders", []]}},
                *_FENCE_OK,
            ]
        },
    ]
}

#: The stored entries, of a field that is ours (missing made empty).
_STORED: Expr = {"$ifNull": ["$$st.holders", []]}

#: The stored entries as they are, where a missing list may read as null (``$map`` of it).
_STORED_OR_NULL: Expr = "$$st.holders"


def _unexpired(also: Expr | None = None) -> Expr:
    """The stored entries still live by the server's clock (and meeting ``also``): one pass."""
    live: Expr = {"$gt": ["$$h.expires", "$$now"]}
    return {
        "$filter": {
            "input": _STORED,
            "as": "h",
            "cond": live if also is None else {"$and": [live, also]},
        }
    }


#: The words of a command refused because its lock field is not ours, written by
#: :func:`_refuse_foreign` and read back by :func:`foreign_field`.
_FOREIGN, _OF_TYPE = "docmultilock: field ", " holds data of type "
_FOREIGN_WORDS = re.compile(re.escape(_FOREIGN) + "(.*?)" + re.escape(_OF_TYPE) + r"(\w+)")


def _refuse_foreign(field: str) -> Expr:
    """An expression that fails the command, naming ``field`` and the type it holds.

    MongoDB has no operator that raises an error of one's choosing: converting a string that
    is not a number fails with ``ConversionFailure`` (code 241), and the server quotes the
    string in its message (:func:`foreign_field`). A failed command writes nothing, and
    with no reply the reader never has to tell a foreign field from a refusal: the layout
    check lives in the pipeline alone, not in every projection as well.
    """
    return {"$toInt": {"$concat": [f"{_FOREIGN}{field!r}{_OF_TYPE}", {"$type": "$$st"}]}}


def foreign_field(message: str) -> tuple[str, str] | None:
    """``(field, type)`` when a server's error ``message`` is :func:`_refuse_foreign`'s."""
    words = _FOREIGN_WORDS.search(message)
    return None if words is None else (words[1], words[2])


def _on_our_field(field: str, variables: dict[str, Expr], body: Expr) -> Expr:
    """``body`` under ``variables``, on a field that is ours (``OURS``).

    A field that is not ours fails the command (:func:`_refuse_foreign`); ``variables``
    are bound only after the check, so they may walk the holders.
    """
    bound = _let(variables, body) if variables else body
    return {"$cond": [OURS, bound, _refuse_foreign(field)]}


def _tags_met(tags: Expr, wanted: frozenset[str]) -> Expr:
    """True when the list ``tags`` holds one of ``wanted`` (never true for none wanted)."""
    if len(wanted) == 1:
        (only,) = wanted
        return contains(tags, literal(only))
    return is_non_empty({"$setIntersection": [tags, literal(sorted(wanted))]})


def capped(rules: TagRules, tag: str) -> bool:
    """True when ``tag`` may join other live entries, so the holder cap can refuse it.

    A tag cooperative with every tag (WriteLock's ``write``) is refused by any live entry
    before the cap could matter: its pipeline leaves the cap out.
    """
    return rules.cooperative[tag] != rules.tags


def _grant(holders: Expr, clock: bool) -> Expr:
    """A decision granting with the next fence; ``holders(fence)`` builds the new list."""
    return _let({"granted": _next_fence(clock)}, {"h": holders, "f": "$$granted"})


def _fresh_decision(rules: TagRules, tag: str, *, clock: bool, max_holders: int) -> Expr:
    """The decision of a new lock id: no stored entry can be ours, except its own.

    An entry with our id exists only when this very command runs again (a retry after a
    lost reply, or the test server re-executing a retried write, ``docs/server.md``): then
    it records nothing, as its first run already decided. A tag that refuses itself meets
    its own entry in the cooperative check; any other tag looks for the id.
    """
    # The live tags, bound once when both checks read them.
    both = bool(rules.cooperative[tag] and rules.assertive[tag])
    tags = "$$tags" if both else each("$$live", "tag")
    unchanged: list[Expr] = []
    if tag not in rules.cooperative[tag]:
        unchanged.append(contains(each("$$live", "id"), "$$id"))
    if rules.cooperative[tag]:
        # A cooperative tag is live: refuse, recording nothing.
        unchanged.append(_tags_met(tags, rules.cooperative[tag]))
    if capped(rules, tag):
        # A new entry beyond ``max_holders`` is refused, recording nothing: the field (and
        # the user's document with it) must not grow until it hits MongoDB's 16 MiB limit.
        unchanged.append({"$gte": [{"$size": "$$live"}, max_holders]})
    branches: list[tuple[Expr, Expr]] = []
    if unchanged:
        branches.append((_any(unchanged), {"h": "$$live", "f": "$$fence0"}))
    if rules.assertive[tag]:
        # An assertive tag is live (held or pending): register as pending.
        wait = {"$concatArrays": ["$$live", [_entry(True, 0)]]}
        branches.append((_tags_met(tags, rules.assertive[tag]), {"h": wait, "f": "$$fence0"}))
    # Nothing in the way: grant, with the next fence.
    grant = _grant({"$concatArrays": ["$$live", [_entry(False, "$$granted")]]}, clock)
    decision = _first(branches, grant)
    return _let({"tags": each("$$live", "tag")}, decision) if both else decision


def lone(rules: TagRules, tag: str) -> bool:
    """True when ``tag`` is its table's only tag and refuses itself: every entry is of it.

    Its fresh acquire has a pipeline of its own (:func:`_lone_tag_body`), and its replies
    need not list the tags in the way: there is no other.
    """
    return rules.tags == {tag} and tag in rules.cooperative[tag]


def _lone_tag_body(field: str, *, clock: bool) -> Expr:
    """A fresh acquire of the only tag of a table, which refuses itself (WriteLock's ``write``).

    Every entry is of this tag, so any live one refuses, recording nothing (the field is
    left as it was); none, and the new entry is the only holder. A live entry of another
    tag (another table's, on the same field) refuses too: granted, this lock would drop it.
    An entry of our own id is live only when this very command runs again
    (``_fresh_decision``), and then it records nothing too. Built apart because it is the
    commonest acquire: it needs no list of live entries or tags and no concatenation, only
    the latest expiry and the new state.
    """
    # Some entry is live exactly when the latest expiry is, since BSON order is total: the
    # expiries and their maximum take fewer nodes than a filtered list and its size.
    live = {"$gt": [_latest(_STORED_OR_NULL), "$$now"]}
    granted = {
        "v": literal(LAYOUT_VERSION),
        "fence": "$$granted",
        "expires": {"$add": ["$$now", "$$ttl"]},
        "holders": [_entry(False, "$$granted")],
    }
    grant = _let({"granted": _next_fence(clock)}, granted)
    return _on_our_field(field, {}, {"$cond": [live, "$$st", grant]})


def _continued_decision(
    rules: TagRules, tag: str, *, clock: bool, max_holders: int, fair: bool = False
) -> Expr:
    """The decision for a pending lock continued by its id (``$$create`` false), or created.

    ``others`` (every entry but ours) is computed only by the refusal that keeps it.
    Refusals and waits look at what stands in our way (``$$btags``): every granted entry,
    and every pending one *ahead* of ours; one behind us queued after us.

    With ``fair`` (hand-off in arrival order), a refusal becomes a pending entry that holds
    a place in line. Entries keep their order in ``holders`` (new ones are appended,
    renewals map in place), so the array is the line: a newcomer is behind them all, so
    it cannot pass anyone who queued before it; a waiter is granted once nothing before it
    conflicts. A waiting entry is an ordinary pending entry, renewed by
    each attempt and pruned at its expiry like any other, so a dead waiter holds up the
    line for one lifetime at most.
    """
    unchanged = {"h": "$$live", "f": "$$fence0"}
    wait = {
        "h": {
            "$cond": [
                "$$has_mine",
                _renew({}),
                {"$concatArrays": ["$$live", [_entry(True, 0)]]},
            ]
        },
        "f": "$$fence0",
    }
    grant = _grant(
        {
            "$cond": [
                "$$has_mine",
                _renew({"pending": False, "fence": "$$granted", "acquired": "$$now"}),
                {"$concatArrays": ["$$live", [_entry(False, "$$granted")]]},
            ]
        },
        clock,
    )
    others = {"$filter": {"input": "$$live", "as": "h", "cond": {"$not": [_is_ours("$$h")]}}}
    full = {"$and": [{"$not": ["$$has_mine"]}, {"$gte": [{"$size": "$$live"}, max_holders]}]}
    # Already held (a continued lock that was granted meanwhile): unchanged.
    branches: list[tuple[Expr, Expr]] = [("$$held", unchanged)]
    if rules.cooperative[tag] and not fair:
        # A cooperative tag is held, or pending ahead of us: refuse, dropping our pending
        # entry if we had one. Not one pending behind us: it queued after us (a fair
        # waiter), so it waits for us rather than taking our place.
        met = _tags_met("$$btags", rules.cooperative[tag])
        branches.append((met, {"h": others, "f": "$$fence0"}))
    # Continuing a lock that is gone (or whose stored tag is another): record nothing.
    gone = {"$and": [{"$not": ["$$has_mine"]}, {"$not": ["$$create"]}]}
    branches.append((gone, unchanged))
    if capped(rules, tag):
        # As many entries as allowed: record nothing.
        branches.append((full, unchanged))
    in_line = rules.cooperative[tag] | rules.assertive[tag]
    if fair and in_line:
        # A tag in the way, granted or ahead of us in line: take, or keep, a place.
        branches.append((_tags_met("$$btags", in_line), wait))
    elif rules.assertive[tag]:
        # An assertive tag is held, or pending ahead of us: register, or renew, as pending.
        # Not one pending behind us: only a fair waiter queues there, and it waits for us
        # (waiting for it in turn would hold both until one gave up).
        branches.append((_tags_met("$$btags", rules.assertive[tag]), wait))
    mine = {"$filter": {"input": "$$live", "as": "h", "cond": _is_ours("$$h")}}
    decision = _first(branches, grant)
    if in_line:
        decision = _let({"btags": _tags_in_the_way()}, decision)
    return _let(
        {"mine": mine},
        _let(
            {
                "has_mine": is_non_empty("$$mine"),
                "held": {"$in": [False, each("$$mine", "pending")]},
            },
            decision,
        ),
    )


def _tags_in_the_way() -> Expr:
    """The tags of the entries before ours in line: every granted one, and pending ones ahead."""
    ids = each("$$live", "id")
    place = {"$cond": ["$$has_mine", {"$indexOfArray": [ids, "$$id"]}, {"$size": "$$live"}]}
    ahead = {
        "$or": [
            {"$eq": ["$$h.pending", False]},
            {"$lt": [{"$indexOfArray": [ids, "$$h.id"]}, place]},
        ]
    }
    in_way = {
        "$filter": {
            "input": "$$live",
            "as": "h",
            "cond": {"$and": [{"$not": [_is_ours("$$h")]}, ahead]},
        }
    }
    return each(in_way, "tag")


def acquire_body(
    field: str,
    rules: TagRules,
    tag: str,
    *,
    clock: bool,
    max_holders: int,
    fresh: bool,
    fair: bool = False,
) -> Expr:
    """The decision for acquiring ``tag``, in the order the reader mirrors.

    ``fresh``: for a new lock id, leaving out what only a continued lock can reach; else
    for continuing a pending lock (``$$create`` false) or creating one. ``fair`` (only
    with ``fresh`` false, as a fresh fair waiter also takes a place in line) waits in
    arrival order (:func:`_continued_decision`). Each branch yields only the new holders
    (``h``) and fence (``f``); the lock state is assembled from them once, after the
    decision, which keeps the pipeline small.
    """
    if fresh and not fair and lone(rules, tag):
        return _lone_tag_body(field, clock=clock)
    if fresh and not fair:
        decide = _fresh_decision(rules, tag, clock=clock, max_holders=max_holders)
    else:
        decide = _continued_decision(rules, tag, clock=clock, max_holders=max_holders, fair=fair)
    outcome = _let({"r": decide}, _state("$$r.h", "$$r.f", clock=clock))
    return _on_our_field(field, {"live": _unexpired()}, outcome)


def release_body(field: str, *, clock: bool) -> Expr:
    """Keep every live entry but ours: one pass over the stored entries.

    Drops our entry whether live or expired: an expired lock nobody displaced is still
    ours to remove quietly (a displacing write would already have pruned it).
    """
    kept = _unexpired({"$ne": ["$$h.id", "$$id"]})
    return _on_our_field(field, {"kept": kept}, _state("$$kept", "$$fence0", clock=clock))


def extend_body(field: str, *, clock: bool) -> Expr:
    # Only a live, granted entry of the stored tag is renewed; an expired one was just
    # pruned with the rest.
    renewed = _state_of(_renew({}, granted_only=True), "$$fence0", clock=clock)
    return _on_our_field(field, {"live": _unexpired()}, renewed)


#: Which entries ``break_lock`` removes, per mode, as a condition on entry ``$$h``. Expired
#: entries go with every mode, as with every other write: none may stay beside a live one.
_EXPIRED: Expr = {"$lte": ["$$h.expires", "$$now"]}
BREAK_MODES: dict[str, Expr] = {
    "lock_id": {"$or": [{"$eq": ["$$h.id", "$$id"]}, _EXPIRED]},
    "all_expired": _EXPIRED,
    "everyone": True,
}


def break_body(field: str, mode: str, *, clock: bool) -> Expr:
    """Remove the entries ``mode`` picks; keep the fence; record what went under ``broken``.

    The fence is kept as it is (never lowered), and for a named lock ``_state`` keeps the
    emptied document's expiry past its fence's millisecond, so a clock fence granted after
    the TTL index deletes it still outranks every earlier grant. The ``broken`` record
    (``$$token`` tells this call's own from an earlier one) is how the reply, which shows
    the document only *after* the write, names the removed entries and the server's time;
    the next write that records something drops it. With nothing to remove the field is left
    exactly as it was (a missing one stays missing).
    """
    gone = BREAK_MODES[mode]
    removed = {"$filter": {"input": _STORED, "as": "h", "cond": gone}}
    kept = {"$filter": {"input": _STORED, "as": "h", "cond": {"$not": [gone]}}}
    record = {"broken": {"token": "$$token", "at": "$$now", "removed": "$$removed"}}
    cleared = {"$mergeObjects": [_state("$$kept", "$$fence0", clock=clock), record]}
    unchanged = f"${field}"
    decide = {"$cond": [is_non_empty("$$removed"), cleared, unchanged]}
    bound = _let({"removed": removed, "kept": kept}, decide)
    return {"$cond": [OURS, bound, unchanged]}


@functools.cache
def _constants(field: str) -> dict[str, Expr]:
    """What every body reads, bound once with the per-call bindings (one ``$let``, not three).

    ``$$now`` is the server's clock, ``$$st`` the field (missing made null) and ``$$fence0``
    the fence it holds (0 when none). ``$$fence0`` reads the field itself rather than
    ``$$st``, as variables of one ``$let`` cannot see each other. On a field that is not an
    object it means nothing, and ``OURS``, which also checks it, refuses such a field by
    its version anyway.
    """
    return {
        "now": SERVER_NOW,
        "st": field_or_null(field),
        "fence0": {"$ifNull": [f"${field}.fence", 0]},
    }


def ours(field: str) -> Expr:
    """``OURS`` standing alone (in a projection or a filter): true when ``field`` is ours."""
    constants = _constants(field)
    return _let({"st": constants["st"], "fence0": constants["fence0"]}, OURS)


def update_stages(field: str, body: Expr, bindings: dict[str, Any]) -> list[dict[str, Any]]:
    """The one ``$set`` stage of ``field``: ``body`` under the per-call ``bindings``.

    ``body`` may be pre-encoded (a ``RawBSONDocument``): only the bindings are encoded
    per call.
    """
    variables = {**_constants(field), **bindings}
    return [{"$set": {field: {"$let": {"vars": variables, "in": body}}}}]
