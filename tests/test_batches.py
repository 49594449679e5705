"""Keep-alive by the batch: one command renews many held locks, and never costs one of them.

Pure tests of the batching decisions (``_schedule.Schedule`` with ``batching``, and
``_batch_rules.outcomes``) need no server; the others hold several locks of one manager with
``keepalive=True``, over every manager and both flavours. Lone renewals (``findAndModify``)
are refused by a fail point where a test must show that the batch alone kept its locks.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.collection import Collection

from docmultilock import (
    HeldLock,
    IncompatibleLockField,
    LockEvent,
    LockListener,
    LockNotFound,
    WriteLock,
)
from docmultilock._async.keepalive import AsyncExtender
from docmultilock._batch_rules import (
    AGAIN,
    ALONE,
    Batch,
    Batching,
    Pace,
    Renewal,
    outcomes,
    resends,
)
from docmultilock._expr import SERVER_NOW
from docmultilock._schedule import Lose, Schedule, Start, Stats, Wait
from docmultilock._sync.keepalive import Extender
from docmultilock.pytest_plugin import CLIENT_OPTIONS
from tests.flavours import MakeLock, Twins
from tests.helpers import server_now
from tests.proxy import ReplyCutter
from tests.subjects import Build, Subject

Doc = dict[str, Any]

#: Locks of 3 s: renewed every second, due 2 s before their estimate, alone once 1 s is left.
LIFETIME = 3.0
APP = "docmultilock-test-batch"


# -- the decisions, without a server ------------------------------------------------------


def grouped(*jobs: tuple[str, float, str], size: int = 1000) -> Schedule[str]:
    """Jobs of group ``g`` (estimate, place), lead 6: due 6 s before their estimate."""
    schedule: Schedule[str] = Schedule(
        8, batching=lambda job: Batching("g", places[job]), batch_size=size
    )
    places = {job: place for job, _, place in jobs}
    for job, estimate, _ in jobs:
        schedule.add(job, estimate, 6.0)
    return schedule


def test_renewals_due_within_the_window_go_in_one_batch() -> None:
    schedule = grouped(("a", 10.0, "1"), ("b", 12.0, "2"), ("c", 14.0, "3"))
    decision = schedule.next(4.0)  # a due; b due at 6 (within 3 s); c due at 8 (not)
    assert isinstance(decision, Batch)
    assert decision.jobs == ("a", "b")


def test_a_first_try_gives_up_halfway_to_its_most_urgent_lock_going_alone() -> None:
    decision = grouped(("a", 10.0, "1"), ("b", 12.0, "2")).next(4.0)
    assert isinstance(decision, Batch)
    assert decision.limit == pytest.approx(1.5)  # a is renewed alone from 7


def test_one_lock_per_document_in_a_batch() -> None:
    schedule = grouped(("a", 10.0, "1"), ("b", 10.5, "1"), ("c", 11.0, "2"))
    decision = schedule.next(4.0)
    assert isinstance(decision, Batch)
    assert decision.jobs == ("a", "c")


def test_a_batch_carries_at_most_its_size() -> None:
    schedule = grouped(*((f"j{i}", 10.0 + i / 10, str(i)) for i in range(5)), size=3)
    decision = schedule.next(4.0)
    assert isinstance(decision, Batch)
    assert decision.jobs == ("j0", "j1", "j2")


def test_a_group_has_one_batch_out_at_a_time_and_the_next_gathers_what_came_due() -> None:
    schedule = grouped(*((f"j{i}", 10.0 + i / 10, str(i)) for i in range(5)), size=2)
    first = schedule.next(4.0)
    assert isinstance(first, Batch)
    assert schedule.next(4.5) == Wait(7.0)  # j2 waits; j0 is renewed alone at 7 if need be
    schedule.batch_finished(first.token, {"j0": 14.0, "j1": 14.0}, 4.6)
    second = schedule.next(4.6)
    assert isinstance(second, Batch)
    assert second.jobs == ("j2", "j3")


def test_a_lone_due_renewal_goes_alone() -> None:
    assert grouped(("a", 10.0, "1"), ("b", 20.0, "2")).next(4.0) == Start("a", 6.0, 0.0)


def test_an_urgent_lock_is_renewed_alone() -> None:
    schedule = grouped(("a", 10.0, "1"), ("b", 10.0, "2"))
    assert isinstance(schedule.next(7.5), Start)  # less than half its lead left


def test_a_first_try_is_given_a_few_times_what_its_groups_batches_took_lately() -> None:
    schedule = grouped(("a", 10.0, "1"), ("b", 10.0, "2"), ("c", 20.0, "3"), ("d", 20.0, "4"))
    batch = schedule.next(4.0)
    assert isinstance(batch, Batch)
    schedule.batch_finished(batch.token, {"a": 20.0, "b": 20.0}, 4.8)  # took 0.8 s
    slow = schedule.next(14.0)  # all four: 3 s to their urgency, half of it is 1.5
    assert isinstance(slow, Batch)
    assert slow.limit == pytest.approx(1.8)  # 3 x 0.8 s, less 1.5 x 0.8 s for a resend


@pytest.mark.parametrize(
    ("took", "limit"),
    [
        pytest.param(0.5, 2.0, id="fast: half"),
        pytest.param(0.8, 2.4, id="slower: three times what batches took"),
        pytest.param(1.0, 2.5, id="slower still: room for a resend of 1.5 times that"),
        pytest.param(1.5, 4.0, id="too slow for two tries: all of it"),
    ],
)
def test_a_first_tries_time_limit_follows_what_batches_took(took: float, limit: float) -> None:
    pace = Pace()
    pace.answered(took)
    assert pace.first_try(4.0) == pytest.approx(limit)


def failed(schedule: Schedule[str], batch: object, now: float) -> None:
    """``batch`` (a :class:`Batch`) told nothing: it failed or went unanswered at ``now``."""
    assert isinstance(batch, Batch)
    schedule.batch_finished(batch.token, dict.fromkeys(batch.jobs, AGAIN), now)


def test_a_failed_batch_is_sent_again_at_once_with_the_rest_of_the_time() -> None:
    schedule = grouped(("a", 10.0, "1"), ("b", 11.0, "2"))
    failed(schedule, schedule.next(4.0), 5.5)
    again = schedule.next(5.5)
    assert isinstance(again, Batch)
    assert again.jobs == ("a", "b")
    assert again.limit == pytest.approx(1.5)  # the old estimates stand: a alone from 7
    assert schedule.stats.resent == 1


def test_a_batch_that_fails_again_is_sent_in_halves_at_once() -> None:
    schedule = grouped(*((f"j{i}", 10.0 + i / 10, str(i)) for i in range(5)))
    failed(schedule, schedule.next(4.0), 4.5)
    failed(schedule, schedule.next(4.5), 5.0)
    first, second = schedule.next(5.0), schedule.next(5.0)  # side by side, one group
    assert isinstance(first, Batch)
    assert isinstance(second, Batch)
    assert (first.jobs, second.jobs) == (("j0", "j1", "j2"), ("j3", "j4"))
    assert first.limit == pytest.approx(2.0)


def test_a_batch_whose_halves_fail_pauses_then_goes_alone_once_urgent() -> None:
    schedule = grouped(("a", 10.0, "1"), ("b", 10.0, "2"), ("c", 10.0, "3"), ("d", 10.0, "4"))
    failed(schedule, schedule.next(4.0), 4.5)
    failed(schedule, schedule.next(4.5), 5.0)
    failed(schedule, schedule.next(5.0), 5.5)
    failed(schedule, schedule.next(5.0), 5.5)
    assert schedule.next(5.5) == Wait(6.0)  # the pause
    assert isinstance(schedule.next(6.0), Batch)  # as a first try, not yet urgent
    assert schedule.stats.resent == 3


def test_a_lock_of_a_failed_batch_still_out_at_its_urgency_is_renewed_alone() -> None:
    schedule = grouped(("a", 10.0, "1"), ("b", 12.0, "2"))
    failed(schedule, schedule.next(4.0), 5.5)
    assert isinstance(schedule.next(5.5), Batch)
    assert schedule.next(6.9) == Wait(7.0)
    assert schedule.next(7.0) == Start("a", 3.0, 3.0)


def test_a_resend_leaves_out_a_lock_removed_meanwhile() -> None:
    schedule = grouped(("a", 10.0, "1"), ("b", 10.0, "2"), ("c", 10.0, "3"))
    batch = schedule.next(4.0)
    schedule.remove("b")
    failed(schedule, batch, 5.0)
    again = schedule.next(5.0)
    assert isinstance(again, Batch)
    assert again.jobs == ("a", "c")


def test_a_failed_try_is_sent_again_whole_then_in_halves_then_not() -> None:
    locks = ["a", "b", "c"]
    assert resends(locks, 0) == [("a", "b", "c")]
    assert resends(locks, 1) == [("a", "b"), ("c",)]
    assert resends(locks, 2) == []
    assert resends([], 0) == []


def test_a_renewed_batch_moves_every_estimate() -> None:
    schedule = grouped(("a", 10.0, "1"), ("b", 11.0, "2"))
    batch = schedule.next(4.0)
    assert isinstance(batch, Batch)
    schedule.batch_finished(batch.token, {"a": 14.0, "b": 14.0}, 4.2)
    assert schedule.next(4.2) == Wait(8.0)
    assert schedule.stats.batches == 1
    assert schedule.stats.batched == 2


def test_only_the_lock_a_batch_found_lost_is_dropped() -> None:
    schedule = grouped(("a", 10.0, "1"), ("b", 10.0, "2"))
    batch = schedule.next(4.0)
    assert isinstance(batch, Batch)
    schedule.batch_finished(batch.token, {"a": None, "b": 14.0}, 4.2, read=True)
    assert not schedule.kept("a")
    assert schedule.kept("b")
    assert schedule.stats.reads == 1


def test_a_lock_a_batch_could_not_judge_is_renewed_alone_next() -> None:
    schedule = grouped(("a", 10.0, "1"), ("b", 10.0, "2"))
    batch = schedule.next(4.0)
    assert isinstance(batch, Batch)
    schedule.batch_finished(batch.token, {"a": ALONE, "b": 14.0}, 4.2)
    decision = schedule.next(4.2)
    assert isinstance(decision, Start)
    assert decision.job == "a"


def test_a_lock_whose_batch_is_still_out_at_its_urgency_is_renewed_alone() -> None:
    schedule = grouped(("a", 10.0, "1"), ("b", 12.0, "2"))
    batch = schedule.next(4.0)
    assert isinstance(batch, Batch)
    assert schedule.next(6.0) == Wait(7.0)  # a becomes urgent at 7
    assert schedule.next(7.0) == Start("a", 3.0, 3.0)
    # The stalled batch's late answer no longer speaks for a; b's renewal counts.
    schedule.batch_finished(batch.token, {"a": AGAIN, "b": 16.0}, 7.1)
    assert schedule.running("a")
    schedule.finished("a", 17.0, 7.2)
    assert schedule.next(7.2) == Wait(10.0)


def test_a_lock_lost_while_its_batch_is_out_is_told_at_its_estimate() -> None:
    schedule: Schedule[str] = Schedule(1, batching=lambda job: Batching("g", job))
    schedule.add("a", 10.0, 6.0)
    schedule.add("b", 12.0, 6.0)
    assert isinstance(schedule.next(4.0), Batch)  # the one slot, held by the batch
    assert schedule.next(10.0) == Lose("a")


RENEWALS = [Renewal(1, "a", "write", 1000), Renewal(2, "b", "write", 1000)]


def test_every_document_modified_renews_every_lock() -> None:
    assert outcomes(RENEWALS, 2, None, estimate=[5.0, 6.0]) == [5.0, 6.0]


def test_a_short_count_is_read_lock_by_lock() -> None:
    read = [{"i": 1, "ours": True, "live": []}, {"i": 2, "ours": True, "live": ["b"]}]
    assert outcomes(RENEWALS, 1, read, estimate=[5.0, 6.0]) == [None, 6.0]


def test_a_foreign_or_missing_document_is_renewed_alone() -> None:
    read = [{"i": 1, "ours": False, "live": []}]
    assert outcomes(RENEWALS, 0, read, estimate=[5.0, 6.0]) == [ALONE, ALONE]


# -- against the server, every manager and flavour ---------------------------------------


@pytest.fixture
def stats(flavour: str, twins: Twins) -> Callable[[], Stats]:
    """The keep-alive's statistics of the test's flavour since the last call."""
    if flavour == "sync":
        Extender.current().reset_stats()
        return Extender.current().reset_stats

    async def read() -> Stats:
        return AsyncExtender.current().reset_stats()

    twins.portal.call(read())
    return lambda: twins.portal.call(read())


@contextlib.contextmanager
def lone_renewals_refused(client: MongoClient[Doc]) -> Iterator[None]:
    """Every ``findAndModify`` fails (not transiently): only a batch can renew a lock."""
    client.admin.command(
        "configureFailPoint",
        "failCommand",
        mode="alwaysOn",
        data={"failCommands": ["findAndModify"], "errorCode": 2},
    )
    try:
        yield
    finally:
        client.admin.command("configureFailPoint", "failCommand", mode="off")


def holding(subject: Subject, count: int, block: contextlib.ExitStack) -> list[HeldLock]:
    """``count`` kept-alive holds of one manager, on keys 1 to ``count``."""
    keys = [subject.key] + [subject.new_key(i) for i in range(2, count + 1)]
    return [
        block.enter_context(subject.hold(key=key, keepalive=True, lock_timeout=LIFETIME))
        for key in keys
    ]


def entries(subject: Subject, held: HeldLock) -> list[Doc]:
    found = subject.collection.find_one({"_id": held.lock.document_id})
    assert found is not None
    return list(found["lock"]["holders"])


def entry(subject: Subject, held: HeldLock, lock_id: str) -> Doc:
    return next(e for e in entries(subject, held) if e["id"] == lock_id)


def plant(subject: Subject, held: HeldLock, planted: Doc) -> None:
    subject.collection.update_one(
        {"_id": held.lock.document_id}, {"$push": {"lock.holders": planted}}
    )


def planted_entry(lock_id: str, expires: datetime, tag: str) -> Doc:
    return {
        "id": lock_id,
        "tag": tag,
        "pending": False,
        "fence": 0,
        "acquired": expires - timedelta(hours=1),
        "expires": expires,
        "ttl": 3_600_000,
    }


def held_on_server(subject: Subject, held: HeldLock) -> bool:
    """True while ``held`` is granted and unexpired by the server's clock (no write)."""
    return subject.collection.count_documents(held.guard()) == 1


