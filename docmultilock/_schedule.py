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
* :class:`~docmultilock._batch_rules.Batch`: renew these locks of one group together, by one
  command, within ``limit`` seconds (``_batch_rules`` says which go together).
* :class:`Wait`: nothing to do before ``until`` (``None``: until an extension finishes).
* :class:`Idle`: nothing is kept alive and nothing runs; the runner may stop.

At most ``slots`` commands (a lone extension, or a batch) run at once. Due renewals wait
for a slot earliest estimate first: a renewal may run later than due as long as it lands
before the estimate, so under load the most urgent go first and the rest spread over
their slack. A stalled extension holds one slot until its own lock's estimate, never the
other locks. A batch holds one slot for the time ``_batch_rules`` gives its tries.

Times are passed in, never read, so the decisions are tested with scripted times; the
runner (``_async/keepalive``) only asks, acts, and reports back (:meth:`Schedule.finished`).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from docmultilock._batch_rules import (
    AGAIN,
    AGAIN_PAUSE,
    ALONE,
    MAX_BATCH,
    WINDOW,
    Batch,
    Batching,
    Outcome,
    Pace,
    resends,
)
from docmultilock._schedule_answers import (
    MIN_EXTEND_TIMEOUT,
    Decision,
    Idle,
    Lose,
    Start,
    Stats,
    Wait,
)
from docmultilock._schedule_entry import Kept, Resend

__all__ = [
    "MIN_EXTEND_TIMEOUT",
    "Batch",
    "Decision",
    "Idle",
    "Lose",
    "Schedule",
    "Start",
    "Stats",
    "Wait",
]

K = TypeVar("K", bound=Hashable)


#: A heap item: (time, tie-breaker, version, job). The tie-breaker is unique, so jobs are
#: never compared with each other.
_Item = tuple[float, int, int, K]


