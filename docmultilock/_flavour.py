"""Clear errors for a ``hold()`` used the wrong way, and for a lock used as one.

``hold()`` of an async manager must be entered with ``async with``, a sync one's with
``with``. Entered the other way, awaited, or used without entering it at all
(``h = locks.hold(...); h.guard()``), Python would say only that a protocol or an
attribute is missing; these mixins say what to write instead. A :class:`~docmultilock.Lock`
is a value, not a context manager: :class:`NotAHold` says so when one is entered.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any, NoReturn

__all__ = ["AsyncOnly", "NotAHold", "SyncOnly"]

#: What a held lock offers inside the block; asked of the hold itself, it was not entered.
_HELD_ATTRIBUTES = frozenset({"lock", "guard", "require", "lost", "error"})


def _not_entered(hold: object, name: str, statement: str) -> AttributeError:
    return AttributeError(
        f"{type(hold).__name__} has no attribute {name!r}: hold() returns a context manager, "
        f"not the held lock; write '{statement} locks.hold(...) as held:' and use "
        f"held.{name} inside the block"
    )


def _never_exited(*_: object) -> None:  # pragma: no cover - entering always raised
    """The exit of a context manager whose entry refuses: never reached."""


async def _never_exited_async(*_: object) -> None:  # pragma: no cover - the same, async
    """The async exit of a context manager whose entry refuses: never reached."""


class AsyncOnly:
    """Refuses plain ``with``: the object is an async context manager."""

    def __enter__(self) -> NoReturn:
        raise TypeError(
            f"{type(self).__name__} is an async context manager: use "
            "'async with locks.hold(...) as held:' (or a sync lock manager for plain 'with')"
        )

    __exit__ = _never_exited

    if not TYPE_CHECKING:  # for the runtime only: a type checker still flags the misuse

        def __await__(self) -> Generator[Any, None, NoReturn]:
            raise TypeError(
                "'await locks.hold(...)' takes no lock: write 'async with locks.hold(...) as "
                "held:' for a block, or 'await locks.acquire(...)' for a lock you release "
                "yourself"
            )

        def __getattr__(self, name: str) -> Any:
            if name in _HELD_ATTRIBUTES:
                raise _not_entered(self, name, "async with")
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


class SyncOnly:
    """Refuses ``async with``: the object is a plain context manager."""

    async def __aenter__(self) -> NoReturn:
        raise TypeError(
            f"{type(self).__name__} is a plain context manager: use "
            "'with locks.hold(...) as held:' (or an async lock manager for 'async with')"
        )

    __aexit__ = _never_exited_async

    if not TYPE_CHECKING:  # for the runtime only: a type checker still flags the misuse

        def __getattr__(self, name: str) -> Any:
            if name in _HELD_ATTRIBUTES:
                raise _not_entered(self, name, "with")
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


class NotAHold:
    """Refuses ``with`` and ``async with``: a lock is a value; ``hold()`` holds one for a block."""

    __slots__ = ()  # a slotted dataclass (``Lock``) stays without a ``__dict__``

    # For the runtime only: a type checker still flags ``with lock:`` as the error it is.
    if not TYPE_CHECKING:

        def __enter__(self) -> NoReturn:
            raise TypeError(
                "a Lock is not a context manager: write 'with locks.hold(...) as held:' to hold "
                "a lock for a block, or release what acquire() returned yourself (in a finally)"
            )

        __exit__ = _never_exited

        async def __aenter__(self) -> NoReturn:
            raise TypeError(
                "a Lock is not a context manager: write 'async with locks.hold(...) as held:' "
                "to hold a lock for a block, or release what acquire() returned yourself"
            )

        __aexit__ = _never_exited_async