def test_a_batch_renews_only_ours(subject: Subject, client: MongoClient[Doc]) -> None:
    with contextlib.ExitStack() as block:
        a, b = holding(subject, 2, block)
        tag = a.lock.tag
        later = (server_now(client) + timedelta(hours=1)).replace(microsecond=0, tzinfo=None)
        earlier = (server_now(client) - timedelta(hours=1)).replace(microsecond=0, tzinfo=None)
        plant(subject, b, planted_entry(a.lock.id, later, tag))  # our id, another document
        plant(subject, a, planted_entry("another-holder", later, tag))
        plant(subject, a, planted_entry(b.lock.id, earlier, tag))  # expired, another document
        first = entry(subject, a, a.lock.id)["expires"]
        with lone_renewals_refused(client):
            time.sleep(2.5 * LIFETIME / 3)  # two renewals
            assert entry(subject, a, a.lock.id)["expires"] > first
            assert not a.lost.is_set()
            assert not b.lost.is_set()
        assert entry(subject, b, a.lock.id)["expires"] == later
        assert entry(subject, a, "another-holder")["expires"] == later
        revived = [e for e in entries(subject, a) if e["id"] == b.lock.id]
        assert all(e["expires"] == earlier for e in revived)  # pruned, or left expired


def test_a_lock_broken_by_an_operator_is_the_only_one_flagged(
    subject: Subject, client: MongoClient[Doc]
) -> None:
    with contextlib.ExitStack() as block:
        a, b, c = holding(subject, 3, block)
        subject.locks.break_lock(subject.key, lock_id=a.lock.id)
        with lone_renewals_refused(client):
            assert a.lost.wait(2 * LIFETIME)
            time.sleep(LIFETIME)
            assert not b.lost.is_set()
            assert not c.lost.is_set()
            assert held_on_server(subject, b)
            assert held_on_server(subject, c)
        assert isinstance(a.error, LockNotFound)
        with pytest.raises(LockNotFound):
            block.close()


