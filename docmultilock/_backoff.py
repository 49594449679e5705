"""Backoff between attempts: exponential, with full jitter, checked once.

``hold(wait=...)``, ``hold_all`` and ``convert(wait=...)`` draw their delays from it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from docmultilock.errors import InvalidArgument

__all__ = ["Backoff", "check_backoff"]


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with full jitter, between ``low`` and ``high`` seconds."""

    low: float
    high: float

    def bounds(self, retry: int) -> tuple[float, float]:
        """The range the delay before retry number ``retry`` (1, 2, ...) is drawn from."""
        # The exponent is capped: 2.0 ** 1100 overflows, and 2 ** 64 exceeds any ``high``.
        return self.low, min(self.high, self.low * 2.0 ** min(retry, 64))


def check_backoff(value: object) -> Backoff:
    """A ``backoff=`` argument: a pair ``(min, max)`` of seconds, ``0 < min <= max``."""
    if (
        not isinstance(value, Sequence)
        or isinstance(value, str)
        or len(value) != 2
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    ):
        raise InvalidArgument(f"backoff must be a pair of numbers (min, max), not {value!r}")
    low, high = float(value[0]), float(value[1])
    if not (math.isfinite(high) and 0 < low <= high):
        raise InvalidArgument(f"backoff must satisfy 0 < min <= max, finite; got {value!r}")
    return Backoff(low, high)
