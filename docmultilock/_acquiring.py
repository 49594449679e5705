"""The acquisition's decision, as the server evaluates it: grant, wait, refuse, or cap.

:func:`acquire_body` is the update pipeline body of a fresh acquisition, of a continued
pending one, and of a fair one (a place in line). It reads the tag table (``_rules``): a
tag's *cooperative* tags refuse it while held or pending; its *assertive* tags make it
register as pending and wait for them to drain; its limit (``lock_limits``) refuses it
while that many entries of it are granted. Every decision compares expiry with the
server's ``$$now``; ``_plans.AcquirePlan`` reads the reply in the same order.
"""

from __future__ import annotations

from docmultilock._expr import Expr, contains, each, is_non_empty, literal
from docmultilock._layout import LAYOUT_VERSION, STORED_OR_NULL, any_of, first, let, on_our_field
from docmultilock._pipeline import entry, is_ours, latest, next_fence, renew, state, unexpired
from docmultilock._rules import TagRules

__all__ = ["acquire_body", "decision", "granted_of"]


def _tags_met(tags: Expr, wanted: frozenset[str]) -> Expr:
    """True when the list ``tags`` holds one of ``wanted`` (never true for none wanted)."""
    if len(wanted) == 1:
        (only,) = wanted
        return contains(tags, literal(only))
    return is_non_empty({"$setIntersection": [tags, literal(sorted(wanted))]})


def granted_of(entries: Expr, tag: str) -> Expr:
    """How many of ``entries`` are granted entries of ``tag`` (pending ones never count)."""
    of_tag = {"$and": [{"$eq": ["$$h.tag", literal(tag)]}, {"$eq": ["$$h.pending", False]}]}
    return {"$size": {"$filter": {"input": entries, "as": "h", "cond": of_tag}}}


def _at_limit(rules: TagRules, tag: str) -> Expr | None:
    """True when ``tag``'s limit is reached by the live granted entries; ``None``: no limit.

    One clause of every acquisition's decision (fresh, continued, fair), read from
    ``$$live``: whatever the decision leaves out of ``$$live`` (a converting entry, say)
    is not counted. A limit is a refusal, like the holder cap: the limit is only ever
    reached by granted entries, which a pending entry cannot make drain, so a pending
    entry waiting on it would only hold back the tags it refuses.
    """
    limit = rules.limit(tag)
    if limit is None:
        return None
    return {"$gte": [granted_of("$$live", tag), limit]}


def _grant(holders: Expr, clock: bool) -> Expr:
    """A decision granting with the next fence; ``holders(fence)`` builds the new list."""
    return let({"granted": next_fence(clock)}, {"h": holders, "f": "$$granted"})


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
    if rules.capped(tag):
        # A new entry beyond ``max_holders`` is refused, recording nothing: the field (and
        # the user's document with it) must not grow until it hits MongoDB's 16 MiB limit.
        unchanged.append({"$gte": [{"$size": "$$live"}, max_holders]})
    at_limit = _at_limit(rules, tag)
    if at_limit is not None:
        # As many granted entries of the tag as its limit allows: refuse, recording nothing
        # (before the assertive wait: a pending entry would not make a slot free).
        unchanged.append(at_limit)
    branches: list[tuple[Expr, Expr]] = []
    if unchanged:
        branches.append((any_of(unchanged), {"h": "$$live", "f": "$$fence0"}))
    if rules.assertive[tag]:
        # An assertive tag is live (held or pending): register as pending.
        wait = {"$concatArrays": ["$$live", [entry(True, 0)]]}
        branches.append((_tags_met(tags, rules.assertive[tag]), {"h": wait, "f": "$$fence0"}))
    # Nothing in the way: grant, with the next fence.
    grant = _grant({"$concatArrays": ["$$live", [entry(False, "$$granted")]]}, clock)
    decision = first(branches, grant)
    return let({"tags": each("$$live", "tag")}, decision) if both else decision


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
    live = {"$gt": [latest(STORED_OR_NULL), "$$now"]}
    granted = {
        "v": literal(LAYOUT_VERSION),
        "fence": "$$granted",
        "expires": {"$add": ["$$now", "$$ttl"]},
        "holders": [entry(False, "$$granted")],
    }
    grant = let({"granted": next_fence(clock)}, granted)
    return on_our_field(field, {}, {"$cond": [live, "$$st", grant]})


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
                renew({}),
                {"$concatArrays": ["$$live", [entry(True, 0)]]},
            ]
        },
        "f": "$$fence0",
    }
    grant = _grant(
        {
            "$cond": [
                "$$has_mine",
                renew({"pending": False, "fence": "$$granted", "acquired": "$$now"}),
                {"$concatArrays": ["$$live", [entry(False, "$$granted")]]},
            ]
        },
        clock,
    )
    others = {"$filter": {"input": "$$live", "as": "h", "cond": {"$not": [is_ours("$$h")]}}}
    full = {"$and": [{"$not": ["$$has_mine"]}, {"$gte": [{"$size": "$$live"}, max_holders]}]}
    # Already held (a continued lock that was granted meanwhile): unchanged.
    branches: list[tuple[Expr, Expr]] = [("$$held", unchanged)]
    at_limit = _at_limit(rules, tag)
    if at_limit is not None:
        # The tag's limit is reached: refuse, dropping our pending entry if we had one (in
        # a fair line too: a place in line would hold back the tags that wait behind it
        # for a slot only a release frees). The reader checks this first, as here.
        branches.append((at_limit, {"h": others, "f": "$$fence0"}))
    if rules.cooperative[tag] and not fair:
        # A cooperative tag is held, or pending ahead of us: refuse, dropping our pending
        # entry if we had one. Not one pending behind us: it queued after us (a fair
        # waiter), so it waits for us rather than taking our place.
        met = _tags_met("$$btags", rules.cooperative[tag])
        branches.append((met, {"h": others, "f": "$$fence0"}))
    # Continuing a lock that is gone (or whose stored tag is another): record nothing.
    gone = {"$and": [{"$not": ["$$has_mine"]}, {"$not": ["$$create"]}]}
    branches.append((gone, unchanged))
    if rules.capped(tag):
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
    mine = {"$filter": {"input": "$$live", "as": "h", "cond": is_ours("$$h")}}
    decision = first(branches, grant)
    if in_line:
        decision = let({"btags": _tags_in_the_way()}, decision)
    return let(
        {"mine": mine},
        let(
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
            "cond": {"$and": [{"$not": [is_ours("$$h")]}, ahead]},
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
    if fresh and not fair and rules.lone(tag):
        return _lone_tag_body(field, clock=clock)
    decide = decision(rules, tag, clock=clock, max_holders=max_holders, fresh=fresh, fair=fair)
    outcome = let({"r": decide}, state("$$r.h", "$$r.f", clock=clock))
    return on_our_field(field, {"live": unexpired()}, outcome)


def decision(
    rules: TagRules, tag: str, *, clock: bool, max_holders: int, fresh: bool, fair: bool = False
) -> Expr:
    """The decision of :func:`acquire_body` alone: ``{h, f}`` from the entries in ``$$live``.

    Whatever ``$$live`` holds is what the decision counts. A conversion
    (``_converting``) binds it without the converting entry, so an upgrade is decided
    exactly as an acquisition of its new tag would be, not counting itself.
    """
    if fresh and not fair:
        return _fresh_decision(rules, tag, clock=clock, max_holders=max_holders)
    return _continued_decision(rules, tag, clock=clock, max_holders=max_holders, fair=fair)
