"""Where a WriteLock acquire+release cycle's client CPU goes, beside the floor's.

Thread CPU (``time.thread_time``) around the parts of each cycle, on a fresh embedded server
(or ``--uri``): pymongo's ``find_one_and_update`` (encoding, the socket and its wait,
decoding), the library's own code (everything else in the call), and the whole cycle;
median of 9 alternating rounds of 60 cycles per side. Beside docmultilock and the floor:

* two floors that wait longer with the floor's own client work: each update carries a
  branch the server parses but never runs, and a cycle's branches add up to once and
  twice the nodes a docmultilock cycle sends beyond the floor's. A least squares line
  through every round of the three floors (thread CPU against wall time) gives the
  floor's client CPU at docmultilock's wall time: what the client pays for waiting as
  long, not for its code;
* the floor and both padded floors under pymongo's operation timeout (``pymongo.timeout``),
  which docmultilock puts on every command by default: what that bound costs, and, by a
  second line through their rounds, the floor's client CPU at docmultilock's wait with the
  timeout on: the least a client can spend on a cycle that waits as long and keeps the
  bound::

    python tools/cpu_attribution.py

``--wait-cost`` needs no database: the same client work (encoding and decoding a small
document) after round trips to a peer process that busy-loops 0 to 4 ms before answering,
to show what a longer wait alone costs the client on this machine::

    python tools/cpu_attribution.py --wait-cost

``--canned`` runs the library's own code alone, hot and without I/O: a sync WriteLock
acquire+release cycle whose pymongo calls (``find_one_and_update``/``find_one_and_delete``)
are replaced, inside this tool only, by canned replies of the shape the server gives (a
client that never connects). It prints µs per cycle (thread CPU, median of rounds) and the
heaviest functions by cProfile; ``--callgrind`` counts instructions per cycle instead,
repeatable on a busy machine (valgrind runs the tool twice, with few and with many cycles,
and the difference per cycle is the cycle's, start-up excluded)::

    python tools/cpu_attribution.py --canned
    python tools/cpu_attribution.py --canned --callgrind
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import datetime
import os
import pstats
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import bson
import pymongo
from bson.raw_bson import RawBSONDocument
from pymongo import MongoClient, ReturnDocument
from pymongo.synchronous import collection as pymongo_collection

from docmultilock import WriteLock
from docmultilock._bench import _floor, _shape
from docmultilock._bench._bed import bed, connect
from docmultilock._expr import Expr
from docmultilock.testing import EmbeddedServer

ROUNDS = 9
CYCLES = 60

Doc = dict[str, Any]

spent: dict[str, float] = defaultdict(float)


@contextlib.contextmanager
def _timed_pymongo() -> Iterator[None]:
    """Count thread CPU spent in ``find_one_and_update`` into ``spent["pymongo"]``."""
    original = pymongo_collection.Collection.find_one_and_update

    def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.thread_time()
        try:
            return original(self, *args, **kwargs)
        finally:
            spent["pymongo"] += time.thread_time() - started

    pymongo_collection.Collection.find_one_and_update = timed  # type: ignore[method-assign]
    try:
        yield
    finally:
        pymongo_collection.Collection.find_one_and_update = original  # type: ignore[method-assign]


def _dead(count: int) -> RawBSONDocument:
    """A never-evaluated expression of ``count`` nodes (at least 1), encoded once.

    It reads a field, so the server cannot fold it as a constant: it only parses it.
    """
    expression: Expr = "$_id"
    for _ in range((count - 1) // 3):
        expression = {"$add": [expression, "$_id"]}  # 3 more nodes
    return RawBSONDocument(bson.encode({"x": expression}))


class PaddedFloor(_floor.FloorLock):
    """The floor whose every update carries a dead branch of about ``nodes`` nodes.

    The server parses the branch (``$cond`` on a constant false), never runs it: the
    client's work is the floor's own, plus the bytes of the branch, copied pre-encoded.
    """

    def __init__(self, collection: Any, nodes: int) -> None:
        super().__init__(collection)
        # The $cond around the real update takes 3 of the nodes.
        self._dead = _dead(nodes - 3)["x"] if nodes > 3 else None

    def _send(self, where: Mapping[str, Any], update: list[Doc], **options: Any) -> Doc | None:
        if self._dead is not None:
            real = update[0]["$set"][_floor.FIELD]
            update = [{"$set": {_floor.FIELD: {"$cond": [False, self._dead, real]}}}]
        return super()._send(where, update, **options)


def _node_gap() -> int:
    """The nodes (filter, update, projection) a WriteLock cycle sends beyond the floor's."""
    ours, floor = _shape.shapes()
    return sum(
        ours["WriteLock", op].nodes
        + ours["WriteLock", op].projection_nodes
        - floor[op].nodes
        - floor[op].projection_nodes
        for op in ("acquire", "release")
    )


