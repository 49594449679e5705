"""Clear errors for a context manager entered with the other flavour's statement.

``hold()`` of an async manager must be entered with ``async with``, a sync one's with
``with``. Entered the other way, Python would say only that the protocol is missing; these
mixins say what to write instead.
"""

from __future__ import annotations

from types import TracebackType
from typing import NoReturn

__all__ = ["AsyncOnly", "SyncOnly"]


class AsyncOnly:
    """Refuses plain ``with``: the object is an async context manager."""

    def __enter__(self) -> NoReturn:
        raise TypeError(
            f"{type(self).__name__} is an async context manager: use "
            "'async with locks.hold(...) as held:' (or a sync lock manager for plain 'with')"
        )

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:  # pragma: no cover - __enter__ always raised
        return None


class SyncOnly:
    """Refuses ``async with``: the object is a plain context manager."""

    async def __aenter__(self) -> NoReturn:
        raise TypeError(
            f"{type(self).__name__} is a plain context manager: use "
            "'with locks.hold(...) as held:' (or an async lock manager for 'async with')"
        )

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:  # pragma: no cover - __aenter__ always raised
        return None
