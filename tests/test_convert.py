"""Conversions (``convert``): a held lock takes another tag in one command, keeping its id.

Run over every manager where the rule applies (MultiLock and NamedLocks with the readers-
writer table for downgrades and upgrades; WriteLock, MultiLock and the exclusive NamedLocks
for a conversion to the same tag) and both flavours.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any, NamedTuple

import pytest
from pymongo.collection import Collection

from docmultilock import (
    AssertiveLock,
    CooperativeLock,
    InvalidArgument,
    Lock,
    LockConverted,
    LockNotFound,
    LockTimeout,
    MultiLock,
    NamedLocks,
    WriteLock,
)
from tests.flavours import MakeLock
from tests.helpers import USER_FIELDS, CommandLog, server_now, user_fields, wait_until
from tests.subjects import SUBJECTS, TAGGED, Subject

Doc = dict[str, Any]
Manager = WriteLock | MultiLock | NamedLocks
READ_WRITE = {
    "read": {"cooperative": ["write"]},
    "write": {"cooperative": ["write"], "assertive": ["read"]},
}


class Place(NamedTuple):
    """A manager and the key it locks: a document's filter, or a name."""

    locks: Any
    key: Any
    #: Where its state lives, for counting what a guard matches.
    home: Collection[Doc]


def tagged_place(subject: Subject, table: dict[str, Any]) -> Place:
    """The subject's manager with ``table`` and roomy lifetimes, and a key it locks."""
    timeouts = dict.fromkeys(table, 10.0)
    locks = subject.manager(lock_timeouts=timeouts, lock_relationships=table)
    return Place(locks, subject.key, subject.collection)


def default_place(subject: Subject) -> Place:
    """The subject's manager with its default table and roomy lifetimes, and a key it locks."""
    return Place(subject.manager(lock_timeout=10.0), subject.key, subject.collection)


@pytest.fixture
def rw(tagged_subject: Subject) -> Place:
    """A readers-writer manager, with roomy lifetimes, and a key it locks."""
    return tagged_place(tagged_subject, READ_WRITE)


@pytest.fixture
def any_place(subject: Subject) -> Place:
    """Every manager with its default table, and a key it locks."""
    return default_place(subject)


def take(place: Place, tag: str, **options: Any) -> Lock:
    """A new ``tag`` lock on the place's key (WriteLock takes no tag)."""
    if isinstance(place.locks, WriteLock) or len(place.locks.options.rules.tags) == 1:
        return place.locks.acquire(place.key, **options)  # type: ignore[no-any-return]
    return place.locks.acquire(place.key, tag=tag, **options)  # type: ignore[no-any-return]


def guards(place: Place, lock: Lock) -> bool:
    """True when ``lock``'s guard matches its document (the lock grants its rights)."""
    return place.home.count_documents(place.locks.guard(place.key, lock)) == 1


def assert_user_fields_kept(place: Place) -> None:
    if isinstance(place.key, dict):
        assert user_fields(place.home) == {"_id": 1, **USER_FIELDS}


def assert_converts_nothing(place: Place, lock: Lock, tag: str) -> None:
    """Converting ``lock`` to ``tag`` raises the loss and writes nothing."""
    before = list(place.home.find())
    with pytest.raises(LockNotFound):
        place.locks.convert(place.key, lock, tag=tag)
    assert list(place.home.find()) == before


# -- to the same tag: the one conversion of an exclusive table --------------------------


def test_a_conversion_to_the_same_tag_is_a_grant_that_grows_the_fence(any_place: Place) -> None:
    lock = take(any_place, "write")
    converted = any_place.locks.convert(any_place.key, lock, tag="write")
    assert (converted.id, converted.tag, converted.pending) == (lock.id, "write", False)
    assert converted.fence > lock.fence
    assert guards(any_place, converted)
    any_place.locks.release(any_place.key, converted)
    assert_user_fields_kept(any_place)


