"""One-client scenarios: uncontended cycles (2, 3, 8), readers at scale (6), document size (7).

Every scenario alternates docmultilock and the floor in short slices on twin documents
(see ``_bed``), and reports docmultilock's figure, the floor's and their ratio.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from docmultilock import MultiLock, WriteLock
from docmultilock._bench import _shape
from docmultilock._bench._bed import Bed, Context, Outcome, bed, connect, payload
from docmultilock._bench._commands import CommandCounter
from docmultilock._bench._floor import FloorLock
from docmultilock._bench._measure import SIDES, Sample, Side, alternate, percentile
from docmultilock._bench._report import Bound, Row

__all__ = ["PERCENTILES", "latency_rows", "readers", "size", "uncontended"]

PERCENTILES = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99))
READERS = (1, 10, 100, 1000)
SIZES = (("1 KB", 1 << 10), ("1 MB", 1 << 20))
HOUR_MS = 3_600_000

Doc = dict[str, Any]


def _must(lock_id: str | None) -> str:
    if lock_id is None:
        raise RuntimeError("the floor's uncontended acquisition was refused")
    return lock_id


def write_sides(twins: Bed, where: Doc) -> dict[str, Side]:
    """A WriteLock cycle and the floor's cycle on the twin documents ``where``."""
    locks, floor = WriteLock(twins.locks), FloorLock(twins.floor)
    return {
        "docmultilock": Side(lambda: locks.acquire(where), lambda lock: locks.release(where, lock)),
        "floor": Side(
            lambda: _must(floor.acquire(where)), lambda lock_id: floor.release(where, lock_id)
        ),
    }


def read_sides(twins: Bed, where: Doc) -> dict[str, Side]:
    """A MultiLock read cycle and the floor's cycle on the twin documents ``where``."""
    # Room for the measured reader beside the most holders scenario 6 plants.
    locks = MultiLock(twins.locks, max_holders=max(READERS) + 1)
    floor = FloorLock(twins.floor)
    return {
        "docmultilock": Side(
            lambda: locks.acquire(where, tag="read"), lambda lock: locks.release(where, lock)
        ),
        "floor": Side(
            lambda: _must(floor.acquire(where)), lambda lock_id: floor.release(where, lock_id)
        ),
    }


def _part(context: Context, index: int, parts: int) -> Callable[[float], None]:
    """A progress tick for part ``index`` of ``parts`` of a scenario."""
    return lambda done: context.progress.bar((index + done) / parts)


def _ms(seconds: float) -> float:
    return seconds * 1000.0


def _growth(
    scenario: int,
    name: str,
    heavy: Mapping[str, float],
    light: Mapping[str, float],
    limit: float,
    detail: str = "",
) -> Row:
    """How much more each side costs under the heavier load, ``heavy / light``; bounded."""
    mine, floor = (heavy[side] / light[side] for side in SIDES)
    return Row.make(
        scenario, name, "x", mine, floor, Bound("<=", limit, of="docmultilock"), detail=detail
    )


def latency_rows(
    scenario: int, what: str, acquire: Sequence[Sequence[float]], release: Sequence[Sequence[float]]
) -> list[Row]:
    """p50/p90/p99 rows (ms) for acquire and release; each argument is (docmultilock, floor)."""
    rows = []
    for operation, pair in (("acquire", acquire), ("release", release)):
        for label, fraction in PERCENTILES:
            mine, floor = (_ms(percentile(values, fraction)) for values in pair)
            rows.append(Row.make(scenario, f"{what} {operation} {label}", "ms", mine, floor))
    return rows


def uncontended(context: Context) -> Outcome:
    """Scenarios 2, 3 and 8 (uncontended): WriteLock cycles on one document, one client."""
    with connect(context.uri) as client, bed(client) as twins:
        twins.seed(1)
        samples = alternate(
            write_sides(twins, {"_id": 0}), context.duration, tick=context.progress.bar
        )
        mine, floor = (samples[side] for side in SIDES)
        collections = twins.sizes()
    target = 0.8 if context.embedded else 0.95
    rows = [
        Row.make(
            2,
            "acquire+release cycles, 1 client, 1 document",
            "cycles/s",
            mine.per_second,
            floor.per_second,
            Bound(">=", target),
            detail=f"{mine.cycles} and {floor.cycles} cycles",
        ),
        Row.make(
            3,
            "client CPU per acquire+release cycle",
            "µs",
            mine.each.cpu * 1e6,
            floor.each.cpu * 1e6,
            Bound("<=", 1.25),
        ),
        Row.make(
            3,
            "  of which the calling thread alone",
            "µs",
            mine.each.thread_cpu * 1e6,
            floor.each.thread_cpu * 1e6,
        ),
        *latency_rows(
            8,
            "uncontended",
            (mine.acquire, floor.acquire),
            (mine.release, floor.release),
        ),
        # What the server parses per operation bounds scenario 2 (counted, not timed).
        *_shape.rows(2),
    ]
    return Outcome(rows, collections)


