"""Shared fixtures: a real server (embedded or DOCMULTILOCK_MONGODB_URI) and fresh collections.

The server, client and per-test collection come from docmultilock's own pytest plugin
(``docmultilock.pytest_plugin``), the same fixtures users get for their tests.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType
from typing import Any

import pytest
from pymongo import MongoClient, uri_parser
from pymongo.collection import Collection

from docmultilock import MultiLock, WriteLock
from docmultilock._wakeup import WATCHERS, AsyncWatchers
from docmultilock.pytest_plugin import CLIENT_OPTIONS
from tests.flavours import MakeLock, Portal, Twins, flavoured
from tests.helpers import USER_FIELDS, CommandLog, Doc, Proxied
from tests.proxy import ReplyCutter

#: The fixtures that run a suite over every lock manager (``subject``, ``build``, ...).
pytest_plugins = ["tests.subjects"]


@pytest.fixture(scope="session")
def portal() -> Iterator[Portal]:
    """The event loop the async flavour's managers run on, for the whole session."""
    running = Portal()
    try:
        yield running
    finally:
        running.close()


@pytest.fixture(params=["sync", "async"])
def flavour(request: pytest.FixtureRequest) -> str:
    """Each test that asks runs with the sync managers, then with their async twins."""
    flavour: str = request.param
    return flavour


@pytest.fixture
def twins(portal: Portal) -> Iterator[Twins]:
    """The test's async clients, closed when it ends."""
    made = Twins(portal)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def make_lock(flavour: str, twins: Twins) -> MakeLock:
    """``make_lock(cls, collection, **options)``: ``cls`` in the test's flavour."""
    return functools.partial(flavoured, flavour, twins)


@pytest.fixture
def open_streams(flavour: str, twins: Twins) -> Callable[[], int]:
    """How many change streams the flavour's watchers run now."""
    if flavour == "sync":
        return WATCHERS.open_streams

    async def count() -> int:
        return AsyncWatchers.current().open_streams()

    return lambda: twins.portal.call(count())


@pytest.fixture(scope="session")
def django_recipe() -> ModuleType:
    """The Django recipe, with Django configured for it.

    Once per process, for every test that uses Django: Django's settings are per process
    (the recipe's configuration is the process's; ``tests/test_mapper_django.py`` adds its
    MongoDB database to it).
    """
    from tests.test_examples import load_example

    recipe = load_example("recipe_django.py")
    recipe.configure()
    return recipe


@pytest.fixture
def uri(docmultilock_uri: str) -> str:
    return docmultilock_uri


@pytest.fixture
def client(docmultilock_client: MongoClient[Doc]) -> MongoClient[Doc]:
    return docmultilock_client


@pytest.fixture
def collection(docmultilock_collection: Collection[Doc]) -> Collection[Doc]:
    return docmultilock_collection


@pytest.fixture
def doc(collection: Collection[Doc]) -> dict[str, Any]:
    """Insert the test document ``{"_id": 1, **USER_FIELDS}``; return its filter."""
    collection.insert_one({"_id": 1, **USER_FIELDS})
    return {"_id": 1}


@pytest.fixture
def write_lock(make_lock: MakeLock, collection: Collection[Doc]) -> WriteLock:
    """A write lock of the test's flavour, with a roomy lifetime."""
    return make_lock(WriteLock, collection, lock_timeout=10.0)


@pytest.fixture
def rw_lock(make_lock: MakeLock, collection: Collection[Doc]) -> MultiLock:
    """The readers-writer table of the issue, with roomy lifetimes, of the test's flavour."""
    return make_lock(
        MultiLock,
        collection,
        lock_timeouts={"read": 10.0, "write": 10.0},
        lock_relationships={
            "read": {"cooperative": ["write"]},
            "write": {"cooperative": ["write"], "assertive": ["read"]},
        },
    )


@pytest.fixture
def counted(uri: str, collection: Collection[Doc]) -> Iterator[tuple[Collection[Doc], CommandLog]]:
    """The test collection seen through a client that logs every command it sends."""
    log = CommandLog()
    counting: MongoClient[Doc] = MongoClient(uri, event_listeners=[log], **CLIENT_OPTIONS)
    try:
        yield counting[collection.database.name][collection.name], log
    finally:
        counting.close()