def test_a_conversion_is_one_command(
    make_lock: MakeLock, collection: Collection[Doc], counted: tuple[Collection[Doc], CommandLog]
) -> None:
    collection.insert_one({"_id": 1, **USER_FIELDS})
    seen, log = counted
    locks = make_lock(MultiLock, seen)
    read = locks.acquire({"_id": 1}, tag="read")
    log.names.clear()
    write = locks.convert({"_id": 1}, read, tag="write")
    locks.convert({"_id": 1}, write, tag="read")
    assert log.names == ["findAndModify", "findAndModify"]


@pytest.mark.parametrize("tag", ["admin", 3])
def test_an_undeclared_tag_is_refused_before_anything_is_sent(any_place: Place, tag: Any) -> None:
    lock = take(any_place, "write")
    with pytest.raises(InvalidArgument):
        any_place.locks.convert(any_place.key, lock, tag=tag)
    assert guards(any_place, lock)  # untouched, still held as it was


def test_a_lost_lock_is_not_converted_and_nothing_is_written(any_place: Place) -> None:
    lock = take(any_place, "write")
    any_place.locks.release(any_place.key, lock)
    assert_converts_nothing(any_place, lock, "write")


# -- downgrade ---------------------------------------------------------------------------


def test_a_downgrade_is_granted_and_lets_readers_in(rw: Place) -> None:
    write = rw.locks.acquire(rw.key, tag="write")
    with pytest.raises(CooperativeLock):
        rw.locks.acquire(rw.key, tag="read")
    read = rw.locks.convert(rw.key, write, tag="read")
    assert (read.id, read.tag, read.pending) == (write.id, "read", False)
    assert read.fence > write.fence
    assert guards(rw, read)
    assert not guards(rw, write)
    other = rw.locks.acquire(rw.key, tag="read")
    rw.locks.release(rw.key, other)
    rw.locks.release(rw.key, read)
    assert_user_fields_kept(rw)


#: A table where a pending entry can stand beside a held lock that downgrades: an
#: ``audit`` waits for ``edit`` to drain, and ``view`` is refused by a pending ``audit``.
AUDITED = {
    "edit": {"cooperative": ["audit"]},
    "audit": {"assertive": ["edit"]},
    "view": {"cooperative": ["audit"]},
}


def test_a_downgrade_is_granted_while_held_even_where_an_acquisition_is_refused(
    tagged_subject: Subject,
) -> None:
    place = tagged_place(tagged_subject, AUDITED)
    edit = place.locks.acquire(place.key, tag="edit")
    with pytest.raises(AssertiveLock):
        place.locks.acquire(place.key, tag="audit")
    with pytest.raises(CooperativeLock):  # a new view is refused by the pending audit
        place.locks.acquire(place.key, tag="view")
    view = place.locks.convert(place.key, edit, tag="view")
    assert (view.id, view.tag) == (edit.id, "view")
    assert view.fence > edit.fence


def upgrade_beside_a_reader(place: Place) -> tuple[Lock, Lock, AssertiveLock]:
    """Two readers; the first's upgrade to write, pending: (first, second, its error)."""
    first = place.locks.acquire(place.key, tag="read")
    second = place.locks.acquire(place.key, tag="read")
    with pytest.raises(AssertiveLock) as raised:
        place.locks.convert(place.key, first, tag="write")
    return first, second, raised.value


# -- upgrade -----------------------------------------------------------------------------


def test_an_upgrade_alone_is_granted_and_refuses_new_readers(rw: Place) -> None:
    read = rw.locks.acquire(rw.key, tag="read")
    write = rw.locks.convert(rw.key, read, tag="write")
    assert (write.id, write.tag, write.pending) == (read.id, "write", False)
    assert write.fence > read.fence
    assert guards(rw, write)
    assert not guards(rw, read)
    with pytest.raises(CooperativeLock):
        rw.locks.acquire(rw.key, tag="read")
    rw.locks.release(rw.key, write)
    assert_user_fields_kept(rw)


