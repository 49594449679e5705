"""``docmultilock doctor``: what a server gives the library, one ok/warn line per check.

Each check is a function of a connected client that returns a :class:`Check`; none raises
(a failure is a warning that says why). The majority-write and change-stream checks write
and delete one document in a scratch collection.

A warning of a check docmultilock relies on fails the run (:func:`passed`; ``doctor``
exits 1). An *advisory* one does not: it names something docmultilock works without,
less well (no change streams: waiters poll instead of waking at once).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pymongo import MongoClient
from pymongo.collection import Collection
from pymongo.errors import PyMongoError
from pymongo.write_concern import WriteConcern

from docmultilock._lock import as_utc
from docmultilock._server_wear import SLOWDOWN, writes_seen
from docmultilock._sync.driver import server_hello

__all__ = ["SCRATCH", "Check", "clock_check", "passed", "render", "run_checks", "version_check"]

#: The scratch collection the write checks use, in the ``--db`` database.
SCRATCH = "docmultilock.doctor"

#: The oldest MongoDB docmultilock runs on: find and findAndModify projections that compute
#: (the replies' keys) and the ``$first`` array operator came with 4.4; ``hello`` with
#: 4.4.2 (``isMaster`` stands in before it).
MIN_VERSION = (4, 4)
#: Beyond this offset between the client's and the server's clocks, warn.
CLOCK_OFFSET_WARN = 1.0
#: Beyond this median round-trip time, warn: every lock operation is one round trip.
RTT_WARN = 0.1

Client = MongoClient[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Check:
    """One line of the report: what was checked, whether it is fine, and why.

    An ``advisory`` check's warning does not fail the run.
    """

    name: str
    ok: bool
    detail: str
    advisory: bool = False
    #: Not merely worse: docmultilock cannot work there (a server older than it supports).
    error: bool = False

    @property
    def status(self) -> str:
        """``ok``, ``warn`` or ``error``."""
        return "ok" if self.ok else "error" if self.error else "warn"

    def as_json(self) -> dict[str, Any]:
        """JSON-safe data for ``--json``."""
        return {
            "check": self.name,
            "status": self.status,
            "detail": self.detail,
            "advisory": self.advisory,
        }


def passed(checks: list[Check]) -> bool:
    """True unless a check that is not advisory warned."""
    return all(check.ok or check.advisory for check in checks)


def _version(client: Client) -> Check:
    try:
        info = client.admin.command("buildInfo")
    except PyMongoError as exc:
        return Check("version", False, f"buildInfo failed ({exc}); docmultilock needs 4.4+")
    embedded = info.get("secantusVersion")
    return version_check(
        str(info.get("version", "?")),
        info.get("versionArray", [0, 0]),
        embedded=None if embedded is None else str(embedded),
        writes=None if embedded is None else writes_seen(client),
    )


def version_check(
    version: str, parts: list[int], *, embedded: str | None = None, writes: int | None = None
) -> Check:
    """The version line for a server reporting ``version`` (``versionArray`` ``parts``).

    ``embedded``: the embedded test server's own version, when that is the server, and
    ``writes`` the writes it has seen (it slows down as they accumulate).
    """
    if embedded is not None:
        seen = "" if writes is None else f"it has seen {writes:,} writes; "
        return Check(
            "version",
            True,
            f"{version}, reported by the embedded test server (SecantusDB {embedded}), "
            f"for development and tests only: run production on MongoDB; {seen}{SLOWDOWN}",
        )
    if tuple(int(part) for part in parts[:2]) >= MIN_VERSION:
        return Check(
            "version", True, f"{version} (computed projections and $first need 4.4 or later)"
        )
    return Check(
        "version",
        False,
        f"{version}: docmultilock needs MongoDB 4.4 or later (its replies are computed "
        "projections, which older servers refuse)",
        error=True,
    )


def _one_node(hello: Mapping[str, Any]) -> bool:
    """True for a replica set of one data-bearing member: majority is that node alone."""
    members = [*hello.get("hosts", []), *hello.get("passives", [])]
    return bool(hello.get("setName")) and len(members) <= 1


def _topology(hello: Mapping[str, Any]) -> Check:
    if _one_node(hello):
        return Check(
            "topology",
            True,
            f"one-node replica set {hello['setName']!r}: transactions, change streams and "
            "majority writes work, but there is no fail-over and no second copy; a lost "
            "node loses its locks with its data (fine for development, not production)",
        )
    if hello.get("setName"):
        primary = hello.get("primary", "?")
        return Check(
            "topology",
            True,
            f"replica set {hello['setName']!r}, primary {primary}: fail-over keeps majority writes",
        )
    if hello.get("msg") == "isdbgrid":
        return Check(
            "topology",
            True,
            "sharded cluster (mongos): before MongoDB 7.0 filters need the shard key "
            "(docs: scaling out)",
        )
    return Check("topology", True, "standalone: no fail-over; a restart loses nothing acknowledged")


def _majority(scratch: Collection[dict[str, Any]], timeout: float, *, single: bool) -> Check:
    view = scratch.with_options(
        write_concern=WriteConcern("majority", wtimeout=int(timeout * 1000))
    )
    try:
        inserted = view.insert_one({"doctor": True})
        view.delete_one({"_id": inserted.inserted_id})
    except PyMongoError as exc:
        return Check("w:majority", False, f"a majority write failed ({exc}); locks use it")
    if single:
        return Check("w:majority", True, "acknowledged (by the one node: nothing to fail over to)")
    return Check("w:majority", True, "acknowledged: locks survive a fail-over once granted")


def _change_streams(scratch: Collection[dict[str, Any]]) -> Check:
    try:
        with scratch.watch(max_await_time_ms=50) as stream:
            stream.try_next()
    except PyMongoError as exc:
        return Check(
            "change streams",
            False,
            f"unavailable ({exc}): waiters fall back to polling, so one waiting for a lock "
            "notices its release after its backoff pause rather than at once; a replica set "
            "or sharded cluster has them",
            advisory=True,
        )
    return Check("change streams", True, "available: a waiter wakes as soon as a lock is released")


def _clock(client: Client) -> Check:
    before = time.time()
    hello = server_hello(client)
    after = time.time()
    server = as_utc(hello["localTime"])
    offset = server.timestamp() - (before + after) / 2
    return clock_check(offset, router=hello.get("msg") == "isdbgrid")


def clock_check(offset: float, *, router: bool) -> Check:
    """The clock line for a server ``offset`` seconds from this client."""
    if router:
        detail = (
            f"this mongos router is {offset:+.3f} s from this client; its clock is $$NOW for "
            "every lock command it routes, so expiry is judged by the routers' clocks, "
            "while the TTL index deletes lock documents by the shard primaries' clocks: "
            "keep every router and shard on NTP (docs: scaling out)"
        )
    else:
        detail = (
            f"server is {offset:+.3f} s from this client; expiry is judged by the server's "
            "clock, an offset misleads only code comparing Lock.expires_at with local time"
        )
    return Check("clock offset", abs(offset) <= CLOCK_OFFSET_WARN, detail)


def _round_trip(client: Client) -> Check:
    times = []
    for _ in range(5):
        start = time.perf_counter()
        client.admin.command("ping")
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    detail = f"median {median * 1000:.1f} ms over 5 pings; each lock operation is one round trip"
    return Check("round trip", median <= RTT_WARN, detail)


def run_checks(client: Client, database: str, scratch: str, timeout: float = 10.0) -> list[Check]:
    """Every check, in the order they print."""
    checks = [_version(client)]
    single = False
    try:
        hello = server_hello(client)
        single = _one_node(hello)
        checks.append(_topology(hello))
        checks.append(_clock(client))
        checks.append(_round_trip(client))
    except PyMongoError as exc:
        checks.append(Check("server", False, f"hello/ping failed: {exc}"))
    collection = client[database][scratch]
    checks.append(_majority(collection, timeout, single=single))
    checks.append(_change_streams(collection))
    return checks


def render(checks: list[Check]) -> str:
    """One ``ok``/``warn``/``error`` line per check."""
    width = max(len(check.name) for check in checks)
    return "".join(
        f"{check.status:<5} {check.name:<{width}}  {check.detail}"
        f"{' (advisory)' if not check.ok and check.advisory else ''}\n"
        for check in checks
    )
