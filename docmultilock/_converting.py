"""What the server decides for a conversion (``convert``): a held lock takes another tag.

A conversion keeps the entry's id and is a grant: the fence grows. Two kinds, told apart
from the tag table alone (``TagRules.is_downgrade``):

* **A downgrade** (the default table's ``write`` to ``read``, or a tag to itself) conflicts
  with nothing the old tag did not: it is granted at once while the lock is held
  (:func:`regrant_body`), and readers can join at once.
* **An upgrade** (``read`` to ``write``) is decided by the acquisition's own decision
  (``_acquiring.decision``) over the live entries *without the converting one*
  (:func:`upgrade_body`), so it is refused, made pending or granted exactly as an
  acquisition of the new tag would be, and obeys whatever that decision comes to decide.

**A pending upgrade is a second entry of the same id.** While the upgrade waits, the
document holds the converting entry as it was (granted, of the old tag) and, after it, a
pending entry of the new tag with the same id. Every existing rule then holds unchanged:
an entry is ours by its id *and* stored tag (``_pipeline.is_ours``), so ``guard()``,
``extend`` and the keep-alive of the read lock see the granted read entry, while the
pending write entry refuses new readers and waits for the others to drain like any
pending writer (``_changes`` and ``inspect`` see it as one); ``release`` and
``break_lock(lock_id=...)`` remove every entry of the id, so both. The granted entry is
kept *before* the pending one, as replies that read one entry of an id read the first.
When the upgrade is granted, the old entry goes and the pending one becomes granted in
place; refused, the pending one goes and the old entry stays. The layout is unchanged:
``holders`` merely lists one id twice.

**The value given is spent.** A conversion is decided only for the granted entry whose
fence is the given value's (``$$given``; null for a pending upgrade continued by its own
value), and the entry it grants records the call (``call``: ``$$call``, drawn per call).
A value used again after its conversion (``_pipeline.spent``) meets an entry of its id under
a greater fence that another call made, and the reader (``_plans.ConvertPlan``) tells it
from a retry of the call that converted it, whose reply shows its own ``call``. **A lock that
expired** converts nothing: its expired entries are dropped (as every write drops them), so
the reply shows no entry of it and reads as its loss.
"""

from __future__ import annotations

from docmultilock._acquiring import decision
from docmultilock._expr import Expr, each
from docmultilock._layout import STORED, let, on_our_field
from docmultilock._pipeline import (
    is_ours,
    next_fence,
    renew,
    state,
    state_of,
    unexpired,
)
from docmultilock._rules import TagRules

__all__ = ["regrant_body", "upgrade_body", "withdrawal_body"]


def _unchanged(field: str, *, clock: bool) -> Expr:
    """What a conversion that converts nothing leaves: the field as it is, pruned if ours lapsed.

    A missing field stays missing, and so does a lock released or spent. An entry of ours
    that expired is dropped with every other expired entry (``$$live`` holds every live
    one then): the reply shows no entry of ours, its loss, where an expired entry left in
    place would read as a refusal.
    """
    expired = {"$and": [{"$eq": ["$$h.id", "$$id"]}, {"$lte": ["$$h.expires", "$$now"]}]}
    lapsed = {"$in": [True, {"$map": {"input": STORED, "as": "h", "in": expired}}]}
    return {"$cond": [lapsed, state("$$live", "$$fence0", clock=clock), f"${field}"]}


def regrant_body(field: str, *, clock: bool) -> Expr:
    """A downgrade: our granted entry of tag ``$$tag`` takes tag ``$$to`` and the next fence.

    Renewed in place by its lifetime (or the call's, ``$$ttl``), stamped acquired now; the
    field is left exactly as it is when the entry is not there, granted and live.
    """
    held = {
        "$and": [
            is_ours("$$h"),
            {"$eq": ["$$h.pending", False]},
            {"$eq": ["$$h.fence", "$$given"]},
        ]
    }
    has = {"$in": [True, {"$map": {"input": "$$live", "as": "h", "in": held}}]}
    changes = {"tag": "$$to", "fence": "$$granted", "acquired": "$$now", "call": "$$call"}
    granted = let(
        {"granted": next_fence(clock)},
        state_of(renew(changes, granted_only=True), "$$granted", clock=clock),
    )
    decided = {"$cond": [has, granted, _unchanged(field, clock=clock)]}
    return on_our_field(field, {"live": unexpired()}, decided)


def upgrade_body(field: str, rules: TagRules, tag: str, *, clock: bool, max_holders: int) -> Expr:
    """An upgrade to ``tag`` (``$$tag``): the acquisition's decision, not counting ourselves.

    The converting entry (``$$old``) is our granted one of another tag, of ``$$from`` when
    the call names it (``None``: the call continues a pending upgrade by its id). The
    decision is the continued one (``$$create`` true): it registers, renews, or grants our
    pending entry of ``tag`` over ``$$live`` without ``$$old``. Granted, ``$$old`` goes;
    otherwise it is put back first, so it still comes before our pending entry.
    """
    converting = {
        "$and": [
            {"$eq": ["$$h.id", "$$id"]},
            {"$eq": ["$$h.pending", False]},
            {"$ne": ["$$h.tag", "$$tag"]},
            {"$or": [{"$eq": ["$$from", None]}, {"$eq": ["$$h.tag", "$$from"]}]},
            {"$or": [{"$eq": ["$$given", None]}, {"$eq": ["$$h.fence", "$$given"]}]},
        ]
    }
    decide = decision(rules, tag, clock=clock, max_holders=max_holders, fresh=False)
    ours = {"$filter": {"input": "$$r.h", "as": "h", "cond": {"$eq": ["$$h.id", "$$id"]}}}
    won = {"$in": [False, each(ours, "pending")]}
    # The grant records the call that made it, as a downgrade's does.
    call = {"$mergeObjects": ["$$h", {"call": "$$call"}]}
    mark = {"$cond": [{"$eq": ["$$h.id", "$$id"]}, call, "$$h"]}
    granted = {"$map": {"input": "$$r.h", "as": "h", "in": mark}}
    holders = {"$cond": [won, granted, {"$concatArrays": ["$$old", "$$r.h"]}]}
    decided = let({"r": decide}, state_of(holders, "$$r.f", clock=clock))
    # Without a converting entry, ``$$live`` is every live entry (what ``_unchanged`` keeps).
    bound = {"old": unexpired(converting), "live": unexpired({"$not": [converting]})}
    converts = {"$gt": [{"$size": "$$old"}, 0]}
    return on_our_field(
        field, bound, {"$cond": [converts, decided, _unchanged(field, clock=clock)]}
    )


def withdrawal_body(field: str, *, clock: bool) -> Expr:
    """Drop our pending entry of ``$$tag`` (a pending upgrade given up), keeping the rest."""
    pending = {"$and": [is_ours("$$h"), {"$eq": ["$$h.pending", True]}]}
    kept = unexpired({"$not": [pending]})
    return on_our_field(field, {"kept": kept}, state("$$kept", "$$fence0", clock=clock))
