"""hold(wait=...) woken by change streams, its safety net, its fallback, and fair hand-off."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pymongo
import pytest
from pymongo.collection import Collection

from docmultilock import (
    AssertiveLock,
    AsyncWriteLock,
    LockAlreadyTaken,
    LockTimeout,
    MultiLock,
    ResourceNotFound,
    WriteLock,
)
from docmultilock._changes import Blockers, Interest, Interests, stream_pipeline
from docmultilock._rules import READ_WRITE, build_rules
from docmultilock._wakeup import WATCHERS
from tests.flavours import MakeLock, Twins
from tests.helpers import NO_SLEEP, Waiter, stored_lock, wait_until

Doc = dict[str, Any]


@pytest.fixture
def two(make_lock: MakeLock, collection: Collection[Doc], doc: Doc) -> Any:
    """A holder's manager and a waiter's manager on the test document."""
    return make_lock(WriteLock, collection), make_lock(WriteLock, collection)


# -- woken by a release -------------------------------------------------------------------


def test_a_release_wakes_the_waiter_without_waiting_out_its_backoff(
    two: Any, doc: Doc, open_streams: Callable[[], int]
) -> None:
    holder, waiting = two
    waiting._clock = NO_SLEEP
    with holder.hold(doc):
        waiter = Waiter(waiting, doc, wait=60.0, backoff=(20.0, 20.0))
        wait_until(lambda: open_streams() == 1)
        time.sleep(0.3)  # refused, then waiting on its stream
        released = time.monotonic()
    waiter.join()
    assert waiter.granted is not None
    assert waiter.granted - released < 2.0  # the safety net would come after 20 s or more


def test_a_waiter_gets_the_lock_when_its_stream_breaks_and_events_are_lost(
    two: Any, doc: Doc, fail_point: Callable[..., None], open_streams: Callable[[], int]
) -> None:
    holder, waiting = two
    with holder.hold(doc):
        waiter = Waiter(waiting, doc, wait=30.0, backoff=(0.1, 0.25))
        wait_until(lambda: open_streams() == 1)
        # Kill the stream for good: its next getMore fails, and so does every reopening.
        fail_point(times=10_000, commands=("getMore", "aggregate"), errorCode=13)
        time.sleep(0.4)
    waiter.join()  # granted by the safety net: the release's event was never delivered
    assert waiter.granted is not None


def test_without_change_streams_waiters_poll_and_say_so_once_at_debug(
    two: Any,
    doc: Doc,
    fail_point: Callable[..., None],
    caplog: pytest.LogCaptureFixture,
    open_streams: Callable[[], int],
) -> None:
    holder, waiting = two
    fail_point(times=1, commands=("aggregate",), errorCode=13)  # as without the privilege
    with caplog.at_level(logging.DEBUG, logger="docmultilock"):
        for _ in range(2):
            with holder.hold(doc):
                waiter = Waiter(waiting, doc, wait=30.0, backoff=(0.05, 0.1))
                time.sleep(0.4)
            waiter.join()
    told = [r for r in caplog.records if r.getMessage().startswith("no change stream on")]
    assert len(told) == 1
    assert told[0].levelno == logging.DEBUG
    assert open_streams() == 0


def test_no_change_stream_stays_open_after_the_last_waiter_leaves(
    two: Any, doc: Doc, client: Any, open_streams: Callable[[], int]
) -> None:
    def cursors() -> int:
        total: int = client.admin.command("serverStatus")["metrics"]["cursor"]["open"]["total"]
        return total

    before = cursors()
    holder, waiting = two
    with holder.hold(doc):
        waiters = [Waiter(waiting, doc, wait=0.8, backoff=(0.05, 0.1)) for _ in range(2)]
        wait_until(lambda: open_streams() == 1 and cursors() > before)
        for waiter in waiters:
            with pytest.raises(LockTimeout):
                waiter.join()
    wait_until(lambda: open_streams() == 0 and cursors() == before)


def test_wake_poll_opens_no_stream(two: Any, doc: Doc, open_streams: Callable[[], int]) -> None:
    holder, waiting = two
    with holder.hold(doc):
        waiter = Waiter(waiting, doc, wait=0.5, backoff=(0.05, 0.1), wake="poll")
        time.sleep(0.2)
        assert open_streams() == 0
        with pytest.raises(LockTimeout):
            waiter.join()


# -- fair hand-off ----------------------------------------------------------------------


def test_fair_waiters_are_granted_in_arrival_order(
    make_lock: MakeLock, collection: Collection[Doc], doc: Doc
) -> None:
    holder = make_lock(WriteLock, collection)
    waiters: list[Waiter] = []

    def in_line() -> bool:
        return len(stored_lock(collection)["holders"]) == len(waiters) + 1

    with holder.hold(doc):
        for _ in range(4):
            locks = make_lock(WriteLock, collection)
            waiters.append(Waiter(locks, doc, 0.05, wait=30.0, backoff=(0.05, 0.2), fair=True))
            wait_until(in_line)
    for waiter in waiters:
        waiter.join()
    assert all(w.granted is not None for w in waiters)
    order = sorted(range(4), key=lambda n: waiters[n].granted or 0.0)
    assert order == [0, 1, 2, 3]


def test_a_newcomer_cannot_pass_a_fair_line(
    make_lock: MakeLock, collection: Collection[Doc], doc: Doc
) -> None:
    holder, newcomer = make_lock(WriteLock, collection), make_lock(WriteLock, collection)
    with holder.hold(doc):
        # A slow waiter (polling, renewing its place every lifetime/3) stands in line.
        waiting = make_lock(WriteLock, collection, lock_timeout=3.0)
        waiter = Waiter(waiting, doc, wait=30.0, backoff=(5.0, 5.0), wake="poll", fair=True)
        wait_until(lambda: len(stored_lock(collection)["holders"]) == 2)
    # The holder has left; the line's head has not come back yet: the newcomer is refused.
    assert [h["pending"] for h in stored_lock(collection)["holders"]] == [True]
    with pytest.raises(LockAlreadyTaken), newcomer.hold(doc):
        pass
    waiter.join()
    assert waiter.granted is not None


def _fair_waiter_behind_a_pending_writer(
    make_lock: MakeLock, collection: Collection[Doc], doc: Doc, tag: str
) -> tuple[Any, Any, Any, Waiter]:
    """A reader holds, a writer waits pending behind it, a fair ``tag`` waiter behind both.

    Returns the first manager, the reader's lock, the pending writer's lock, the waiter.
    """
    locks = make_lock(MultiLock, collection)
    reader = locks.acquire(doc, tag="read")
    with pytest.raises(AssertiveLock) as pending:
        locks.acquire(doc, tag="write")
    waiter = Waiter(
        make_lock(MultiLock, collection), doc, tag=tag, wait=30.0, wake="poll", fair=True
    )
    wait_until(lambda: len(stored_lock(collection)["holders"]) == 3)
    return locks, reader, pending.value.lock, waiter


def test_a_fair_reader_behind_a_pending_writer_does_not_hold_it_up(
    make_lock: MakeLock, collection: Collection[Doc], doc: Doc
) -> None:
    # The fair reader queues behind the pending writer and waits for it; the writer must
    # not wait for the reader in turn (each would hold the other until one gave up).
    locks, reader, pending, fair_reader = _fair_waiter_behind_a_pending_writer(
        make_lock, collection, doc, "read"
    )
    locks.release(doc, reader)
    writer = locks.acquire(doc, lock=pending)
    assert not writer.pending
    locks.release(doc, writer)
    fair_reader.join()
    assert fair_reader.granted is not None


def test_a_fair_writer_queued_behind_a_pending_writer_does_not_take_its_place(
    make_lock: MakeLock, collection: Collection[Doc], doc: Doc
) -> None:
    # The pending writer came first: one queued behind it waits for it, never refuses it.
    locks, reader, pending, fair_writer = _fair_waiter_behind_a_pending_writer(
        make_lock, collection, doc, "write"
    )
    with pytest.raises(AssertiveLock):  # still waiting for the reader, its place kept
        locks.acquire(doc, lock=pending)
    locks.release(doc, reader)
    writer = locks.acquire(doc, lock=pending)
    assert not writer.pending
    assert fair_writer.granted is None
    locks.release(doc, writer)
    fair_writer.join()
    assert fair_writer.granted is not None


def test_a_reader_behind_a_writer_that_gives_up_is_woken_though_readers_still_hold(
    make_lock: MakeLock, collection: Collection[Doc], doc: Doc, open_streams: Callable[[], int]
) -> None:
    locks = make_lock(MultiLock, collection)
    locks.acquire(doc, tag="read")
    with pytest.raises(AssertiveLock) as pending:
        locks.acquire(doc, tag="write")
    waiting = make_lock(MultiLock, collection)
    waiting._clock = NO_SLEEP
    reader = Waiter(waiting, doc, tag="read", wait=60.0, backoff=(20.0, 20.0))
    wait_until(lambda: open_streams() == 1)
    time.sleep(0.3)  # refused by the pending writer, then waiting on its stream
    locks.release(doc, pending.value.lock)  # the writer gives up; the first reader holds on
    released = time.monotonic()
    reader.join()
    assert reader.granted is not None
    assert reader.granted - released < 2.0  # the safety net would come after 20 s or more


def test_a_dropped_collection_wakes_its_waiters_and_closes_its_stream(
    two: Any, collection: Collection[Doc], doc: Doc, open_streams: Callable[[], int]
) -> None:
    # Dropping the collection invalidates its stream for good: it must start afresh,
    # waking its waiters (here before any backoff), never spin on a stream that returns
    # nothing. The woken waiter finds the document gone.
    holder, waiting = two
    waiting._clock = NO_SLEEP
    with contextlib.ExitStack() as holding:
        holding.enter_context(holder.hold(doc))
        waiter = Waiter(waiting, doc, wait=60.0, backoff=(20.0, 20.0))
        wait_until(lambda: open_streams() == 1)
        time.sleep(0.3)  # refused, then waiting on its stream
        collection.drop()
        with pytest.raises(ResourceNotFound):  # the holder's lock went with the document
            holding.close()
    with pytest.raises(ResourceNotFound):
        waiter.join()
    assert waiter.granted is None
    wait_until(lambda: open_streams() == 0)


def test_without_a_thread_for_the_stream_the_waiter_polls_and_nothing_is_left_open(
    collection: Collection[Doc], doc: Doc, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A process at its limit of threads cannot start the stream's thread (sync only).
    start = threading.Thread.start

    def refuse_the_streams(thread: threading.Thread) -> None:
        if thread.name == "docmultilock-wakeup":
            raise RuntimeError("can't start new thread")
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", refuse_the_streams)
    holder, waiting = WriteLock(collection), WriteLock(collection)
    with holder.hold(doc):
        waiter = Waiter(waiting, doc, wait=30.0, backoff=(0.05, 0.1))
        time.sleep(0.3)
    waiter.join()
    assert waiter.granted is not None
    assert WATCHERS.open_streams() == 0


def test_one_failed_opening_of_a_stream_is_tried_again(
    two: Any, doc: Doc, fail_point: Callable[..., None], open_streams: Callable[[], int]
) -> None:
    # A transient error (here a not-primary answer) is no server without change streams.
    holder, waiting = two
    waiting._clock = NO_SLEEP
    fail_point(times=1, commands=("aggregate",), errorCode=10107)
    with holder.hold(doc):
        waiter = Waiter(waiting, doc, wait=60.0, backoff=(20.0, 20.0))
        wait_until(lambda: open_streams() == 1)
        time.sleep(0.6)  # refused, the first opening failed, the second one watches
        released = time.monotonic()
    waiter.join()
    assert waiter.granted is not None
    assert waiter.granted - released < 2.0


def test_the_shared_tasks_do_not_inherit_a_waiters_operation_timeout(
    collection: Collection[Doc], doc: Doc, twins: Twins
) -> None:
    # The first holder's pymongo.timeout() must not become the deadline of the loop's
    # keep-alive and change-stream tasks, which serve every holder after it.
    orders = twins.of(collection)

    async def hold_past_an_outer_deadline() -> bool:
        locks = AsyncWriteLock(orders, lock_timeout=0.9)
        with pymongo.timeout(0.5):
            held_context = locks.hold(doc, keepalive=True)
            held = await held_context.__aenter__()
        await asyncio.sleep(2.5)  # renewed about every 0.3 s, well past the 0.5 s deadline
        lost = held.lost.is_set()
        await held_context.__aexit__(None, None, None)
        return lost

    assert twins.portal.call(hold_past_an_outer_deadline()) is False


# -- whom an event wakes (no server) ------------------------------------------------------


def _interests(*interests: Interest) -> Interests:
    made = Interests("lock")
    for interest in interests:
        made.add(interest)
    return made


def _change(*holders: tuple[str, bool] | tuple[str, bool, str], op: str = "update") -> Doc:
    """A change event leaving ``holders`` (id, pending, tag: ``write`` unless given)."""
    entries = [{"id": h[0], "pending": h[1], "tag": (*h, "write")[2]} for h in holders]
    return {
        "operationType": op,
        "documentKey": {"_id": 1},
        "fullDocument": {"lock": {"holders": entries}},
    }


def test_a_change_while_the_lock_is_granted_wakes_nobody() -> None:
    first = Interest(1, True, lambda: None)
    _interests(first).dispatch(_change(("a", False), ("b", True)))
    assert not first.woken


def test_a_release_wakes_one_exclusive_waiter_and_every_shared_one() -> None:
    one, two, reader = (
        Interest(1, True, lambda: None),
        Interest(1, True, lambda: None),
        Interest(1, False, lambda: None),
    )
    _interests(one, two, reader).dispatch(_change())
    assert (one.woken, two.woken, reader.woken) == (True, False, True)


def test_a_wake_not_taken_passes_to_the_next_exclusive_waiter() -> None:
    one, two = Interest(1, True, lambda: None), Interest(1, True, lambda: None)
    interests = _interests(one, two)
    interests.dispatch(_change(op="delete"))
    interests.remove(one)
    assert two.woken


def test_in_a_fair_line_only_its_head_is_woken() -> None:
    head, second = Interest(1, True, lambda: None), Interest(1, True, lambda: None)
    second.entry, head.entry = "b", "a"
    second.fair = head.fair = True
    _interests(second, head).dispatch(_change(("a", True), ("b", True)))
    assert (head.woken, second.woken) == (True, False)


def test_a_pending_entry_is_woken_beside_the_exclusive_waiter_given_the_wake() -> None:
    # An assertive lock's pending entry may be granted once its tags drained, whoever
    # else in the process was given the one exclusive wake.
    refused, pending = Interest(1, True, lambda: None), Interest(1, True, lambda: None)
    pending.entry = "w"
    _interests(refused, pending).dispatch(_change(("w", True)))
    assert (refused.woken, pending.woken) == (True, True)


def test_a_newcomer_to_a_document_left_free_is_woken_on_arrival() -> None:
    # The release may have come between its refused attempt and its watch.
    interests = _interests(Interest(1, True, lambda: None))
    interests.dispatch(_change())
    newcomer = Interest(1, True, lambda: None)
    interests.add(newcomer)
    assert newcomer.woken


def test_a_newcomer_to_a_document_held_since_its_last_release_is_not_woken() -> None:
    interests = _interests(Interest(1, True, lambda: None))
    interests.dispatch(_change())
    interests.dispatch(_change(("b", False)))
    newcomer = Interest(1, True, lambda: None)
    interests.add(newcomer)
    assert not newcomer.woken


def test_what_a_change_left_is_forgotten_with_the_documents_last_waiter() -> None:
    first = Interest(1, True, lambda: None)
    interests = _interests(first)
    interests.dispatch(_change())
    interests.remove(first)
    newcomer = Interest(1, True, lambda: None)
    interests.add(newcomer)  # a document the stream did not follow: its reopening wakes it
    assert not newcomer.woken


def test_a_document_id_python_cannot_hash_is_followed_like_any_other() -> None:
    key = {"region": "eu", "n": 1}
    interests = _interests(Interest(key, True, lambda: None))
    interests.dispatch({**_change(), "documentKey": {"_id": key}})
    newcomer = Interest(key, True, lambda: None)
    interests.add(newcomer)
    assert newcomer.woken


def test_a_waiters_own_renewal_does_not_wake_it_again() -> None:
    # A pending entry behind another one renews itself with each attempt: woken by its own
    # write, it would retry at once, again and again, until the one ahead lapsed.
    behind = Interest(1, True, lambda: None)
    behind.entry = "b"
    interests = _interests(behind)
    interests.dispatch(_change(("a", True), ("b", True)))
    assert behind.take()
    interests.dispatch(_change(("a", True), ("b", True)))  # its renewal: expiries only
    assert not behind.woken


def test_a_named_lock_created_again_is_seen_as_held() -> None:
    # After the last release deleted it, the next acquire inserts the document anew.
    assert "insert" in _stream_operations()
    interests = _interests(Interest(1, True, lambda: None))
    interests.dispatch(_change(op="delete"))
    interests.dispatch(_change(("b", False), op="insert"))
    newcomer = Interest(1, True, lambda: None)
    interests.add(newcomer)
    assert not newcomer.woken


def test_what_a_change_left_is_forgotten_when_events_may_have_been_missed() -> None:
    interests = _interests(Interest(1, True, lambda: None))
    interests.dispatch(_change())
    interests.wake_all()
    newcomer = Interest(1, True, lambda: None)
    interests.add(newcomer)
    assert not newcomer.woken


def test_ids_python_calls_equal_are_different_documents_as_in_mongodb() -> None:
    one, true = Interest(1, True, lambda: None), Interest(True, True, lambda: None)
    interests = _interests(one, true)
    assert interests.ids() == [1, True]
    interests.dispatch(_change())  # a change to document 1
    assert (one.woken, true.woken) == (True, False)


def _stream_operations() -> list[str]:
    match = stream_pipeline("lock", [1])[0]["$match"]
    return list(match["operationType"]["$in"])


READER = Blockers.of_tag(build_rules(READ_WRITE, {}, 1), "read")
WRITER = Blockers.of_tag(build_rules(READ_WRITE, {}, 1), "write")


def test_a_reader_refused_by_a_pending_writer_is_woken_when_it_gives_up() -> None:
    # Though other readers still hold: they never kept it out.
    reader = Interest(1, False, lambda: None, READER)
    interests = _interests(reader)
    interests.dispatch(_change(("r1", False, "read"), ("w", True, "write")))
    assert not reader.woken  # the pending writer refuses it
    interests.dispatch(_change(("r1", False, "read")))  # the writer gave up
    assert reader.woken


def test_a_pending_writer_is_woken_once_the_readers_drained() -> None:
    writer = Interest(1, True, lambda: None, WRITER)
    writer.entry = "w"
    interests = _interests(writer)
    interests.dispatch(_change(("r1", False, "read"), ("r2", False, "read"), ("w", True)))
    interests.dispatch(_change(("r2", False, "read"), ("w", True)))
    assert not writer.woken  # a reader still holds
    interests.dispatch(_change(("w", True)))
    assert writer.woken


def test_a_waiter_refused_by_a_fair_line_is_not_woken_while_the_line_waits() -> None:
    # A non-fair newcomer would only be refused again: the line's entries are pending.
    newcomer = Interest(1, True, lambda: None, READER)
    _interests(newcomer).dispatch(_change(("a", True), ("b", True)))
    assert not newcomer.woken


def test_a_waiter_whose_own_entry_is_all_that_is_left_is_woken_on_arrival() -> None:
    interests = _interests(Interest(1, True, lambda: None))
    interests.dispatch(_change(("w", True)))  # the readers it waited for left
    writer = Interest(1, True, lambda: None, WRITER, entry="w")
    interests.add(writer)
    assert writer.woken


def test_a_waiter_is_woken_when_it_names_its_entry_after_the_change() -> None:
    writer = Interest(1, True, lambda: None, WRITER)
    interests = _interests(writer)
    interests.dispatch(_change(("w", True)))
    assert not writer.woken  # a pending writer it does not know as its own
    interests.update(writer, "w")
    assert writer.woken


def test_fair_readers_in_line_together_are_woken_together() -> None:
    # The server grants both once the writer ahead released: neither is in the other's way.
    first, second = (Interest(1, False, lambda: None, READER, entry=e, fair=True) for e in "ab")
    _interests(first, second).dispatch(_change(("a", True, "read"), ("b", True, "read")))
    assert (first.woken, second.woken) == (True, True)


def test_a_fair_writer_behind_a_fair_reader_waits_for_it() -> None:
    writer = Interest(1, True, lambda: None, WRITER, entry="w", fair=True)
    _interests(writer).dispatch(_change(("a", True, "read"), ("w", True)))
    assert not writer.woken


def test_one_wake_per_release_goes_to_each_tag_that_excludes_itself() -> None:
    # Two self-exclusive tags that do not conflict (a custom table): one release may let
    # a waiter of each in.
    apart = build_rules({t: {"cooperative": [t]} for t in ("import", "export")}, {}, 1)
    imports, exports = (Blockers.of_tag(apart, t) for t in ("import", "export"))
    first, second, other = (
        Interest(1, True, lambda: None, imports),
        Interest(1, True, lambda: None, imports),
        Interest(1, True, lambda: None, exports),
    )
    _interests(first, second, other).dispatch(_change())
    assert (first.woken, second.woken, other.woken) == (True, False, True)


# -- limits: waiters refused by lock_limits or max_holders ---------------------------------


def test_a_waiter_at_its_tags_limit_is_not_woken_by_a_change_that_keeps_it_full() -> None:
    waiter = Interest(1, False, lambda: None, Blockers(frozenset(), limit=("export", 2)))
    interests = _interests(waiter)
    interests.dispatch(
        _change(("a", False, "export"), ("b", False, "export"), ("c", True, "export"))
    )
    assert not waiter.woken  # the pending export does not count, but two granted ones are there


def test_a_release_that_frees_a_slot_of_the_tag_wakes_its_waiter() -> None:
    waiter = Interest(1, False, lambda: None, Blockers(frozenset(), limit=("export", 2)))
    interests = _interests(waiter)
    interests.dispatch(_change(("a", False, "export"), ("b", False, "export")))
    interests.dispatch(_change(("a", False, "export"), ("v", False, "view")))
    assert waiter.woken


def test_a_waiter_refused_by_max_holders_is_woken_once_fewer_entries_are_left() -> None:
    waiter = Interest(1, False, lambda: None, Blockers(frozenset(), most=2))
    interests = _interests(waiter)
    interests.dispatch(_change(("a", False, "view"), ("b", True, "view")))
    assert not waiter.woken
    interests.dispatch(_change(("a", False, "view")))
    assert waiter.woken