@pytest.fixture
def behind_proxy(build: Build, proxied: Callable[..., Collection[Doc]]) -> Subject:
    """The subject through the reply-dropping proxy; pymongo does not retry, the flows do."""
    return build(proxied(retryWrites=False))


def test_a_batch_whose_reply_is_lost_is_sent_again(
    behind_proxy: Subject, cutter: ReplyCutter, client: MongoClient[Doc]
) -> None:
    subject = behind_proxy
    with contextlib.ExitStack() as block:
        a, b = holding(subject, 2, block)
        with lone_renewals_refused(client):
            cutter.cut_replies(["update"])
            time.sleep(2 * LIFETIME)
            assert [cut.command["update"] for cut in cutter.cuts] == [subject.collection.name]
            assert not a.lost.is_set()
            assert not b.lost.is_set()
            assert held_on_server(subject, a)
            assert held_on_server(subject, b)


def test_a_foreign_field_on_one_document_does_not_stop_the_others(
    subject: Subject, stats: Callable[[], Stats]
) -> None:
    with contextlib.ExitStack() as block:
        a, b, c = holding(subject, 3, block)
        stats()
        subject.collection.update_one({"_id": b.lock.document_id}, {"$set": {"lock": "theirs"}})
        assert b.lost.wait(2 * LIFETIME)
        time.sleep(LIFETIME)
        assert not a.lost.is_set()
        assert not c.lost.is_set()
        assert held_on_server(subject, a)
        assert held_on_server(subject, c)
        assert stats().batches >= 2
        assert isinstance(b.error, IncompatibleLockField)
        with pytest.raises(IncompatibleLockField):
            block.close()


