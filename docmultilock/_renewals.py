"""When each kept-alive lock is extended, and when it counts as lost: decisions, no threads.

A kept-alive lock is known to the :class:`Schedule` by its *estimate*: the local time
(``_clock.now``) before which the server surely still holds it. Its next renewal is *due*
``lead`` seconds before the estimate (``lifetime - extend_every``: a third of the lifetime
after the last extension, by default). Asked "what now?", the schedule answers with one
:class:`Decision`:

* :class:`Lose`: a lock's estimate has passed without a successful renewal, whether its
  extension is still waiting for a slot or already in flight. The holder must stop trusting
  the lock at its estimate, not whenever a stalled command gives up.
* :class:`Start`: run this lock's extension now, within ``limit`` seconds: what is left of
  its estimate, since past it the answer cannot save the lock.
* :class:`Wait`: nothing to do before ``until`` (``None``: until an extension finishes).
* :class:`Idle`: nothing is kept alive and nothing runs; the runner may stop.

At most ``slots`` extensions run at once. Due renewals wait for a slot earliest estimate
first: a renewal may run later than due as long as it lands before the estimate, so under
load the most urgent go first and the rest spread over their slack. A stalled extension
holds one slot until its own lock's estimate, never the other locks.

Times are passed in, never read, so the decisions are tested with scripted times; the
runners (``_keepalive``) only ask, act, and report back with :meth:`Schedule.finished`.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = ["MIN_EXTEND_TIMEOUT", "Decision", "Idle", "Lose", "Schedule", "Start", "Stats", "Wait"]

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


Decision = Start[K] | Lose[K] | Wait | Idle


@dataclass
class Stats:
    """What the schedule has seen since it was made (or since :meth:`Schedule.reset_stats`)."""

    #: Extensions started.
    started: int = 0
    #: Locks that lost: past their estimate without a renewal, or found lost by an extension.
    lost: int = 0
    #: The most a renewal started after it was due, in seconds.
    worst_late: float = 0.0
    #: The sum of those delays, for the mean.
    total_late: float = 0.0
    #: The least time left before a lock's estimate when its renewal succeeded.
    least_left: float = math.inf


@dataclass(slots=True)
class _Entry:
    estimate: float
    lead: float
    version: int = 0  # bumped at each renewal: older heap items are stale

    @property
    def due(self) -> float:
        return self.estimate - self.lead


#: A heap item: (time, tie-breaker, version, job). The tie-breaker is unique, so jobs are
#: never compared with each other.
_Item = tuple[float, int, int, K]


@dataclass
class Schedule(Generic[K]):
    """The keep-alive's decisions for every lock it keeps; not thread-safe (runners lock)."""

    slots: int = 8
    stats: Stats = field(default_factory=Stats)

    def __post_init__(self) -> None:
        if self.slots < 1:
            raise ValueError(f"slots must be at least 1, not {self.slots}")
        self._entries: dict[K, _Entry] = {}
        self._running: set[K] = set()  # in flight, including jobs removed or lost since
        self._waiting: list[_Item[K]] = []  # by due time, not yet due
        self._ready: list[_Item[K]] = []  # by estimate, due and waiting for a slot
        self._deadlines: list[_Item[K]] = []  # by estimate, every job kept
        self._ties = itertools.count()

    def __len__(self) -> int:
        """The number of locks kept alive."""
        return len(self._entries)

    def add(self, job: K, estimate: float, lead: float) -> None:
        """Keep ``job`` alive: its lock surely lives until ``estimate``; renew ``lead`` before."""
        if job in self._entries:
            raise ValueError(f"{job!r} is kept alive already")
        entry = _Entry(estimate, lead)
        self._entries[job] = entry
        self._push(job, entry)

    def remove(self, job: K) -> None:
        """Stop keeping ``job`` alive (an extension in flight runs on; see :meth:`running`)."""
        self._entries.pop(job, None)

    @property
    def idle(self) -> bool:
        """True when nothing is kept alive and no extension is in flight."""
        return not self._entries and not self._running

    def kept(self, job: K) -> bool:
        """True while ``job`` is kept alive: added, and neither removed nor lost since."""
        return job in self._entries

    def running(self, job: K) -> bool:
        """True while an extension of ``job`` is in flight."""
        return job in self._running

    def next(self, now: float) -> Decision[K]:
        """What to do at ``now``; call again after acting on a :class:`Start` or :class:`Lose`."""
        # Losses first: a lock past its estimate is lost, whatever else is due.
        while self._deadlines:
            estimate, _, version, job = self._deadlines[0]
            if not self._current(job, version):
                heapq.heappop(self._deadlines)
            elif estimate <= now:
                heapq.heappop(self._deadlines)
                del self._entries[job]
                self.stats.lost += 1
                return Lose(job)
            else:
                break
        while self._waiting and self._waiting[0][0] <= now:
            _, _, version, job = heapq.heappop(self._waiting)
            if self._current(job, version):
                entry = self._entries[job]
                heapq.heappush(self._ready, (entry.estimate, next(self._ties), version, job))
        while self._ready and len(self._running) < self.slots:
            _, _, version, job = heapq.heappop(self._ready)
            if self._current(job, version):
                entry = self._entries[job]
                late = max(now - entry.due, 0.0)
                self._running.add(job)
                self.stats.started += 1
                self.stats.total_late += late
                self.stats.worst_late = max(self.stats.worst_late, late)
                return Start(job, max(entry.estimate - now, MIN_EXTEND_TIMEOUT), late)
        times = [heap[0][0] for heap in (self._deadlines, self._waiting) if heap]
        if times:
            return Wait(min(times))
        return Wait(None) if self._running else Idle()

    def finished(self, job: K, estimate: float | None, now: float) -> None:
        """The extension of ``job`` that started returned at ``now``.

        ``estimate`` is the lock's new estimate, or ``None`` when the extension found the
        lock lost (its holder knows already). A success counts even when it returns after
        the old estimate, before :meth:`next` reported the loss: the server found the lock
        live, and it cannot revive an expired one, so the lock was held throughout.
        """
        self._running.discard(job)
        entry = self._entries.get(job)
        if entry is None:
            return  # removed, or reported lost, while in flight
        if estimate is None:
            del self._entries[job]
            self.stats.lost += 1
            return
        self.stats.least_left = min(self.stats.least_left, entry.estimate - now)
        entry.estimate = estimate
        entry.version += 1
        self._push(job, entry)

    def unanswered(self, job: K) -> None:
        """The extension of ``job`` that started ended without an answer (it was cancelled).

        Nothing is known of it, so the lock keeps its old estimate and is due again at once;
        the estimate passing without a renewal reports the loss, as ever.
        """
        self._running.discard(job)
        entry = self._entries.get(job)
        if entry is not None:
            entry.version += 1
            self._push(job, entry)

    def reset_stats(self) -> Stats:
        """Return the statistics so far and start counting afresh."""
        stats, self.stats = self.stats, Stats()
        return stats

    def _push(self, job: K, entry: _Entry) -> None:
        heapq.heappush(self._waiting, (entry.due, next(self._ties), entry.version, job))
        heapq.heappush(self._deadlines, (entry.estimate, next(self._ties), entry.version, job))

    def _current(self, job: K, version: int) -> bool:
        entry = self._entries.get(job)
        return entry is not None and entry.version == version