def test_an_upgrade_beside_a_reader_is_pending_and_keeps_the_read_rights(rw: Place) -> None:
    mine, other, refusal = upgrade_beside_a_reader(rw)
    pending = refusal.lock
    assert (pending.id, pending.tag, pending.pending) == (mine.id, "write", True)
    assert refusal.blocking_tags == ("read",)
    assert guards(rw, mine)  # the read lock still grants its rights
    assert rw.locks.extend(rw.key, mine).tag == "read"  # and is kept alive as ever
    with pytest.raises(CooperativeLock):  # new readers are refused
        rw.locks.acquire(rw.key, tag="read")
    rw.locks.release(rw.key, other)
    write = rw.locks.convert(rw.key, pending, tag="write")
    assert (write.id, write.tag, write.pending) == (mine.id, "write", False)
    assert guards(rw, write)
    assert not guards(rw, mine)
    assert_user_fields_kept(rw)


def test_a_pending_upgrade_is_continued_by_the_read_lock_too(rw: Place) -> None:
    mine, other, _ = upgrade_beside_a_reader(rw)
    rw.locks.release(rw.key, other)
    assert rw.locks.convert(rw.key, mine, tag="write").tag == "write"


def test_a_pending_upgrade_goes_with_its_release(rw: Place) -> None:
    mine, other, _ = upgrade_beside_a_reader(rw)
    rw.locks.release(rw.key, mine)
    rw.locks.release(rw.key, other)
    rw.locks.release(rw.key, rw.locks.acquire(rw.key, tag="read"))


def test_a_pending_upgrade_is_continued_only_to_its_own_tag(rw: Place) -> None:
    _, _, refusal = upgrade_beside_a_reader(rw)
    with pytest.raises(InvalidArgument):
        rw.locks.convert(rw.key, refusal.lock, tag="read")


def test_two_readers_upgrading_at_once_never_deadlock(rw: Place) -> None:
    first, second, refusal = upgrade_beside_a_reader(rw)
    with pytest.raises(CooperativeLock):  # refused at once, even when told to wait
        rw.locks.convert(rw.key, second, tag="write", wait=5.0)
    assert guards(rw, second)  # and keeps its read lock
    rw.locks.release(rw.key, second)
    assert rw.locks.convert(rw.key, refusal.lock, tag="write").id == first.id


def test_an_upgrade_waits_for_the_readers_to_drain(rw: Place) -> None:
    mine = rw.locks.acquire(rw.key, tag="read")
    other = rw.locks.acquire(rw.key, tag="read")
    releaser = threading.Timer(0.3, rw.locks.release, (rw.key, other))
    releaser.start()
    try:
        write = rw.locks.convert(rw.key, mine, tag="write", wait=30.0, backoff=(0.01, 0.05))
    finally:
        releaser.join()
    assert (write.id, write.tag, write.pending) == (mine.id, "write", False)


def test_an_upgrade_whose_wait_runs_out_is_withdrawn_and_the_read_lock_kept(rw: Place) -> None:
    mine = rw.locks.acquire(rw.key, tag="read")
    rw.locks.acquire(rw.key, tag="read")
    with pytest.raises(LockTimeout) as raised:
        rw.locks.convert(rw.key, mine, tag="write", wait=0.2, backoff=(0.01, 0.05))
    assert isinstance(raised.value.__cause__, AssertiveLock)
    assert guards(rw, mine)
    rw.locks.acquire(rw.key, tag="read")  # readers are let in again: nothing pending


def test_an_upgrade_of_a_lost_read_lock_is_refused_and_nothing_is_written(rw: Place) -> None:
    mine = rw.locks.acquire(rw.key, tag="read")
    rw.locks.acquire(rw.key, tag="read")
    rw.locks.release(rw.key, mine)
    assert_converts_nothing(rw, mine, "write")


