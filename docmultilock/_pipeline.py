"""What the server decides: the update pipeline body of every operation, and its conditions.

Every builder here returns an aggregation expression; nothing is sent. ``_core`` assembles
them into commands (in the frame and on the layout of ``_layout``), ``_plans`` reads the
replies in the same order of decisions. The acquisition's decision has a module of its own
(``_acquiring``); here are the building blocks it shares with the others (the state a write
leaves, a new entry, a renewal, the live entries), the bodies of release, extend and break,
and the conditions of ``guard()``
(:func:`held_by`) and of a named lock's release by deletion (:func:`deletable_by`).

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

from docmultilock._expr import SERVER_NOW, Expr, contains, each, is_non_empty, literal
from docmultilock._layout import (
    FENCES_PER_MS,
    LAYOUT_VERSION,
    OURS,
    STORED,
    is_entry,
    let,
    on_our_field,
)

__all__ = [
    "BREAK_MODES",
    "break_body",
    "deletable_by",
    "entry",
    "extend_body",
    "held_by",
    "is_ours",
    "latest",
    "next_fence",
    "release_body",
    "renew",
    "renew_each_body",
    "spent",
    "state",
    "state_of",
    "unexpired",
]

#: The smallest fence a clock-fenced grant may take at server time ``$$now``.
#: The lifetime of a renewal: the call's own (``$$ttl``), else the one the entry was taken
#: with, else (an entry written before lifetimes were stored) the tag's default.
#: Which entries ``break_lock`` removes, per mode, as a condition on entry ``$$h``. Expired
#: entries go with every mode, as with every other write: none may stay beside a live one.
_CLOCK_FENCE: Expr = {"$multiply": [{"$toLong": "$$now"}, FENCES_PER_MS]}

# The server checks every node of a pipeline when it parses it, whether its branch runs or
# not, and walks the holders array once per array operator that runs: each body below is
# built for one operation from the parts it can reach, and binds what it uses twice.


def next_fence(clock: bool) -> Expr:
    """The fence of a grant: the document's last plus one; with ``clock``, at least now.

    "Now" is the server's clock in fence units (``FENCES_PER_MS`` per millisecond). Named
    locks need it: their document is deleted by the last release or by the TTL index, and
    its counter with it. A clock fence still outranks every fence granted before the
    deletion, because a document is deleted only once the clock has passed its fence
    (``LockCore.release_by_delete``; ``state`` keeps ``expires`` past it for the TTL
    index). This assumes the server's clock does not step back, and fewer than
    ``FENCES_PER_MS`` grants per millisecond on one name.
    """
    counter = {"$add": ["$$fence0", 1]}
    return {"$max": [counter, _CLOCK_FENCE]} if clock else counter


def latest(holders: Expr) -> Expr:
    """The latest expiry among ``holders``: null when there is no list, or no entry has one."""
    return {"$max": each(holders, "expires")}


def state(holders: str, fence: Expr, *, clock: bool) -> Expr:
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
        "expires": {"$ifNull": [latest(holders), idle]},
        "holders": holders,
    }


def state_of(holders: Expr, fence: Expr, *, clock: bool) -> Expr:
    """:func:`state` of a computed list of holders, bound once as ``$$kept``."""
    return let({"kept": holders}, state("$$kept", fence, clock=clock))


def entry(pending: bool, fence: Expr) -> Expr:
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


def is_ours(entry: str) -> Expr:
    """True for our entry: our id *and* the tag the server stored for it (``$$tag``).

    The id alone proves ownership, but a client can edit the tag of a lock it sends back;
    an entry whose stored tag differs is not the lock the caller describes, so it is
    neither continued nor extended under the other tag's rules or lifetime.
    """
    return {"$and": [{"$eq": [f"{entry}.id", "$$id"]}, {"$eq": [f"{entry}.tag", "$$tag"]}]}


_LIFE: Expr = {"$ifNull": ["$$ttl", {"$ifNull": ["$$h.ttl", "$$dttl"]}]}


def renew(changes: Expr, *, granted_only: bool = False) -> Expr:
    """Map over ``$$live``: renew our own entry's expiry and merge ``changes`` into it.

    Keeps the order and keys of every entry. With ``granted_only``, a pending entry of ours
    is left as it is.
    """
    ours: Expr = is_ours("$$h")
    if granted_only:
        ours = {"$and": [ours, {"$eq": ["$$h.pending", False]}]}
    renewed = let(
        {"life": _LIFE},
        {
            "$mergeObjects": [
                "$$h",
                {**changes, "expires": {"$add": ["$$now", "$$life"]}, "ttl": "$$life"},
            ]
        },
    )
    return {"$map": {"input": "$$live", "as": "h", "in": {"$cond": [ours, renewed, "$$h"]}}}


def unexpired(also: Expr | None = None) -> Expr:
    """The stored entries still live by the server's clock (and meeting ``also``): one pass."""
    live: Expr = {"$gt": ["$$h.expires", "$$now"]}
    return {
        "$filter": {
            "input": STORED,
            "as": "h",
            "cond": live if also is None else {"$and": [live, also]},
        }
    }


