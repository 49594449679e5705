"""A lock command sent is seen through to its reply before a cancellation goes on.

A flow cleans up after a cancellation (an acquisition whose reply never came is withdrawn,
``_lock_flows``). That cleanup must reach the server after the command it cleans up after:
were the cancelled command still queued there, it would be applied after the withdrawal
and leave an entry nobody holds. So the async driver lets such a command (``Send.settle``:
a new acquisition's) end before the cancellation goes into the flow: within the command's
operation timeout, or ``CLEANUP_LIMIT`` without one, after which the caller goes (an
entry the command makes after that lapses with its lifetime, as a crashed holder's does).
An event loop shutting down cancels the command's own task too: nothing can wait then.
The sync flavour cannot wait either: a signal's ``KeyboardInterrupt`` is raised wherever
the thread is, a socket read included.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

from docmultilock._flows import CLEANUP_LIMIT

__all__ = ["AsyncSettle", "Settle"]

T = TypeVar("T")


class AsyncSettle:
    """The async flavour: a cancelled caller still waits for the command it sent."""

    @staticmethod
    async def reply(awaitable: Awaitable[T], limit: float | None) -> T:
        """Await ``awaitable``; a cancellation meanwhile is raised once it has ended.

        It is given ``limit`` seconds more (``CLEANUP_LIMIT`` for ``None``), then cancelled
        itself.
        """
        task = asyncio.ensure_future(awaitable)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            loop = asyncio.get_running_loop()
            give_up = loop.time() + (CLEANUP_LIMIT if limit is None else limit)
            while not task.done():
                left = give_up - loop.time()
                if left <= 0:
                    task.cancel()
                    break
                # A further cancellation (an anyio scope repeats it) waits on for the end.
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait((task,), timeout=left)
            if task.done() and not task.cancelled():
                task.exception()  # retrieved: the outcome goes with the cancellation
            raise


class Settle:
    """The sync flavour: the command has ended by the time its value is here."""

    @staticmethod
    def reply(value: T, limit: float | None) -> T:
        """``value`` itself."""
        return value
