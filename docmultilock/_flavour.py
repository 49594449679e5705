"""Clear errors for a ``hold()`` used the wrong way, and for a lock used as one.

``hold()`` of an async manager must be entered with ``async with``, a sync one's with
``with``. Entered the other way, awaited, or used without entering it at all
(``h = locks.hold(...); h.guard()``), Python would say only that a protocol or an
attribute is missing; these mixins say what to write instead. A :class:`~docmultilock.Lock`
is a value, not a context manager: :class:`NotAHold` says so when one is entered.

``with locks.acquire(...)`` enters the lock that was just granted: the caller never gets
it, so nobody could release it. A lock a manager hands out therefore carries, privately
(:func:`unclaimed`: a slot, not a field, so neither its equality, its repr, its pickle
nor :class:`~docmultilock.LockSchema` sees it), how to release it, and entering it
releases it before the ``TypeError``. In a plain ``with`` inside a running event loop, an
async manager's release can only be started (a task of that loop), not awaited.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import sys
import types
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

__all__ = [
    "AsyncOnly",
    "NotAHold",
    "Release",
    "SyncOnly",
    "async_decorates",
    "decorates",
    "own_methods",
    "unclaimed",
]

log = logging.getLogger("docmultilock")

#: Releases the lock a manager handed out: it returns once done (sync), or a coroutine.
Release = Callable[[Any], object]

L = TypeVar("L", bound="NotAHold")

#: Releases started from a plain ``with`` in an event loop, kept until they end.
_RELEASING: set[asyncio.Task[object]] = set()

#: What a held lock (``hold()``) or set (``hold_all()``) offers inside the block; asked of
#: the hold itself, it was not entered.
_HELD_ATTRIBUTES = {
    "hold": frozenset({"lock", "guard", "require", "lost", "error", "convert"}),
    "hold_all": frozenset({"locks", "members", "errors", "guard", "require", "lost"}),
}


def _call_of(hold: object) -> str:
    """The method that made ``hold``: ``hold`` or ``hold_all`` (the block's ``_call``)."""
    return str(getattr(hold, "_call", "hold()")).removesuffix("()")


def _not_entered(hold: object, name: str, statement: str) -> AttributeError:
    call = _call_of(hold)
    held = "the held locks" if call == "hold_all" else "the held lock"
    return AttributeError(
        f"{type(hold).__name__} has no attribute {name!r}: {call}() returns a context "
        f"manager, not {held}; write '{statement} locks.{call}(...) as held:' and use "
        f"held.{name} inside the block"
    )


def _held_attribute(hold: object, name: str) -> bool:
    return name in _HELD_ATTRIBUTES.get(_call_of(hold), frozenset())


def own_methods(cls: type, names: tuple[str, ...]) -> None:
    """Give ``cls`` its own copy of each inherited method of ``names``, named for ``cls``.

    Python names a method's class in its argument errors (``WriteLock.acquire() takes 2
    positional arguments but 3 were given``) from the code's qualified name (3.11 on): a
    copy names the class the user made, never the private base that defines the method.
    """
    for name in names:
        function = getattr(cls, name)
        code = function.__code__
        if sys.version_info >= (3, 11):
            code = code.replace(co_qualname=f"{cls.__name__}.{name}")
        copy = types.FunctionType(
            code, function.__globals__, name, function.__defaults__, function.__closure__
        )
        copy.__kwdefaults__ = function.__kwdefaults__
        copy.__annotations__ = function.__annotations__
        copy.__doc__ = function.__doc__
        copy.__module__ = function.__module__
        copy.__qualname__ = f"{cls.__qualname__}.{name}"
        setattr(cls, name, copy)


def _never_exited(*_: object) -> None:  # pragma: no cover - entering always raised
    """The exit of a context manager whose entry refuses: never reached."""


async def _never_exited_async(*_: object) -> None:  # pragma: no cover - the same, async
    """The async exit of a context manager whose entry refuses: never reached."""


def async_decorates(function: object, manager: str) -> None:
    """Refuse, for an async manager's ``holding()``, anything but an ``async def`` function."""
    if not inspect.iscoroutinefunction(function):
        raise TypeError(
            f"{manager}.holding() decorates async functions (async def), not "
            f"{_described(function)}: use {manager.removeprefix('Async')} (the sync manager) "
            "for a plain function"
        )


def decorates(function: object, manager: str) -> None:
    """Refuse, for a sync manager's ``holding()``, an ``async def`` function or no function."""
    if inspect.iscoroutinefunction(function) or not callable(function):
        raise TypeError(
            f"{manager}.holding() decorates plain functions, not {_described(function)}: use "
            f"Async{manager} (the async manager) for an async function"
        )


def _described(function: object) -> str:
    """``function`` as an error names it: its kind and name."""
    if inspect.iscoroutinefunction(function):
        kind = "the async function"
    elif callable(function):
        kind = "the plain function"
    else:
        return f"a {type(function).__name__}"
    return f"{kind} {getattr(function, '__qualname__', function)!r}"


class AsyncOnly:
    """Refuses plain ``with``: the object is an async context manager."""

    def __enter__(self) -> NoReturn:
        raise TypeError(
            f"{type(self).__name__} is an async context manager: use 'async with "
            f"locks.{_call_of(self)}(...) as held:' (or a sync lock manager for plain 'with')"
        )

    __exit__ = _never_exited

    if not TYPE_CHECKING:  # for the runtime only: a type checker still flags the misuse

        def __await__(self) -> Generator[Any, None, NoReturn]:
            call = _call_of(self)
            acquire = "acquire_all" if call == "hold_all" else "acquire"
            raise TypeError(
                f"'await locks.{call}(...)' takes no lock: write 'async with "
                f"locks.{call}(...) as held:' for a block, or 'await locks.{acquire}(...)' "
                "for locks you release yourself"
            )

        def __getattr__(self, name: str) -> Any:
            if _held_attribute(self, name):
                raise _not_entered(self, name, "async with")
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


class SyncOnly:
    """Refuses ``async with``: the object is a plain context manager."""

    async def __aenter__(self) -> NoReturn:
        raise TypeError(
            f"{type(self).__name__} is a plain context manager: use 'with "
            f"locks.{_call_of(self)}(...) as held:' (or an async lock manager for 'async with')"
        )

    __aexit__ = _never_exited_async

    if not TYPE_CHECKING:  # for the runtime only: a type checker still flags the misuse

        def __getattr__(self, name: str) -> Any:
            if _held_attribute(self, name):
                raise _not_entered(self, name, "with")
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


def unclaimed(lock: L, release: Release) -> L:
    """``lock`` as a manager hands it out: entered by mistake, it calls ``release(lock)`` first.

    ``release`` is given the lock rather than holding it: a lock that held its own release
    would be a reference cycle, left to the garbage collector on every acquisition.
    """
    object.__setattr__(lock, "_unclaimed", release)
    return lock


_NOT_A_CONTEXT_MANAGER = (
    "a Lock is not a context manager{told}: write '{statement} locks.hold(...) as held:' to "
    "hold a lock for a block, or keep what acquire() returns and release it yourself (in a "
    "finally)"
)

#: What a release that ended tells.
_RELEASED = ", so the lock it names was released (nothing stays locked)"


def _released(result: object) -> str:
    """What became of the lock once ``release`` returned ``result`` (sync ``with``)."""
    if not inspect.iscoroutine(result):
        return _RELEASED
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # no loop to run the async manager's release on
        result.close()
        return ", and the lock it names could not be released here: it stays until it expires"
    task = loop.create_task(result)
    _RELEASING.add(task)
    task.add_done_callback(_finished)
    return ", so the lock it names is being released (by a task of this event loop)"


def _finished(task: asyncio.Task[object]) -> None:
    _RELEASING.discard(task)
    if not task.cancelled() and task.exception() is not None:
        log.warning("could not release a lock entered by mistake: %s", task.exception())


def _failed(exc: Exception) -> str:
    """What the release's own error tells: the lock was gone already, or is left held."""
    return f", and releasing the lock it names failed ({type(exc).__name__}: {exc})"


class NotAHold:
    """Refuses ``with`` and ``async with``: a lock is a value; ``hold()`` holds one for a block.

    A lock a manager just handed out (:func:`unclaimed`) is released first.
    """

    # A slot, not a dataclass field: how to release the lock stays out of the value.
    __slots__ = ("_unclaimed",)

    def _claim(self) -> Release | None:
        """The release a manager left on this value, once (the next entry finds none)."""
        release: Release | None = getattr(self, "_unclaimed", None)
        if release is not None:
            object.__setattr__(self, "_unclaimed", None)
        return release

    # For the runtime only: a type checker still flags ``with lock:`` as the error it is.
    if not TYPE_CHECKING:

        def __enter__(self) -> NoReturn:
            release, told = self._claim(), ""
            if release is not None:
                try:
                    told = _released(release(self))
                except Exception as exc:  # the release's own error: reported, not raised
                    told = _failed(exc)
            raise TypeError(_NOT_A_CONTEXT_MANAGER.format(told=told, statement="with"))

        __exit__ = _never_exited

        async def __aenter__(self) -> NoReturn:
            release, told = self._claim(), ""
            if release is not None:
                try:
                    result = release(self)
                    if inspect.isawaitable(result):
                        await result
                    told = _RELEASED
                except Exception as exc:  # the release's own error: reported, not raised
                    told = _failed(exc)
            raise TypeError(_NOT_A_CONTEXT_MANAGER.format(told=told, statement="async with"))

        __aexit__ = _never_exited_async
