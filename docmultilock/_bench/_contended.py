"""Contended scenarios: 4 processes on one document (4, 8) and over 100 documents (5).

Each worker process (``_worker``) tries once, and releases on success. The same processes
run docmultilock and the floor in alternating phases that start together on the wall clock.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from docmultilock._bench._bed import Context, Outcome, bed, connect
from docmultilock._bench._measure import SIDES, ratio
from docmultilock._bench._report import Bound, Row
from docmultilock._bench._single import latency_rows
from docmultilock._bench._worker import Job, Phase, Result, worker_main
from docmultilock._workers import STARTUP_LIMIT, Pool, Ready

__all__ = ["PROCESSES", "contended", "spread"]

PROCESSES = 4
PHASES = 2  # per side, alternating
START_DELAY = 0.2  # seconds between sending a phase and its common start


@dataclass
class Total:
    """One side's phases summed over workers."""

    wins: list[int] = field(default_factory=lambda: [0] * PROCESSES)
    attempts: int = 0
    seconds: float = 0.0
    acquire: list[float] = field(default_factory=list)
    release: list[float] = field(default_factory=list)

    def add(self, result: Result) -> None:
        self.wins[result.worker] += result.wins
        self.attempts += result.attempts
        self.acquire += result.acquire
        self.release += result.release

    @property
    def shares(self) -> list[float]:
        """Each process's share of the wins."""
        total = sum(self.wins)
        return [ratio(won, total) for won in self.wins]


def _race(context: Context, documents: int) -> tuple[dict[str, Total], str]:
    totals = {side: Total() for side in SIDES}
    with connect(context.uri) as client, bed(client) as twins:
        twins.seed(documents)
        job = Job(context.uri, twins.locks.name, twins.floor.name)
        with Pool("bench", PROCESSES, worker_main, job, inboxes=True) as pool:
            pool.collect(Ready, STARTUP_LIMIT)
            seconds = context.duration / PHASES / len(SIDES)
            steps = [(n, side) for n in range(PHASES) for side in SIDES]
            for step, (n, side) in enumerate(steps):
                context.progress.bar(step / len(steps), f"{side} running")
                phase = Phase(side, seconds, time.time() + START_DELAY, documents, f"{n}")
                pool.send(phase)
                results = pool.collect(Result, seconds + START_DELAY + STARTUP_LIMIT)
                for result in results:
                    totals[side].add(result)
                totals[side].seconds += sum(r.wall for r in results) / len(results)
            context.progress.bar(1.0)
        return totals, twins.sizes()


def _rows(scenario: int, what: str, totals: dict[str, Total]) -> list[Row]:
    mine, floor = (totals[side] for side in SIDES)

    def rate(total: Total, count: int) -> float:
        return count / total.seconds

    def shares(total: Total) -> str:
        return " ".join(f"{share:.2f}" for share in total.shares)

    return [
        Row.make(
            scenario,
            f"{what}: successful acquisitions",
            "/s",
            rate(mine, sum(mine.wins)),
            rate(floor, sum(floor.wins)),
        ),
        Row.make(
            scenario,
            f"{what}: attempts",
            "/s",
            rate(mine, mine.attempts),
            rate(floor, floor.attempts),
        ),
        Row.make(
            scenario,
            f"{what}: fairness, least share of wins x {PROCESSES}",
            "x",
            min(mine.shares) * PROCESSES,
            min(floor.shares) * PROCESSES,
            Bound(">", 0.0, of="docmultilock"),
            detail=f"shares {shares(mine)}; floor {shares(floor)}",
        ),
    ]


def contended(context: Context) -> Outcome:
    """Scenarios 4 and 8 (contended): 4 processes on one document."""
    totals, collections = _race(context, 1)
    mine, floor = (totals[side] for side in SIDES)
    rows = _rows(4, f"{PROCESSES} processes, 1 document", totals)
    rows += latency_rows(
        8, "contended", (mine.acquire, floor.acquire), (mine.release, floor.release)
    )
    return Outcome(rows, collections)


def spread(context: Context) -> Outcome:
    """Scenario 5: 4 processes over 100 documents."""
    totals, collections = _race(context, 100)
    return Outcome(_rows(5, f"{PROCESSES} processes, 100 documents", totals), collections)
