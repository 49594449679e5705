"""One test body for both flavours: async lock managers seen through the sync methods.

An async manager runs on a :class:`Portal`, an event loop on a thread of its own that runs
for the whole session, so its keep-alive tasks run between calls as they would in an
application. :class:`AsyncView` gives it the sync manager's methods: each coroutine is run
on the portal and its result (or exception) handed back. The contract suites build their
managers through the ``flavoured`` fixture (``tests/conftest.py``) and so run twice.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import inspect
import sys
import threading
import time
import warnings
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, Protocol, TypeVar, cast

from pymongo import AsyncMongoClient, MongoClient
from pymongo.collection import Collection
from pymongo.database import Database

import docmultilock

T = TypeVar("T")

#: A call on the portal that takes longer than this fails the test instead of hanging it.
CALL_TIMEOUT = 120.0


class Portal:
    """An event loop running on a daemon thread; :meth:`call` runs a coroutine on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="test-portal", daemon=True
        )
        self._thread.start()

    def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the loop and return its result (or raise its exception)."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(CALL_TIMEOUT)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


class Twins:
    """One test's async clients, each configured like a sync client of the test.

    Made per test and closed at its end, so no socket outlives the test; the sync clients
    are kept referenced so that their ids, the keys here, are not reused meanwhile.
    """

    def __init__(self, portal: Portal) -> None:
        self.portal = portal
        self._clients: dict[int, tuple[MongoClient[Any], AsyncMongoClient[Any]]] = {}

    def client(self, client: MongoClient[Any]) -> AsyncMongoClient[Any]:
        """An async client configured like ``client`` (listeners included), made once."""
        pair = self._clients.get(id(client))
        if pair is None:
            pair = (client, AsyncMongoClient(**client._init_kwargs))
            self._clients[id(client)] = pair
        return pair[1]

    def of(self, where: Collection[Any] | Database[Any]) -> Any:
        """The async collection or database of the same name on the twin client."""
        if isinstance(where, Collection):
            return self.client(where.database.client)[where.database.name][where.name]
        return self.client(where.client)[where.name]

    def close_twin(self, client: MongoClient[Any]) -> None:
        """Close ``client``'s async twin now, if one was made (before what it talks to goes)."""
        pair = self._clients.pop(id(client), None)
        if pair is not None:
            self.portal.call(pair[1].close())

    def close(self) -> None:
        if not self._clients:
            return
        for _, twin in self._clients.values():
            self.portal.call(twin.close())
        self._clients.clear()
        _collect_unclosed_sockets()


def _collect_unclosed_sockets() -> None:
    """Collect, quietly, the sockets pymongo's async client left unclosed in this test.

    pymongo's async client (4.20) can leave the socket of a failed connection attempt (a
    stopped server) unclosed, and its ``ResourceWarning`` would otherwise be raised in
    whichever later test the garbage collector happens to run. The sync client does not.
    """

    def hook(unraisable: Any) -> None:
        if not _is_unclosed_socket(unraisable.exc_value):
            previous(unraisable)

    previous = sys.unraisablehook
    sys.unraisablehook = hook
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "unclosed <socket", ResourceWarning)
            gc.collect()
    finally:
        sys.unraisablehook = previous


def _is_unclosed_socket(error: object) -> bool:
    return isinstance(error, ResourceWarning) and str(error).startswith("unclosed <socket")


class _EventView:
    """An :class:`asyncio.Event` of the portal's loop behind ``threading.Event``'s API."""

    def __init__(self, event: asyncio.Event) -> None:
        self._event = event

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._event.is_set():
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.005)
        return True


class _Forwarding:
    """Attributes of the wrapped async object; its coroutine methods run on the portal."""

    wrapped: Any
    _portal: Portal

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.wrapped, name)
        if inspect.iscoroutinefunction(attribute):
            return lambda *args, **kwargs: self._portal.call(attribute(*args, **kwargs))
        return attribute

    def __repr__(self) -> str:
        return repr(self.wrapped)


class HeldView(_Forwarding):
    """An :class:`~docmultilock.AsyncHeldLock` (or ``AsyncHeldLocks``) behind the sync API."""

    def __init__(
        self, held: docmultilock.AsyncHeldLock | docmultilock.AsyncHeldLocks, portal: Portal
    ) -> None:
        self.wrapped = held
        self._portal = portal
        self.lost = _EventView(held.lost)


class HoldView:
    """The async ``hold()`` context behind a plain ``with``."""

    def __init__(self, hold: Any, portal: Portal) -> None:
        self._hold = hold
        self._portal = portal

    def __enter__(self) -> HeldView:
        return HeldView(self._portal.call(self._hold.__aenter__()), self._portal)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._portal.call(self._hold.__aexit__(exc_type, exc, traceback))


class AsyncView(_Forwarding):
    """An async lock manager behind the sync manager's methods.

    ``collection`` is the sync collection the lock state lives in, so a test reads the
    stored state the same way in both flavours.
    """

    def __init__(self, manager: Any, portal: Portal, collection: Collection[Any]) -> None:
        object.__setattr__(self, "wrapped", manager)
        object.__setattr__(self, "_portal", portal)
        object.__setattr__(self, "collection", collection)

    def __getattr__(self, name: str) -> Any:
        if name in ("hold", "hold_all"):
            hold = getattr(self.wrapped, name)
            return lambda *args, **kwargs: HoldView(hold(*args, **kwargs), self._portal)
        return super().__getattr__(name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.wrapped, name, value)


class MakeLock(Protocol):
    """``make_lock(cls, where, *args, **options)``: ``cls`` built in a test's flavour."""

    def __call__(self, cls: type[T], where: Any, /, *args: Any, **options: Any) -> T: ...


def flavoured(
    flavour: str, twins: Twins, cls: type[T], where: Any, /, *args: Any, **options: Any
) -> T:
    """``cls(where, *args, **options)``, or its async twin seen through an :class:`AsyncView`.

    ``where`` is a sync collection or database; the async twin gets the one of the same
    name on an async client configured like ``where``'s client.
    """
    if flavour == "sync":
        return cast(T, cast(Any, cls)(where, *args, **options))
    twin_cls = getattr(docmultilock, f"Async{cls.__name__}")
    manager = twin_cls(twins.of(where), *args, **options)
    collection = where if isinstance(where, Collection) else where[args[0]]
    return cast(T, AsyncView(manager, twins.portal, collection))


__all__ = ["AsyncView", "HeldView", "HoldView", "MakeLock", "Portal", "Twins", "flavoured"]
