# Generated from docmultilock/_async/wakeup.py by tools/unasync.py: do not edit.
# Edit the async source and run `python tools/unasync.py`.
"""The change-stream loop that wakes waiters: one stream per collection, while watched.

What the streams are for, and how they behave, is told in ``docmultilock._wakeup``; whom
an event wakes is ``_changes``' decision, and what to do after an error ``_resumption``'s.
This module only runs the loop, written once for both flavours:

* each stream runs on a task (or thread) of its own, started by ``start``; the
  watchers are kept by :class:`~docmultilock._concurrency.PerProcess`;
* the state a stream shares with its subscribers is guarded by the lock of
  ``create_lock`` (none for tasks, which take turns), so no ``with self.lock:``
  block may suspend.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from pymongo.errors import PyMongoError

from docmultilock._changes import MAX_AWAIT_MS, Interest, Interests, stream_pipeline
from docmultilock._concurrency import PerProcess, create_lock, start, wait_event
from docmultilock._flows import SYSTEM_CLOCK, Watch
from docmultilock._resumption import (
    Invalidated,
    Unavailable,
    forget_token,
    gives_up,
    make_interest,
    newly_covered,
    reopen_pause,
)

__all__ = ["Subscription", "Watchers"]

log = logging.getLogger("docmultilock")

#: The name of what runs a stream.
STREAM_NAME = "docmultilock-wakeup"


class Subscription:
    """A waiter's watch, as the driver holds it (opaque to the flow)."""

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
        wait_event(self._event, seconds)
        with stream.lock:
            self._event.clear()
            return self._interest.take()

    def close(self) -> None:
        """Stop watching."""
        with self._stream.lock:
            self._stream.interests.remove(self._interest)


class _Stream:
    """One collection's stream; its state is guarded by its watchers' ``lock``."""

    def __init__(self, hub: Watchers, key: tuple[Any, ...], collection: Any, field: str) -> None:
        self.hub = hub
        self.lock = hub.lock
        self.key = key
        self.collection = collection
        self.interests = Interests(field, collection.codec_options)
        self.unavailable = False
        self.runner: object = None  # what runs the stream, kept referenced

    def end(self) -> None:
        """Let every subscriber poll from now on (the lock held)."""
        self.unavailable = True  # a subscription left over polls
        self.interests.wake_all()
        self.hub.drop(self)

    def _ids_or_end(self) -> list[Any]:
        with self.lock:
            ids = self.interests.ids()
            if not ids:
                self.hub.drop(self)  # decided under the lock: a new watch starts anew
            return ids

    def run(self) -> None:
        """Watch while anyone is interested; then, or after a bug, leave waiters to poll."""
        try:
            self._watch()
        except Exception:  # pymongo's errors are handled in _watch: a bug
            log.exception("the change stream on %s failed; its waiters poll", self.key[1])
        finally:
            with self.lock:
                self.end()

    def _watch(self) -> None:
        token: Any = None
        covered: list[Any] = []
        opened = False
        failures = 0
        while ids := self._ids_or_end():
            try:
                stream = self.collection.watch(
                    stream_pipeline(self.interests.field, ids),
                    full_document="updateLookup",
                    resume_after=token,
                    max_await_time_ms=MAX_AWAIT_MS,
                )
                with stream:
                    opened, failures = True, 0
                    with self.lock:
                        self.interests.wake_all(newly_covered(ids, covered, token))
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
                            raise Invalidated
            except (PyMongoError, Invalidated) as exc:
                failures += 1
                with self.lock:
                    self.interests.wake_all()  # an event may have been lost
                    if isinstance(exc, PyMongoError) and gives_up(exc, opened, failures):
                        self.hub.unavailable.add(self.collection.database.client, self.key[1], exc)
                        return
                log.debug("change stream on %s failed; resuming: %r", self.key[1], exc)
                token = forget_token(exc, token)
                self.hub.pause(reopen_pause(failures))


class Watchers:
    """The change streams of the process, one per collection (see :meth:`current`)."""

    def __init__(self, pause: Callable[[float], object] = SYSTEM_CLOCK.sleep) -> None:
        self.pause = pause
        self.start_afresh()

    def start_afresh(self) -> None:
        """Start afresh, with no stream (in a forked child, which has none of them)."""
        self.lock = create_lock()
        self.streams: dict[tuple[Any, ...], _Stream] = {}
        self.unavailable = Unavailable()

    @staticmethod
    def current() -> Watchers:
        """The watchers of the process."""
        return _CURRENT.get()

    def subscribe(self, collection: Any, watch: Watch) -> Subscription | None:
        """Watch ``watch.document_id`` in ``collection``; ``None`` where no stream can be had."""
        field = watch.field
        client = collection.database.client
        key = (id(client), collection.full_name, field)
        event = threading.Event()
        interest = make_interest(watch, event.set, collection)  # may raise: before any stream
        with self.lock:
            if (client, collection.full_name) in self.unavailable:
                return None
            stream = self.streams.get(key)
            new = stream is None
            if stream is None:
                stream = self.streams[key] = _Stream(self, key, collection, field)
            stream.interests.add(interest)
        if new:
            try:
                stream.runner = start(stream.run, STREAM_NAME)
            except Exception as exc:  # no thread to be had (a limit on threads): poll
                with self.lock:
                    stream.end()  # whoever joined it meanwhile polls too
                if not isinstance(exc, RuntimeError):
                    raise
                log.debug("no change-stream thread for %s (%r): waiters poll", key[1], exc)
                return None
        return Subscription(stream, interest, event)

    def drop(self, stream: _Stream) -> None:
        """Forget ``stream`` (the lock held): the next watch of its collection starts another."""
        if self.streams.get(stream.key) is stream:
            del self.streams[stream.key]

    def open_streams(self) -> int:
        """How many streams run now (for tests and the bench)."""
        with self.lock:
            return len(self.streams)


#: The watchers of the process (:meth:`Watchers.current`).
_CURRENT: PerProcess[Watchers] = PerProcess(Watchers)
