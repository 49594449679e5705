"""The pure decision core: what it sends, without a server."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

import pytest

from docmultilock._acquiring import decision
from docmultilock._command import EXCLUSIVE, NAMES
from docmultilock._converting import upgrade_body
from docmultilock._core import LockCore
from docmultilock._lock import Lock
from docmultilock._rules import READ_WRITE, build_rules
from docmultilock.errors import (
    AssertiveLock,
    CooperativeLock,
    LockConverted,
    LockNotFound,
    LockWasReacquired,
    ResourceNotFound,
)

CORE = LockCore("lock", build_rules(READ_WRITE, {}, 10_000))
LOCK = Lock(
    id="a" * 32,
    tag="write",
    document_id=1,
    acquired_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
    expires_at=datetime(2026, 1, 1, 0, 0, 10, tzinfo=timezone.utc),
    fence=3,
)
READ = replace(LOCK, id="d" * 32, tag="read")
#: A conversion call's id.
CALL = "c" * 32


def plans() -> list[Any]:
    return [
        CORE.acquire(
            {"_id": 1}, user_filter={"_id": 1}, tag="read", lock_id="b" * 32, lifetime_ms=5
        ),
        CORE.acquire(
            {"_id": 1},
            user_filter={"_id": 1},
            tag="write",
            lock_id="x",
            lifetime_ms=5,
            continuing=LOCK,
        ),
        CORE.release({"_id": 1}, user_filter={"_id": 1}, lock=LOCK),
        CORE.extend({"_id": 1}, user_filter={"_id": 1}, lock=LOCK, lifetime_ms=5),
        CORE.convert(
            {"_id": 1}, user_filter={"_id": 1}, lock=LOCK, tag="read", lifetime_ms=None, call=CALL
        ),
        CORE.convert(
            {"_id": 1}, user_filter={"_id": 1}, lock=READ, tag="write", lifetime_ms=5, call=CALL
        ),
    ]


IDS = ["acquire", "continue", "release", "extend", "downgrade", "upgrade"]


@pytest.mark.parametrize("plan", plans(), ids=IDS)
def test_each_update_sets_the_lock_field_and_nothing_else(plan: Any) -> None:
    (stage,) = plan.command.update
    assert list(stage) == ["$set"]
    assert list(stage["$set"]) == ["lock"]


@pytest.mark.parametrize("plan", plans(), ids=IDS)
def test_each_projection_returns_no_user_field(plan: Any) -> None:
    assert set(plan.command.projection) <= {"_id", "i", "mine", "tags", "r"}


@pytest.mark.parametrize("plan", plans(), ids=IDS)
def test_each_projection_leaves_the_stored_id_out_so_an_image_is_told_apart(plan: Any) -> None:
    assert plan.command.projection["_id"] == 0
    assert plan.command.projection["i"] == "$_id"


def test_continuing_uses_the_pending_locks_id() -> None:
    plan = plans()[1]
    bindings = plan.command.update[0]["$set"]["lock"]["$let"]["vars"]
    assert bindings["id"] == {"$literal": LOCK.id}
    assert bindings["create"] is False


def test_release_reads_the_state_before_its_write() -> None:
    assert plans()[2].command.return_after is False


def test_tag_names_are_literals_never_field_paths() -> None:
    core = LockCore("lock", build_rules({"$where": {}}, {}, 1000))
    plan = core.acquire(
        {"_id": 1}, user_filter={"_id": 1}, tag="$where", lock_id="c", lifetime_ms=5
    )
    assert '{"$literal": "$where"}' in _dump(plan.command.update).replace("'", '"')


def _dump(value: Any) -> str:
    return repr(value)


def test_a_missing_document_reads_as_resource_not_found() -> None:
    with pytest.raises(ResourceNotFound):
        plans()[0].read(None)


def test_a_pending_entry_reads_as_an_assertive_wait() -> None:
    entry = {
        "id": "b" * 32,
        "tag": "read",
        "pending": True,
        "fence": 0,
        "acquired": datetime(2026, 1, 1),
        "expires": datetime(2026, 1, 2),
    }
    reply = {"i": 1, "ours": True, "t": "object", "v": 1, "mine": [entry], "tags": ["read"]}
    lock = CORE.judge.to_lock(entry, 1)
    assert lock.acquired_at.tzinfo is timezone.utc
    assert lock.pending
    with pytest.raises(Exception, match="pending"):
        plans()[0].read(reply)


NAMED = LockCore(
    "lock",
    build_rules({"write": {"cooperative": ["write"]}}, {}, 10_000),
    home=NAMES,
    verdicts=EXCLUSIVE,
)


def test_a_named_acquire_is_an_upsert_but_continuing_never_creates() -> None:
    fresh = NAMED.acquire(
        {"_id": "a"}, user_filter={"_id": "a"}, tag="write", lock_id="b", lifetime_ms=5
    )
    pending = NAMED.acquire(
        {"_id": "a"},
        user_filter={"_id": "a"},
        tag="write",
        lock_id="b",
        lifetime_ms=5,
        continuing=LOCK,
    )
    assert fresh.command.upsert
    assert not pending.command.upsert


def test_only_an_exclusive_named_release_deletes() -> None:
    assert CORE.release_by_delete({"_id": 1}, lock=LOCK) is None
    deleting = NAMED.release_by_delete({"_id": "a"}, lock=LOCK)
    assert deleting is not None
    assert deleting.command.delete
    assert deleting.command.filter["_id"] == "a"
    assert "$expr" in deleting.command.filter


def test_a_missing_named_document_is_a_loss_not_resource_not_found() -> None:
    plan = NAMED.release({"_id": "a"}, user_filter={"_id": "a"}, lock=LOCK)
    with pytest.raises(LockWasReacquired):
        plan.read(None)


# -- conversions --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "down"),
    [
        ("write", "read", True),
        ("write", "write", True),
        ("read", "read", True),
        ("read", "write", False),
    ],
)
def test_a_downgrade_is_a_conversion_that_meets_nothing_new(old: str, new: str, down: bool) -> None:
    assert CORE.rules.is_downgrade(old, new) is down


def test_an_upgrade_is_decided_by_the_acquisitions_own_decision() -> None:
    rules = CORE.rules
    decided = decision(rules, "write", clock=False, max_holders=7, fresh=False)
    body = upgrade_body("lock", rules, "write", clock=False, max_holders=7)
    assert repr(decided) in repr(body)


def _reply(
    *entries: tuple[str, bool, int], tags: tuple[str, ...] = (), call: str = CALL
) -> dict[str, Any]:
    moment = datetime(2026, 1, 1)
    mine: list[dict[str, Any]] = [
        {"id": READ.id, "tag": t, "pending": p, "fence": f, "acquired": moment, "expires": moment}
        for t, p, f in entries
    ]
    for entry, (_, _, fence) in zip(mine, entries, strict=True):
        if fence > READ.fence:
            entry["call"] = call  # granted by a conversion: it records the call
    return {"i": 1, "mine": mine, "tags": list(tags)}


def _upgrade() -> Any:
    return CORE.convert(
        {"_id": 1}, user_filter={"_id": 1}, lock=READ, tag="write", lifetime_ms=5, call=CALL
    )


def test_an_upgrade_granted_reads_as_the_lock_with_its_new_tag() -> None:
    lock = _upgrade().read(_reply(("write", False, 9)))
    assert (lock.id, lock.tag, lock.fence) == (READ.id, "write", 9)


def test_an_upgrade_granted_by_another_call_reads_as_a_spent_value() -> None:
    with pytest.raises(LockConverted) as raised:
        _upgrade().read(_reply(("write", False, 9), call="e" * 32))
    assert (raised.value.lock, raised.value.tag, raised.value.fence) == (READ, "write", 9)


@pytest.mark.parametrize("kind", ["release", "extend"])
def test_a_held_lock_under_a_greater_fence_reads_as_a_spent_value(kind: str) -> None:
    plan = getattr(CORE, kind)(
        {"_id": 1},
        user_filter={"_id": 1},
        lock=READ,
        **({"lifetime_ms": None} if kind == "extend" else {}),
    )
    with pytest.raises(LockConverted):
        plan.read(_reply(("read", False, READ.fence + 1), call="e" * 32))


def test_a_pending_upgrade_reads_as_an_assertive_wait_with_the_read_lock_kept() -> None:
    with pytest.raises(AssertiveLock) as raised:
        _upgrade().read(_reply(("read", False, 3), ("write", True, 0), tags=("read",)))
    assert (raised.value.lock.tag, raised.value.lock.pending) == ("write", True)
    assert raised.value.blocking_tags == ("read",)


def test_a_refused_upgrade_reads_as_cooperative() -> None:
    with pytest.raises(CooperativeLock):
        _upgrade().read(_reply(("read", False, 3), tags=("read", "write")))


def test_an_upgrade_of_a_lock_gone_reads_as_a_loss() -> None:
    with pytest.raises(LockNotFound):
        _upgrade().read(_reply(("write", True, 0), tags=("read",)))
