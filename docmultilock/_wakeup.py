"""Change streams that wake waiters, in two flavours: a thread, or a task per event loop.

``hold(wait=...)`` waits between attempts on a watch of the refusing document
(``_holding.wait_flow``'s ``Watch``/``WaitChange``/``Unwatch`` effects, performed by the
drivers through :class:`Watchers` and :class:`AsyncWatchers`). Whom an event wakes is
``_changes``' decision; this module only keeps the streams running:

* **One stream per collection per process** (per event loop for the async managers),
  opened with the first watch and closed once the last one is gone (within
  :data:`~docmultilock._changes.MAX_AWAIT_MS`). When the set of documents waited for
  changes, the stream is reopened with the new server-side filter from its resume token,
  so no event in between is lost; a document newly watched is woken once when the stream
  covers it, as a release may have come before.
* **Errors**: after an error the stream resumes from its resume token, and every waiter
  is woken, since an event may have been lost. When the stream cannot even be opened (a
  standalone server, a user without the ``changeStream`` privilege, a refused
  ``aggregate``), the collection is marked as having none, once per client, and logged
  at DEBUG; its waiters poll, and later ones poll from the start.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from pymongo.errors import OperationFailure, PyMongoError

from docmultilock._changes import MAX_AWAIT_MS, Interest, Interests, stream_pipeline
from docmultilock._flows import Watch

__all__ = ["AsyncWatchers", "Watchers"]

log = logging.getLogger("docmultilock")

#: Server errors after which a resume token is no use: start afresh (waking everyone).
_TOKEN_LOST = frozenset({280, 286})

#: The longest pause between attempts to reopen a failed stream, in seconds.
_REOPEN_MAX = 1.0

#: Server errors that say change streams are not to be had here: no privilege (13),
#: unknown command or stage (59, 115, 40324), not a replica set (40573).
_NO_STREAMS = frozenset({13, 59, 115, 40324, 40573})
#: Failed attempts to open a stream that never opened, after which the collection's
#: waiters poll even though no error said streams are unsupported.
_OPEN_ATTEMPTS = 5


def _interest(watch: Watch, notify: Callable[[], None], collection: Any) -> Interest:
    return Interest(
        watch.document_id,
        watch.exclusive,
        notify,
        watch.blockers,
        watch.entry,
        watch.fair,
        collection.codec_options,
    )


class _Invalidated(Exception):
    """The stream ended for good: its collection was dropped or renamed (an invalidate)."""


def _forget_token(exc: Exception, token: Any) -> Any:
    # After an invalidate no token resumes the stream: start afresh (waking everyone).
    if isinstance(exc, _Invalidated):
        return None
    if isinstance(exc, OperationFailure) and exc.code in _TOKEN_LOST:
        return None
    return token


def _reopen_pause(failures: int) -> float:
    return float(min(0.05 * 2**failures, _REOPEN_MAX))


def _gives_up(exc: PyMongoError, opened: bool, failures: int) -> bool:
    """True when a stream that never opened is not to be tried again: its waiters poll.

    A transient failure (a fail-over, a dropped connection) is not a server without change
    streams: the stream is tried again, a few times, before the collection is given up.
    """
    if opened:
        return False
    if isinstance(exc, OperationFailure) and exc.code in _NO_STREAMS:
        return True
    return failures >= _OPEN_ATTEMPTS


class _Unavailable:
    """The (client, collection) pairs where a change stream could not be opened."""

    def __init__(self) -> None:
        self._names: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()

    def __contains__(self, where: tuple[Any, str]) -> bool:
        client, name = where
        return name in self._names.get(client, ())

    def add(self, client: Any, name: str, exc: BaseException) -> None:
        self._names.setdefault(client, set()).add(name)
        log.debug("no change stream on %s (%r): waiters poll", name, exc)


class Subscription:
    """A waiter's watch, as the sync driver holds it (opaque to the flow)."""

    def __init__(self, stream: _Stream, interest: Interest, event: threading.Event) -> None:
        self._stream = stream
        self._interest = interest
        self._event = event

    def wait(self, seconds: float, entry: str | None) -> bool | None:
        """Sleep up to ``seconds`` unless woken; ``None`` when there is no stream to wait on."""
        stream = self._stream
        with stream.lock:
            if stream.unavailable:
                return None
            stream.interests.update(self._interest, entry)
        self._event.wait(seconds)
        with stream.lock:
            self._event.clear()
            return self._interest.take()

    def close(self) -> None:
        with self._stream.lock:
            self._stream.interests.remove(self._interest)


