"""What the keep-alive's schedule (``_schedule.Schedule``) knows of one kept lock.

Its estimate (before which the server surely holds it) and lead give when its renewal is
*due* and from when it is *urgent* (renewed alone, never in a batch, ``_batch_rules.URGENT``);
after a batch that failed, it is due again after a pause, or at once with the others of
its part of that batch (:class:`Resend`, ``_batch_rules.resends``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from docmultilock._batch_rules import URGENT

__all__ = ["Kept", "Resend"]


@dataclass(frozen=True, slots=True)
class Resend:
    """A lock's place in a batch sent again: the failed batch, which part, which try."""

    batch: int  # the failed batch's token
    part: int
    tries: int
    at: float  # when it failed: due at once


@dataclass(slots=True)
class Kept:
    """One kept lock: its estimate and lead, and how its next renewal goes."""

    estimate: float
    lead: float
    version: int = 0  # bumped at each renewal: older heap items are stale
    not_before: float = -math.inf  # after a batch that failed: not due before this
    alone: bool = False  # renewed alone next time
    resend: Resend | None = None  # sent again with the others of its failed batch

    @property
    def due(self) -> float:
        """When its renewal is due."""
        if self.resend is not None:
            return self.resend.at
        return max(self.estimate - self.lead, self.not_before)

    @property
    def urgent(self) -> float:
        """From this time on the lock is renewed alone, never in a batch."""
        return self.estimate - self.lead * URGENT
