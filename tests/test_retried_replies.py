"""A command retried by pymongo and answered as MongoDB answers it: with the stored image.

On a MongoDB replica set, a ``findAndModify`` whose reply was lost after it was applied (a
dropped connection, a fail-over) and that pymongo retries with the same session and
transaction number is answered from the oplog with the document's **full** pre- or
post-image, without the command's projection (``docmultilock/_reply.py``). The embedded
server runs the retry again instead, so the proxy (``tests/proxy.py``,
``answer_retries_as_mongodb``) plays MongoDB's part: it sends the command without its
projection, drops the reply, and answers the retry with that image itself.

Every operation must then report what the applied command did, decided from the lock field
of the image: the same report the projected reply would have given. Each test runs in both
flavours, on a plain document and on one whose top-level fields are named like the keys
the projections compute.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from pymongo.collection import Collection

from docmultilock import (
    AssertiveLock,
    CooperativeLock,
    Lock,
    MultiLock,
    NamedLocks,
    TooManyHolders,
    WriteLock,
)
from tests.flavours import MakeLock
from tests.helpers import USER_FIELDS, Doc, Proxied, server_now, stored_lock, wait_until
from tests.proxy import ReplyCutter

#: A user's document with top-level fields named like every key a projection computes
#: (and the document id's, ``i``): an image must never be read through them.
LOOKALIKE: Doc = {
    "i": "not the id",
    "r": {"e": None, "t": ["other"]},
    "mine": [],
    "tags": ["other"],
    "ours": False,
    "t": "string",
    "v": 9,
    "e": None,
    "g": 99,
    "broken": {"token": "x", "removed": []},
}

RW_TABLE: dict[str, Any] = {
    "lock_timeouts": {"read": 10.0, "write": 10.0},
    "lock_relationships": {
        "read": {"cooperative": ["write"]},
        "write": {"cooperative": ["write"], "assertive": ["read"]},
    },
}

Make = Callable[..., Any]


@pytest.fixture(params=["plain", "lookalike"])
def fields(request: pytest.FixtureRequest) -> Doc:
    """The user's fields of the locked document."""
    return dict(USER_FIELDS) if request.param == "plain" else {**USER_FIELDS, **LOOKALIKE}


@pytest.fixture
def record(collection: Collection[Doc], fields: Doc) -> Doc:
    """Insert the locked document ``{"_id": 1, **fields}``; return its filter."""
    collection.insert_one({"_id": 1, **fields})
    return {"_id": 1}


@pytest.fixture
def through(make_lock: MakeLock, proxied: Proxied, collection: Collection[Doc]) -> Make:
    """``through(cls, **options)``: a manager of the test's flavour behind the proxy.

    Its client retries writes (pymongo's default), so a dropped reply is retried and the
    proxy answers the retry.
    """
    retried = proxied(retryWrites=True)

    def make(cls: type[Any], **options: Any) -> Any:
        if cls is NamedLocks:
            return make_lock(cls, retried.database, collection.name, **options)
        return make_lock(cls, retried, **options)

    return make


@pytest.fixture
def direct(make_lock: MakeLock, collection: Collection[Doc]) -> Make:
    """``direct(cls, **options)``: a manager of the test's flavour on the server itself."""

    def make(cls: type[Any], **options: Any) -> Any:
        if cls is NamedLocks:
            return make_lock(cls, collection.database, collection.name, **options)
        return make_lock(cls, collection, **options)

    return make


@contextmanager
def answered_as_mongodb(cutter: ReplyCutter) -> Iterator[None]:
    """Drop the next ``findAndModify``'s reply; answer its retry with the stored image."""
    cutter.answer_retries_as_mongodb({"findAndModify"})
    yield
    # pytest.fail, not assert: a proxy that dropped nothing must not pass for a test.
    if [cut.name for cut in cutter.cuts] != ["findAndModify"] or cutter.answered != 1:
        pytest.fail(f"the proxy dropped {cutter.cuts} and answered {cutter.answered} retries")