@pytest.fixture
def stalled(build: Build, uri: str, collection: Collection[Doc]) -> Iterator[Subject]:
    """The subject through a client of its own, which a fail point can single out."""
    client: MongoClient[Doc] = MongoClient(uri, appName=APP, **CLIENT_OPTIONS)
    try:
        yield build(client[collection.database.name][collection.name])
    finally:
        client.close()


@pytest.mark.slow
def test_no_lock_expires_unnoticed_while_its_batch_hangs(
    stalled: Subject, fail_point: Callable[..., None], stats: Callable[[], Stats]
) -> None:
    with contextlib.ExitStack() as block:
        helds = holding(stalled, 3, block)
        stats()
        # Every batch hangs past every lock's estimate; each lock is renewed alone in time.
        fail_point(
            times=1000,
            appName=APP,
            commands=("update",),
            blockConnection=True,
            blockTimeMS=3_000 * LIFETIME,
        )
        for _ in range(int(3 * LIFETIME / 0.25)):
            time.sleep(0.25)
            for held in helds:
                assert held_on_server(stalled, held), f"{held} expired behind a stalled batch"
        assert not any(held.lost.is_set() for held in helds)
        seen = stats()
        assert seen.batches >= 1
        assert seen.commands - seen.batches >= len(helds)  # renewed alone meanwhile