class _Stream:
    """One collection's stream on a thread of its own; its state is guarded by ``lock``."""

    def __init__(self, hub: Watchers, key: tuple[Any, ...], collection: Any, field: str) -> None:
        self.hub = hub
        self.lock = hub.lock
        self.key = key
        self.collection = collection
        self.interests = Interests(field, collection.codec_options)
        self.unavailable = False
        self.thread = threading.Thread(target=self._run, name="docmultilock-wakeup", daemon=True)

    def _ids_or_end(self) -> list[Any]:
        with self.lock:
            ids = self.interests.ids()
            if not ids and self.hub.streams.get(self.key) is self:
                del self.hub.streams[self.key]  # decided under the lock: a new watch starts anew
            return ids

    def _run(self) -> None:
        try:
            self._watch()
        except Exception:  # pymongo's errors are handled in _watch: a bug
            log.exception("the change stream on %s failed; its waiters poll", self.key[1])
        finally:
            with self.lock:
                self.unavailable = True  # a subscription left over polls
                self.interests.wake_all()
                if self.hub.streams.get(self.key) is self:
                    del self.hub.streams[self.key]

    def _watch(self) -> None:
        token: Any = None
        covered: list[Any] = []
        opened = False
        failures = 0
        while ids := self._ids_or_end():
            try:
                with self.collection.watch(
                    stream_pipeline(self.interests.field, ids),
                    full_document="updateLookup",
                    resume_after=token,
                    max_await_time_ms=MAX_AWAIT_MS,
                ) as stream:
                    opened, failures = True, 0
                    with self.lock:
                        self.interests.wake_all(
                            [i for i in ids if token is None or i not in covered]
                        )
                    covered = ids
                    while True:
                        change = stream.try_next()
                        token = stream.resume_token or token
                        with self.lock:
                            if change is not None:
                                self.interests.dispatch(change)
                            if self.interests.ids() != ids:
                                break
                        if not stream.alive:
                            raise _Invalidated
            except (PyMongoError, _Invalidated) as exc:
                failures += 1
                with self.lock:
                    self.interests.wake_all()  # an event may have been lost
                    if isinstance(exc, PyMongoError) and _gives_up(exc, opened, failures):
                        self.hub.unavailable.add(self.collection.database.client, self.key[1], exc)
                        return
                log.debug("change stream on %s failed; resuming: %r", self.key[1], exc)
                token = _forget_token(exc, token)
                self.hub.pause(_reopen_pause(failures))


class Watchers:
    """The process's change streams for the sync managers: one thread per collection."""

    def __init__(self, pause: Callable[[float], object] = time.sleep) -> None:
        self.pause = pause
        self._reset()

    def _reset(self) -> None:
        self.lock = threading.Lock()
        self.streams: dict[tuple[Any, ...], _Stream] = {}
        self.unavailable = _Unavailable()

    @staticmethod
    def current() -> Watchers:
        """The process's watchers."""
        return WATCHERS

    def subscribe(self, collection: Any, watch: Watch) -> Subscription | None:
        """Watch ``watch.document_id`` in ``collection``; ``None`` where no stream can be had."""
        field = watch.field
        client = collection.database.client
        key = (id(client), collection.full_name, field)
        event = threading.Event()
        interest = _interest(watch, event.set, collection)  # may raise: before any stream
        with self.lock:
            if (client, collection.full_name) in self.unavailable:
                return None
            stream = self.streams.get(key)
            start = stream is None
            if stream is None:
                stream = self.streams[key] = _Stream(self, key, collection, field)
            stream.interests.add(interest)
        if start:
            try:
                stream.thread.start()
            except Exception as exc:  # no thread to be had (a limit on threads): poll
                with self.lock:
                    stream.unavailable = True  # whoever joined it meanwhile polls too
                    stream.interests.wake_all()
                    if self.streams.get(key) is stream:
                        del self.streams[key]
                if not isinstance(exc, RuntimeError):
                    raise
                log.debug("no change-stream thread for %s (%r): waiters poll", key[1], exc)
                return None
        return Subscription(stream, interest, event)

    def open_streams(self) -> int:
        """How many streams run now (for tests and the bench)."""
        with self.lock:
            return len(self.streams)


#: The process's watchers.
WATCHERS = Watchers()

# A forked child has none of the parent's threads: it starts its own streams.
if hasattr(os, "register_at_fork"):  # pragma: no branch - absent on Windows only
    os.register_at_fork(after_in_child=WATCHERS._reset)


