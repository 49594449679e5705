"""A lock keeps the lifetime it was taken with until a call says otherwise.

The lifetime is stored with the entry on the server, so an extension or a continued pending
lock renews by the lock's own lifetime, whatever the manager's default for its tag.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pymongo.collection import Collection

from docmultilock import AssertiveLock, Lock, MultiLock
from tests.helpers import server_now, stored_lock
from tests.subjects import Manager, Subject

Doc = dict[str, Any]


class Scene:
    """One lock manager and the key it locks, whichever the class (and flavour)."""

    def __init__(self, subject: Subject) -> None:
        self.collection = subject.collection
        self.locks: Manager = subject.manager(lock_timeout=30.0)
        self.key: Any = subject.key
        self.tagged: dict[str, str] = {} if subject.tag is None else {"tag": subject.tag}

    def acquire(self, **kwargs: Any) -> Lock:
        return self.locks.acquire(self.key, **self.tagged, **kwargs)  # type: ignore[arg-type]

    def extend(self, lock: Lock, **kwargs: Any) -> Lock:
        return self.locks.extend(self.key, lock, **kwargs)


@pytest.fixture
def scene(subject: Subject) -> Scene:
    return Scene(subject)


def left(scene: Scene, lock: Lock) -> timedelta:
    return lock.expires_at - server_now(scene.collection.database.client)


def test_extend_renews_by_the_lifetime_the_lock_was_taken_with(scene: Scene) -> None:
    lock = scene.acquire(lock_timeout=2.0)
    extended = scene.extend(lock)
    assert left(scene, extended) <= timedelta(seconds=2)


def test_extend_never_shortens_a_long_lock_to_the_managers_default(scene: Scene) -> None:
    lock = scene.acquire(lock_timeout=120.0)
    extended = scene.extend(lock)
    assert left(scene, extended) > timedelta(seconds=60)


def test_a_lifetime_given_to_extend_is_kept_by_later_extensions(scene: Scene) -> None:
    lock = scene.acquire()
    lock = scene.extend(lock, lock_timeout=2.0)
    extended = scene.extend(lock)
    assert left(scene, extended) <= timedelta(seconds=2)


def test_continuing_a_pending_lock_keeps_the_lifetime_it_was_taken_with(
    rw_lock: MultiLock, doc: Doc, collection: Collection[Doc]
) -> None:
    reader = rw_lock.acquire(doc, tag="read")
    with pytest.raises(AssertiveLock) as caught:
        rw_lock.acquire(doc, tag="write", lock_timeout=600.0)
    rw_lock.release(doc, reader)
    granted = rw_lock.acquire(doc, lock=caught.value.lock)
    assert granted.expires_at - server_now(collection.database.client) > timedelta(seconds=300)


def test_a_pending_lock_keeps_its_lifetime_while_it_waits(
    rw_lock: MultiLock, doc: Doc, collection: Collection[Doc]
) -> None:
    rw_lock.acquire(doc, tag="read")
    with pytest.raises(AssertiveLock) as caught:
        rw_lock.acquire(doc, tag="write", lock_timeout=600.0)
    with pytest.raises(AssertiveLock) as again:
        rw_lock.acquire(doc, lock=caught.value.lock)
    assert again.value.lock.expires_at - server_now(collection.database.client) > timedelta(
        seconds=300
    )
    (entry,) = [h for h in stored_lock(collection)["holders"] if h["pending"]]
    assert entry["ttl"] == 600_000
