"""Constructor options: validated once, every problem named, nothing written."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pymongo.collection import Collection

from docmultilock import InvalidArgument, InvalidConfiguration, MultiLock, WriteLock

Doc = dict[str, Any]


def problems(exc: pytest.ExceptionInfo[InvalidConfiguration]) -> dict[str, Any]:
    return exc.value.problems


def test_timedeltas_and_seconds_are_both_durations(collection: Collection[Doc]) -> None:
    locks = MultiLock(collection, lock_timeouts={"read": timedelta(seconds=2)}, lock_timeout=3)
    assert locks.options.rules.lifetime_ms == {"read": 2000, "write": 3000}


@pytest.mark.parametrize("bad", [0, -1.0, True, float("nan"), float("inf"), "10", None])
def test_a_lock_timeout_must_be_a_positive_duration(collection: Collection[Doc], bad: Any) -> None:
    with pytest.raises(InvalidConfiguration) as exc:
        WriteLock(collection, lock_timeout=bad)
    assert "lock_timeout" in problems(exc)


@pytest.mark.parametrize("bad", [0, -1, 100_001, 2.0, True, "10", None])
def test_max_holders_must_be_a_whole_number_from_1_to_100000(
    collection: Collection[Doc], bad: Any
) -> None:
    with pytest.raises(InvalidConfiguration) as exc:
        MultiLock(collection, max_holders=bad)
    assert "max_holders" in problems(exc)


def test_max_holders_defaults_to_1000(collection: Collection[Doc]) -> None:
    assert MultiLock(collection).options.max_holders == 1000


@pytest.mark.parametrize("bad", [0, -5, False, "soon"])
def test_an_operation_timeout_must_be_a_positive_duration(
    collection: Collection[Doc], bad: Any
) -> None:
    with pytest.raises(InvalidConfiguration) as exc:
        WriteLock(collection, timeout=bad)
    assert "timeout" in problems(exc)


def test_no_operation_timeout_is_allowed(collection: Collection[Doc]) -> None:
    assert WriteLock(collection, timeout=None).options.timeout is None


@pytest.mark.parametrize("bad", [0, -1, True, "", 1.5])
def test_write_concern_must_be_acknowledged(collection: Collection[Doc], bad: Any) -> None:
    with pytest.raises(InvalidConfiguration) as exc:
        WriteLock(collection, w=bad)
    assert "w" in problems(exc)


@pytest.mark.parametrize("bad", ["", "$lock", "a.b", "_id", 3, "nul\x00"])
def test_the_lock_field_must_be_a_plain_top_level_name(
    collection: Collection[Doc], bad: Any
) -> None:
    with pytest.raises(InvalidConfiguration) as exc:
        WriteLock(collection, field=bad)
    assert "field" in problems(exc)


def test_error_factory_must_be_callable(collection: Collection[Doc]) -> None:
    with pytest.raises(InvalidConfiguration) as exc:
        WriteLock(collection, error_factory="raise")  # type: ignore[arg-type]
    assert "error_factory" in problems(exc)


def test_every_problem_is_named_at_once(collection: Collection[Doc]) -> None:
    with pytest.raises(InvalidConfiguration) as exc:
        MultiLock(collection, lock_timeout=-1, timeout=0, w=0, field="a.b")
    assert set(problems(exc)) == {"lock_timeout", "timeout", "w", "field"}


def test_table_problems_are_named_beside_field_problems(collection: Collection[Doc]) -> None:
    with pytest.raises(InvalidConfiguration) as exc:
        MultiLock(
            collection,
            lock_timeout=0,
            lock_timeouts={"a": 0, "b": 1.0},
            lock_relationships={"a": {"assertive": ["b"]}, "b": {"assertive": ["a"]}},
        )
    assert set(problems(exc)) == {"lock_timeout", "lock_timeouts", "lock_relationships"}
    assert "cycle" in str(problems(exc)["lock_relationships"])
    assert "undeclared" not in str(exc.value)


def test_unknown_relationship_keys_are_refused(collection: Collection[Doc]) -> None:
    with pytest.raises(InvalidConfiguration) as exc:
        MultiLock(collection, lock_relationships={"read": {"cooprative": ["read"]}})
    assert "cooprative" in str(exc.value)


@pytest.mark.parametrize(
    ("table", "fragment"),
    [
        ({"read": {"cooperative": ["write"]}}, "undeclared tag 'write'"),
        ({"a": {"assertive": ["a"]}}, "assertive with itself"),
        ({"a": {"assertive": ["b"]}, "b": {"assertive": ["a"]}}, "cycle"),
        ({"a": {"cooperative": ["b"], "assertive": ["b"]}, "b": {}}, "both cooperative"),
    ],
)
def test_an_unsound_relationship_table_is_refused(
    collection: Collection[Doc], table: Any, fragment: str
) -> None:
    with pytest.raises(InvalidConfiguration, match=fragment):
        MultiLock(collection, lock_relationships=table)


def test_lock_timeouts_declare_tags(collection: Collection[Doc]) -> None:
    locks = MultiLock(collection, lock_timeouts={"audit": 1.0}, lock_relationships={})
    assert locks.options.rules.tags == {"audit"}


def test_an_empty_table_is_refused(collection: Collection[Doc]) -> None:
    with pytest.raises(InvalidConfiguration, match="at least one tag"):
        MultiLock(collection, lock_relationships={})


def test_a_bad_lock_timeouts_entry_is_named(collection: Collection[Doc]) -> None:
    with pytest.raises(InvalidConfiguration) as exc:
        MultiLock(collection, lock_timeouts={"read": 0})
    assert "lock_timeouts" in problems(exc)


def test_the_collection_must_be_a_pymongo_collection() -> None:
    with pytest.raises(InvalidArgument, match="pymongo Collection"):
        WriteLock("orders")  # type: ignore[arg-type]


def test_constructing_writes_nothing(collection: Collection[Doc]) -> None:
    WriteLock(collection)
    MultiLock(collection)
    assert collection.name not in collection.database.list_collection_names()


def test_relationships_may_be_any_sequence_of_tags(collection: Collection[Doc]) -> None:
    locks = MultiLock(
        collection,
        lock_relationships={
            "read": {"cooperative": ("write",)},
            "write": {"cooperative": ("write",)},
        },
    )
    assert locks.options.rules.cooperative["read"] == frozenset({"write"})


def test_a_single_string_is_not_a_list_of_tags(collection: Collection[Doc]) -> None:
    with pytest.raises(InvalidConfiguration, match="list"):
        MultiLock(collection, lock_relationships={"read": {"cooperative": "write"}, "write": {}})
