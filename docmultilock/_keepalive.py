"""The keep-alive's two flavours, threads and tasks: runners for the ``_renewals`` schedule.

This is the one place where the sync and async shells genuinely differ; the decisions are
``_renewals``' and ``_batches``' in both. A :class:`~docmultilock._renewals.Batch` runs in
a slot like a lone extension: its first job's ``together`` renews the batch's holders by
one command (``_jobs``).

**Threads** (:class:`Extender`, for the sync managers).
Each ``hold(..., keepalive=True)`` registers a :class:`Job`: how to extend its lock within a
time limit, and how to tell the holder the lock is lost. The process has one
:class:`Extender`. Its *coordinator* thread (named :data:`THREAD_NAME`) asks the schedule
what to do and never waits on the server: it hands extensions to up to ``slots`` *worker*
threads and tells holders of their losses on time, even while every worker is stuck in a
stalled command. Threads start with the first registration and end by themselves once
nothing is registered, so an idle process has none.

**Tasks** (:class:`AsyncExtender`, for the async managers). One per event loop: a
coordinator task does the same, starting each extension as a task of its own (at most
``slots`` at once) on the running loop. It starts with the first registration and ends
once nothing is registered, so an idle loop runs none.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from docmultilock._batches import AGAIN, Batching, Outcome
from docmultilock._clock import SYSTEM_CLOCK, Clock
from docmultilock._concurrency import PerLoop, PerProcess, async_start, start
from docmultilock._jobs import AsyncJob, Job, members
from docmultilock._renewals import Batch, Lose, Schedule, Start, Stats, Wait

__all__ = ["EXTENDER", "SLOTS", "THREAD_NAME", "AsyncExtender", "AsyncJob", "Extender", "Job"]

log = logging.getLogger("docmultilock")

T = TypeVar("T")

#: The name of the coordinator thread (one per process at most); workers add ``-N``.
THREAD_NAME = "docmultilock-keepalive"
#: The name of an async extension task.
EXTENSION_NAME = f"{THREAD_NAME}-extension"

#: How many extensions may be in flight at once, per process.
SLOTS = 8

#: A worker that had nothing to do for this long ends (another starts when needed).
WORKER_IDLE = 10.0


class Extender:
    """Runs the keep-alive schedule on a coordinator thread and a pool of worker threads."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK, slots: int = SLOTS) -> None:
        self._clock = clock
        self._slots = slots
        self._reset()

    @staticmethod
    def current() -> Extender:
        """The process's extender."""
        return _PROCESS.get()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # the coordinator waits on it
        self._handed = threading.Condition(self._lock)  # idle workers wait on it
        self._done = threading.Condition(self._lock)  # remove() waits on it
        self._schedule: Schedule[Job] = Schedule(self._slots, batching=_batching)
        self._handoff: deque[Start[Job] | Batch[Job]] = deque()
        self._coordinator: threading.Thread | None = None
        self._workers: set[threading.Thread] = set()
        self._idle = 0  # workers waiting for a handoff
        self._telling: Job | None = None  # the job whose holder hears of its loss right now
        self._names = itertools.count(1)

    def add(self, job: Job, estimate: float) -> None:
        """Keep ``job``'s lock alive; it surely lives until ``estimate`` (on the clock)."""
        with self._lock:
            self._schedule.add(job, estimate, job.lead)
            if self._coordinator is None:
                self._coordinator = start(self._coordinate, THREAD_NAME)
            self._changed.notify()

    def remove(self, job: Job) -> None:
        """Stop keeping ``job`` alive; if it is being extended or told of its loss, wait.

        After this returns, neither ``extend`` nor ``lose`` of the job is running or will
        run again, so a holder can release its lock without an extension racing the
        release, and without ``on_lost`` being called after ``hold()`` returned.
        """
        with self._lock:
            self._schedule.remove(job)
            self._changed.notify()  # the coordinator may have nothing left to wait for
            current = threading.current_thread()
            if current is not self._coordinator and current not in self._workers:
                self._done.wait_for(
                    lambda: not self._schedule.running(job) and self._telling is not job
                )

    def reset_stats(self) -> Stats:
        """The schedule's statistics so far (lateness, losses); counting starts afresh."""
        with self._lock:
            return self._schedule.reset_stats()

    # -- the threads: each holds ``_lock`` except while it calls a job -----------------

    def _unlocked(self, action: Callable[[], T]) -> T:
        """Run ``action`` without holding the lock: it may take long, or call back in."""
        self._lock.release()
        try:
            return action()
        finally:
            self._lock.acquire()

    def _coordinate(self) -> None:
        with self._lock:
            try:
                while True:
                    decision = self._schedule.next(self._clock.monotonic())
                    if isinstance(decision, (Start, Batch)):
                        self._handoff.append(decision)
                        if self._idle < len(self._handoff) and len(self._workers) < self._slots:
                            name = f"{THREAD_NAME}-{next(self._names)}"
                            self._workers.add(start(self._work, name))
                        self._handed.notify()
                    elif isinstance(decision, Lose):
                        self._telling = decision.job
                        self._unlocked(functools.partial(_safely, decision.job.lose))
                        self._telling = None
                        self._done.notify_all()
                    elif isinstance(decision, Wait):
                        left = (
                            None
                            if decision.until is None
                            else decision.until - self._clock.monotonic()
                        )
                        self._changed.wait(None if left is None else max(left, 0.0))
                    else:
                        # Decided under the lock: an add() from now on starts a new one.
                        self._coordinator = None
                        self._handed.notify_all()  # idle workers end now
                        return
            except Exception:  # the schedule and the jobs handle their errors: a bug
                log.exception("the keep-alive coordinator failed")
                if self._coordinator is threading.current_thread():
                    self._coordinator = None  # the next add() starts another

    def _work(self) -> None:
        with self._lock:
            try:
                while self._handoff or self._await_handoff():
                    decision = self._handoff.popleft()
                    if isinstance(decision, Batch):
                        self._renew_batch(decision)
                    else:
                        job, estimate = decision.job, None
                        if self._schedule.kept(job):  # not removed while it waited
                            extend = functools.partial(_safely, job.extend, decision.limit)
                            estimate = self._unlocked(extend)
                        self._schedule.finished(job, estimate, self._clock.monotonic())
                    self._done.notify_all()
                    self._changed.notify()
            finally:
                self._workers.discard(threading.current_thread())

    def _renew_batch(self, batch: Batch[Job]) -> None:
        """Renew ``batch``'s jobs still kept by one command, then record each outcome."""
        jobs, holders, results, together = members(batch.jobs, self._schedule.kept)
        read = False
        if together is not None:
            done = self._unlocked(functools.partial(_safely, together, holders, batch.limit))
            outcomes, read = (None, False) if done is None else done
            results.update(_outcomes(jobs, outcomes))
        self._schedule.batch_finished(batch.token, results, self._clock.monotonic(), read=read)

    def _await_handoff(self) -> bool:
        """Wait for an extension to run; False when none came (idle for long, or nothing kept)."""
        self._idle += 1
        try:
            self._handed.wait_for(lambda: self._handoff or self._schedule.idle, WORKER_IDLE)
        finally:
            self._idle -= 1
        return bool(self._handoff)


