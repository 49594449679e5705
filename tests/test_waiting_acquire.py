"""``acquire(wait=...)`` and ``acquire_all(wait=...)``: ``hold()``'s waiting, for a lock kept.

By default both try once, as ever; with ``wait=`` they run the waiting flow ``hold()``
runs (backoff, change streams, a pending assertive lock continued and withdrawn on the
way out), over every lock manager and both flavours.
"""

from __future__ import annotations

from typing import Any

import pytest

from docmultilock import AssertiveLock, InvalidArgument, LockConflict, LockTimeout, MultiLock
from docmultilock.options import WaitOptions
from tests.helpers import stored_lock
from tests.subjects import Subject
from tests.test_hold import FakePacing

Doc = dict[str, Any]


def test_acquire_with_wait_is_granted_once_the_holder_releases(subject: Subject) -> None:
    holder = subject.locks.acquire(subject.key, tag=subject.tag)
    waiter = subject.manager()
    FakePacing(
        then=lambda n: subject.locks.release(subject.key, holder) if n == 2 else None
    ).install(waiter)
    lock = waiter.acquire(subject.key, tag=subject.tag, wait=5.0, wake="poll")
    assert [h["id"] for h in subject.holders()] == [lock.id]
    waiter.release(subject.key, lock)


def test_acquire_with_wait_times_out_and_leaves_nothing(subject: Subject) -> None:
    holder = subject.locks.acquire(subject.key, tag=subject.tag)
    waiter = subject.manager()
    FakePacing().install(waiter)
    with pytest.raises(LockTimeout) as exc:
        waiter.acquire(subject.key, tag=subject.tag, wait=1.0, backoff=(0.1, 0.4), wake="poll")
    assert isinstance(exc.value.__cause__, LockConflict)
    assert exc.value.attempts == 4
    assert [h["id"] for h in subject.holders()] == [holder.id]


def test_acquire_without_wait_tries_once_and_leaves_the_pending_entry(
    rw_lock: MultiLock, doc: Doc
) -> None:
    rw_lock.acquire(doc, tag="read")
    with pytest.raises(AssertiveLock) as exc:
        rw_lock.acquire(doc, tag="write", backoff=(0.1, 0.2))  # no wait: how to wait is moot
    pending = [h for h in stored_lock(rw_lock.collection)["holders"] if h["pending"]]
    assert [h["id"] for h in pending] == [exc.value.lock.id]


def test_acquire_with_wait_continues_a_pending_lock_and_withdraws_it_on_timeout(
    rw_lock: MultiLock, doc: Doc
) -> None:
    reader = rw_lock.acquire(doc, tag="read")
    with pytest.raises(AssertiveLock) as exc:
        rw_lock.acquire(doc, tag="write")
    FakePacing().install(rw_lock)
    with pytest.raises(LockTimeout) as timeout:
        rw_lock.acquire(doc, lock=exc.value.lock, wait=1.0, wake="poll")
    assert timeout.value.blocking_tags == ("read",)
    assert [h["id"] for h in stored_lock(rw_lock.collection)["holders"]] == [reader.id]


def test_acquire_with_wait_grants_the_pending_lock_it_continued(
    rw_lock: MultiLock, doc: Doc
) -> None:
    reader = rw_lock.acquire(doc, tag="read")
    FakePacing(then=lambda n: rw_lock.release(doc, reader) if n == 2 else None).install(rw_lock)
    with pytest.raises(AssertiveLock) as exc:
        rw_lock.acquire(doc, tag="write")
    lock = rw_lock.acquire(doc, lock=exc.value.lock, wait=5.0, wake="poll")
    assert (lock.id, lock.tag, lock.pending) == (exc.value.lock.id, "write", False)


def test_acquire_all_with_wait_waits_for_a_taken_key(subject: Subject) -> None:
    second = subject.new_key(2)
    holder = subject.locks.acquire(second, tag=subject.tag)
    waiter = subject.manager()
    FakePacing(then=lambda n: subject.locks.release(second, holder) if n == 2 else None).install(
        waiter
    )
    locks = waiter.acquire_all([second, subject.key], tag=subject.tag, wait=5.0, wake="poll")
    assert [subject.holders()[0]["id"]] == [locks[1].id]
    waiter.release_all([second, subject.key], locks)


def test_acquire_all_with_wait_times_out_and_leaves_nothing(subject: Subject) -> None:
    second = subject.new_key(2)
    holder = subject.locks.acquire(second, tag=subject.tag)
    waiter = subject.manager()
    FakePacing().install(waiter)
    with pytest.raises(LockTimeout):
        waiter.acquire_all([subject.key, second], tag=subject.tag, wait=1.0, wake="poll")
    assert subject.holders() == []
    assert [h["id"] for h in subject.stored(second)["holders"]] == [holder.id]


#: A value of each waiting option that must be refused, by the option's name.
BAD_WAIT: dict[str, Any] = {"wait": "soon", "backoff": "fast", "wake": "shout", "fair": "yes"}


def test_every_waiting_option_declared_has_a_refused_value_here() -> None:
    assert set(BAD_WAIT) | {"tag", "lock_timeout", "timeout", "w"} == WaitOptions.__optional_keys__


@pytest.mark.parametrize("option", sorted(BAD_WAIT))
@pytest.mark.parametrize("method", ["acquire", "acquire_all"])
def test_a_bad_waiting_option_is_refused_by_name_before_anything_is_written(
    subject: Subject, method: str, option: str
) -> None:
    call = getattr(subject.locks, method)
    key = subject.key if method == "acquire" else [subject.key]
    with pytest.raises(InvalidArgument, match=rf"\b{option}\b"):
        call(key, tag=subject.tag, **{"wait": 1.0, option: BAD_WAIT[option]})
    assert subject.stored() is None


@pytest.mark.parametrize("option", ["keepalive", "on_lost", "extend_every"])
def test_acquire_takes_no_holding_option(subject: Subject, option: str) -> None:
    extra: dict[str, Any] = {option: None}
    with pytest.raises(
        TypeError, match=rf"acquire\(\) got an unexpected keyword argument '{option}'"
    ):
        subject.locks.acquire(subject.key, tag=subject.tag, **extra)
