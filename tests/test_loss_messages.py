"""A lost lock's error is worded for what the user did, over every manager and flavour.

A second release, an extension of a lock that is gone, a guarded write that matched
nothing, a loss the keep-alive found while the block ran, a loss found as the block
ended, and a set's lock (which key of the set): each says what happened to *that* call,
and none gives another's advice.
"""

from __future__ import annotations

import contextlib

import pytest

from docmultilock import LockNotFound
from tests.subjects import Subject

#: The advice that fits a second release only.
SECOND_RELEASE = "a second release"


def test_a_second_release_says_it_may_be_a_second_release(subject: Subject) -> None:
    lock = subject.locks.acquire(subject.key, tag=subject.tag)
    subject.locks.release(subject.key, lock)
    with pytest.raises(LockNotFound, match=r"^cannot release: .*already released.*second release"):
        subject.locks.release(subject.key, lock)


def test_an_extension_of_a_lock_gone_says_it_cannot_be_revived(subject: Subject) -> None:
    lock = subject.locks.acquire(subject.key, tag=subject.tag)
    subject.steal()
    with pytest.raises(LockNotFound) as exc:
        subject.locks.extend(subject.key, lock)
    message = str(exc.value)
    assert message.startswith("cannot extend: ")
    assert "cannot be revived" in message
    assert SECOND_RELEASE not in message


def test_a_guarded_write_that_matched_nothing_says_so(subject: Subject) -> None:
    with contextlib.ExitStack() as block:
        held = block.enter_context(subject.hold())
        subject.steal()
        with pytest.raises(LockNotFound) as exc:
            held.require(subject.collection.update_one(held.guard(), {"$set": {"total": 2}}))
        block.pop_all()
    message = str(exc.value)
    assert message.startswith("a guarded write matched nothing: ")
    assert "before the write landed" in message
    assert SECOND_RELEASE not in message


def test_a_loss_the_keepalive_found_says_it_was_lost_while_held(subject: Subject) -> None:
    with contextlib.ExitStack() as block:
        held = block.enter_context(subject.hold(keepalive=True, lock_timeout=0.6))
        subject.steal()
        assert held.lost.wait(10.0)
        with pytest.raises(LockNotFound) as exc:
            block.close()
    message = str(exc.value)
    assert message.startswith("lost while held: ")
    assert "the keep-alive found it gone" in message
    assert SECOND_RELEASE not in message


def test_a_loss_found_as_the_block_ended_says_the_block_was_not_protected(
    subject: Subject,
) -> None:
    with pytest.raises(LockNotFound) as exc, subject.hold():
        subject.steal()
    message = str(exc.value)
    assert message.startswith("lost during the block: ")
    assert "found gone when the block ended" in message
    assert "not protected throughout" in message
    assert SECOND_RELEASE not in message


def test_a_sets_loss_names_which_key_of_the_set_it_is(subject: Subject) -> None:
    keys = [subject.new_key(2), subject.key]
    with pytest.raises(LockNotFound) as exc, subject.locks.hold_all(keys, tag=subject.tag):
        subject.steal()
    assert "(key 2 of the 2 keys of the set)" in str(exc.value)
    assert exc.value.lock.document_id == (
        subject.key["_id"] if isinstance(subject.key, dict) else subject.key
    )