def test_a_client_edited_tag_converts_nothing(rw: Place) -> None:
    read = rw.locks.acquire(rw.key, tag="read")
    rw.locks.acquire(rw.key, tag="read")
    # No granted write entry of that id: nothing to convert.
    assert_converts_nothing(rw, replace(read, tag="write"), "read")


def test_inspect_shows_a_pending_upgrade_as_a_second_entry_of_the_id(rw: Place) -> None:
    mine, _, _ = upgrade_beside_a_reader(rw)
    ours = [(h.tag, h.pending) for h in rw.locks.inspect(rw.key).holders if h.id == mine.id]
    assert ours == [("read", False), ("write", True)]


def test_breaking_a_lock_with_a_pending_upgrade_removes_both_entries(rw: Place) -> None:
    mine, other, refusal = upgrade_beside_a_reader(rw)
    rw.locks.break_lock(rw.key, lock_id=mine.id)
    assert [h.id for h in rw.locks.inspect(rw.key).holders] == [other.id]
    with pytest.raises(LockNotFound):
        rw.locks.convert(rw.key, refusal.lock, tag="write")


# -- a lock held by hold() converted through its HeldLock -----------------------------------

#: Renewed every 0.2 s: a keep-alive renewing the lock as it was would find it gone.
KEPT_ALIVE: dict[str, Any] = {"keepalive": True, "lock_timeout": 1.5, "extend_every": 0.2}


def test_a_held_lock_upgraded_in_its_block_stays_held_and_kept_alive(rw: Place) -> None:
    with rw.locks.hold(
        rw.key, tag="read", keepalive=True, lock_timeout=1.5, extend_every=0.2
    ) as held:
        upgraded = held.convert("write")
        assert (held.lock.tag, held.lock.id) == ("write", upgraded.id)
        assert rw.home.count_documents(held.guard()) == 1
        time.sleep(1.0)  # several renewals of the converted lock
        assert not held.lost.is_set()
        with pytest.raises(CooperativeLock):
            take(rw, "read")  # the write lock refuses readers


def test_a_held_upgrade_beside_a_reader_is_pending_and_the_read_lock_stays_held(
    rw: Place,
) -> None:
    other = take(rw, "read")
    with rw.locks.hold(
        rw.key, tag="read", keepalive=True, lock_timeout=1.5, extend_every=0.2
    ) as held:
        with pytest.raises(AssertiveLock):
            held.convert("write")
        assert held.lock.tag == "read"
        assert rw.home.count_documents(held.guard()) == 1
        rw.locks.release(rw.key, other)
        assert held.convert("write").tag == "write"  # continued, now that the reader left
        assert not held.lost.is_set()


def test_a_held_upgrade_waits_for_the_readers_to_drain_and_keeps_the_read_lock_alive(
    rw: Place,
) -> None:
    other = take(rw, "read")
    # The reader leaves after longer than the read lock's lifetime: the wait renews it.
    releaser = threading.Timer(1.5, rw.locks.release, (rw.key, other))
    with rw.locks.hold(
        rw.key, tag="read", keepalive=True, lock_timeout=1.0, extend_every=0.2
    ) as held:
        releaser.start()
        try:
            upgraded = held.convert("write", wait=30.0)
        finally:
            releaser.join()
        assert (upgraded.tag, upgraded.pending, held.lock.tag) == ("write", False, "write")
        assert rw.home.count_documents(held.guard()) == 1
        assert not held.lost.is_set()


def test_a_held_upgrade_whose_wait_runs_out_is_withdrawn_and_the_read_lock_kept(
    rw: Place,
) -> None:
    take(rw, "read")
    with rw.locks.hold(rw.key, tag="read", keepalive=True, lock_timeout=10.0) as held:
        with pytest.raises(LockTimeout) as raised:
            held.convert("write", wait=0.2)
        assert isinstance(raised.value.__cause__, AssertiveLock)
        assert held.lock.tag == "read"
        assert rw.home.count_documents(held.guard()) == 1
        take(rw, "read")  # readers are let in again: nothing pending
        assert not held.lost.is_set()


