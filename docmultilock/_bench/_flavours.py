"""Async beside sync (scenario 10): cycles, client CPU, and how long waiting stalls the loop.

* **Cycles**: WriteLock acquire+release cycles with 1 and with 50 workers, each on its own
  document (so the figure is the client's and the server's capacity, not contention): sync
  workers are threads sharing one ``MongoClient`` (one thread runs ``_measure.run_cycles``,
  the loop of scenario 2), async workers are coroutines on one event loop sharing one
  ``AsyncMongoClient``. The four phases alternate, twice each, so drift weighs on all alike.
* **Client CPU per cycle**: the process's CPU time (``time.process_time``: every thread,
  pymongo's monitors included) around each phase, over its cycles. Async work all runs on
  the loop's thread, so the async figure includes the async client's monitor tasks.
* **Event-loop stall**: a ticker task sleeps 10 ms at a time and records how much later than
  asked it wakes, while 100 coroutines take turns holding one document through
  ``async with locks.hold(filter, wait=...)`` (each holds it for 2 ms). A stall is the
  largest such lateness: the time the loop ran something else without yielding.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pymongo.asynchronous.collection import AsyncCollection

from docmultilock import AsyncWriteLock, LockTimeout, WriteLock
from docmultilock._bench._bed import Context, Outcome, bed, connect, connect_async
from docmultilock._bench._measure import Sample, Side, percentile, run_cycles, timed
from docmultilock._bench._report import Bound, Row

__all__ = ["CONTENDERS", "MANY", "TICK", "async_beside_sync"]

#: Concurrent workers of the "many" phases, each on its own document.
MANY = 50
#: Coroutines waiting on one document while the ticker runs.
CONTENDERS = 100
#: The ticker's period, in seconds.
TICK = 0.010
#: How long each contender keeps the lock once it has it, in seconds.
HOLD_FOR = 0.002
#: Targets: async CPU per cycle at most this times sync's; no stall this long (ms).
CPU_RATIO = 1.1
STALL_MS = 50.0
#: Each phase runs this many times, alternating with the others.
SLICES = 2

Doc = dict[str, Any]


def _side(locks: WriteLock, where: Doc) -> Side:
    return Side(lambda: locks.acquire(where), lambda lock: locks.release(where, lock))


def _sync_cycles(locks: WriteLock, workers: int, seconds: float) -> int:
    """``workers`` threads, each cycling on its own document for ``seconds``; total cycles."""
    samples = [Sample() for _ in range(workers)]
    sides = [_side(locks, {"_id": i}) for i in range(workers)]
    if workers == 1:
        run_cycles(sides[0], seconds, samples[0])
        return samples[0].cycles
    start = threading.Barrier(workers)

    def work(index: int) -> None:
        start.wait()
        run_cycles(sides[index], seconds, samples[index])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(sample.cycles for sample in samples)


async def _async_cycles(locks: AsyncWriteLock, workers: int, seconds: float) -> int:
    """``workers`` coroutines, each cycling on its own document for ``seconds``; total cycles."""
    end = time.perf_counter() + seconds

    async def work(where: Doc) -> int:
        done = 0
        while time.perf_counter() < end or not done:
            lock = await locks.acquire(where)
            await locks.release(where, lock)
            done += 1
        return done

    return sum(await asyncio.gather(*(work({"_id": i}) for i in range(workers))))


@dataclass
class Stall:
    """The ticker's lateness (seconds) and the holds the contenders got meanwhile."""

    late: list[float]
    holds: int
    timeouts: int


async def _stall(locks: AsyncWriteLock, seconds: float) -> Stall:
    """A 10 ms ticker beside 100 coroutines waiting in ``hold(wait=...)`` on one document."""
    end = time.perf_counter() + seconds
    late: list[float] = []
    holds = timeouts = 0
    running = True

    async def ticker() -> None:
        before = time.perf_counter()
        while running:
            await asyncio.sleep(TICK)
            now = time.perf_counter()
            late.append(max(0.0, now - before - TICK))
            before = now

    async def contender() -> None:
        nonlocal holds, timeouts
        while (left := end - time.perf_counter()) > 0:
            try:
                async with locks.hold({"_id": 0}, wait=left):
                    holds += 1
                    await asyncio.sleep(HOLD_FOR)
            except LockTimeout:
                timeouts += 1

    tick = asyncio.create_task(ticker())
    await asyncio.gather(*(contender() for _ in range(CONTENDERS)))
    running = False
    await tick
    return Stall(late, holds, timeouts)