@pytest.fixture(scope="session")
def is_embedded(docmultilock_client: MongoClient[Doc]) -> bool:
    """True when the server is the embedded SecantusDB rather than MongoDB."""
    return "secantusVersion" in docmultilock_client.admin.command("buildInfo")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "embedded_only(why): needs the embedded SecantusDB server itself (a server of its own,"
        " its admin commands or its behaviour); skipped, saying why, on a real MongoDB",
    )


@pytest.fixture
def require_embedded(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """``require_embedded(why)``: skip the test unless the session's server is the embedded one.

    The one way a test says it cannot run on a real MongoDB (``DOCMULTILOCK_MONGODB_URI``):
    mark it ``@pytest.mark.embedded_only("why")``, or call this for a part of a test. Fail
    points are no reason: MongoDB has them with ``enableTestCommands=1``.
    """

    def require(why: str) -> None:
        if not request.getfixturevalue("is_embedded"):
            pytest.skip(f"needs the embedded server: {why}")

    return require


@pytest.fixture(autouse=True)
def _embedded_only(request: pytest.FixtureRequest) -> None:
    """Skip a test marked ``embedded_only(why)`` when the session's server is MongoDB."""
    marker = request.node.get_closest_marker("embedded_only")
    if marker is None:
        return
    if len(marker.args) != 1 or not isinstance(marker.args[0], str) or marker.kwargs:
        raise TypeError(f"{request.node.nodeid}: embedded_only takes one reason, a string")
    require: Callable[[str], None] = request.getfixturevalue("require_embedded")
    require(marker.args[0])


@pytest.fixture
def fail_point(client: MongoClient[Doc]) -> Iterator[Callable[..., None]]:
    """Arm ``failCommand`` (findAndModify unless ``commands`` says); always switched off after.

    ``arm(times=1, commands=("findAndModify",), **data)`` with mongod's ``failCommand``
    data: ``errorCode``, ``closeConnection``, ``writeConcernError`` (applied, then the reply
    reports an error: a lost reply), ``blockConnection``/``blockTimeMS``.
    """

    def arm(times: int = 1, commands: Sequence[str] = ("findAndModify",), **data: Any) -> None:
        client.admin.command(
            "configureFailPoint",
            "failCommand",
            mode={"times": times},
            data={"failCommands": list(commands), **data},
        )

    yield arm
    client.admin.command("configureFailPoint", "failCommand", mode="off")


@pytest.fixture
def cutter(client: MongoClient[Doc]) -> Iterator[ReplyCutter]:
    """A reply-dropping proxy in front of the session's server (its primary)."""
    address = client.address
    assert address is not None
    with ReplyCutter(address) as proxy:
        yield proxy


@pytest.fixture
def proxied(
    uri: str, cutter: ReplyCutter, collection: Collection[Doc], twins: Twins
) -> Iterator[Proxied]:
    """``proxied(**options)``: the test collection through ``cutter``, with client options.

    The defaults are the test clients' (``timeoutMS``: an operation timeout, so pymongo
    sends each attempt with the ``maxTimeMS`` left) and pymongo's (``retryWrites=True``).
    """
    parsed = uri_parser.parse_uri(uri)
    credentials: Doc = {}
    if parsed["username"]:
        credentials = {
            "username": parsed["username"],
            "password": parsed["password"],
            "authSource": parsed["options"].get("authsource", "admin"),
        }
    clients: list[MongoClient[Doc]] = []

    def through(**options: Any) -> Collection[Doc]:
        client: MongoClient[Doc] = MongoClient(
            "127.0.0.1",
            cutter.port,
            directConnection=True,
            **{**CLIENT_OPTIONS, **credentials, **options},
        )
        clients.append(client)
        return client[collection.database.name][collection.name]

    try:
        yield through
    finally:
        # Before the proxy stops: a client closed after it would spend its server selection
        # timeout (30 s) trying to end its sessions through it.
        for client in clients:
            twins.close_twin(client)
            client.close()
