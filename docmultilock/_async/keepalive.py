"""The keep-alive runner: it runs the ``_schedule`` of kept locks, written once for both flavours.

The decisions are ``_schedule``'s and ``_batch_rules``'; this module only asks, acts and
reports back. Each ``hold(..., keepalive=True)`` registers an :class:`AsyncJob`: how to
extend its lock within a time limit, how to tell the holder the lock is lost, and how it
may be renewed in a batch with the others of its group (its ``batching`` and
``together``, which renews the holdings of one group by one command).

An extender (one per event loop, or per process for threads: :meth:`AsyncExtender.current`)
has a *coordinator* (a task, or a thread, named :data:`THREAD_NAME`) that asks the schedule
what to do and never waits on the server: it hands extensions and batches to up to
``slots`` *workers* (named :data:`EXTENSION_NAME`) and tells holders of their losses on
time, even while every worker is stuck in a stalled command. They start with the first
registration and end by themselves once nothing is registered, so an idle loop or process
runs none.

The few primitives that differ between tasks and threads (start one, an event, a lock,
which one is running) are ``docmultilock._concurrency``'s; the state the coordinator and
workers share is guarded by the lock of ``async_create_lock`` (none for tasks, which take
turns), so no ``with self._lock:`` block may suspend.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from docmultilock._batch_rules import AGAIN, Batch, Batching, Outcome
from docmultilock._clock import SYSTEM_CLOCK, Clock
from docmultilock._concurrency import (
    AsyncRunning,
    PerLoop,
    async_create_lock,
    async_current,
    async_start,
    async_wait_event,
)
from docmultilock._held_lock import Holding
from docmultilock._schedule import Lose, Schedule, Start, Stats, Wait

__all__ = ["EXTENSION_NAME", "SLOTS", "THREAD_NAME", "AsyncExtender", "AsyncGroup", "AsyncJob"]

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


class AsyncGroup(Protocol):
    """What renews the holdings of one group: one alone, or several by one command."""

    def extend(self, holding: Holding, limit: float) -> Awaitable[float | None]:
        """Extend ``holding`` within ``limit`` s: its new estimate, or ``None`` if lost."""

    def renew(self, holdings: Sequence[Holding], limit: float) -> Awaitable[Renewed]:
        """Renew ``holdings`` by one command within ``limit`` s: each outcome, and if read."""


@dataclass(frozen=True, eq=False)  # identity: each held lock registers its own job
class AsyncJob:
    """One held lock's part in the keep-alive."""

    #: Extend once within the given seconds; the new expiry estimate, or ``None`` when the
    #: lock is lost (the job has told its holder).
    extend: Callable[[float], Awaitable[float | None]]
    #: Tell the holder its lock is lost: its estimate passed without a renewal.
    lose: Callable[[], None]
    #: Renew this many seconds before the estimate.
    lead: float
    #: How the job may share a batch (``None``: always renewed alone).
    batching: Batching | None = None
    #: Renews the holdings of the job's group together (with ``batching``).
    together: Callable[[Sequence[Any], float], Awaitable[Renewed]] | None = None
    #: The holding ``together`` is given (``None`` once it was garbage-collected).
    holding: Callable[[], Any] = lambda: None
    #: What the job keeps alive, for the log.
    name: str = ""

    @classmethod
    def weakly(
        cls, holding: Holding, group: AsyncGroup, *, lead: float, name: str, batching: Batching
    ) -> AsyncJob:
        """The job of a held lock's ``holding``, renewed by its ``group``; held weakly.

        ``group`` extends one holding (``extend``) or several together (``renew``); the
        holding tells its own loss (``overdue``). A ``hold()`` dropped without its exit
        (never left, then garbage-collected) is no longer renewed: its next renewal finds
        it gone, logs a warning naming ``name``, and ends the job, so its lock expires
        within its lifetime and the keep-alive stops once nothing else is kept. Strong
        references would renew it for ever.
        """
        held = weakref.ref(holding)

        async def extend(limit: float) -> float | None:
            alive = held()
            if alive is None:
                dropped(name)
                return None
            return await group.extend(alive, limit)

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
        "'async with')",
        name,
    )