@contextlib.contextmanager
def _runner() -> Iterator[asyncio.AbstractEventLoop]:
    """One event loop, to run coroutines on between sync phases (``asyncio.Runner`` is 3.11+)."""
    loop = asyncio.new_event_loop()
    try:
        yield loop
    finally:
        loop.close()


class _AsyncSide:
    """The async client and its lock manager, made and used on one runner's loop."""

    def __init__(self, uri: str, database: str, collection: str) -> None:
        self.uri, self.database, self.collection = uri, database, collection

    async def open(self) -> None:
        self.client = connect_async(self.uri)
        target: AsyncCollection[Doc] = self.client[self.database][self.collection]
        self.locks = AsyncWriteLock(target)
        for _ in range(3):  # warm up: connect, and build the cached commands
            await self.locks.release({"_id": 0}, await self.locks.acquire({"_id": 0}))

    async def close(self) -> None:
        await self.client.close()


def async_beside_sync(context: Context) -> Outcome:
    """Scenario 10: async cycles and CPU beside sync's, and the loop's stall while waiting."""
    part = context.duration / (4 * SLICES + 2)  # 4 phases x SLICES, and twice that to stall
    sync = {1: Sample(), MANY: Sample()}
    asyn = {1: Sample(), MANY: Sample()}
    with connect(context.uri) as client, bed(client) as twins, _runner() as runner:
        twins.locks.insert_many([{"_id": i} for i in range(MANY)])
        locks = WriteLock(twins.locks)
        for _ in range(3):
            locks.release({"_id": 0}, locks.acquire({"_id": 0}))
        side = _AsyncSide(context.uri, twins.locks.database.name, twins.locks.name)
        runner.run_until_complete(side.open())
        try:
            steps = 0
            for _ in range(SLICES):
                for workers in (1, MANY):
                    timed(sync[workers], functools.partial(_sync_cycles, locks, workers, part))
                    cycles = functools.partial(_async_cycles, side.locks, workers, part)
                    timed(asyn[workers], lambda: runner.run_until_complete(cycles()))  # noqa: B023 - run at once
                    steps += 2
                    context.progress.bar(steps / (4 * SLICES + 2))
            stall = runner.run_until_complete(_stall(side.locks, 2 * part))
        finally:
            runner.run_until_complete(side.close())
        collections = twins.sizes()
    worst = 1000 * max(stall.late, default=0.0)
    rows: list[Row] = []
    for workers, sync_what, async_what in (
        (1, "1 thread", "1 coroutine"),
        (MANY, f"{MANY} threads", f"{MANY} coroutines on one loop"),
    ):
        docs = f"{workers} document{'s' * (workers > 1)}"
        mine, theirs = asyn[workers], sync[workers]
        rows += [
            Row.make(
                10,
                f"sync acquire+release cycles, {sync_what}, {docs}",
                "cycles/s",
                theirs.per_second,
                None,
                detail=f"{theirs.cycles} cycles",
            ),
            Row.make(
                10,
                f"async acquire+release cycles, {async_what}, {docs}",
                "cycles/s",
                mine.per_second,
                None,
                detail=f"{mine.cycles} cycles; {mine.per_second / theirs.per_second:.2f} x sync",
            ),
            Row.make(
                10,
                f"client CPU per cycle, async / sync, {workers} worker{'s' * (workers > 1)}",
                "x",
                mine.each.cpu / theirs.each.cpu,
                None,
                Bound("<=", CPU_RATIO, of="docmultilock"),
                detail=(
                    f"process CPU per cycle: async {mine.each.cpu * 1e6:,.0f} µs, "
                    f"sync {theirs.each.cpu * 1e6:,.0f} µs"
                    + (
                        f"; calling thread alone: async {mine.each.thread_cpu * 1e6:,.0f} µs, "
                        f"sync {theirs.each.thread_cpu * 1e6:,.0f} µs"
                        if workers == 1
                        else ""
                    )
                ),
            ),
        ]
    rows.append(
        Row.make(
            10,
            f"largest event-loop stall, {TICK * 1000:g} ms ticker, "
            f"{CONTENDERS} coroutines in hold(wait=...) on 1 document",
            "ms",
            worst,
            None,
            Bound("<", STALL_MS, of="docmultilock"),
            detail=(
                f"p99 {1000 * percentile(stall.late, 0.99):.1f} ms over {len(stall.late)} ticks; "
                f"{stall.holds} holds, {stall.timeouts} waits timed out"
            ),
        )
    )
    return Outcome(rows, collections)
