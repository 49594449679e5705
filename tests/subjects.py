"""Every lock manager as a test subject: how to build it, its keys, where its state lives.

The suites that run over every manager (``hold()``, lock sets, the contract) take the
``subject`` (or ``build``) fixture; a new manager is one more line in :data:`SUBJECTS`.
A suite whose rule holds for only some managers takes the fixture of that group:
``document_subject`` (the managers that lock a user's document: :data:`IN_DOCUMENTS`),
``tagged_subject`` (those that take a tag table: :data:`TAGGED`), or ``document_make``
(only how to build one of the first, for a suite that makes its own documents).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from pymongo.collection import Collection

from docmultilock import HeldLock, Lock, LockConflict, MultiLock, NamedLocks, WriteLock
from tests.flavours import MakeLock, Twins, flavoured
from tests.helpers import USER_FIELDS

Doc = dict[str, Any]
Manager = WriteLock | MultiLock | NamedLocks


@dataclass
class Subject:
    """One lock manager class under test: how to build it, its keys, where its state lives."""

    make: Callable[..., Manager]  # (collection, **options) -> a manager
    collection: Collection[Doc]  # where the lock state is stored
    tag: str | None  # what hold() is given as tag=
    new_key: Callable[[int], Any]  # a lockable key number i (creating what it needs)
    state: Callable[[Any], Doc]  # key -> filter of the document holding its lock state
    key: Any = None
    locks: Manager = field(init=False)

    def __post_init__(self) -> None:
        self.key = self.new_key(1)
        self.locks = self.make(self.collection)

    def manager(self, **options: Any) -> Manager:
        return self.make(self.collection, **options)

    def hold(
        self, locks: Manager | None = None, key: Any = None, **kwargs: Any
    ) -> contextlib.AbstractContextManager[HeldLock]:
        locks = self.locks if locks is None else locks
        return locks.hold(self.key if key is None else key, tag=self.tag, **kwargs)

    def acquire(self, locks: Manager | None = None, key: Any = None, **kwargs: Any) -> Lock:
        locks = self.locks if locks is None else locks
        return locks.acquire(self.key if key is None else key, tag=self.tag, **kwargs)

    def stored(self, key: Any = None) -> Any:
        found = self.collection.find_one(self.state(self.key if key is None else key))
        return None if found is None else found.get("lock")

    def holders(self) -> list[Doc]:
        stored = self.stored()
        return [] if stored is None else list(stored.get("holders", []))

    def steal(self) -> None:
        """What an administrator does to break a lock: remove the lock field."""
        self.collection.update_one(self.state(self.key), {"$unset": {"lock": ""}})

    def is_refused(self) -> bool:
        """True when another manager cannot take the lock now."""
        try:
            with self.hold(self.manager()):
                return False
        except LockConflict:
            return True


Build = Callable[[Collection[Doc]], Subject]


Builder = Callable[[MakeLock, Collection[Doc]], Subject]


#: The managers whose lock lives in a user's document.
DocumentManager = WriteLock | MultiLock
#: Builds one over a collection with options: ``(collection, **options) -> manager``.
DocumentMake = Callable[..., DocumentManager]


def _maker(cls: type[DocumentManager], make_lock: MakeLock) -> DocumentMake:
    def make(collection: Collection[Doc], **options: Any) -> DocumentManager:
        return make_lock(cls, collection, **options)

    return make


def _in_document(cls: type[DocumentManager], tag: str | None) -> Builder:
    def build(make_lock: MakeLock, collection: Collection[Doc]) -> Subject:
        def new_key(i: int) -> Doc:
            collection.insert_one({"_id": i, **USER_FIELDS})
            return {"_id": i}

        return Subject(_maker(cls, make_lock), collection, tag, new_key, state=lambda key: key)

    return build


def _named(make_lock: MakeLock, collection: Collection[Doc]) -> Subject:
    def make(collection: Collection[Doc], **options: Any) -> NamedLocks:
        return make_lock(NamedLocks, collection.database, collection.name, **options)

    return Subject(make, collection, None, lambda i: f"job-{i}", state=lambda name: {"_id": name})


#: Every lock manager hold() runs on; a new manager is one more line here.
SUBJECTS: dict[str, Builder] = {
    "WriteLock": _in_document(WriteLock, None),
    "MultiLock": _in_document(MultiLock, "write"),
    "NamedLocks": _named,
}

#: The managers whose lock lives in a user's document, by class.
IN_DOCUMENTS: dict[str, type[DocumentManager]] = {
    "WriteLock": WriteLock,
    "MultiLock": MultiLock,
}

#: The managers that take a tag table (``lock_relationships``, ``lock_limits``).
TAGGED = ("MultiLock", "NamedLocks")


@pytest.fixture(params=sorted(SUBJECTS))
def build(request: pytest.FixtureRequest, make_lock: MakeLock) -> Build:
    """Builds the subject of each manager, in the test's flavour."""
    return functools.partial(SUBJECTS[request.param], make_lock)


@pytest.fixture
def subject(build: Build, collection: Collection[Doc]) -> Subject:
    return build(collection)


@pytest.fixture(params=sorted(IN_DOCUMENTS))
def document_build(request: pytest.FixtureRequest, make_lock: MakeLock) -> Build:
    """Builds the subject of each manager that locks a user's document, in the test's flavour."""
    return functools.partial(SUBJECTS[request.param], make_lock)


@pytest.fixture
def document_subject(document_build: Build, collection: Collection[Doc]) -> Subject:
    return document_build(collection)


@pytest.fixture(params=sorted(IN_DOCUMENTS))
def document_make(request: pytest.FixtureRequest, make_lock: MakeLock) -> DocumentMake:
    """How to build each manager that locks a user's document, in the test's flavour."""
    return _maker(IN_DOCUMENTS[request.param], make_lock)


@pytest.fixture(params=TAGGED)
def tagged_build(request: pytest.FixtureRequest, make_lock: MakeLock) -> Build:
    """Builds the subject of each manager that takes a tag table, in the test's flavour."""
    return functools.partial(SUBJECTS[request.param], make_lock)


@pytest.fixture
def tagged_subject(tagged_build: Build, collection: Collection[Doc]) -> Subject:
    return tagged_build(collection)


@pytest.fixture(params=sorted(SUBJECTS))
def sync_subject(
    request: pytest.FixtureRequest, twins: Twins, collection: Collection[Doc]
) -> Subject:
    """The subject of each manager in the sync flavour only (its keep-alive is threads)."""
    return SUBJECTS[request.param](functools.partial(flavoured, "sync", twins), collection)


@pytest.fixture(params=sorted(SUBJECTS))
def async_subject(
    request: pytest.FixtureRequest, twins: Twins, collection: Collection[Doc]
) -> Subject:
    """The subject of each manager in the async flavour only (its keep-alive is tasks)."""
    return SUBJECTS[request.param](functools.partial(flavoured, "async", twins), collection)


__all__ = [
    "IN_DOCUMENTS",
    "SUBJECTS",
    "TAGGED",
    "Build",
    "Builder",
    "DocumentMake",
    "DocumentManager",
    "Manager",
    "Subject",
    "async_subject",
    "build",
    "document_build",
    "document_make",
    "document_subject",
    "subject",
    "sync_subject",
    "tagged_build",
    "tagged_subject",
]
