"""The wake-up decision agrees with the server's, for random tables and holders.

A waiter is woken when no stored entry keeps it out (``_changes``, from
``TagRules.in_the_way``); the server decides its next attempt (``_acquiring``). Both read
one table, and for any table and any stored entries they must agree. The waiter is kept
out exactly when the server refuses its attempt, or registers it as pending behind a
*granted* entry of a tag it waits for; granted, or pending beside pending entries only
(it is then in line: progress), it is woken. Limits (``lock_limits``, ``max_holders``)
keep it out by number, on both sides. Each example stores the entries on the real server
and acquires.
"""

from __future__ import annotations

import itertools
import secrets
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple

from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from pymongo.collection import Collection

from docmultilock import AssertiveLock, CooperativeLock, MultiLock
from docmultilock._changes import Blockers, Interest, Interests
from docmultilock._rules import build_rules, check_relationships
from tests.helpers import Doc

TAGS = ("a", "b", "c")
_ids = itertools.count(1)


@st.composite
def tables(draw: st.DrawFn) -> dict[str, dict[str, list[str]]]:
    """A sound relationship table over two or three tags."""
    tags = draw(st.sampled_from([TAGS[:2], TAGS]))
    table: dict[str, dict[str, list[str]]] = {}
    for tag in tags:
        cooperative = draw(st.lists(st.sampled_from(tags), unique=True))
        assertive = draw(st.lists(st.sampled_from([t for t in tags if t != tag]), unique=True))
        table[tag] = {
            "cooperative": cooperative,
            "assertive": [t for t in assertive if t not in cooperative],
        }
    assume(not check_relationships(tags, table))
    return table


class Case(NamedTuple):
    """A table, the entries stored (tag, pending), the waiter's tag, and the limits."""

    table: dict[str, dict[str, list[str]]]
    holders: list[tuple[str, bool]]
    tag: str
    limits: dict[str, int] = {}  # noqa: RUF012 - a NamedTuple's default, never mutated
    max_holders: int = 1000


@st.composite
def cases(draw: st.DrawFn) -> Case:
    """A table, the entries stored (tag, pending), the waiter's tag, maybe limits."""
    table = draw(tables())
    tags = sorted(table)
    holders = draw(st.lists(st.tuples(st.sampled_from(tags), st.booleans()), max_size=4))
    # A limit on a tag cooperative with itself means nothing, and is refused.
    limitable = [t for t in tags if t not in table[t].get("cooperative", ())]
    limits = (
        draw(st.dictionaries(st.sampled_from(limitable), st.integers(1, 2), max_size=2))
        if limitable
        else {}
    )
    max_holders = draw(st.sampled_from([1000, 2, 3]))
    return Case(table, holders, draw(st.sampled_from(tags)), limits, max_holders)


#: The readers-writer table, and a writer's pending entry among them.
RW = {"a": {"cooperative": ["b"], "assertive": []}, "b": {"cooperative": ["b"], "assertive": ["a"]}}


def stored_field(holders: list[tuple[str, bool]]) -> Doc:
    """A lock field as docmultilock writes it, holding ``holders`` (tag, pending), all live."""
    now = datetime.now(timezone.utc).replace(microsecond=0)
    later = now + timedelta(hours=1)
    return {
        "v": 1,
        "fence": 10,
        "expires": later,
        "holders": [
            {
                "id": secrets.token_hex(16),
                "tag": tag,
                "pending": pending,
                "fence": 0 if pending else 10,
                "acquired": now,
                "expires": later,
                "ttl": 3_600_000,
            }
            for tag, pending in holders
        ],
    }


def woken(rules: Any, tag: str, field: Doc, document_id: int, max_holders: int) -> bool:
    """Whether a change leaving ``field`` on the document wakes a new waiter of ``tag``."""
    interests = Interests("lock")
    most = max_holders if rules.capped(tag) else None
    waiter = Interest(document_id, False, lambda: None, Blockers.of_tag(rules, tag, most))
    interests.add(waiter)
    interests.dispatch(
        {
            "operationType": "update",
            "documentKey": {"_id": document_id},
            "fullDocument": {"_id": document_id, "lock": field},
        }
    )
    return waiter.take()


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much],
)
@given(case=cases())
# The cases that tell the rules apart, always tried: a reader beside a granted writer and
# beside a pending one; a writer behind granted readers, and beside a pending writer only.
@example(case=Case(RW, [("b", False)], "a"))
@example(case=Case(RW, [("b", True)], "a"))
@example(case=Case(RW, [("a", False)], "b"))
@example(case=Case(RW, [("a", True)], "b"))
@example(case=Case({"a": {"assertive": ["b"]}, "b": {}}, [("b", True)], "a"))
# Limits: a reader at its tag's limit, beside pending readers only; and a full document.
@example(case=Case(RW, [("a", False), ("a", True)], "a", {"a": 1}))
@example(case=Case(RW, [("a", True), ("a", True)], "a", {"a": 1}))
@example(case=Case(RW, [("a", False), ("a", False)], "a", {}, 2))
def test_a_waiter_is_woken_exactly_when_the_server_would_let_it_progress(
    collection: Collection[Doc], case: Case
) -> None:
    table, holders, tag, limits, max_holders = case
    rules = build_rules(table, {}, 3_600_000, limits)
    document_id = next(_ids)
    field = stored_field(holders)
    collection.insert_one({"_id": document_id, "lock": field})

    locks = MultiLock(
        collection,
        lock_relationships=table,
        lock_timeout=3600.0,
        lock_limits=limits,
        max_holders=max_holders,
    )
    try:
        locks.acquire({"_id": document_id}, tag=tag)
        outcome = "granted"
    except AssertiveLock:
        outcome = "pending"
    except CooperativeLock:
        outcome = "refused"

    behind_a_holder = any(
        not pending and other in rules.assertive[tag] for other, pending in holders
    )
    kept_out = outcome == "refused" or (outcome == "pending" and behind_a_holder)
    assert woken(rules, tag, field, document_id, max_holders) is not kept_out, (case, outcome)
