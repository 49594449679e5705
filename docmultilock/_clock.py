"""The one clock every local expiry estimate is read from: it counts suspended time.

A holder never compares its clock with the server's; it estimates locally how long its lock
surely lives ("sent before the command, plus the lifetime"). That estimate is only as good
as the clock that measures the time since. ``time.monotonic`` does not count the time the
machine was suspended on Linux, while the server's clock does: after a suspend longer than
the lifetime, a monotonic estimate still says "held" about a lock that expired meanwhile.
``CLOCK_BOOTTIME`` is monotonic too and counts suspended time; it is used where it exists,
``time.monotonic`` elsewhere.

Read it through :func:`now` at call time (never bind ``time.clock_gettime`` at import), so
that a test can stand in for the system clocks.

:class:`Clock` is the one clock type: where flows, ``hold()`` and the keep-alive read time
and draw jitter, and where drivers sleep, injected as one value and replaced in tests.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

__all__ = ["SYSTEM_CLOCK", "Clock", "now"]

_BOOTTIME: int | None = getattr(time, "CLOCK_BOOTTIME", None)


def now() -> float:
    """Seconds on a clock that never steps back and counts time the machine was suspended."""
    if _BOOTTIME is None:  # pragma: no cover - Linux has it
        return time.monotonic()
    return time.clock_gettime(_BOOTTIME)


async def _asyncio_sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


@dataclass(frozen=True, slots=True)
class Clock:
    """Where flows read time and draw jitter, and where drivers sleep; replaced in tests.

    ``monotonic`` measures every local duration (deadlines, backoff, expiry estimates) on
    a clock that counts suspended time (:func:`now`); expiry itself is always the server's
    clock. ``sleep`` serves the sync driver, ``asleep`` the async one.
    """

    monotonic: Callable[[], float] = now
    sleep: Callable[[float], object] = time.sleep
    asleep: Callable[[float], Awaitable[object]] = _asyncio_sleep
    uniform: Callable[[float, float], float] = random.uniform


#: The real clock.
SYSTEM_CLOCK = Clock()
