"""Where a WriteLock acquire+release cycle's client CPU goes, beside the floor's.

Thread CPU (``time.thread_time``) around the parts of each cycle, on a fresh embedded server
(or ``--uri``): pymongo's ``find_one_and_update`` (encoding, the socket and its wait,
decoding), the library's own code (everything else in the call), and the whole cycle;
median of 7 alternating rounds of 60 cycles per side. Then the same floor with a
never-taken branch that makes the server parse about 200 more nodes per command: the
client's work is unchanged, only the wait grows, which shows how much of the client CPU
follows the server's speed rather than the client's code; and the floor under pymongo's
operation timeout (``pymongo.timeout``), which docmultilock puts on every command by
default, to show what that bound costs::

    python tools/cpu_attribution.py

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
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import bson
import pymongo
from bson.raw_bson import RawBSONDocument
from pymongo import MongoClient, ReturnDocument
from pymongo.synchronous import collection as pymongo_collection

from docmultilock import WriteLock
from docmultilock._bench import _floor
from docmultilock._bench._bed import bed, connect
from docmultilock._expr import Expr
from docmultilock.testing import EmbeddedServer

ROUNDS = 7
CYCLES = 60

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


def _dead_branch(depth: int) -> RawBSONDocument:
    expression: Expr = {"$add": [1, 2]}
    for _ in range(depth):
        expression = {"$add": [expression, 1]}
    return RawBSONDocument(bson.encode({"x": expression}))


_DEAD = _dead_branch(50)
_PLAIN_SET_IF = _floor._set_if


def _heavy_set_if(condition: Expr, value: Expr) -> list[dict[str, Any]]:
    real = {"$cond": [condition, value, f"${_floor.FIELD}"]}
    return [{"$set": {_floor.FIELD: {"$cond": [False, _DEAD, real]}}}]


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


def measure(uri: str) -> dict[str, dict[str, float]]:
    """µs per cycle, median of the rounds, per side and part."""
    with connect(uri) as client, bed(client) as twins, _timed_pymongo():
        twins.seed(1)
        where = {"_id": 0}
        locks, floor = WriteLock(twins.locks), _floor.FloorLock(twins.floor)

        def heavy() -> None:
            _floor._set_if = _heavy_set_if
            try:
                floor.release(where, floor.acquire(where) or "")
            finally:
                _floor._set_if = _PLAIN_SET_IF

        def deadline() -> None:
            # The floor under pymongo's operation timeout, as docmultilock sends every
            # command by default (``timeout``): what that bound costs the client alone.
            with pymongo.timeout(30):
                lock_id = floor.acquire(where) or ""
            with pymongo.timeout(30):
                floor.release(where, lock_id)

        sides: dict[str, Callable[[], object]] = {
            "docmultilock": lambda: locks.release(where, locks.acquire(where)),
            "floor": lambda: floor.release(where, floor.acquire(where) or ""),
            "floor + 200 dead nodes": heavy,
            "floor + timeout": deadline,
        }
        for side in sides.values():
            for _ in range(20):
                side()
        rounds: dict[str, dict[str, list[float]]] = {name: defaultdict(list) for name in sides}
        for _ in range(ROUNDS):
            for name, side in sides.items():
                for part, seconds in _round(side).items():
                    rounds[name][part].append(seconds / CYCLES * 1e6)
    return {
        name: {part: statistics.median(values) for part, values in parts.items()}
        for name, parts in rounds.items()
    }


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
    reply = {"_id": where["_id"], "ours": True, "t": "object", "v": 1, "mine": [entry]}
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
    """Print µs per canned cycle (median of 7 rounds) and, with ``profile``, the top functions."""
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
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        totals = re.findall(r"Collected : (\d+)", done.stderr)
        return int(totals[-1])


def main() -> None:
    """Measure and print the table (Markdown)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--uri", help="a server to use instead of a fresh embedded one")
    parser.add_argument("--canned", action="store_true", help="the library's code alone, no I/O")
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
        figures = measure(uri)
    sides = list(figures)
    print("| µs per cycle | " + " | ".join(sides) + " |")
    print("|---" * (len(sides) + 1) + "|")
    for part in figures["floor"]:
        print(f"| {part.strip()} | " + " | ".join(f"{figures[s][part]:,.0f}" for s in sides) + " |")


if __name__ == "__main__":
    main()
