"""Where a WriteLock acquire+release cycle's client CPU goes, beside the floor's.

Thread CPU (``time.thread_time``) around the parts of each cycle, on a fresh embedded server
(or ``--uri``): pymongo's ``find_one_and_update`` (encoding, the socket and its wait,
decoding), the library's own code (everything else in the call), and the whole cycle;
median of 7 alternating rounds of 60 cycles per side. Then the same floor with a
never-taken branch that makes the server parse about 200 more nodes per command: the
client's work is unchanged, only the wait grows, which shows how much of the client CPU
follows the server's speed rather than the client's code::

    python tools/cpu_attribution.py
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import bson
from bson.raw_bson import RawBSONDocument
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

        sides: dict[str, Callable[[], object]] = {
            "docmultilock": lambda: locks.release(where, locks.acquire(where)),
            "floor": lambda: floor.release(where, floor.acquire(where) or ""),
            "floor + 200 dead nodes": heavy,
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


def main() -> None:
    """Measure and print the table (Markdown)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--uri", help="a server to use instead of a fresh embedded one")
    uri = parser.parse_args().uri
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