def _round(cycle: Callable[[], object]) -> dict[str, float]:
    spent.clear()
    cpu, wall = time.thread_time(), time.perf_counter()
    for _ in range(CYCLES):
        cycle()
    cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
    return {
        "whole cycle (thread CPU)": cpu,
        "  pymongo find_one_and_update": spent["pymongo"],
        "  the library's own code": cpu - spent["pymongo"],
        "wall time": wall,
    }


def _rounds(sides: dict[str, Callable[[], object]]) -> dict[str, dict[str, list[float]]]:
    """µs per cycle of every alternating round, per side and part."""
    found: dict[str, dict[str, list[float]]] = {name: defaultdict(list) for name in sides}
    for side in sides.values():
        for _ in range(20):
            side()
    for _ in range(ROUNDS):
        for name, side in sides.items():
            for part, seconds in _round(side).items():
                found[name][part].append(seconds / CYCLES * 1e6)
    return found


def _floor_cycle(
    floor: _floor.FloorLock, where: Doc, timeout: float | None = None
) -> Callable[[], object]:
    """A floor acquire+release cycle; with ``timeout``, each command under that bound."""
    if timeout is None:
        return lambda: floor.release(where, floor.acquire(where) or "")

    def bounded() -> None:
        # As docmultilock sends every command by default: each under pymongo's timeout.
        with pymongo.timeout(timeout):
            lock_id = floor.acquire(where) or ""
        with pymongo.timeout(timeout):
            floor.release(where, lock_id)

    return bounded


#: The padded floors: each sends this many times the nodes docmultilock sends beyond it.
PADDINGS = {"floor, as many nodes": 1, "floor, twice as many": 2}


@dataclass(frozen=True)
class Attribution:
    """Medians per side and part; the floor's thread CPU fitted at docmultilock's wait."""

    medians: dict[str, dict[str, float]]
    #: Dead nodes per cycle of each padded floor.
    padding: dict[str, int]
    #: The floor's thread CPU per cycle at docmultilock's median wall time, by a least
    #: squares line through every round of the plain and padded floors (µs).
    floor_at_our_wait: float
    #: The same, through the rounds of the floors under the operation timeout (µs).
    bounded_floor_at_our_wait: float


#: The floors with the operation timeout, as ``measure`` names them.
BOUNDED = {name: f"{name} + timeout" for name in ("floor", *PADDINGS)}


def _at_wait(rounds: dict[str, dict[str, list[float]]], sides: list[str], wall: float) -> float:
    """Thread CPU per cycle at ``wall``, by a least squares line through ``sides``' rounds."""
    walls = [w for name in sides for w in rounds[name]["wall time"]]
    cpus = [c for name in sides for c in rounds[name]["whole cycle (thread CPU)"]]
    slope, intercept = statistics.linear_regression(walls, cpus)
    return intercept + slope * wall


