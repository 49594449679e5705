"""The tag-relationship table: what is refused at construction, and why."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from docmultilock._rules import READ_WRITE, WRITE_ONLY, build_rules, check_relationships


def test_the_readers_writer_table_is_sound() -> None:
    assert check_relationships(["read", "write"], READ_WRITE) == []


def test_a_relationship_naming_an_undeclared_tag_is_a_problem() -> None:
    problems = check_relationships(["read"], {"read": {"cooperative": ["wirte"]}})
    assert problems == ["tag 'read' names undeclared tag 'wirte'"]


def test_a_tag_assertive_with_itself_is_a_problem() -> None:
    problems = check_relationships(["a"], {"a": {"assertive": ["a"]}})
    assert problems == ["tag 'a' is assertive with itself (it would wait for itself)"]


def test_two_tags_assertive_with_each_other_deadlock() -> None:
    problems = check_relationships(
        ["a", "b"], {"a": {"assertive": ["b"]}, "b": {"assertive": ["a"]}}
    )
    assert problems == ["assertive relationships form a cycle (deadlock): a -> b -> a"]


def test_a_longer_assertive_cycle_is_named_once() -> None:
    table = {"a": {"assertive": ["b"]}, "b": {"assertive": ["c"]}, "c": {"assertive": ["a"]}}
    problems = check_relationships(["a", "b", "c"], table)
    assert problems == ["assertive relationships form a cycle (deadlock): a -> b -> c -> a"]


def test_an_assertive_chain_without_a_cycle_is_sound() -> None:
    table = {"a": {"assertive": ["b", "c"]}, "b": {"assertive": ["c"]}}
    assert check_relationships(["a", "b", "c"], table) == []


def test_a_tag_both_cooperative_and_assertive_with_another_is_a_problem() -> None:
    problems = check_relationships(["a", "b"], {"a": {"cooperative": ["b"], "assertive": ["b"]}})
    assert problems == ["tag 'a' is both cooperative and assertive with 'b'"]


def test_every_problem_is_reported_at_once() -> None:
    table = {"a": {"assertive": ["a", "zzz"]}, "b": {"cooperative": ["a"], "assertive": ["a"]}}
    assert len(check_relationships(["a", "b"], table)) == 3


def test_tags_without_relationships_are_declared_by_their_lifetime() -> None:
    rules = build_rules(READ_WRITE, {"audit": 5000}, 10000)
    assert rules.tags == {"read", "write", "audit"}
    assert rules.cooperative["audit"] == frozenset()
    assert rules.lifetime_ms == {"audit": 5000, "read": 10000, "write": 10000}


@given(
    st.dictionaries(
        st.sampled_from("abcde"), st.lists(st.sampled_from("abcde"), max_size=4), max_size=5
    )
)
def test_a_cycle_is_reported_exactly_when_the_waits_cannot_be_ordered(
    waits: dict[str, list[str]],
) -> None:
    table = {tag: {"assertive": [o for o in others if o != tag]} for tag, others in waits.items()}
    reported = any("cycle" in p for p in check_relationships("abcde", table))
    assert reported == (not _orderable(table))


def _orderable(table: dict[str, dict[str, list[str]]]) -> bool:
    """Kahn's algorithm: the waits can be ordered iff repeatedly removing sinks empties them."""
    edges = {tag: set(kinds["assertive"]) for tag, kinds in table.items()}
    while edges:
        sinks = {tag for tag, targets in edges.items() if not targets & set(edges)}
        if not sinks:
            return False
        edges = {tag: targets for tag, targets in edges.items() if tag not in sinks}
    return True


def test_a_tags_limit_is_kept_for_a_tag_that_shares() -> None:
    rules = build_rules(READ_WRITE, {}, 1000, {"read": 3})
    assert (rules.limit("read"), rules.limit("write")) == (3, None)


def test_a_limit_on_a_tag_that_excludes_itself_never_binds() -> None:
    # One granted entry already refuses the next: the pipeline needs no count for it.
    rules = build_rules(READ_WRITE, {}, 1000, {"write": 2})
    assert rules.limit("write") is None


RW = build_rules(READ_WRITE, {}, 1000, limits={"read": 3})
ONLY = build_rules(WRITE_ONLY, {}, 1000)


def test_a_tag_refuses_itself_when_cooperative_with_itself() -> None:
    assert RW.refuses_itself("write")
    assert not RW.refuses_itself("read")


def test_a_table_shares_when_some_tag_does_not_refuse_itself() -> None:
    assert RW.shared
    assert not ONLY.shared


def test_the_limited_tags_are_those_a_limit_can_refuse() -> None:
    assert RW.limited == {"read"}
    assert build_rules(READ_WRITE, {}, 1000, limits={"write": 1}).limited == frozenset()


def test_a_tag_refused_by_every_tag_is_not_capped() -> None:
    assert not ONLY.capped("write")
    assert RW.capped("write")  # it joins read entries, pending
    assert RW.capped("read")


def test_a_lone_tag_is_the_only_one_and_refuses_itself() -> None:
    assert ONLY.lone("write")
    assert not RW.lone("write")
    assert not build_rules({}, {"a": 1000}, 1000).lone("a")  # alone, but shares


def test_a_pending_entry_drains_its_assertive_tags_or_in_a_fair_line_all_in_the_way() -> None:
    assert RW.drains("write", fair=False) == {"read"}
    assert RW.drains("write", fair=True) == {"read", "write"}
    assert RW.drains("read", fair=True) == {"write"}


def test_a_downgrade_meets_nothing_the_held_tag_did_not() -> None:
    rules = build_rules(READ_WRITE, {}, 1000)
    assert rules.is_downgrade("write", "read")
    assert rules.is_downgrade("write", "write")
    assert not rules.is_downgrade("read", "write")


def test_a_conversion_to_another_limited_tag_is_never_a_downgrade() -> None:
    assert not RW.is_downgrade("write", "read")
    assert RW.is_downgrade("read", "read")
