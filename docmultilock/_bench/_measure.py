"""Timing loops: acquire+release cycles, alternated between docmultilock and the floor.

Both sides of a comparison run in the same process against the same server, in short
alternating slices, so that drift on the server (or the machine) weighs on both alike.
Client CPU is the process's own user+sys time (``time.process_time``) around the loop;
pymongo's monitor threads count on both sides, in proportion to the wall time. The calling
thread's own CPU (``time.thread_time``) is kept beside it: the work each cycle makes the
client do, without the background threads.
"""

from __future__ import annotations

import math
import operator
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

__all__ = [
    "SIDES",
    "Sample",
    "Side",
    "Spent",
    "alternate",
    "percentile",
    "ratio",
    "run_cycles",
    "timed",
]

#: The two sides of every comparison, in the order they alternate.
SIDES = ("docmultilock", "floor")


def ratio(part: float, whole: float) -> float:
    """``part / whole``, or 0.0 when ``whole`` is 0 (nothing was measured)."""
    return part / whole if whole else 0.0


@dataclass(frozen=True)
class Side:
    """An acquire that must succeed, and the release of what it returned."""

    acquire: Callable[[], Any]
    release: Callable[[Any], object]


class Spent(NamedTuple):
    """Seconds: of the wall clock, of the process's CPU, and of the calling thread's alone."""

    wall: float = 0.0
    cpu: float = 0.0
    thread_cpu: float = 0.0

    def per(self, count: int) -> Spent:
        """Each figure divided by ``count`` (0.0 when nothing was counted)."""
        return Spent(*(ratio(seconds, count) for seconds in self))


@dataclass
class Sample:
    """Cycles run, the seconds they took, and each call's latency in seconds."""

    cycles: int = 0
    spent: Spent = field(default_factory=Spent)
    acquire: list[float] = field(default_factory=list)
    release: list[float] = field(default_factory=list)

    @property
    def per_second(self) -> float:
        """Cycles per wall-clock second."""
        return ratio(self.cycles, self.spent.wall)

    @property
    def each(self) -> Spent:
        """The seconds of one cycle, on average."""
        return self.spent.per(self.cycles)


def timed(into: Sample, run: Callable[[], int]) -> None:
    """Run ``run`` (which returns its cycle count) and add the seconds it took to ``into``.

    ``thread_cpu`` is the calling thread's: with one worker, the thread that runs every
    cycle (the sync caller, or the event loop), without the sync client's monitor threads.
    """
    cpu0, thread0, start = time.process_time(), time.thread_time(), time.perf_counter()
    into.cycles += run()
    took = Spent(
        time.perf_counter() - start, time.process_time() - cpu0, time.thread_time() - thread0
    )
    into.spent = Spent(*map(operator.add, into.spent, took))


def run_cycles(side: Side, seconds: float, into: Sample, *, at_least: int = 1) -> None:
    """Run acquire+release cycles for ``seconds`` (and ``at_least`` cycles) into ``into``."""
    clock = time.perf_counter
    acquired, released = into.acquire, into.release

    def cycles() -> int:
        done = 0
        now = clock()
        end = now + seconds
        while now < end or done < at_least:
            handle = side.acquire()
            middle = clock()
            side.release(handle)
            later = clock()
            acquired.append(middle - now)
            released.append(later - middle)
            now = later
            done += 1
        return done

    timed(into, cycles)


def alternate(
    sides: dict[str, Side],
    seconds: float,
    *,
    slices: int = 10,
    warmup: int = 3,
    at_least: int = 3,
    tick: Callable[[float], None] = lambda done: None,
) -> dict[str, Sample]:
    """Run every side for about ``seconds`` in all, alternating ``slices`` times.

    Each side first runs ``warmup`` uncounted cycles; ``tick`` hears the fraction done.
    """
    samples = {name: Sample() for name in sides}
    for side in sides.values():
        for _ in range(warmup):
            side.release(side.acquire())
    per_slice = seconds / slices / len(sides)
    for index in range(slices):
        for name, side in sides.items():
            run_cycles(side, per_slice, samples[name], at_least=max(1, at_least // slices))
        tick((index + 1) / slices)
    return samples


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile (``fraction`` from 0 to 1) of ``values``."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]
