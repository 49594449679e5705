"""The few primitives whose thread and task flavours truly differ, side by side.

Code written once in ``_async/`` calls the task flavour (``async_create_lock``,
``async_start``, ``async_wait_event``, :class:`PerLoop`); ``tools/unasync.py`` turns each
call into its thread twin (``create_lock``, ``start``, ``wait_event``,
:class:`PerProcess`). The model is pymongo's ``pymongo/lock.py`` (``_create_lock`` and
``_async_create_lock``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import threading
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, Generic, Protocol, TypeVar

__all__ = [
    "AsyncRunning",
    "PerLoop",
    "PerProcess",
    "Running",
    "async_create_lock",
    "async_current",
    "async_start",
    "async_wait_event",
    "create_lock",
    "current",
    "start",
    "wait_event",
]

T = TypeVar("T")

#: What runs code started by ``start``: a thread, or a task.
Running = threading.Thread
AsyncRunning = asyncio.Task[Any]


def create_lock() -> threading.Lock:
    """A lock for state that threads share."""
    return threading.Lock()


def async_create_lock() -> contextlib.nullcontext[None]:
    """No lock at all: a loop runs one task at a time.

    Entered with a plain ``with``, so a block it guards never lets another task in between:
    it must not suspend (no ``await`` inside).
    """
    return contextlib.nullcontext()


def start(
    target: Callable[[], object],
    name: str,
    *,
    ended: Callable[[threading.Thread], object] | None = None,
) -> threading.Thread:
    """Run ``target`` on a daemon thread of its own; ``RuntimeError`` if none is to be had.

    ``ended``, when given, is called with the thread once ``target`` returned or raised.
    """

    def run() -> None:
        try:
            target()
        finally:
            if ended is not None:
                ended(threading.current_thread())

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread


def async_start(
    target: Callable[[], Coroutine[Any, Any, T]],
    name: str,
    *,
    ended: Callable[[asyncio.Task[T]], object] | None = None,
) -> asyncio.Task[T]:
    """Run ``target()`` as a task of the running loop, in a context of its own.

    Keep the task referenced: a loop holds its tasks only weakly. The task serves every
    caller, so it must not inherit the first one's context (a ``pymongo.timeout()``
    deadline above all, which would fail all its later commands once it passed).
    ``ended``, when given, is called with the task once done, also when it was cancelled
    before it started (and so ran none of its body).
    """
    loop = asyncio.get_running_loop()
    task = contextvars.Context().run(loop.create_task, target(), name=name)
    if ended is not None:
        task.add_done_callback(ended)
    return task


def current() -> threading.Thread:
    """The thread running now."""
    return threading.current_thread()


def async_current() -> asyncio.Task[Any] | None:
    """The task running now (``None`` outside one)."""
    return asyncio.current_task()


def wait_event(event: threading.Event, seconds: float | None) -> None:
    """Sleep up to ``seconds`` unless ``event`` is set."""
    event.wait(seconds)


async def async_wait_event(event: asyncio.Event, seconds: float | None) -> None:
    """Sleep up to ``seconds`` unless ``event`` is set."""
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)


class PerLoop(Generic[T]):
    """One ``T`` per event loop, made on first use there; it ends with its loop."""

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._each: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, T] = (
            weakref.WeakKeyDictionary()
        )

    def get(self) -> T:
        """The running loop's ``T``."""
        loop = asyncio.get_running_loop()
        value = self._each.get(loop)
        if value is None:
            value = self._each[loop] = self._make()
        return value


class Resettable(Protocol):
    """What a process keeps one of: it can start afresh."""

    def start_afresh(self) -> None: ...


R = TypeVar("R", bound=Resettable)


class PerProcess(Generic[R]):
    """The process's one ``R``, made now; a forked child resets it.

    A forked child has none of its parent's threads: it starts its own.
    """

    def __init__(self, make: Callable[[], R]) -> None:
        self._value = make()
        if hasattr(os, "register_at_fork"):  # pragma: no branch - absent on Windows only
            os.register_at_fork(after_in_child=self._value.start_afresh)

    def get(self) -> R:
        """The process's ``R``."""
        return self._value
