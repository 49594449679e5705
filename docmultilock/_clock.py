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
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["Clock", "now"]

#: Seconds on a clock that never steps back; only differences mean anything.
Clock = Callable[[], float]

_BOOTTIME: int | None = getattr(time, "CLOCK_BOOTTIME", None)


def now() -> float:
    """Seconds on a clock that never steps back and counts time the machine was suspended."""
    if _BOOTTIME is None:  # pragma: no cover - Linux has it
        return time.monotonic()
    return time.clock_gettime(_BOOTTIME)
