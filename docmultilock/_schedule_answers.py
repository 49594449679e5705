"""The keep-alive schedule's answers (``_schedule.Schedule.next``) and its statistics."""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from docmultilock._batch_rules import Batch

__all__ = ["MIN_EXTEND_TIMEOUT", "Decision", "Idle", "Lose", "Start", "Stats", "Wait"]

K = TypeVar("K", bound=Hashable)

#: The least time an extension is given, even when its estimate is about to pass: the
#: estimate is conservative, and the server may still find the lock live.
MIN_EXTEND_TIMEOUT = 0.05


@dataclass(frozen=True, slots=True)
class Start(Generic[K]):
    """Extend ``job`` now, within ``limit`` seconds; it was due ``late`` seconds ago."""

    job: K
    limit: float
    late: float


@dataclass(frozen=True, slots=True)
class Lose(Generic[K]):
    """``job``'s estimate passed without a successful renewal: tell its holder."""

    job: K


@dataclass(frozen=True, slots=True)
class Wait:
    """Nothing to do before ``until`` (``None``: before an extension finishes)."""

    until: float | None


@dataclass(frozen=True, slots=True)
class Idle:
    """Nothing kept alive, nothing running."""


Decision = Start[K] | Batch[K] | Lose[K] | Wait | Idle


@dataclass
class Stats:
    """What the schedule has seen since it was made (or since :meth:`Schedule.reset_stats`)."""

    #: Renewals started, alone or in a batch (one per lock).
    started: int = 0
    #: Commands started: lone extensions and batches.
    commands: int = 0
    #: Batches started, and the locks they carried.
    batches: int = 0
    batched: int = 0
    #: Batches sent again at once after a try that failed or went unanswered (whole, or
    #: a half); counted in ``batches`` too.
    resent: int = 0
    #: Reads that followed a batch that renewed fewer documents than it named.
    reads: int = 0
    #: Locks that lost: past their estimate without a renewal, or found lost by an extension.
    lost: int = 0
    #: The most a renewal started after it was due, in seconds.
    worst_late: float = 0.0
    #: The sum of those delays, for the mean.
    total_late: float = 0.0
    #: The least time left before a lock's estimate when its renewal succeeded.
    least_left: float = math.inf