@dataclass
class Schedule(Generic[K]):
    """The keep-alive's decisions for every lock it keeps; not thread-safe (runners lock)."""

    slots: int = 8
    stats: Stats = field(default_factory=Stats)
    #: How a job may be batched (``None``: always alone).
    batching: Callable[[K], Batching | None] = lambda job: None
    #: The most locks one batch carries.
    batch_size: int = MAX_BATCH

    def __post_init__(self) -> None:
        if self.slots < 1:
            raise ValueError(f"slots must be at least 1, not {self.slots}")
        self._entries: dict[K, Kept] = {}
        # In flight, by the token of their command (jobs removed or lost since included).
        self._running: dict[K, int] = {}
        self._flights: dict[int, int] = {}  # token: jobs of that command still in it
        self._busy: dict[int, Hashable] = {}  # token: group, of each batch in flight
        self._out: dict[int, tuple[int, float]] = {}  # token: (which try, when sent), a batch
        self._paces: dict[Hashable, Pace] = {}  # group: what its batches took lately
        self._urgent: list[_Item[K]] = []  # by urgency, jobs out in a batch
        self._tokens = itertools.count()
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
        entry = Kept(estimate, lead)
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
        """What to do at ``now``; call again after acting on anything but :class:`Wait`."""
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
        # A lock out in a batch that has not answered by its urgency is renewed alone.
        while self._urgent:
            urgent, _, version, job = self._urgent[0]
            if not self._current(job, version) or job not in self._running:
                heapq.heappop(self._urgent)  # its batch answered, or it was lost or removed
            elif urgent <= now and self._free:
                heapq.heappop(self._urgent)
                self._land(job)
                return self._start(job, now)
            else:
                break
        waiting: list[_Item[K]] = []  # for their group's batch in flight to answer
        try:
            while self._ready and self._free:
                item = heapq.heappop(self._ready)
                job = item[3]
                if not self._current(job, item[2]):
                    continue
                if self._waits_for_its_group(job, now):
                    waiting.append(item)
                    continue
                return self._batch(job, now) or self._start(job, now)
        finally:
            for item in waiting:
                heapq.heappush(self._ready, item)
        while self._waiting and not self._current(self._waiting[0][3], self._waiting[0][2]):
            heapq.heappop(self._waiting)  # taken into a batch since: not a time to wake
        times = [heap[0][0] for heap in (self._deadlines, self._waiting) if heap]
        if self._urgent and self._free:
            times.append(self._urgent[0][0])
        times.extend(self._entries[item[3]].urgent for item in waiting)
        if times:
            return Wait(min(times))
        return Wait(None) if self._running else Idle()

    @property
    def _free(self) -> bool:
        return len(self._flights) < self.slots

    def _waits_for_its_group(self, job: K, now: float) -> bool:
        """True when ``job`` should wait for its group's batch in flight rather than start.

        One batch per group at a time: on a server that runs one command at a time (the
        embedded one), two would only queue behind each other and delay everyone else's
        commands; the next batch gathers what came due meanwhile. An urgent lock does not
        wait.
        """
        batching = self.batching(job)
        entry = self._entries[job]
        if batching is None or entry.alone or entry.urgent <= now or entry.resend is not None:
            return False  # a batch sent again goes at once, beside its group's
        return batching.group in self._busy.values()

    def _fly(self, jobs: list[K]) -> int:
        token = next(self._tokens)
        self._flights[token] = len(jobs)
        for job in jobs:
            self._running[job] = token
        self.stats.commands += 1
        return token

    def _land(self, job: K) -> None:
        """``job`` is no longer out (its command ended, or it was taken out of a batch)."""
        token = self._running.pop(job, None)
        if token is not None:
            self._flights[token] -= 1
            if not self._flights[token]:
                del self._flights[token]
                self._busy.pop(token, None)

    def _late(self, entry: Kept, now: float) -> float:
        late = max(now - entry.due, 0.0)
        self.stats.started += 1
        self.stats.total_late += late
        self.stats.worst_late = max(self.stats.worst_late, late)
        return late

    def _start(self, job: K, now: float) -> Start[K]:
        entry = self._entries[job]
        entry.alone, entry.resend = False, None
        self._fly([job])
        late = self._late(entry, now)
        return Start(job, max(entry.estimate - now, MIN_EXTEND_TIMEOUT), late)

    def _batch(self, first: K, now: float) -> Batch[K] | None:
        """A batch of ``first`` and the renewals of its group due soon; None: alone."""
        entry = self._entries[first]
        batching = self.batching(first)
        if batching is None or entry.alone or entry.urgent <= now:
            return None
        resend = entry.resend
        jobs = self._gather(first, batching, now) if resend is None else self._again(first, now)
        if len(jobs) == 1:
            return None  # alone (``_start`` clears its resend)
        late = 0.0
        for job in jobs:
            member = self._entries[job]
            late = max(late, self._late(member, now))
            member.resend = None
            # Its waiting items go stale; its deadline (the loss) and urgency stand.
            member.version += 1
            heapq.heappush(
                self._deadlines, (member.estimate, next(self._ties), member.version, job)
            )
            heapq.heappush(self._urgent, (member.urgent, next(self._ties), member.version, job))
        token = self._fly(jobs)
        self._busy[token] = batching.group
        tries = 0 if resend is None else resend.tries
        self._out[token] = (tries, now)
        self.stats.batches += 1
        self.stats.batched += len(jobs)
        self.stats.resent += tries > 0
        # The batch ends before its most urgent lock must be renewed alone; a first try
        # earlier, leaving the rest to send it again.
        limit = min(self._entries[job].urgent for job in jobs) - now
        if not tries:
            limit = self._paces.setdefault(batching.group, Pace()).first_try(limit)
        return Batch(token, tuple(jobs), max(limit, MIN_EXTEND_TIMEOUT), late)

    def _again(self, first: K, now: float) -> list[K]:
        """``first`` and the other locks of its part of a failed batch, most urgent first."""
        resend = self._entries[first].resend
        taken: list[tuple[float, K]] = []
        for _, _, version, job in itertools.chain(self._ready, self._waiting):
            other = self._entries.get(job)
            if job is first or other is None or other.version != version:
                continue
            if other.resend == resend and job not in self._running and other.urgent > now:
                taken.append((other.estimate, job))
        taken.sort(key=lambda item: item[0])
        return [first] + [job for _, job in taken]

    def _gather(self, first: K, batching: Batching, now: float) -> list[K]:
        """``first`` and the renewals of its group due soon, most urgent first."""
        entry = self._entries[first]
        horizon = now + WINDOW * entry.lead
        places = {batching.place}
        taken: list[tuple[float, K]] = []
        # One pass over the renewals waiting: a batch is rare next to the locks it renews.
        for _, _, version, job in itertools.chain(self._ready, self._waiting):
            other = self._entries.get(job)
            if job is first or other is None or other.version != version or other.alone:
                continue
            if other.resend is not None:
                continue  # goes with the others of its failed batch
            if other.due > horizon or other.urgent <= now or job in self._running:
                continue
            joining = self.batching(job)
            if joining is None or joining.group != batching.group or joining.place in places:
                continue
            places.add(joining.place)
            taken.append((other.estimate, job))
        taken.sort(key=lambda item: item[0])
        return [first] + [job for _, job in taken[: self.batch_size - 1]]

    def batch_finished(
        self, token: int, results: Mapping[K, Outcome], now: float, *, read: bool = False
    ) -> None:
        """Batch ``token`` returned at ``now`` with each job's outcome (``_batch_rules``).

        A job taken out of the batch since (renewed alone) keeps its own renewal's answer.
        ``read``: the batch needed a read to tell its outcomes. The locks it told nothing of
        (:data:`AGAIN`) are sent again at once (``_batch_rules.resends``), or after a pause.
        """
        self.stats.reads += read
        tries, sent = self._out.pop(token, (0, now))
        if any(outcome is not AGAIN for outcome in results.values()):
            group = self._busy.get(token)  # answered: its time tells the group's pace
            if group is not None:
                self._paces.setdefault(group, Pace()).answered(now - sent)
        failed = [
            job
            for job, outcome in results.items()
            if outcome is AGAIN and self._running.get(job) == token and job in self._entries
        ]
        failed.sort(key=lambda job: self._entries[job].estimate)
        again = {
            job: Resend(token, part, tries + 1, now)
            for part, jobs in enumerate(resends(failed, tries))
            for job in jobs
        }
        for job, outcome in results.items():
            if self._running.get(job) != token:
                continue
            if outcome is AGAIN or outcome is ALONE:
                self._land(job)
                entry = self._entries.get(job)
                if entry is not None:
                    entry.version += 1
                    entry.alone = outcome is ALONE
                    entry.resend = again.get(job)
                    if outcome is AGAIN and entry.resend is None:
                        entry.not_before = now + AGAIN_PAUSE
                    self._push(job, entry)
            else:
                self.finished(job, outcome, now)

    def finished(self, job: K, estimate: float | None, now: float) -> None:
        """The extension of ``job`` that started returned at ``now``.

        ``estimate`` is the lock's new estimate, or ``None`` when the extension found the
        lock lost (its holder knows already). A success counts even when it returns after
        the old estimate, before :meth:`next` reported the loss: the server found the lock
        live, and it cannot revive an expired one, so the lock was held throughout.
        """
        self._land(job)
        entry = self._entries.get(job)
        if entry is None:
            return  # removed, or reported lost, while in flight
        if estimate is None:
            del self._entries[job]
            self.stats.lost += 1
            return
        self.stats.least_left = min(self.stats.least_left, entry.estimate - now)
        entry.estimate = estimate
        entry.not_before = -math.inf
        entry.version += 1
        self._push(job, entry)

    def unanswered(self, job: K) -> None:
        """The extension of ``job`` that started ended without an answer (it was cancelled).

        Nothing is known of it, so the lock keeps its old estimate and is due again at once;
        the estimate passing without a renewal reports the loss, as ever.
        """
        self._land(job)
        entry = self._entries.get(job)
        if entry is not None:
            entry.version += 1
            self._push(job, entry)

    def reset_stats(self) -> Stats:
        """Return the statistics so far and start counting afresh."""
        stats, self.stats = self.stats, Stats()
        return stats

    def _push(self, job: K, entry: Kept) -> None:
        heapq.heappush(self._waiting, (entry.due, next(self._ties), entry.version, job))
        heapq.heappush(self._deadlines, (entry.estimate, next(self._ties), entry.version, job))

    def _current(self, job: K, version: int) -> bool:
        entry = self._entries.get(job)
        return entry is not None and entry.version == version