def test_a_held_lock_downgraded_in_its_block_lets_readers_in(rw: Place) -> None:
    with rw.locks.hold(rw.key, tag="write", keepalive=True) as held:
        held.convert("read")
        reader = take(rw, "read")
        assert held.lock.tag == "read"
        rw.locks.release(rw.key, reader)
    assert not held.lost.is_set()


# -- a spent value, an expired lock ----------------------------------------------------------


class Conversion(NamedTuple):
    """A manager, its key, and a conversion it allows: from tag ``old`` to ``new``."""

    place: Place
    old: str
    new: str


#: Each conversion of each manager: to the same tag (every table), down and up (``rw``).
CONVERSIONS = [
    *[(kind, "write", "write", None) for kind in sorted(SUBJECTS)],
    *[
        (kind, old, new, READ_WRITE)
        for kind in TAGGED
        for old, new in (("write", "read"), ("read", "write"))
    ],
]


@pytest.fixture(
    params=CONVERSIONS, ids=[f"{kind}-{old}-{new}" for kind, old, new, _ in CONVERSIONS]
)
def conversion(
    request: pytest.FixtureRequest, make_lock: MakeLock, collection: Collection[Doc]
) -> Conversion:
    kind, old, new, table = request.param
    subject = SUBJECTS[kind](make_lock, collection)
    if table is None:
        return Conversion(default_place(subject), old, new)
    return Conversion(tagged_place(subject, table), old, new)


def converted(conversion: Conversion) -> tuple[Lock, Lock]:
    """A lock of the old tag, and what converting it returned: (spent value, new value)."""
    place = conversion.place
    old = take(place, conversion.old)
    return old, place.locks.convert(place.key, old, tag=conversion.new)


def test_a_spent_value_guards_nothing(conversion: Conversion) -> None:
    spent, new = converted(conversion)
    assert not guards(conversion.place, spent)
    assert guards(conversion.place, new)


def use_again(conversion: Conversion, spent: Lock, use: str) -> None:
    """``use`` (extend, release or convert, to the same new tag) the ``spent`` value."""
    place = conversion.place
    if use == "convert":
        place.locks.convert(place.key, spent, tag=conversion.new)
    else:
        getattr(place.locks, use)(place.key, spent)


@pytest.mark.parametrize("use", ["extend", "release", "convert"])
def test_a_spent_value_is_refused_naming_the_conversion_and_nothing_is_written(
    conversion: Conversion, use: str
) -> None:
    place = conversion.place
    spent, new = converted(conversion)
    before = list(place.home.find())
    with pytest.raises(LockConverted) as raised:
        use_again(conversion, spent, use)
    assert list(place.home.find()) == before
    assert (raised.value.lock, raised.value.tag, raised.value.fence) == (spent, new.tag, new.fence)
    assert "converted" in str(raised.value)
    assert guards(place, new)  # the converted lock is held as it was
    place.locks.release(place.key, new)
    assert_user_fields_kept(place)


def test_converting_an_expired_lock_is_the_loss_and_grants_nothing(
    conversion: Conversion,
) -> None:
    place = conversion.place
    lock = take(place, conversion.old, lock_timeout=0.3)
    client = place.home.database.client
    wait_until(lambda: server_now(client) > lock.expires_at)
    with pytest.raises(LockNotFound) as raised:
        place.locks.convert(place.key, lock, tag=conversion.new)
    assert not isinstance(raised.value, LockConverted)
    now = server_now(client).replace(tzinfo=None)
    where = place.key if isinstance(place.key, dict) else {"_id": place.key}
    state = place.home.find_one(where) or {}
    live = [h for h in (state.get("lock") or {}).get("holders", []) if h["expires"] > now]
    assert [h for h in live if h["id"] == lock.id] == []
    assert_user_fields_kept(place)