def spent(entries: Expr) -> Expr:
    """True when the first of ``entries`` with our id is granted under another fence.

    ``$$given`` is the fence of the value the call names, or null for a pending value (a
    grant under its id does not spend it). A conversion keeps the id and grows the fence
    (``_converting``), so the value it was given is spent: release and extend leave the
    field as it is for it, and ``guard()`` (:func:`held_by`) matches nothing. The first
    entry of the id is the granted one when there is one (a pending upgrade comes after
    it), and the one the reply's reader reads (``_judge.Judge.spent``).
    """
    index = {"$indexOfArray": [each(entries, "id"), "$$id"]}
    first = {"$arrayElemAt": [entries, "$$k"]}
    other = {"$and": [{"$eq": ["$$e.pending", False]}, {"$ne": ["$$e.fence", "$$given"]}]}
    found = let({"k": index}, {"$and": [{"$gte": ["$$k", 0]}, let({"e": first}, other)]})
    return {"$and": [{"$ne": ["$$given", None]}, found]}


def release_body(field: str, *, clock: bool) -> Expr:
    """Keep every live entry but ours: one pass over the stored entries.

    Drops our entry whether live or expired: an expired lock nobody displaced is still
    ours to remove quietly (a displacing write would already have pruned it). A spent value
    (:func:`spent`, over the stored entries as the reply's reader sees them) removes
    nothing and leaves the field exactly as it was.
    """
    kept = unexpired({"$ne": ["$$h.id", "$$id"]})
    removed = state("$$kept", "$$fence0", clock=clock)
    return on_our_field(field, {"kept": kept}, {"$cond": [spent(STORED), f"${field}", removed]})


def _renewed(clock: bool) -> Expr:
    """The state after renewing our live, granted entry (over ``$$live``)."""
    return state_of(renew({}, granted_only=True), "$$fence0", clock=clock)


def extend_body(field: str, *, clock: bool) -> Expr:
    # Only a live, granted entry of the stored tag is renewed; an expired one was just
    # pruned with the rest. A spent value renews nothing and leaves the field as it was.
    renewed = {"$cond": [spent("$$live"), f"${field}", _renewed(clock)]}
    return on_our_field(field, {"live": unexpired()}, renewed)


def renew_each_body(field: str, *, clock: bool) -> Expr:
    """A batch's renewal (``_batch_rules``): in each document, the one lock the batch names for it.

    ``$$docs`` lists the batch's document ids and ``$$want``, at the same index, the entry
    each is to renew (``{id, tag, dttl}``): a document finds its own by its ``_id``, so an
    entry with the same id on another document is never renewed. The renewal is
    :func:`extend_body`'s, bound to that entry. Where that entry is not live and granted, or
    the field is not ours, the field is left exactly as it was, never refused (one foreign
    field would stop the rest of the batch): that document is then not counted modified,
    and the reply's count tells a batch that renewed everything from one that did not.
    """
    unchanged = f"${field}"
    index = {"$indexOfArray": ["$$docs", "$_id"]}
    wanted = {"$cond": [{"$gte": ["$$k", 0]}, {"$arrayElemAt": ["$$want", "$$k"]}, None]}
    mine = {"id": "$$w.id", "tag": "$$w.tag", "dttl": "$$w.dttl"}
    ours = {"$and": [is_ours("$$h"), {"$eq": ["$$h.pending", False]}]}
    held = {"$anyElementTrue": [{"$map": {"input": "$$live", "as": "h", "in": ours}}]}
    renewed = let({"live": unexpired()}, {"$cond": [held, _renewed(clock), unchanged]})
    bound = let({"k": index}, let({"w": wanted}, let(mine, renewed)))
    return {"$cond": [OURS, bound, unchanged]}