def _holders(count: int) -> Doc:
    """``count`` live read entries in docmultilock's stored layout, stamped by the server."""
    return {
        "$map": {
            "input": {"$range": [0, count]},
            "in": {
                "id": {"$concat": ["reader-", {"$toString": "$$this"}]},
                "tag": "read",
                "pending": False,
                "fence": {"$add": ["$$this", 1]},
                "acquired": "$$NOW",
                "expires": {"$add": ["$$NOW", HOUR_MS]},
                "ttl": HOUR_MS,
            },
        }
    }


def readers(context: Context) -> Outcome:
    """Scenario 6: read acquire+release beside 1, 10, 100 and 1000 read holders.

    The holders go into the document in one write. The floor's twin document carries the
    same entries in a field it never touches, so both documents are the same size.
    """
    rows = []
    cost: dict[int, dict[str, float]] = {}
    with connect(context.uri) as client, bed(client) as twins:
        twins.seed(len(READERS))
        for index, count in enumerate(READERS):
            where = {"_id": index}
            layout = {
                "v": 1,
                "fence": count,
                "expires": {"$add": ["$$NOW", HOUR_MS]},
                "holders": _holders(count),
            }
            twins.locks.update_one(where, [{"$set": {"lock": layout}}])
            twins.floor.update_one(where, [{"$set": {"readers": _holders(count)}}])
            samples = alternate(
                read_sides(twins, where),
                context.duration / len(READERS),
                slices=4,
                tick=_part(context, index, len(READERS)),
            )
            mine, floor = (samples[side] for side in SIDES)
            cost[count] = {side: samples[side].each.wall for side in SIDES}
            rows.append(
                Row.make(
                    6,
                    f"read acquire+release beside {count} read holder{'s' * (count > 1)}",
                    "ms/cycle",
                    _ms(mine.each.wall),
                    _ms(floor.each.wall),
                    detail=(
                        f"acquire p50 {_ms(percentile(mine.acquire, 0.5)):.2f} ms, "
                        f"release p50 {_ms(percentile(mine.release, 0.5)):.2f} ms"
                    ),
                )
            )
        collections = twins.sizes()
    most, least = READERS[-1], READERS[0]
    # The passes over the holders, counted: array operators in a read cycle's commands.
    passes = [shape.array_operators for shape in _shape.cycle(*_shape.shapes(), "MultiLock")]
    rows.append(
        _growth(
            6,
            f"cost beside {most} holders / beside {least}",
            cost[most],
            cost[least],
            3.0,
            detail=(
                f"{passes[0]} and {passes[1]} array operators per cycle (every branch: "
                "at most that many passes over the holders)"
            ),
        )
    )
    return Outcome(rows, collections)


def _traffic(uri: str, twins: Bed, where: Doc) -> dict[str, int]:
    """BSON bytes sent and received by one cycle on each side, through a counting client."""
    counter = CommandCounter()
    traffic = {}
    with connect(uri, [counter]) as client:
        database = client[twins.locks.database.name]
        counted = Bed(*(database[c.name] for c in (twins.locks, twins.floor, twins.named)))
        for name, side in write_sides(counted, where).items():
            counter.clear()
            side.release(side.acquire())
            traffic[name] = counter.sent + counter.received
    return traffic


def size(context: Context) -> Outcome:
    """Scenario 7: WriteLock cycles on a 1 KB and a 1 MB document; bytes on the wire."""
    rows = []
    cost: dict[str, dict[str, float]] = {}
    traffic: dict[str, dict[str, int]] = {}
    with connect(context.uri) as client, bed(client) as twins:
        for index, (label, nbytes) in enumerate(SIZES):
            where = {"_id": index}
            for collection in (twins.locks, twins.floor):
                collection.insert_one({**where, **payload(nbytes)})
            samples: dict[str, Sample] = alternate(
                write_sides(twins, where),
                context.duration / len(SIZES),
                slices=4,
                tick=_part(context, index, len(SIZES)),
            )
            cost[label] = {side: samples[side].each.wall for side in SIDES}
            traffic[label] = _traffic(context.uri, twins, where)
            rows.append(
                Row.make(
                    7,
                    f"acquire+release on a {label} document",
                    "ms/cycle",
                    _ms(cost[label]["docmultilock"]),
                    _ms(cost[label]["floor"]),
                    detail=(
                        f"{traffic[label]['docmultilock']} and {traffic[label]['floor']} "
                        "bytes on the wire per cycle"
                    ),
                )
            )
        collections = twins.sizes()
    big, small = SIZES[-1][0], SIZES[0][0]
    rows += [
        _growth(7, f"cost on {big} / on {small}", cost[big], cost[small], 1.5),
        _growth(
            7, f"bytes on the wire per cycle, {big} / {small}", traffic[big], traffic[small], 1.01
        ),
    ]
    return Outcome(rows, collections)