def entry_of(collection: Collection[Doc], lock: Lock, _id: Any = 1) -> Doc | None:
    """The stored entry of ``lock`` on document ``_id``, as the server holds it."""
    found = collection.find_one({"_id": _id}, {"lock": 1}) or {}
    state = found.get("lock") or {}
    return next((h for h in state.get("holders", []) if h["id"] == lock.id), None)


def assert_reports(lock: Lock, collection: Collection[Doc], _id: Any = 1) -> None:
    """``lock`` is what the server stores: its id, tag, fence, state and dates."""
    stored = entry_of(collection, lock, _id)
    assert stored is not None
    assert (stored["tag"], stored["fence"], stored["pending"]) == (
        lock.tag,
        lock.fence,
        lock.pending,
    )
    assert stored["expires"] == lock.expires_at.replace(tzinfo=None)
    assert lock.document_id == _id


def tagged(cls: type[Any], tag: str) -> dict[str, str]:
    """The ``tag=`` argument for ``cls`` (a ``WriteLock`` takes none)."""
    return {} if cls is WriteLock else {"tag": tag}


def assert_untouched(collection: Collection[Doc], fields: Doc) -> None:
    found = collection.find_one({"_id": 1}, {"lock": 0})
    assert found == {"_id": 1, **fields}


# -- acquire ------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [WriteLock, MultiLock])
def test_a_retried_acquire_reports_the_grant_it_made(
    through: Make,
    cutter: ReplyCutter,
    record: Doc,
    collection: Collection[Doc],
    fields: Doc,
    cls: type[Any],
) -> None:
    locks = through(cls, **({} if cls is WriteLock else RW_TABLE))
    with answered_as_mongodb(cutter):
        lock = locks.acquire(record, **tagged(cls, "write"))
    assert not lock.pending
    assert_reports(lock, collection)
    assert_untouched(collection, fields)


def test_a_retried_shared_acquire_reports_the_grant_beside_other_readers(
    through: Make, direct: Make, cutter: ReplyCutter, record: Doc, collection: Collection[Doc]
) -> None:
    direct(MultiLock, **RW_TABLE).acquire(record, tag="read")
    locks = through(MultiLock, **RW_TABLE)
    with answered_as_mongodb(cutter):
        lock = locks.acquire(record, tag="read")
    assert_reports(lock, collection)
    assert len(stored_lock(collection)["holders"]) == 2


def test_a_retried_refused_acquire_names_the_tags_in_the_way(
    through: Make, direct: Make, cutter: ReplyCutter, record: Doc, collection: Collection[Doc]
) -> None:
    writer = direct(MultiLock, **RW_TABLE).acquire(record, tag="write")
    locks = through(MultiLock, **RW_TABLE)
    with answered_as_mongodb(cutter), pytest.raises(CooperativeLock) as refused:
        locks.acquire(record, tag="read")
    assert refused.value.blocking_tags == ("write",)
    assert [h["id"] for h in stored_lock(collection)["holders"]] == [writer.id]


def test_a_retried_acquire_refused_at_its_tags_limit_names_the_tag_and_limit(
    through: Make, direct: Make, cutter: ReplyCutter, record: Doc, collection: Collection[Doc]
) -> None:
    limited = {**RW_TABLE, "lock_limits": {"read": 1}}
    reader = direct(MultiLock, **limited).acquire(record, tag="read")
    locks = through(MultiLock, **limited)
    with answered_as_mongodb(cutter), pytest.raises(TooManyHolders) as refused:
        locks.acquire(record, tag="read")
    assert (refused.value.tag, refused.value.limit) == ("read", 1)
    assert [h["id"] for h in stored_lock(collection)["holders"]] == [reader.id]