def measure(uri: str) -> Attribution:
    """Measure every side in alternating rounds on one server (``uri``)."""
    with connect(uri) as client, bed(client) as twins, _timed_pymongo():
        twins.seed(1)
        where = {"_id": 0}
        locks, floor = WriteLock(twins.locks), _floor.FloorLock(twins.floor)
        gap = _node_gap()

        sides: dict[str, Callable[[], object]] = {
            "docmultilock": lambda: locks.release(where, locks.acquire(where)),
            "floor": _floor_cycle(floor, where),
        }
        floors: dict[str, _floor.FloorLock] = {"floor": floor}
        for name, times in PADDINGS.items():
            floors[name] = PaddedFloor(twins.floor, gap * times // 2)  # per command
            sides[name] = _floor_cycle(floors[name], where)
        for name, bounded in BOUNDED.items():
            sides[bounded] = _floor_cycle(floors[name], where, locks.options.timeout)
        rounds = _rounds(sides)
    medians = {
        name: {part: statistics.median(values) for part, values in parts.items()}
        for name, parts in rounds.items()
    }
    wall = medians["docmultilock"]["wall time"]
    return Attribution(
        medians,
        {name: gap * times for name, times in PADDINGS.items()},
        _at_wait(rounds, list(BOUNDED), wall),
        _at_wait(rounds, list(BOUNDED.values()), wall),
    )


def _canned_reply(
    self: Any, where: Any, update: Any = None, *, return_document: Any = None, **_: Any
) -> dict[str, Any]:
    """What the server answers an uncontended acquire (after) or release (before)."""
    bindings = update[0]["$set"]["lock"]["$let"]["vars"]
    lock_id = bindings["id"]["$literal"]
    now = datetime.datetime(2025, 1, 1, 12, 0, 0)  # naive, as pymongo decodes by default
    entry = {
        "id": lock_id,
        "tag": "write",
        "pending": False,
        "fence": 7,
        "acquired": now,
        "expires": now + datetime.timedelta(seconds=10),
        "ttl": 10_000,
    }
    reply = {"i": where["_id"], "ours": True, "t": "object", "v": 1, "mine": [entry]}
    if return_document is ReturnDocument.AFTER:
        reply["tags"] = ["write"]
    return reply


@contextlib.contextmanager
def _canned() -> Iterator[Callable[[], object]]:
    """A WriteLock cycle against canned replies: the library's code alone, no I/O."""
    client: MongoClient[dict[str, Any]] = MongoClient("mongodb://127.0.0.1:9", connect=False)
    original = pymongo_collection.Collection.find_one_and_update
    pymongo_collection.Collection.find_one_and_update = _canned_reply  # type: ignore[method-assign,assignment]
    try:
        locks, where = WriteLock(client.bench.docs), {"_id": 0}
        yield lambda: locks.release(where, locks.acquire(where))
    finally:
        pymongo_collection.Collection.find_one_and_update = original  # type: ignore[method-assign]
        client.close()


def canned(cycles: int, profile: bool) -> None:
    """Print µs per canned cycle (median of the rounds) and, with ``profile``, the top functions."""
    with _canned() as cycle:
        for _ in range(200):
            cycle()
        per_round = []
        for _ in range(ROUNDS):
            started = time.thread_time()
            for _ in range(cycles):
                cycle()
            per_round.append((time.thread_time() - started) / cycles * 1e6)
        print(f"the library's own code, canned: {statistics.median(per_round):.1f} µs per cycle")
        if profile:
            profiler = cProfile.Profile()
            profiler.runcall(lambda: [cycle() for _ in range(cycles)])
            stats = pstats.Stats(profiler)
            print(f"{stats.total_calls / cycles:.0f} Python function calls per cycle")  # type: ignore[attr-defined]
            stats.sort_stats("tottime").print_stats(25)


def _instructions(cycles: int) -> int:
    """Instructions valgrind counts for this tool running ``cycles`` canned cycles."""
    with tempfile.TemporaryDirectory() as where:
        out = os.path.join(where, "callgrind.out")
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
        command += [sys.executable, __file__, "--canned", "--cycles", str(cycles), "--once"]
        # One hash seed for every run: string hashing moves dict probes, and with them a
        # few thousand instructions per cycle between two runs of the same code.
        seeded = {**os.environ, "PYTHONHASHSEED": "0"}
        done = subprocess.run(command, capture_output=True, text=True, check=True, env=seeded)
        totals = re.findall(r"Collected : (\d+)", done.stderr)
        return int(totals[-1])


def wait_cost() -> None:
    """Print the thread CPU of a round trip plus fixed work, by how long the peer takes."""
    document = {"a": [{"x": i, "y": str(i), "z": [1, 2, 3]} for i in range(50)]}
    print("| peer busy per reply | thread CPU per round trip | of which the fixed work |")
    print("|---|---|---|")
    for busy_us in (0, 1000, 2000, 4000):
        ours, theirs = socket.socketpair()
        child = os.fork()
        if child == 0:  # the peer: answer each byte after busy-looping (no sleep, no I/O)
            ours.close()
            while theirs.recv(1):
                until = time.perf_counter() + busy_us / 1e6
                while time.perf_counter() < until:
                    pass
                theirs.sendall(b"x")
            os._exit(0)
        theirs.close()
        whole, work = [], []
        for _ in range(ROUNDS):
            started, in_work = time.thread_time(), 0.0
            for _ in range(300):
                ours.sendall(b"q")
                ours.recv(1)
                before = time.thread_time()
                bson.decode(bson.encode(document))
                in_work += time.thread_time() - before
            whole.append((time.thread_time() - started) / 300 * 1e6)
            work.append(in_work / 300 * 1e6)
        ours.close()
        os.waitpid(child, 0)
        print(
            f"| {busy_us:,} µs | {statistics.median(whole):,.0f} µs "
            f"| {statistics.median(work):,.0f} µs |"
        )


def main() -> None:
    """Measure and print the table (Markdown)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--uri", help="a server to use instead of a fresh embedded one")
    parser.add_argument("--canned", action="store_true", help="the library's code alone, no I/O")
    parser.add_argument("--wait-cost", action="store_true", help="what a longer wait costs")
    parser.add_argument("--callgrind", action="store_true", help="with --canned: instructions")
    parser.add_argument("--profile", action="store_true", help="with --canned: cProfile's top")
    parser.add_argument("--cycles", type=int, default=2000, help="with --canned: per round")
    parser.add_argument("--once", action="store_true", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.once:  # one run under valgrind: warm up, then the cycles
        with _canned() as cycle:
            for _ in range(50 + arguments.cycles):
                cycle()
        return
    if arguments.wait_cost:
        wait_cost()
        return
    if arguments.canned and arguments.callgrind:
        few, many = _instructions(100), _instructions(100 + arguments.cycles)
        per_cycle = (many - few) / arguments.cycles
        print(f"the library's own code, canned: {per_cycle:,.0f} instructions per cycle")
        return
    if arguments.canned:
        canned(arguments.cycles, arguments.profile)
        return
    uri = arguments.uri
    with contextlib.ExitStack() as stack:
        if uri is None:
            uri = stack.enter_context(EmbeddedServer()).uri
        found = measure(uri)
    figures = found.medians
    sides = list(figures)
    print("| µs per cycle | " + " | ".join(sides) + " |")
    print("|---" * (len(sides) + 1) + "|")
    for part in figures["floor"]:
        print(f"| {part.strip()} | " + " | ".join(f"{figures[s][part]:,.0f}" for s in sides) + " |")
    print()
    for side, nodes in found.padding.items():
        print(f"{side}: {nodes:,} dead nodes per cycle (filter, update and projection)")
    mine = figures["docmultilock"]["whole cycle (thread CPU)"]
    plain = figures["floor"]["whole cycle (thread CPU)"]
    print(
        f"the floor at docmultilock's wall time (least squares over the floors' rounds): "
        f"{found.floor_at_our_wait:,.0f} µs; docmultilock / floor: {mine / plain:.2f} x, "
        f"docmultilock / the floor at the same wait: {mine / found.floor_at_our_wait:.2f} x"
    )
    bounded = found.bounded_floor_at_our_wait
    print(
        f"the floor under the timeout at docmultilock's wall time (least squares over those "
        f"floors' rounds): {bounded:,.0f} µs, {bounded / plain:.2f} x the floor; "
        f"docmultilock / it: {mine / bounded:.2f} x"
    )


if __name__ == "__main__":
    main()