class AsyncExtender:
    """Runs the keep-alive schedule: a coordinator, and up to ``slots`` workers."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK, slots: int = SLOTS) -> None:
        self._clock = clock
        self._slots = slots
        self.start_afresh()

    @staticmethod
    def current() -> AsyncExtender:
        """The extender of the running loop."""
        return _EACH.get()

    def start_afresh(self) -> None:
        """Start afresh (a forked child has none of its parent's threads)."""
        self._lock = async_create_lock()
        self._changed = asyncio.Event()  # the coordinator waits on it
        self._handed = asyncio.Event()  # idle workers wait on it
        self._done = asyncio.Event()  # remove() waits on it
        self._schedule: Schedule[AsyncJob] = Schedule(self._slots, batching=_batching)
        self._handoff: deque[Start[AsyncJob] | Batch[AsyncJob]] = deque()
        self._coordinator: AsyncRunning | None = None
        self._workers: set[AsyncRunning] = set()
        self._idle = 0  # workers waiting for a handoff
        self._telling: AsyncJob | None = None  # the job whose holder hears of its loss now

    def add(self, job: AsyncJob, estimate: float) -> None:
        """Keep ``job``'s lock alive; it surely lives until ``estimate`` (on the clock)."""
        with self._lock:
            self._schedule.add(job, estimate, job.lead)
            if self._coordinator is None:
                # In a context of its own, as it serves every holder (a ``pymongo.timeout()``
                # deadline would fail every renewal once it passed).
                self._coordinator = async_start(
                    self._coordinate, THREAD_NAME, ended=self._coordinator_ended
                )
            self._changed.set()

    async def remove(self, job: AsyncJob) -> None:
        """Stop keeping ``job`` alive; if it is being extended or told of its loss, wait.

        After this returns, neither ``extend`` nor ``lose`` of the job is running or will
        run again, so a holder can release its lock without an extension racing the
        release, and without ``on_lost`` being called after ``hold()`` returned. Called
        from the keep-alive itself (an ``on_lost``), it does not wait.
        """
        me = async_current()
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
            await async_wait_event(self._done, None)

    def reset_stats(self) -> Stats:
        """The schedule's statistics so far (lateness, losses); counting starts afresh."""
        with self._lock:
            return self._schedule.reset_stats()

    # -- the coordinator and the workers: each holds ``_lock`` except while it acts ------

    async def _coordinate(self) -> None:
        try:
            await self._decide()
        except Exception:  # the schedule and the jobs handle their errors: a bug
            log.exception("the keep-alive coordinator failed")

    async def _decide(self) -> None:
        while True:
            with self._lock:
                decision = self._schedule.next(self._clock.monotonic())
                if isinstance(decision, (Start, Batch)):
                    self._handoff.append(decision)
                    if self._idle < len(self._handoff) and len(self._workers) < self._slots:
                        self._workers.add(
                            async_start(self._work, EXTENSION_NAME, ended=self._worker_ended)
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
                await async_wait_event(self._changed, left)

    def _coordinator_ended(self, ended: AsyncRunning) -> None:
        """However the coordinator ended (a bug, its loop shutting down), add() starts another."""
        with self._lock:
            if self._coordinator is ended:
                self._coordinator = None

    async def _work(self) -> None:
        me = async_current()
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
                    await async_wait_event(self._handed, WORKER_IDLE)
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
                await self._renew_batch(decision)
            else:
                await self._extend(decision)

    def _worker_ended(self, ended: AsyncRunning) -> None:
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

    def _left_unanswered(self, decision: Start[AsyncJob] | Batch[AsyncJob]) -> None:
        """Record that ``decision`` ended without an answer: nothing is known of it."""
        now = self._clock.monotonic()
        if isinstance(decision, Batch):
            self._schedule.batch_finished(decision.token, dict.fromkeys(decision.jobs, AGAIN), now)
        else:
            self._schedule.unanswered(decision.job)

    async def _extend(self, start: Start[AsyncJob]) -> None:
        """Extend ``start``'s lock alone, then record how that ended."""
        job = start.job
        with self._lock:
            kept = self._schedule.kept(job)  # not removed while it waited
        try:
            estimate = await _extended(job, start.limit) if kept else None
        except BaseException:  # cancelled: the renewal may or may not be in
            with self._lock:
                self._left_unanswered(start)
                self._ended()
            raise
        with self._lock:
            self._schedule.finished(job, estimate, self._clock.monotonic())
            self._ended()

    async def _renew_batch(self, batch: Batch[AsyncJob]) -> None:
        """Renew ``batch``'s jobs still kept by one command, then record each outcome."""
        with self._lock:
            jobs, holdings, results, together = _members(batch.jobs, self._schedule.kept)
        read = False
        try:
            if together is not None:
                outcomes, read = await _together(together, holdings, batch.limit)
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


def _batching(job: AsyncJob) -> Batching | None:
    return job.batching if job.together is not None else None


def _members(
    jobs: Sequence[AsyncJob], kept: Callable[[AsyncJob], bool]
) -> tuple[list[AsyncJob], list[Any], dict[Any, Outcome], Any]:
    """A batch's jobs to renew, their holdings, the outcomes known, and the group's ``together``.

    A job no longer ``kept`` (removed while the batch waited) is :data:`AGAIN`, which the
    schedule forgets; one whose holding was garbage-collected is lost (logged).
    """
    results: dict[Any, Outcome] = dict.fromkeys(jobs, AGAIN)
    renewed: list[AsyncJob] = []
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


async def _extended(job: AsyncJob, limit: float) -> float | None:
    """Extend ``job`` alone; an exception is logged, and the job dropped (``None``)."""
    try:
        return await job.extend(limit)
    except Exception:  # a job handles its own errors: a bug
        log.exception("keep-alive job %r failed; it is dropped", job)
        return None


async def _together(
    together: Callable[[Sequence[Any], float], Awaitable[Renewed]],
    holdings: Sequence[Any],
    limit: float,
) -> tuple[Sequence[Outcome] | None, bool]:
    """Renew ``holdings`` together; an exception is logged, and nothing known (``None``)."""
    try:
        return await together(holdings, limit)
    except Exception:  # the group handles its own errors: a bug
        log.exception("keep-alive batch of %d locks failed", len(holdings))
        return None, False


def _told(job: AsyncJob) -> None:
    """Tell ``job``'s holder of its loss; an exception is logged."""
    try:
        job.lose()
    except Exception:  # a job handles its own errors: a bug
        log.exception("keep-alive job %r failed to report its loss", job)


#: The extender of each event loop that has one (it ends with its loop).
_EACH: PerLoop[AsyncExtender] = PerLoop(AsyncExtender)