_EXPIRED: Expr = {"$lte": ["$$h.expires", "$$now"]}
BREAK_MODES: dict[str, Expr] = {
    "lock_id": {"$or": [{"$eq": ["$$h.id", "$$id"]}, _EXPIRED]},
    "all_expired": _EXPIRED,
    "everyone": True,
}


def break_body(field: str, mode: str, *, clock: bool) -> Expr:
    """Remove the entries ``mode`` picks; keep the fence; record what went under ``broken``.

    The fence is kept as it is (never lowered), and for a named lock ``state`` keeps the
    emptied document's expiry past its fence's millisecond, so a clock fence granted after
    the TTL index deletes it still outranks every earlier grant. The ``broken`` record
    (``$$token`` tells this call's own from an earlier one) is how the reply, which shows
    the document only *after* the write, names the removed entries and the server's time;
    the next write that records something drops it. With nothing to remove the field is left
    exactly as it was (a missing one stays missing).
    """
    gone = BREAK_MODES[mode]
    removed = {"$filter": {"input": STORED, "as": "h", "cond": gone}}
    kept = {"$filter": {"input": STORED, "as": "h", "cond": {"$not": [gone]}}}
    record = {"broken": {"token": "$$token", "at": "$$now", "removed": "$$removed"}}
    cleared = {"$mergeObjects": [state("$$kept", "$$fence0", clock=clock), record]}
    unchanged = f"${field}"
    decide = {"$cond": [is_non_empty("$$removed"), cleared, unchanged]}
    bound = let({"removed": removed, "kept": kept}, decide)
    return {"$cond": [OURS, bound, unchanged]}


def held_by(holders: Expr, lock_id: str, tag: str, fence: int) -> Expr:
    """True while entry ``lock_id`` of ``holders`` is granted as ``tag``, ``fence``, unexpired.

    The condition of ``guard()``: the stored entry must carry the lock's tag, so a reader's
    lock edited to say ``write`` guards nothing, and its fence, so a value spent by a
    conversion guards nothing either; expiry is the server's clock.
    """
    held = {
        "$and": [
            is_entry(lock_id),
            {"$eq": ["$$this.tag", literal(tag)]},
            {"$eq": ["$$this.fence", fence]},
            {"$eq": ["$$this.pending", False]},
            {"$gt": ["$$this.expires", SERVER_NOW]},
        ]
    }
    return {"$anyElementTrue": [{"$map": {"input": holders, "in": held}}]}


def deletable_by(field: str, owned: Expr, holders: Expr, lock_id: str, fence: int | None) -> Expr:
    """True when an exclusive named lock's document may be deleted as ``lock_id``'s release.

    While the field is ``owned`` (``OURS``: a foreign one is never deleted), ``lock_id`` is
    its one live entry, under ``fence`` (``None``: a pending value, any), and the server's
    clock has passed its fence's millisecond (a clock fence granted after the deletion then
    still outranks it, :func:`next_fence`). A spent value (:func:`spent`) deletes nothing.
    """
    mine: Expr = is_entry(lock_id)
    if fence is not None:
        mine = {"$and": [mine, {"$eq": ["$$this.fence", fence]}]}
    expired = {"$lte": ["$$this.expires", SERVER_NOW]}
    ours_or_expired = {"$or": [mine, {"$and": [{"$not": [is_entry(lock_id)]}, expired]}]}
    return {
        "$and": [
            owned,
            contains(each(holders, "id"), literal(lock_id)),
            {"$allElementsTrue": [{"$map": {"input": holders, "in": ours_or_expired}}]},
            {"$lt": [f"${field}.fence", {"$multiply": [{"$toLong": SERVER_NOW}, FENCES_PER_MS]}]},
        ]
    }
