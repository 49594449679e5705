"""Waiting (scenarios 11 to 13): hand-off latency, commands per grant, fairness.

* **Hand-off latency** (11): 1 + N threads of one process take turns on one document
  through ``hold(wait=...)``, each holding it for :data:`HOLD_FOR`; the hand-off is the
  time from a release returning to the next grant returning, p50/p90/p99, with N = 1 and
  10 waiters, woken by change streams (``wake="changes"``) and polling (``wake="poll"``,
  the default backoff). Once more with 1 waiter and holds of :data:`LONG_HOLD`, long
  enough for a polling waiter's backoff to grow.
* **Commands per grant** (12): from the same runs, every command the process sent (the
  acquisitions, refused or not, the releases, and the change stream's ``aggregate`` and
  ``getMore``) over the grants, with 10 waiters.
* **Fairness** (13): :data:`PROCESSES` processes, each a loop of ``hold(wait=...)`` on one
  document for the scenario's time; the least share of grants times the number of
  processes (1 is perfectly even), the longest wait, and with ``fair=True`` the share of
  grants that went to the waiter that had been waiting longest.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from pymongo import monitoring

from docmultilock import WriteLock
from docmultilock._bench._bed import DATABASE, Context, Outcome, connect
from docmultilock._bench._measure import percentile
from docmultilock._bench._report import Bound, Row
from docmultilock._workers import Link, Pool

__all__ = ["fairness", "handoff"]

#: How long each holder keeps the lock, in seconds.
HOLD_FOR = 0.02
#: The longer hold of the last hand-off phases, in seconds.
LONG_HOLD = 0.3
#: Waiters of the two hand-off phases.
WAITERS = (1, 10)
#: Processes of the fairness scenario, and how long they have to start and connect (s).
PROCESSES = 4
FAIR_START = 3.0
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


def _turns(
    uri: str, threads: int, wake: str, seconds: float, hold_for: float = HOLD_FOR
) -> tuple[list[float], float]:
    """``threads`` threads take turns on one document; hand-offs (s), commands per grant.

    After its release a thread pauses as long as it held the lock before it asks again, so
    the next grant goes to a thread that was waiting: a hand-off is counted from a release
    to the next grant *by another thread*.
    """
    count = _Count()
    with connect(uri, [count]) as client:
        collection = client[DATABASE][f"handoff_{wake}_{threads}_{int(hold_for * 1000)}"]
        collection.drop()
        collection.insert_one({"_id": 1})
        locks = WriteLock(collection, lock_timeout=30.0)
        events: list[tuple[float, str, int]] = []
        guard = threading.Lock()
        end = time.monotonic() + seconds

        def turn(me: int) -> None:
            while time.monotonic() < end:
                with locks.hold({"_id": 1}, wait=60.0, wake=wake):  # type: ignore[arg-type]
                    with guard:
                        events.append((time.monotonic(), "grant", me))
                    time.sleep(hold_for)
                with guard:
                    events.append((time.monotonic(), "release", me))
                time.sleep(hold_for)

        workers = [threading.Thread(target=turn, args=(me,)) for me in range(threads)]
        count.names.clear()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        commands = sum(count.names.values())
        collection.drop()
    events.sort()
    handoffs: list[float] = []
    released: tuple[float, int] | None = None
    for at, what, who in events:
        if what == "release":
            released = (at, who)
        elif released is not None:
            if who != released[1]:
                handoffs.append(at - released[0])
            released = None
    grants = sum(1 for _, what, _ in events if what == "grant")
    return handoffs, commands / max(grants, 1)


def handoff(context: Context) -> Outcome:
    """Scenarios 11 and 12: hand-off latency and commands per grant, changes vs polling."""
    rows: list[Row] = []
    wakes = ("changes", "poll")
    phases = [(n, wake, HOLD_FOR) for n in WAITERS for wake in wakes]
    phases += [(1, wake, LONG_HOLD) for wake in wakes]
    for done, (waiters, wake, hold_for) in enumerate(phases):
        held = f"hold {hold_for * 1000:g} ms"
        context.progress.bar(done / len(phases), f"{waiters} waiter(s), wake={wake}, {held}")
        seconds = context.duration / len(phases)
        handoffs, per_grant = _turns(context.uri, waiters + 1, wake, seconds, hold_for)
        ms = [h * 1000 for h in handoffs]
        for label, fraction in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
            rows.append(
                Row.make(
                    11,
                    f"hand-off {label}, {waiters} waiter(s), wake={wake}, {held}",
                    "ms",
                    percentile(ms, fraction) if ms else float("nan"),
                    None,
                    detail=f"{len(ms)} hand-offs",
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


Grant = tuple[int, float, float]  # (process, asked, granted), wall-clock times


@dataclass(frozen=True)
class _Grants:
    """One process's grants, its answer to the parent."""

    grants: list[Grant]


def _fair_worker(link: Link, uri: str, fair: bool, start: float, seconds: float) -> None:
    """One process of the fairness scenario: from ``start`` (wall clock), a loop of holds."""
    grants: list[Grant] = []
    with link.working():
        with connect(uri) as client:
            locks = WriteLock(client[DATABASE]["fairness"], lock_timeout=30.0)
            time.sleep(max(start - time.time(), 0))
            while time.time() < start + seconds:
                asked = time.time()
                with locks.hold({"_id": 1}, wait=60.0, fair=fair):
                    grants.append((link.index, asked, time.time()))
                    time.sleep(HOLD_FOR)
        link.put(_Grants(grants))


def _fair_run(uri: str, fair: bool, seconds: float) -> list[Grant]:
    start = time.time() + FAIR_START  # the processes start and connect meanwhile
    with Pool("bench", PROCESSES, _fair_worker, uri, fair, start, seconds) as pool:
        found = pool.collect(_Grants, seconds + 120)
    return sorted((grant for each in found for grant in each.grants), key=lambda grant: grant[2])


def _in_order(grants: list[Grant]) -> float:
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