class AsyncSubscription:
    """A waiter's watch, as the async driver holds it (opaque to the flow)."""

    def __init__(self, stream: _AsyncStream, interest: Interest, event: asyncio.Event) -> None:
        self._stream = stream
        self._interest = interest
        self._event = event

    async def wait(self, seconds: float, entry: str | None) -> bool | None:
        """Sleep up to ``seconds`` unless woken; ``None`` when there is no stream to wait on."""
        if self._stream.unavailable:
            return None
        self._stream.interests.update(self._interest, entry)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._event.wait(), seconds)
        self._event.clear()
        return self._interest.take()

    def close(self) -> None:
        self._stream.interests.remove(self._interest)


class _AsyncStream:
    """One collection's stream as a task of the loop; single-threaded, so no lock."""

    def __init__(
        self, hub: AsyncWatchers, key: tuple[Any, ...], collection: Any, field: str
    ) -> None:
        self.hub = hub
        self.key = key
        self.collection = collection
        self.interests = Interests(field, collection.codec_options)
        self.unavailable = False
        self.task: asyncio.Task[None] | None = None

    def _ids_or_end(self) -> list[Any]:
        ids = self.interests.ids()
        if not ids and self.hub.streams.get(self.key) is self:
            del self.hub.streams[self.key]
        return ids

    async def run(self) -> None:
        try:
            await self._watch()
        except Exception:  # pymongo's errors are handled in _watch: a bug
            log.exception("the change stream on %s failed; its waiters poll", self.key[1])
        finally:
            self.unavailable = True  # a subscription left over polls
            self.interests.wake_all()
            if self.hub.streams.get(self.key) is self:
                del self.hub.streams[self.key]

    async def _watch(self) -> None:
        token: Any = None
        covered: list[Any] = []
        opened = False
        failures = 0
        while ids := self._ids_or_end():
            try:
                stream = await self.collection.watch(
                    stream_pipeline(self.interests.field, ids),
                    full_document="updateLookup",
                    resume_after=token,
                    max_await_time_ms=MAX_AWAIT_MS,
                )
                async with stream:
                    opened, failures = True, 0
                    self.interests.wake_all([i for i in ids if token is None or i not in covered])
                    covered = ids
                    while True:
                        change = await stream.try_next()
                        token = stream.resume_token or token
                        if change is not None:
                            self.interests.dispatch(change)
                        if self.interests.ids() != ids:
                            break
                        if not stream.alive:
                            raise _Invalidated
            except (PyMongoError, _Invalidated) as exc:
                failures += 1
                self.interests.wake_all()  # an event may have been lost
                if isinstance(exc, PyMongoError) and _gives_up(exc, opened, failures):
                    self.hub.unavailable.add(self.collection.database.client, self.key[1], exc)
                    return
                log.debug("change stream on %s failed; resuming: %r", self.key[1], exc)
                token = _forget_token(exc, token)
                await self.hub.pause(_reopen_pause(failures))


#: The task watchers of each event loop that has one (a loop's end with the loop).
_LOOP_WATCHERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncWatchers] = (
    weakref.WeakKeyDictionary()
)


class AsyncWatchers:
    """An event loop's change streams for the async managers: one task per collection."""

    def __init__(self, pause: Callable[[float], Awaitable[object]] = asyncio.sleep) -> None:
        self.streams: dict[tuple[Any, ...], _AsyncStream] = {}
        self.unavailable = _Unavailable()
        self.pause = pause

    @staticmethod
    def current() -> AsyncWatchers:
        """The running loop's watchers (made on first use)."""
        loop = asyncio.get_running_loop()
        watchers = _LOOP_WATCHERS.get(loop)
        if watchers is None:
            watchers = _LOOP_WATCHERS[loop] = AsyncWatchers()
        return watchers

    def subscribe(self, collection: Any, watch: Watch) -> AsyncSubscription | None:
        """Watch ``watch.document_id`` in ``collection``; ``None`` where no stream can be had."""
        field = watch.field
        client = collection.database.client
        if (client, collection.full_name) in self.unavailable:
            return None
        event = asyncio.Event()
        interest = _interest(watch, event.set, collection)  # may raise: before any stream
        key = (id(client), collection.full_name, field)
        stream = self.streams.get(key)
        if stream is None:
            stream = self.streams[key] = _AsyncStream(self, key, collection, field)
            # In a context of its own: the task serves every waiter, so it must not inherit
            # the first one's context (a ``pymongo.timeout()`` deadline above all).
            loop = asyncio.get_running_loop()
            stream.task = contextvars.Context().run(
                loop.create_task, stream.run(), name="docmultilock-wakeup"
            )
        stream.interests.add(interest)
        return AsyncSubscription(stream, interest, event)

    def open_streams(self) -> int:
        """How many streams run now on this loop (for tests and the bench)."""
        return len(self.streams)
