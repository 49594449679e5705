"""Waiting (scenarios 11 to 13): hand-off latency, commands per grant, fairness.

* **Hand-off latency** (11): 1 + N threads of one process take turns on one document
  through ``hold(wait=...)``, each holding it for :data:`HOLD_FOR`; the hand-off is the
  time from a release returning to the next grant returning, p50/p90/p99, with N = 1 and
  10 waiters, woken by change streams (``wake="changes"``) and polling (``wake="poll"``,
  the default backoff).
* **Commands per grant** (12): from the same runs, every command the process sent (the
  acquisitions, refused or not, the releases, and the change stream's ``aggregate`` and
  ``getMore``) over the grants, with 10 waiters.
* **Fairness** (13): :data:`PROCESSES` processes, each a loop of ``hold(wait=...)`` on one
  document for the scenario's time; the least share of grants times the number of
  processes (1 is perfectly even), the longest wait, and with ``fair=True`` the share of
  grants that went to the waiter that had been waiting longest.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections import Counter
from typing import Any

from pymongo import monitoring

from docmultilock import WriteLock
from docmultilock._bench._bed import DATABASE, Context, Outcome, connect
from docmultilock._bench._measure import percentile
from docmultilock._bench._report import Bound, Row
from docmultilock._parent import exit_with_parent

__all__ = ["fairness", "handoff"]

#: How long each holder keeps the lock, in seconds.
HOLD_FOR = 0.02
#: Waiters of the two hand-off phases.
WAITERS = (1, 10)
#: Processes of the fairness scenario.
PROCESSES = 4
#: Goals of the issue: at most this many commands per grant beyond the grant itself (the
#: release counted as one of them too), and fair grants in arrival order this often (%).
EXTRA_COMMANDS = 3
IN_ORDER = 95.0

Doc = dict[str, Any]


class _Count(monitoring.CommandListener):
    """Counts the commands a client sends, by name."""

    def __init__(self) -> None:
        self.names: Counter[str] = Counter()
        self._lock = threading.Lock()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        with self._lock:
            self.names[event.command_name] += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def _turns(uri: str, threads: int, wake: str, seconds: float) -> tuple[list[float], float]:
    """``threads`` threads take turns on one document; hand-offs (s), commands per grant."""
    count = _Count()
    with connect(uri, [count]) as client:
        collection = client[DATABASE][f"handoff_{wake}_{threads}"]
        collection.drop()
        collection.insert_one({"_id": 1})
        locks = WriteLock(collection, lock_timeout=30.0)
        events: list[tuple[float, str]] = []
        guard = threading.Lock()
        end = time.monotonic() + seconds

        def turn() -> None:
            while time.monotonic() < end:
                with locks.hold({"_id": 1}, wait=60.0, wake=wake):  # type: ignore[arg-type]
                    with guard:
                        events.append((time.monotonic(), "grant"))
                    time.sleep(HOLD_FOR)
                with guard:
                    events.append((time.monotonic(), "release"))

        workers = [threading.Thread(target=turn) for _ in range(threads)]
        count.names.clear()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        commands = sum(count.names.values())
        collection.drop()
    events.sort()
    handoffs, released = [], None
    for at, what in events:
        if what == "release":
            released = at
        elif released is not None:
            handoffs.append(at - released)
            released = None
    grants = sum(1 for _, what in events if what == "grant")
    return handoffs, commands / max(grants, 1)


def handoff(context: Context) -> Outcome:
    """Scenarios 11 and 12: hand-off latency and commands per grant, changes vs polling."""
    rows: list[Row] = []
    phases = [(n, wake) for n in WAITERS for wake in ("changes", "poll")]
    for done, (waiters, wake) in enumerate(phases):
        context.progress.bar(done / len(phases), f"{waiters} waiter(s), wake={wake}")
        handoffs, per_grant = _turns(context.uri, waiters + 1, wake, context.duration / len(phases))
        ms = [h * 1000 for h in handoffs]
        for label, fraction in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
            rows.append(
                Row.make(
                    11,
                    f"hand-off {label}, {waiters} waiter(s), wake={wake}",
                    "ms",
                    percentile(ms, fraction) if ms else float("nan"),
                    None,
                    detail=f"{len(ms)} hand-offs, hold {HOLD_FOR * 1000:g} ms",
                )
            )
        if waiters == max(WAITERS):
            rows.append(
                Row.make(
                    12,
                    f"commands per grant (release included), {waiters} waiters, wake={wake}",
                    "commands",
                    per_grant,
                    None,
                    Bound("<=", 2 + EXTRA_COMMANDS, of="docmultilock")
                    if wake == "changes"
                    else None,
                )
            )
    return Outcome(rows, "1 document per phase")


def _fair_worker(index: int, uri: str, fair: bool, start: float, seconds: float, out: Any) -> None:
    """One process of the fairness scenario: (index, asked, granted) wall times per grant."""
    exit_with_parent()
    grants: list[tuple[int, float, float]] = []
    with connect(uri) as client:
        locks = WriteLock(client[DATABASE]["fairness"], lock_timeout=30.0)
        time.sleep(max(start - time.time(), 0))
        while time.time() < start + seconds:
            asked = time.time()
            with locks.hold({"_id": 1}, wait=60.0, fair=fair):
                grants.append((index, asked, time.time()))
                time.sleep(HOLD_FOR)
    out.put(grants)


def _fair_run(uri: str, fair: bool, seconds: float) -> list[tuple[int, float, float]]:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    start = time.time() + 3.0  # the processes start and connect meanwhile
    procs = [
        ctx.Process(target=_fair_worker, args=(i, uri, fair, start, seconds, out), daemon=True)
        for i in range(PROCESSES)
    ]
    for proc in procs:
        proc.start()
    grants: list[tuple[int, float, float]] = []
    for _ in procs:
        grants += out.get(timeout=seconds + 120)
    for proc in procs:
        proc.join(30)
    return sorted(grants, key=lambda grant: grant[2])


def _in_order(grants: list[tuple[int, float, float]]) -> float:
    """% of grants that went to the waiter asking longest among those waiting then."""
    good = 0
    for n, (_, asked, granted) in enumerate(grants):
        waiting = [a for _, a, g in grants[n:] if a <= granted]
        good += asked <= min(waiting)
    return 100.0 * good / max(len(grants), 1)


def fairness(context: Context) -> Outcome:
    """Scenario 13: shares, longest wait and arrival order, without and with ``fair=True``."""
    rows: list[Row] = []
    with connect(context.uri) as client:
        collection = client[DATABASE]["fairness"]
        collection.drop()
        collection.insert_one({"_id": 1})
    for done, fair in enumerate((False, True)):
        context.progress.bar(done / 2, f"fair={fair}")
        grants = _fair_run(context.uri, fair, context.duration)
        shares = Counter(index for index, _, _ in grants)
        least = min(shares.get(i, 0) for i in range(PROCESSES)) / max(len(grants), 1)
        longest = max((g - a for _, a, g in grants), default=float("nan"))
        detail = f"{len(grants)} grants, shares {sorted(shares.values())}"
        rows += [
            Row.make(
                13,
                f"least share x {PROCESSES}, fair={fair}",
                "",
                least * PROCESSES,
                None,
                detail=detail,
            ),
            Row.make(13, f"longest wait, fair={fair}", "s", longest, None),
            Row.make(
                13,
                f"grants in arrival order, fair={fair}",
                "%",
                _in_order(grants),
                None,
                Bound(">=", IN_ORDER, of="docmultilock") if fair else None,
            ),
        ]
    return Outcome(rows, "1 document")
