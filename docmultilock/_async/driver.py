"""The async driver: runs a core flow, performing its effects on an async collection.

This is the only place the async flavour talks to the server. The flows decide; this module
only sends what they yield and hands back results or the exceptions pymongo raised.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any, TypeVar

import pymongo
from pymongo import ReturnDocument
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.mongo_client import AsyncMongoClient
from pymongo.errors import CollectionInvalid, OperationFailure
from pymongo.write_concern import WriteConcern

from docmultilock._async.wakeup import AsyncWatchers
from docmultilock._calls import Acquisition, Conversion
from docmultilock._command import SIMPLE_COLLATION, Command
from docmultilock._failures import COMMAND_NOT_FOUND, already_made
from docmultilock._flavour import unclaimed
from docmultilock._flows import (
    Aggregate,
    Clock,
    Effect,
    Flow,
    MakeTtlIndex,
    Reread,
    Send,
    SendMany,
    ServerTime,
    Sleep,
    Unwatch,
    WaitChange,
    Watch,
)
from docmultilock._lock import Lock, as_utc
from docmultilock._lock_flows import release
from docmultilock._parts import Parts
from docmultilock._settle import AsyncSettle
from docmultilock.errors import LockError
from docmultilock.options import ErrorFactory, raised_for

__all__ = ["AsyncMongoIO", "AsyncRunner", "server_hello"]

T = TypeVar("T")


def _deadline(seconds: float | None) -> contextlib.AbstractContextManager[None]:
    """Bound every operation inside by pymongo's client-side operation timeout.

    A plain function returning pymongo's own context manager (no generator-based one on
    the per-command path); nothing at all without a bound.
    """
    return contextlib.nullcontext() if seconds is None else pymongo.timeout(seconds)


class AsyncMongoIO:
    """Performs flow effects on one collection (a view per write concern, made once)."""

    def __init__(self, collection: AsyncCollection[Any]) -> None:
        self.collection = collection
        self._views: dict[int | str, AsyncCollection[Any]] = {}

    def _view(self, w: int | str) -> AsyncCollection[Any]:
        view = self._views.get(w)
        if view is None:
            view = self.collection.with_options(write_concern=WriteConcern(w=w))
            self._views[w] = view
        return view

    async def perform(self, effect: Effect, clock: Clock) -> Any:
        """Do what ``effect`` says; return its result (pymongo's errors propagate)."""
        if isinstance(effect, Send):  # every command: the view's lookup and the bound inline
            view = self._views.get(effect.w)
            if view is None:
                view = self._view(effect.w)
            timeout = effect.timeout
            with contextlib.nullcontext() if timeout is None else pymongo.timeout(timeout):
                sending = _execute(view, effect.command)
                if effect.settle:  # seen through, so that a withdrawal comes after it
                    return await AsyncSettle.reply(sending, effect.timeout)
                return await sending
        if isinstance(effect, SendMany):
            with _deadline(effect.timeout):
                result = await self._view(effect.w).update_many(
                    effect.command.filter, effect.command.update, collation=SIMPLE_COLLATION
                )
            return result.modified_count
        if isinstance(effect, Sleep):
            await clock.asleep(effect.seconds)
            return None
        if isinstance(effect, Reread):
            with _deadline(effect.timeout):
                return await self.collection.find_one(
                    effect.filter, projection=effect.projection, collation=SIMPLE_COLLATION
                )
        if isinstance(effect, ServerTime):
            with _deadline(effect.timeout):
                hello = await server_hello(self.collection.database.client)
            return as_utc(hello["localTime"])
        if isinstance(effect, Aggregate):
            with _deadline(effect.timeout):
                cursor = await self.collection.aggregate(
                    effect.pipeline, collation=SIMPLE_COLLATION
                )
                return await cursor.to_list()
        if isinstance(effect, MakeTtlIndex):
            with _deadline(effect.timeout):
                # Create the collection first, so the index never creates it implicitly:
                # on the embedded test server, an index build that creates a collection at
                # the same moment as an upsert does can stall it (docs/server.md). Another
                # process creating either at the same time is as good as done.
                try:
                    await self.collection.database.create_collection(self.collection.name)
                except (CollectionInvalid, OperationFailure) as exc:
                    if not already_made(exc):
                        raise
                try:
                    await self.collection.create_index(
                        [(f"{effect.field}.expires", 1)], expireAfterSeconds=0, name=effect.name
                    )
                except OperationFailure as exc:
                    if not already_made(exc):
                        raise
            return None
        if isinstance(effect, Watch):
            return AsyncWatchers.current().subscribe(self.collection, effect)
        if isinstance(effect, WaitChange):
            return await effect.watch.wait(effect.seconds, effect.entry)
        if isinstance(effect, Unwatch):
            effect.watch.close()
            return None
        raise TypeError(f"not an effect: {effect!r}")  # pragma: no cover


async def server_hello(client: AsyncMongoClient[Any]) -> Mapping[str, Any]:
    """``hello``, or ``isMaster`` from a server that has no ``hello`` (before 4.4.2)."""
    try:
        reply: Mapping[str, Any] = await client.admin.command("hello")
    except OperationFailure as exc:
        if exc.code != COMMAND_NOT_FOUND:
            raise
        reply = await client.admin.command("isMaster")
    return reply


async def _execute(collection: AsyncCollection[Any], command: Command) -> Mapping[str, Any] | None:
    if command.delete:
        deleted: Mapping[str, Any] | None = await collection.find_one_and_delete(
            command.filter, projection=command.projection, collation=SIMPLE_COLLATION
        )
        return deleted
    reply: Mapping[str, Any] | None = await collection.find_one_and_update(
        command.filter,
        command.update,
        projection=command.projection,
        return_document=ReturnDocument.AFTER if command.return_after else ReturnDocument.BEFORE,
        upsert=command.upsert,
        collation=SIMPLE_COLLATION,
    )
    return reply


class AsyncRunner:
    """Runs one manager's flows with this driver, and maps their errors in one place.

    ``clock`` is where flows read time and the driver sleeps (tests replace it);
    ``error_factory`` turns a :class:`~docmultilock.LockError` into what public methods
    raise.
    """

    def __init__(self, io: AsyncMongoIO, clock: Clock, error_factory: ErrorFactory | None) -> None:
        self.io = io
        self.clock = clock
        self._error_factory = error_factory

    async def __call__(self, flow: Flow[T], *, mapped: bool = True) -> T:
        """Run ``flow`` to its end: perform each effect, send back its result or throw its error.

        Every exception of an effect is thrown into the flow, a cancellation included, so a
        flow can clean up (release a pending entry) before it re-raises. A LockError leaves
        as ``error_factory`` makes it, unless not ``mapped``. (The loop is here, not in a
        function this calls: a call less per operation.)
        """
        perform, clock = self.io.perform, self.clock
        result: Any = None
        error: BaseException | None = None
        try:
            while True:
                try:
                    effect = flow.send(result) if error is None else flow.throw(error)
                except StopIteration as done:
                    value: T = done.value
                    return value
                result, error = None, None
                try:
                    result = await perform(effect, clock)
                except BaseException as exc:
                    error = exc
        except LockError as err:
            if not mapped:
                raise
            raise self.mapped(err)  # noqa: B904 - mapped() sets __cause__ itself

    async def unmapped(self, flow: Flow[T]) -> T:
        """Run ``flow``, its errors as they are (for the keep-alive and ``hold()``'s exits)."""
        return await self(flow, mapped=False)

    def handed_out(self, parts: Parts, call: Acquisition | Conversion, lock: Lock) -> Lock:
        """``lock``, granted by ``call``, as a public method hands it out.

        Entered by mistake (``with locks.acquire(...)``), it releases itself before it
        raises the ``TypeError`` (``_flavour.NotAHold``): the caller never received it.
        """
        return unclaimed(
            lock, lambda given: self.unmapped(release(parts, call.held(given), clock=self.clock))
        )

    def mapped(self, err: LockError) -> BaseException:
        """What a public method raises for ``err`` (:func:`~docmultilock.options.raised_for`)."""
        return raised_for(err, self._error_factory)