def test_a_retried_assertive_acquire_reports_its_pending_entry(
    through: Make, direct: Make, cutter: ReplyCutter, record: Doc, collection: Collection[Doc]
) -> None:
    direct(MultiLock, **RW_TABLE).acquire(record, tag="read")
    locks = through(MultiLock, **RW_TABLE)
    with answered_as_mongodb(cutter), pytest.raises(AssertiveLock) as pending:
        locks.acquire(record, tag="write")
    assert pending.value.blocking_tags == ("read",)
    assert pending.value.lock is not None
    assert pending.value.lock.pending
    assert_reports(pending.value.lock, collection)


def test_a_retried_continuation_reports_the_grant_once_the_readers_drained(
    through: Make, direct: Make, cutter: ReplyCutter, record: Doc, collection: Collection[Doc]
) -> None:
    readers = direct(MultiLock, **RW_TABLE)
    reader = readers.acquire(record, tag="read")
    locks = through(MultiLock, **RW_TABLE)
    with pytest.raises(AssertiveLock) as pending:
        locks.acquire(record, tag="write")
    readers.release(record, reader)
    with answered_as_mongodb(cutter):
        lock = locks.acquire(record, lock=pending.value.lock)
    assert lock.id == pending.value.lock.id
    assert not lock.pending
    assert_reports(lock, collection)


def test_a_retried_fair_acquire_enters_its_hold(
    through: Make, cutter: ReplyCutter, record: Doc, collection: Collection[Doc]
) -> None:
    locks = through(WriteLock)
    with answered_as_mongodb(cutter), locks.hold(record, wait=5.0, fair=True) as held:
        assert_reports(held.lock, collection)
        assert not held.lock.pending


# -- extend and release -------------------------------------------------------------------


@pytest.mark.parametrize("cls", [WriteLock, MultiLock])
def test_a_retried_extend_reports_the_new_expiry(
    through: Make,
    cutter: ReplyCutter,
    record: Doc,
    collection: Collection[Doc],
    fields: Doc,
    cls: type[Any],
) -> None:
    locks = through(cls, **({} if cls is WriteLock else RW_TABLE))
    lock = locks.acquire(record, **tagged(cls, "read"))
    with answered_as_mongodb(cutter):
        extended = locks.extend(record, lock, lock_timeout=60.0)
    assert extended.id == lock.id
    assert extended.expires_at > lock.expires_at
    assert_reports(extended, collection)
    assert_untouched(collection, fields)


@pytest.mark.parametrize("cls", [WriteLock, MultiLock])
def test_a_retried_release_succeeds(
    through: Make,
    cutter: ReplyCutter,
    record: Doc,
    collection: Collection[Doc],
    fields: Doc,
    cls: type[Any],
) -> None:
    locks = through(cls, **({} if cls is WriteLock else RW_TABLE))
    lock = locks.acquire(record, **tagged(cls, "read"))
    with answered_as_mongodb(cutter):
        locks.release(record, lock)
    assert entry_of(collection, lock) is None
    assert_untouched(collection, fields)


def test_a_retried_release_of_a_held_hold_leaves_the_block_quietly(
    through: Make, cutter: ReplyCutter, record: Doc, collection: Collection[Doc]
) -> None:
    locks = through(WriteLock)
    with locks.hold(record) as held:
        lock = held.lock
        cutter.answer_retries_as_mongodb({"findAndModify"})
    assert entry_of(collection, lock) is None
    assert cutter.answered == 1


# -- named locks --------------------------------------------------------------------------


def test_a_retried_first_acquire_of_a_name_reports_the_grant(
    through: Make, cutter: ReplyCutter, collection: Collection[Doc]
) -> None:
    names = through(NamedLocks)
    with answered_as_mongodb(cutter):
        lock = names.acquire("nightly")
    assert_reports(lock, collection, "nightly")


def test_a_retried_release_of_a_name_by_delete_succeeds(
    through: Make, cutter: ReplyCutter, collection: Collection[Doc]
) -> None:
    # Any deleted document tells that the delete applied, so this held before images were
    # read: it pins that the delete path stays right.
    names = through(NamedLocks)
    lock = names.acquire("nightly")
    # The delete's condition waits for the server's clock to pass the grant's millisecond.
    wait_until(lambda: server_now(collection.database.client) > lock.acquired_at)
    with answered_as_mongodb(cutter):
        names.release("nightly", lock)
    assert cutter.cuts[0].command.get("remove") is True
    assert collection.find_one({"_id": "nightly"}) is None


