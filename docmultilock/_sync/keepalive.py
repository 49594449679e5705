# Generated from docmultilock/_async/keepalive.py by tools/unasync.py: do not edit.
# Edit the async source and run `python tools/unasync.py`.
"""The keep-alive runner: it runs the ``_schedule`` of kept locks, written once for both flavours.

The decisions are ``_schedule``'s and ``_batch_rules``'; this module only asks, acts and
reports back. Each ``hold(..., keepalive=True)`` registers an :class:`Job`: how to
extend its lock within a time limit, how to tell the holder the lock is lost, and how it
may be renewed in a batch with the others of its group (its ``batching`` and
``together``, which renews the holdings of one group by one command).

An extender (one per event loop, or per process for threads: :meth:`Extender.current`)
has a *coordinator* (a task, or a thread, named :data:`THREAD_NAME`) that asks the schedule
what to do and never waits on the server: it hands extensions and batches to up to
``slots`` *workers* (named :data:`EXTENSION_NAME`) and tells holders of their losses on
time, even while every worker is stuck in a stalled command. They start with the first
registration and end by themselves once nothing is registered, so an idle loop or process
runs none.

The few primitives that differ between tasks and threads (start one, an event, a lock,
which one is running) are ``docmultilock._concurrency``'s; the state the coordinator and
workers share is guarded by the lock of ``create_lock`` (none for tasks, which take
turns), so no ``with self._lock:`` block may suspend.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from docmultilock._batch_rules import AGAIN, Batch, Batching, Outcome
from docmultilock._clock import SYSTEM_CLOCK, Clock
from docmultilock._concurrency import (
    PerProcess,
    Running,
    create_lock,
    current,
    start,
    wait_event,
)
from docmultilock._held_lock import Holding
from docmultilock._schedule import Lose, Schedule, Start, Stats, Wait

__all__ = ["EXTENSION_NAME", "SLOTS", "THREAD_NAME", "Extender", "Group", "Job"]

log = logging.getLogger("docmultilock")

#: The name of the coordinator (one per event loop, or per process, at most).
THREAD_NAME = "docmultilock-keepalive"
#: The name of a worker, which runs extensions and batches.
EXTENSION_NAME = f"{THREAD_NAME}-extension"

#: How many extensions may be in flight at once, per event loop (or process).
SLOTS = 8

#: A worker that had nothing to do for this long ends (another starts when needed).
WORKER_IDLE = 10.0

#: What renewing holdings together gives: each one's outcome (``_batch_rules``), and whether
#: a read was needed to tell them.
Renewed = tuple[Sequence[Outcome], bool]


class Group(Protocol):
    """What renews the holdings of one group: one alone, or several by one command."""

    def extend(self, holding: Holding, limit: float) -> float | None:
        """Extend ``holding`` within ``limit`` s: its new estimate, or ``None`` if lost."""

    def renew(self, holdings: Sequence[Holding], limit: float) -> Renewed:
        """Renew ``holdings`` by one command within ``limit`` s: each outcome, and if read."""


@dataclass(frozen=True, eq=False)  # identity: each held lock registers its own job
class Job:
    """One held lock's part in the keep-alive."""

    #: Extend once within the given seconds; the new expiry estimate, or ``None`` when the
    #: lock is lost (the job has told its holder).
    extend: Callable[[float], float | None]
    #: Tell the holder its lock is lost: its estimate passed without a renewal.
    lose: Callable[[], None]
    #: Renew this many seconds before the estimate.
    lead: float
    #: How the job may share a batch (``None``: always renewed alone).
    batching: Batching | None = None
    #: Renews the holdings of the job's group together (with ``batching``).
    together: Callable[[Sequence[Any], float], Renewed] | None = None
    #: The holding ``together`` is given (``None`` once it was garbage-collected).
    holding: Callable[[], Any] = lambda: None
    #: What the job keeps alive, for the log.
    name: str = ""

    @classmethod
    def weakly(
        cls, holding: Holding, group: Group, *, lead: float, name: str, batching: Batching
    ) -> Job:
        """The job of a held lock's ``holding``, renewed by its ``group``; held weakly.

        ``group`` extends one holding (``extend``) or several together (``renew``); the
        holding tells its own loss (``overdue``). A ``hold()`` dropped without its exit
        (never left, then garbage-collected) is no longer renewed: its next renewal finds
        it gone, logs a warning naming ``name``, and ends the job, so its lock expires
        within its lifetime and the keep-alive stops once nothing else is kept. Strong
        references would renew it for ever.
        """
        held = weakref.ref(holding)

        def extend(limit: float) -> float | None:
            alive = held()
            if alive is None:
                dropped(name)
                return None
            return group.extend(alive, limit)

        def lose() -> None:
            alive = held()
            if alive is not None:
                alive.overdue()

        return cls(extend, lose, lead, batching, group.renew, held, name)


