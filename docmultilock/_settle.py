"""A command sent is seen through to its reply before a cancellation goes on.

A flow cleans up after a cancellation (an acquisition whose reply never came is withdrawn,
``_operations``). That cleanup must reach the server after the command it cleans up after:
were the cancelled command still queued there, it could be applied after the withdrawal
and leave an entry nobody holds. So the async driver awaits each lock command to its end,
bounded by its operation timeout, and only then lets the cancellation into the flow. The
sync flavour cannot wait: a signal's ``KeyboardInterrupt`` is raised wherever the thread
is, in the middle of a socket read too, and the withdrawal then follows at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["AsyncSettle", "Settle"]

T = TypeVar("T")


class AsyncSettle:
    """The async flavour: a cancelled caller still waits for the command it sent."""

    @staticmethod
    async def reply(awaitable: Awaitable[T]) -> T:
        """Await ``awaitable`` to its end; a cancellation meanwhile is raised only after it."""
        task = asyncio.ensure_future(awaitable)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            while not task.done():  # a further cancellation waits for the same end
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await asyncio.shield(task)
            if not task.cancelled():
                task.exception()  # retrieved: the outcome goes with the cancellation
            raise


class Settle:
    """The sync flavour: the command has ended by the time its value is here."""

    @staticmethod
    def reply(value: T) -> T:
        """``value`` itself."""
        return value