def test_a_retried_release_of_a_shared_name_succeeds(
    through: Make, cutter: ReplyCutter, collection: Collection[Doc]
) -> None:
    names = through(NamedLocks, **RW_TABLE)
    lock = names.acquire("report", tag="read")
    with answered_as_mongodb(cutter):
        names.release("report", lock)
    assert entry_of(collection, lock, "report") is None


# -- operators ----------------------------------------------------------------------------


def test_a_retried_break_reports_the_entries_it_removed(
    through: Make,
    direct: Make,
    cutter: ReplyCutter,
    record: Doc,
    collection: Collection[Doc],
    fields: Doc,
) -> None:
    lock = direct(WriteLock).acquire(record)
    locks = through(WriteLock)
    with answered_as_mongodb(cutter):
        removed = locks.break_lock(record, everyone=True)
    assert [holder.id for holder in removed] == [lock.id]
    assert entry_of(collection, lock) is None
    assert_untouched(collection, fields)


# -- convert ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "old", "new"),
    [(WriteLock, "write", "write"), (MultiLock, "write", "read"), (MultiLock, "read", "write")],
)
def test_a_retried_conversion_reports_the_grant_it_made(
    through: Make,
    cutter: ReplyCutter,
    record: Doc,
    collection: Collection[Doc],
    fields: Doc,
    cls: type[Any],
    old: str,
    new: str,
) -> None:
    locks = through(cls, **({} if cls is WriteLock else RW_TABLE))
    held = locks.acquire(record, **tagged(cls, old))
    with answered_as_mongodb(cutter):
        converted = locks.convert(record, held, tag=new)
    assert (converted.id, converted.tag, converted.pending) == (held.id, new, False)
    assert converted.fence > held.fence
    assert_reports(converted, collection)
    assert_untouched(collection, fields)


def test_a_retried_upgrade_reports_its_pending_entry_beside_the_read_lock_kept(
    through: Make, direct: Make, cutter: ReplyCutter, record: Doc, collection: Collection[Doc]
) -> None:
    direct(MultiLock, **RW_TABLE).acquire(record, tag="read")
    locks = through(MultiLock, **RW_TABLE)
    read = locks.acquire(record, tag="read")
    with answered_as_mongodb(cutter), pytest.raises(AssertiveLock) as pending:
        locks.convert(record, read, tag="write")
    assert pending.value.lock is not None
    assert (pending.value.lock.tag, pending.value.lock.pending) == ("write", True)
    assert pending.value.blocking_tags == ("read",)
    ours = [h for h in stored_lock(collection)["holders"] if h["id"] == read.id]
    assert [(h["tag"], h["pending"]) for h in ours] == [("read", False), ("write", True)]


@pytest.mark.parametrize("use", ["extend", "release"])
@pytest.mark.parametrize(
    ("cls", "old", "new"), [(WriteLock, "write", "write"), (MultiLock, "read", "write")]
)
def test_a_retried_command_on_a_converted_lock_reads_its_fence_from_the_image(
    through: Make,
    cutter: ReplyCutter,
    record: Doc,
    collection: Collection[Doc],
    fields: Doc,
    cls: type[Any],
    old: str,
    new: str,
    use: str,
) -> None:
    # The image holds the entry the conversion granted, with its fence and call: the value
    # convert() returned is the lock's own, not a spent one.
    locks = through(cls, **({} if cls is WriteLock else RW_TABLE))
    converted = locks.convert(record, locks.acquire(record, **tagged(cls, old)), tag=new)
    with answered_as_mongodb(cutter):
        getattr(locks, use)(record, converted)
    assert (entry_of(collection, converted) is None) == (use == "release")
    assert_untouched(collection, fields)