def dropped(name: str) -> None:
    """Log that the hold of ``name`` was dropped without its exit; its renewals end."""
    log.warning(
        "the hold() of %s was garbage-collected without leaving its block: no longer "
        "renewed, it expires within its lifetime (leave a hold() with 'with' or "
        "'with')",
        name,
    )


class Extender:
    """Runs the keep-alive schedule: a coordinator, and up to ``slots`` workers."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK, slots: int = SLOTS) -> None:
        self._clock = clock
        self._slots = slots
        self.start_afresh()

    @staticmethod
    def current() -> Extender:
        """The extender of the process."""
        return _EACH.get()

    def start_afresh(self) -> None:
        """Start afresh (a forked child has none of its parent's threads)."""
        self._lock = create_lock()
        self._changed = threading.Event()  # the coordinator waits on it
        self._handed = threading.Event()  # idle workers wait on it
        self._done = threading.Event()  # remove() waits on it
        self._schedule: Schedule[Job] = Schedule(self._slots, batching=_batching)
        self._handoff: deque[Start[Job] | Batch[Job]] = deque()
        self._coordinator: Running | None = None
        self._workers: set[Running] = set()
        self._idle = 0  # workers waiting for a handoff
        self._telling: Job | None = None  # the job whose holder hears of its loss now

    def add(self, job: Job, estimate: float) -> None:
        """Keep ``job``'s lock alive; it surely lives until ``estimate`` (on the clock)."""
        with self._lock:
            self._schedule.add(job, estimate, job.lead)
            if self._coordinator is None:
                # In a context of its own, as it serves every holder (a ``pymongo.timeout()``
                # deadline would fail every renewal once it passed).
                self._coordinator = start(
                    self._coordinate, THREAD_NAME, ended=self._coordinator_ended
                )
            self._changed.set()

    def remove(self, job: Job) -> None:
        """Stop keeping ``job`` alive; if it is being extended or told of its loss, wait.

        After this returns, neither ``extend`` nor ``lose`` of the job is running or will
        run again, so a holder can release its lock without an extension racing the
        release, and without ``on_lost`` being called after ``hold()`` returned. Called
        from the keep-alive itself (an ``on_lost``), it does not wait.
        """
        me = current()
        with self._lock:
            self._schedule.remove(job)
            self._changed.set()  # the coordinator may have nothing left to wait for
            if me is self._coordinator or me in self._workers:
                return
        while True:
            with self._lock:
                if not self._schedule.running(job) and self._telling is not job:
                    return
                self._done.clear()
            wait_event(self._done, None)

    def reset_stats(self) -> Stats:
        """The schedule's statistics so far (lateness, losses); counting starts afresh."""
        with self._lock:
            return self._schedule.reset_stats()

    # -- the coordinator and the workers: each holds ``_lock`` except while it acts ------

    def _coordinate(self) -> None:
        try:
            self._decide()
        except Exception:  # the schedule and the jobs handle their errors: a bug
            log.exception("the keep-alive coordinator failed")

    def _decide(self) -> None:
        while True:
            with self._lock:
                decision = self._schedule.next(self._clock.monotonic())
                if isinstance(decision, (Start, Batch)):
                    self._handoff.append(decision)
                    if self._idle < len(self._handoff) and len(self._workers) < self._slots:
                        self._workers.add(
                            start(self._work, EXTENSION_NAME, ended=self._worker_ended)
                        )
                    self._handed.set()
                    continue
                if isinstance(decision, Lose):
                    self._telling = decision.job
                elif isinstance(decision, Wait):
                    self._changed.clear()
                    left = None
                    if decision.until is not None:
                        left = max(decision.until - self._clock.monotonic(), 0.0)
                else:
                    # Decided under the lock: an add() from now on starts a new one.
                    self._coordinator = None
                    self._handed.set()  # idle workers end now
                    return
            if isinstance(decision, Lose):
                _told(decision.job)
                with self._lock:
                    self._telling = None
                    self._done.set()
            else:
                wait_event(self._changed, left)

    def _coordinator_ended(self, ended: Running) -> None:
        """However the coordinator ended (a bug, its loop shutting down), add() starts another."""
        with self._lock:
            if self._coordinator is ended:
                self._coordinator = None

    def _work(self) -> None:
        me = current()
        while True:
            with self._lock:
                decision = self._handoff.popleft() if self._handoff else None
                if decision is None:
                    if self._schedule.idle:
                        self._workers.discard(me)
                        return
                    self._handed.clear()
                    self._idle += 1
            if decision is None:
                try:
                    wait_event(self._handed, WORKER_IDLE)
                finally:
                    with self._lock:
                        self._idle -= 1
                        # Idle for long: the coordinator starts another when needed.
                        idle = not self._handed.is_set() and not self._handoff
                        if idle:
                            self._workers.discard(me)
                if idle:
                    return
            elif isinstance(decision, Batch):
                self._renew_batch(decision)
            else:
                self._extend(decision)

    def _worker_ended(self, ended: Running) -> None:
        """A worker ended; if it was the last, what was handed to none is left unanswered.

        A task cancelled before it started (its loop shutting down) runs none of its body,
        and :meth:`remove` waits until every extension is recorded.
        """
        with self._lock:
            self._workers.discard(ended)
            if self._workers:
                return
            while self._handoff:
                self._left_unanswered(self._handoff.popleft())
            self._done.set()
            self._changed.set()

    def _left_unanswered(self, decision: Start[Job] | Batch[Job]) -> None:
        """Record that ``decision`` ended without an answer: nothing is known of it."""
        now = self._clock.monotonic()
        if isinstance(decision, Batch):
            self._schedule.batch_finished(decision.token, dict.fromkeys(decision.jobs, AGAIN), now)
        else:
            self._schedule.unanswered(decision.job)

    def _extend(self, start: Start[Job]) -> None:
        """Extend ``start``'s lock alone, then record how that ended."""
        job = start.job
        with self._lock:
            kept = self._schedule.kept(job)  # not removed while it waited
        try:
            estimate = _extended(job, start.limit) if kept else None
        except BaseException:  # cancelled: the renewal may or may not be in
            with self._lock:
                self._left_unanswered(start)
                self._ended()
            raise
        with self._lock:
            self._schedule.finished(job, estimate, self._clock.monotonic())
            self._ended()

    def _renew_batch(self, batch: Batch[Job]) -> None:
        """Renew ``batch``'s jobs still kept by one command, then record each outcome."""
        with self._lock:
            jobs, holdings, results, together = _members(batch.jobs, self._schedule.kept)
        read = False
        try:
            if together is not None:
                outcomes, read = _together(together, holdings, batch.limit)
                if outcomes is not None:  # else it failed and tells nothing: AGAIN, as set
                    results.update(zip(jobs, outcomes, strict=True))
        except BaseException:  # cancelled: nothing is known
            with self._lock:
                self._left_unanswered(batch)
                self._ended()
            raise
        with self._lock:
            now = self._clock.monotonic()
            self._schedule.batch_finished(batch.token, results, now, read=read)
            self._ended()

    def _ended(self) -> None:
        """A command ended: the coordinator and the removers look again (under the lock)."""
        self._done.set()
        self._changed.set()


def _batching(job: Job) -> Batching | None:
    return job.batching if job.together is not None else None


def _members(
    jobs: Sequence[Job], kept: Callable[[Job], bool]
) -> tuple[list[Job], list[Any], dict[Any, Outcome], Any]:
    """A batch's jobs to renew, their holdings, the outcomes known, and the group's ``together``.

    A job no longer ``kept`` (removed while the batch waited) is :data:`AGAIN`, which the
    schedule forgets; one whose holding was garbage-collected is lost (logged).
    """
    results: dict[Any, Outcome] = dict.fromkeys(jobs, AGAIN)
    renewed: list[Job] = []
    holdings: list[Any] = []
    for job in jobs:
        if not kept(job):
            continue
        holding = job.holding()
        if holding is None:
            dropped(job.name)
            results[job] = None
        else:
            renewed.append(job)
            holdings.append(holding)
    together = renewed[0].together if renewed else None
    return renewed, holdings, results, together


def _extended(job: Job, limit: float) -> float | None:
    """Extend ``job`` alone; an exception is logged, and the job dropped (``None``)."""
    try:
        return job.extend(limit)
    except Exception:  # a job handles its own errors: a bug
        log.exception("keep-alive job %r failed; it is dropped", job)
        return None


def _together(
    together: Callable[[Sequence[Any], float], Renewed],
    holdings: Sequence[Any],
    limit: float,
) -> tuple[Sequence[Outcome] | None, bool]:
    """Renew ``holdings`` together; an exception is logged, and nothing known (``None``)."""
    try:
        return together(holdings, limit)
    except Exception:  # the group handles its own errors: a bug
        log.exception("keep-alive batch of %d locks failed", len(holdings))
        return None, False


def _told(job: Job) -> None:
    """Tell ``job``'s holder of its loss; an exception is logged."""
    try:
        job.lose()
    except Exception:  # a job handles its own errors: a bug
        log.exception("keep-alive job %r failed to report its loss", job)


#: The extender of each event loop that has one (it ends with its loop).
_EACH: PerProcess[Extender] = PerProcess(Extender)