def _batching(job: Job | AsyncJob) -> Batching | None:
    return job.batching if job.together is not None else None


def _outcomes(jobs: Sequence[Any], outcomes: Sequence[Outcome] | None) -> dict[Any, Outcome]:
    """Each job's outcome; a batch that failed (``None``) tells nothing: :data:`AGAIN`."""
    if outcomes is None:
        return dict.fromkeys(jobs, AGAIN)
    return dict(zip(jobs, outcomes, strict=True))


def _safely(action: Callable[..., T], *args: object) -> T | None:
    """Call a job's ``extend`` or ``lose``; an exception is logged, and the job dropped."""
    try:
        return action(*args)
    except Exception:  # a job handles its own errors: a bug
        log.exception("keep-alive job %r failed; it is dropped", action)
        return None


# A forked child has none of the parent's threads and must not extend the parent's locks.
_PROCESS = PerProcess(Extender)

#: The process's extender.
EXTENDER = _PROCESS.get()


class AsyncExtender:
    """Runs the keep-alive schedule on one event loop: a coordinator task, extension tasks.

    Everything runs on the loop's thread, so no lock is needed: the coordinator sleeps on
    an :class:`asyncio.Event` set by every change (a registration, a removal, an extension
    that finished).
    """

    def __init__(self, clock: Clock = SYSTEM_CLOCK, slots: int = SLOTS) -> None:
        self._clock = clock
        self._schedule: Schedule[AsyncJob] = Schedule(slots, batching=_batching)
        self._changed = asyncio.Event()
        self._coordinator: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()  # extensions and batches in flight
        self._telling: AsyncJob | None = None

    @staticmethod
    def current() -> AsyncExtender:
        """The running loop's extender (made on first use)."""
        return _LOOPS.get()

    def add(self, job: AsyncJob, estimate: float) -> None:
        """Keep ``job``'s lock alive; it surely lives until ``estimate`` (on the clock)."""
        self._schedule.add(job, estimate, job.lead)
        if self._coordinator is None or self._coordinator.done():
            # In a context of its own, as its tasks serve every holder on the loop (a
            # ``pymongo.timeout()`` deadline would fail every renewal once it passed).
            self._coordinator = async_start(self._coordinate, THREAD_NAME)
        self._changed.set()

    async def remove(self, job: AsyncJob) -> None:
        """Stop keeping ``job`` alive; if it is being extended, wait for that to end.

        After this returns, neither ``extend`` nor ``lose`` of the job runs again.
        """
        self._schedule.remove(job)
        self._changed.set()
        while self._schedule.running(job) or self._telling is job:
            self._changed.clear()
            await self._changed.wait()

    def reset_stats(self) -> Stats:
        """The schedule's statistics so far (lateness, losses); counting starts afresh."""
        return self._schedule.reset_stats()

    async def _coordinate(self) -> None:
        try:
            while True:
                decision = self._schedule.next(self._clock.monotonic())
                if isinstance(decision, Start):
                    task = asyncio.get_running_loop().create_task(
                        self._extend(decision.job, decision.limit), name=EXTENSION_NAME
                    )
                    self._tasks.add(task)
                    task.add_done_callback(functools.partial(self._ended, decision.job))
                elif isinstance(decision, Batch):
                    batch = asyncio.get_running_loop().create_task(
                        self._renew_batch(decision), name=EXTENSION_NAME
                    )
                    self._tasks.add(batch)
                    batch.add_done_callback(functools.partial(self._batch_ended, decision))
                elif isinstance(decision, Lose):
                    self._telling = decision.job
                    _safely(decision.job.lose)
                    self._telling = None
                    self._changed.set()
                elif isinstance(decision, Wait):
                    self._changed.clear()
                    left = (
                        None if decision.until is None else decision.until - self._clock.monotonic()
                    )
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(
                            self._changed.wait(), None if left is None else max(left, 0.0)
                        )
                else:
                    return
        except Exception:  # the schedule and the jobs handle their errors: a bug
            log.exception("the keep-alive coordinator failed")
        finally:
            self._coordinator = None

    async def _extend(self, job: AsyncJob, limit: float) -> float | None:
        if not self._schedule.kept(job):  # removed since it was started
            return None
        try:
            return await job.extend(limit)
        except Exception:  # a job handles its own errors: a bug
            log.exception("keep-alive job %r failed; it is dropped", job)
            return None

    async def _renew_batch(self, batch: Batch[AsyncJob]) -> tuple[dict[Any, Outcome], bool]:
        jobs, holders, results, together = members(batch.jobs, self._schedule.kept)
        read = False
        if together is not None:
            try:
                outcomes, read = await together(holders, batch.limit)
            except Exception:  # a job handles its own errors: a bug
                log.exception("keep-alive batch of %d locks failed", len(jobs))
                outcomes = None
            results.update(_outcomes(jobs, outcomes))
        return results, read

    def _batch_ended(
        self, batch: Batch[AsyncJob], task: asyncio.Task[tuple[dict[Any, Outcome], bool]]
    ) -> None:
        """Record how a batch ended; a cancelled one tells nothing (see :meth:`_ended`)."""
        self._tasks.discard(task)
        results: dict[Any, Outcome] = dict.fromkeys(batch.jobs, AGAIN)
        read = False
        if not task.cancelled() and task.exception() is None:
            results, read = task.result()
        now = self._clock.monotonic()
        self._schedule.batch_finished(batch.token, results, now, read=read)
        self._changed.set()

    def _ended(self, job: AsyncJob, task: asyncio.Task[float | None]) -> None:
        """Record how an extension ended, a cancelled one too (even one that never ran).

        A done callback, not the task's own code: a task cancelled before it starts runs
        none of its body, and :meth:`remove` waits until every extension is recorded.
        """
        self._tasks.discard(task)
        if task.cancelled():  # at a loop's shutdown, say: the renewal may or may not be in
            self._schedule.unanswered(job)
        else:
            estimate = None if task.exception() is not None else task.result()
            self._schedule.finished(job, estimate, self._clock.monotonic())
        self._changed.set()


#: The task extender of each event loop that has one (it ends with its loop).
_LOOPS: PerLoop[AsyncExtender] = PerLoop(AsyncExtender)