#: The edge of a stalled batch: 250 locks of 6 s on one manager, one ``update`` blocked 4 s.
EDGE_LOCKS, EDGE_LIFETIME, EDGE_BLOCK = 250, 6.0, 4.0


def unexpired(collection: Collection[Doc]) -> dict[Any, set[str]]:
    """Each document's unexpired lock ids, read from the raw documents by the server's clock."""
    entries = {"$ifNull": ["$lock.holders", []]}
    live = {"$filter": {"input": entries, "cond": {"$gt": ["$$this.expires", SERVER_NOW]}}}
    pipeline = [{"$project": {"ids": {"$map": {"input": live, "in": "$$this.id"}}}}]
    return {found["_id"]: set(found["ids"]) for found in collection.aggregate(pipeline)}


@pytest.mark.slow
def test_one_stalled_batch_costs_no_lock(
    make_lock: MakeLock,
    uri: str,
    collection: Collection[Doc],
    fail_point: Callable[..., None],
    stats: Callable[[], Stats],
) -> None:
    collection.insert_many([{"_id": i} for i in range(EDGE_LOCKS)])
    client: MongoClient[Doc] = MongoClient(uri, appName=APP, **CLIENT_OPTIONS)
    with client, contextlib.ExitStack() as block:
        locks = make_lock(WriteLock, client[collection.database.name][collection.name])
        helds = [
            block.enter_context(locks.hold({"_id": i}, keepalive=True, lock_timeout=EDGE_LIFETIME))
            for i in range(EDGE_LOCKS)
        ]
        time.sleep(EDGE_LIFETIME / 2)  # renewed in batches by now
        stats()
        fail_point(
            commands=("update",), appName=APP, blockConnection=True, blockTimeMS=EDGE_BLOCK * 1000
        )
        ids = {held.lock.document_id: held.lock.id for held in helds}
        ends = time.monotonic() + 2 * EDGE_LIFETIME
        while time.monotonic() < ends:
            live = unexpired(collection)
            expired = [key for key, lock_id in ids.items() if lock_id not in live.get(key, ())]
            assert not expired, f"{len(expired)} locks expired on the server behind one stall"
            time.sleep(0.25)
        assert not any(held.lost.is_set() for held in helds)
        seen = stats()
        assert seen.commands == seen.batches, "locks were renewed alone"
        assert seen.resent >= 1  # the stalled batch was sent again


