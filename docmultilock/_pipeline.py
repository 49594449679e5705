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
  clock. Expired entries are dropped by every write, so no expired entry can sit next to a
  live one and let a conflicting holder in.
* **Only the lock field is touched.** The pipeline ``$set``s ``field`` and nothing else, and
  leaves it as it is when it holds something this layout did not write (``OURS``).
* **The stored entry decides.** Our entry is the one with our id *and* the tag the server
  stored for it; its rights and lifetime come from the server, not from the caller.
"""

from __future__ import annotations

from typing import Any

from docmultilock._expr import SERVER_NOW, Expr, each, field_or_null, is_non_empty, literal
from docmultilock._rules import TagRules

__all__ = [
    "BREAK_MODES",
    "FENCES_PER_MS",
    "FENCE_LIMIT",
    "LAYOUT_VERSION",
    "OURS",
    "acquire_body",
    "break_body",
    "capped",
    "extend_body",
    "release_body",
    "update_stages",
]

LAYOUT_VERSION = 1

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
OURS: Expr = {
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
                    OURS,
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


def capped(rules: TagRules, tag: str) -> bool:
    """True when ``tag`` may join other live entries, so the holder cap can refuse it.

    A tag cooperative with every tag (WriteLock's ``write``) is refused by any live entry
    before the cap could matter: its pipeline leaves the cap out.
    """
    return rules.cooperative[tag] != rules.tags


def acquire_body(
    field: str, rules: TagRules, tag: str, *, clock: bool, max_holders: int, fair: bool = False
) -> Expr:
    """The decision for acquiring (or continuing) ``tag``, in the order the reader mirrors.

    Each branch yields only the new holders (``h``) and fence (``f``); the lock state is
    assembled from them once, after the decision, which keeps the pipeline small. With
    ``fair``, the branches are :func:`_fair_branches` (a place in line) instead.
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
        {"case": full if capped(rules, tag) else False, "then": unchanged},
        # An assertive tag is live (held or pending): register, or renew, as pending.
        {"case": _meets("$$otags", rules.assertive[tag]), "then": wait},
    ]
    if fair:
        branches = _fair_branches(rules, tag, unchanged, wait, full)
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
                    "in": _in_line({"$switch": {"branches": branches, "default": grant}}, fair),
                }
            },
        }
    }
    outcome = {"$let": {"vars": {"r": decide}, "in": _state("$$r.h", "$$r.f", clock=clock)}}
    return _with_live_state(field, outcome)


def _fair_branches(
    rules: TagRules, tag: str, unchanged: Expr, wait: Expr, full: Expr
) -> list[dict[str, Any]]:
    """Fair hand-off: a refusal becomes a pending entry that holds a place in line.

    Entries keep their order in ``holders`` (new ones are appended, renewals map in
    place), so the array is the line. What stands in our way (``$$btags``) is every
    granted entry, and every pending one *ahead* of ours: a newcomer is behind them all, so
    it cannot pass anyone who queued before it; a waiter is granted once nothing before it
    conflicts. A waiting entry is an ordinary pending entry, renewed by each attempt and
    pruned at its expiry like any other, so a dead waiter holds up the line for one
    lifetime at most.
    """
    return [
        {"case": "$$held", "then": unchanged},
        {"case": {"$and": [{"$not": ["$$has_mine"]}, {"$not": ["$$create"]}]}, "then": unchanged},
        {"case": full if capped(rules, tag) else False, "then": unchanged},
        {"case": _meets("$$btags", rules.cooperative[tag] | rules.assertive[tag]), "then": wait},
    ]


def _in_line(decision: Expr, fair: bool) -> Expr:
    """Bind ``$$btags`` for :func:`_fair_branches`: tags granted, or pending ahead of ours."""
    if not fair:
        return decision
    ids = each("$$live", "id")
    place = {"$cond": ["$$has_mine", {"$indexOfArray": [ids, "$$id"]}, {"$size": "$$live"}]}
    in_way = {
        "$filter": {
            "input": "$$others",
            "as": "h",
            "cond": {
                "$or": [
                    {"$eq": ["$$h.pending", False]},
                    {"$lt": [{"$indexOfArray": [ids, "$$h.id"]}, place]},
                ]
            },
        }
    }
    return {"$let": {"vars": {"btags": each(in_way, "tag")}, "in": decision}}


def _meets(tags: Expr, wanted: frozenset[str]) -> Expr:
    if not wanted:
        return False
    return is_non_empty({"$setIntersection": [tags, literal(sorted(wanted))]})


def release_body(field: str, *, clock: bool) -> Expr:
    # Drops our entry whether live or expired: an expired lock nobody displaced is still
    # ours to remove quietly (a displacing write would already have pruned it).
    keep = {"$filter": {"input": "$$live", "as": "h", "cond": {"$ne": ["$$h.id", "$$id"]}}}
    return _with_live_state(field, _state(keep, "$$fence0", clock=clock))


def extend_body(field: str, *, clock: bool) -> Expr:
    # Only a live, granted entry of the stored tag is renewed; an expired one was just
    # pruned with the rest.
    renewed = _renew("$$tag", {}, granted_only=True)
    return _with_live_state(field, _state(renewed, "$$fence0", clock=clock))


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
    the next write of the field drops it. With nothing to remove the field is left exactly
    as it was (a missing one stays missing).
    """
    gone = BREAK_MODES[mode]
    every: Expr = {"$ifNull": ["$$st.holders", []]}
    removed = {"$filter": {"input": every, "as": "h", "cond": gone}}
    kept = {"$filter": {"input": every, "as": "h", "cond": {"$not": [gone]}}}
    record = {"broken": {"token": "$$token", "at": "$$now", "removed": "$$removed"}}
    cleared = {"$mergeObjects": [_state("$$kept", "$$fence0", clock=clock), record]}
    unchanged = f"${field}"
    return {
        "$let": {
            "vars": {"st": field_or_null(field)},
            "in": {
                "$cond": [
                    OURS,
                    {
                        "$let": {
                            "vars": {
                                "removed": removed,
                                "kept": kept,
                                "fence0": {"$ifNull": ["$$st.fence", 0]},
                            },
                            "in": {"$cond": [is_non_empty("$$removed"), cleared, unchanged]},
                        }
                    },
                    unchanged,
                ]
            },
        }
    }


def update_stages(field: str, body: Expr, bindings: dict[str, Any]) -> list[dict[str, Any]]:
    variables = {"now": SERVER_NOW, **bindings}
    return [{"$set": {field: {"$let": {"vars": variables, "in": body}}}}]
