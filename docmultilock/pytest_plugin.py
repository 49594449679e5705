"""pytest fixtures for testing code that uses docmultilock against a real server.

Installed as a pytest plugin with the package. Fixtures:

* ``docmultilock_uri`` (session): ``DOCMULTILOCK_MONGODB_URI`` if set, else one embedded
  server for the whole session (with fail points enabled).
* ``docmultilock_client`` (session): a :class:`pymongo.MongoClient` on it.
* ``docmultilock_collection``: a fresh, empty collection per test, dropped afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.collection import Collection

from docmultilock.testing import mongodb_uri

__all__ = ["docmultilock_client", "docmultilock_collection", "docmultilock_uri"]

#: Every test client gets an operation limit, so a stuck server fails a test instead of CI.
CLIENT_OPTIONS: dict[str, Any] = {"timeoutMS": 30_000, "heartbeatFrequencyMS": 500}


@pytest.fixture(scope="session")
def docmultilock_uri() -> Iterator[str]:
    """The URI of the server the session's tests use."""
    with mongodb_uri(enable_test_commands=True) as uri:
        yield uri


@pytest.fixture(scope="session")
def docmultilock_client(docmultilock_uri: str) -> Iterator[MongoClient[dict[str, Any]]]:
    """A client on the session's server."""
    client: MongoClient[dict[str, Any]] = MongoClient(docmultilock_uri, **CLIENT_OPTIONS)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def docmultilock_collection(
    docmultilock_client: MongoClient[dict[str, Any]],
) -> Iterator[Collection[dict[str, Any]]]:
    """A fresh collection for one test, dropped afterwards."""
    collection = docmultilock_client["docmultilock_test"][f"t_{uuid.uuid4().hex[:12]}"]
    try:
        yield collection
    finally:
        collection.drop()