def test_a_release_whose_reply_is_lost_after_batch_renewals_still_releases(
    behind_proxy: Subject, cutter: ReplyCutter, client: MongoClient[Doc]
) -> None:
    # The ledger must vouch for the lock up to its batch-renewed expiry, not the grant's:
    # the release's first attempt removes the entry, its retry finds it gone.
    with contextlib.ExitStack() as block:
        helds = holding(behind_proxy, 2, block)
        with lone_renewals_refused(client):
            time.sleep(2 * LIFETIME)  # past the grants' expiries: only batches kept them
        assert all(held_on_server(behind_proxy, held) for held in helds)
        cutter.cut_replies(["findAndModify"])  # the release of the last held, the first to go
        block.close()  # raises nothing: every lock was released
    assert [cut.command["findAndModify"] for cut in cutter.cuts] == [behind_proxy.collection.name]
    assert not any(held_on_server(behind_proxy, held) for held in helds)


class Extensions(LockListener):
    """Counts the ``extended`` events of each lock."""

    def __init__(self) -> None:
        self.of: dict[str, int] = {}

    def on_extended(self, event: LockEvent) -> None:
        assert event.lock is not None
        self.of[event.lock.id] = self.of.get(event.lock.id, 0) + 1


def test_a_lock_renewed_by_a_batch_is_told_to_the_listener_as_extended(
    subject: Subject, client: MongoClient[Doc]
) -> None:
    told = Extensions()
    locks = subject.manager(listener=told)
    keys = [subject.key, subject.new_key(2)]
    with contextlib.ExitStack() as block:
        held = [
            block.enter_context(subject.hold(locks, key=key, keepalive=True, lock_timeout=LIFETIME))
            for key in keys
        ]
        with lone_renewals_refused(client):
            time.sleep(2 * LIFETIME)
            assert all(h.lost.is_set() is False for h in held)
    assert all(told.of.get(h.lock.id, 0) >= 2 for h in held), told.of


def utc(value: datetime) -> datetime:
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value


def test_a_batch_renewal_moves_the_held_locks_expires_at_on_as_a_lower_bound(
    subject: Subject, client: MongoClient[Doc]
) -> None:
    with contextlib.ExitStack() as block:
        helds = holding(subject, 2, block)
        granted = [held.lock.expires_at for held in helds]
        with lone_renewals_refused(client):
            time.sleep(2.5 * LIFETIME / 3)  # two renewals, by batches only
            assert not any(held.lost.is_set() for held in helds)
            for held, first in zip(helds, granted, strict=True):
                stored = utc(entry(subject, held, held.lock.id)["expires"])
                assert held.lock.expires_at > first + timedelta(seconds=LIFETIME / 3)
                # Never later than the server's (its stamps are whole milliseconds).
                assert held.lock.expires_at <= stored + timedelta(milliseconds=1)
