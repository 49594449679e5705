"""The chaos checker: judges a run from the workers' journals and the final documents.

It trusts neither the library nor the workers' conclusions, only what was recorded: the
grants with the server's times and fences (journals), and the writes the server applied
(the ``log`` arrays, each entry stamped with the server's ``$$NOW`` when it was applied).

Each lock's *interval* is the time it certainly counted: from ``start``, the later of its
``acquired_at`` and the host time its grant's reply arrived, to ``end``, the earlier of its
latest known expiry and the host time just before its release was sent. (The server and
the workers share this host's clock. ``acquired_at`` alone would not do as a start: it is
the ``$$NOW`` bound when the command started, and a command can wait behind another's
write, so a grant decided after a release can carry an earlier stamp.) Both bounds err on
the short side (a lost extension reply, a release reply that arrives later), so an overlap
between two intervals is a real one, never an artefact of the recording. A grant starting
at the very millisecond another lock ended is not an overlap.

Violations (kind: what it means):

``conflict``      two conflicting locks held at once on one resource
``unguarded``     a document-mode write applied by an unknown lock, or outside its interval
``fence``         two grants with one fence on a resource, or fences out of grant order, or
                  applied writes whose fences go backwards where the locks exclude each other
``counter``       a counter that does not match the writes applied (lost update: ``rmw``)
``lost_write``    a write acknowledged as applied that is not in the document
``user_fields``   a user field changed
``dead_holder``   a killed holder's lock still counting after its lifetime plus one second
``undocumented``  a docmultilock call raised something outside the documented errors
``release``       a release refused while the lock was live (see below)
``restart``       a server restart after which no lock was ever granted again

Named-mode writes are fenced rather than guarded (the counter is in another collection),
so one that lands after its lock expired but before a later holder wrote is fencing doing
its documented job; those are counted (``fenced_after_expiry``), not flagged.

Release is idempotent, so a release refused while its lock was live is a violation, lost
replies or not, with one exception that belongs to the embedded server, not the library
(``docs/server.md``, "Retried writes"): SecantusDB executes a write that pymongo retried
under an operation timeout again, so a release whose reply the proxy cut after the server
applied it is run twice, and the second run finds the entry gone. docmultilock never sees
the lost reply (pymongo retried), and reports the lock lost. The checker excuses a refusal
only where the proxy's record (``tests/proxy.py``: the command and the server's reply it
dropped) proves it: a ``findAndModify`` carrying the lock's id, sent after the release
began (the worker sends nothing else for that lock by then), whose reply shows the lock's
entry was there to remove (or that it deleted the named lock's document, which it matches
only while that entry is). A kill -9 of the server does the same to a release under way: the
connection dies with the server, pymongo retries on the restarted one, which executes the
write again; a refusal whose release spans a kill is excused too. Such refusals are counted,
not flagged, and only when the run's server executes such retries again
(``retries_reexecuted``); on MongoDB they stay violations.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.chaos.resources import CONFLICTS, COUNTER_FIELDS, ms
from tests.proxy import Cut

Doc = dict[str, Any]

#: Refused acquisitions (a conflicting tag is held) and how each release ended.
REFUSALS = frozenset({"CooperativeLock", "LockAlreadyTaken"})
RELEASE_OUTCOMES = {
    "ok": "ok",
    "expired": "after expiry",
    "abandoned": "abandoned",
    "refused_live": "refused while live",
}

#: A killed holder's lock must stop counting within its lifetime plus this (ms).
DEAD_HOLDER_SLACK_MS = 1000

#: A lock id as docmultilock draws it (``secrets.token_hex(16)``).
LOCK_ID = re.compile(r"[0-9a-f]{32}")


@dataclass
class Grant:
    id: str
    resource: str
    tag: str
    fence: int
    acq: int
    exp: int
    recv: int  # host time the grant's reply arrived
    released_from: int | None = None  # host time just before the release was sent

    @property
    def start(self) -> int:
        return max(self.acq, self.recv)

    @property
    def end(self) -> int:
        if self.released_from is None:
            return self.exp
        return min(self.exp, self.released_from)


@dataclass(frozen=True)
class DeadHolder:
    """What the conductor saw of one killed holder's lock (server times, ms)."""

    resource: str
    lock_id: str
    lifetime_ms: int
    killed_at: int  # read just before the SIGKILL
    last_live: int | None  # the last poll that found the lock still counting
    freed_at: int | None  # the first poll that found it free; None: never seen free


@dataclass(frozen=True)
class Violation:
    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


@dataclass
class Report:
    counts: Counter[str] = field(default_factory=Counter)
    violations: list[Violation] = field(default_factory=list)

    def flag(self, kind: str, detail: str) -> None:
        self.violations.append(Violation(kind, detail))

    def summary(self) -> str:
        lines = [f"  {key}: {value}" for key, value in sorted(self.counts.items())]
        lines.append(f"  violations: {len(self.violations)}")
        lines.extend(f"    {violation}" for violation in self.violations[:20])
        return "\n".join(lines)


def read_journal(path: Path) -> tuple[list[Doc], int]:
    """The events of one journal file, and the number of torn lines skipped."""
    events: list[Doc] = []
    torn = 0
    for line in path.read_text().splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            torn += 1
    return events, torn


def load_journals(directory: Path) -> tuple[list[Doc], int]:
    """Every event of every journal file in ``directory``, and the torn lines skipped."""
    events: list[Doc] = []
    torn = 0
    for path in sorted(directory.glob("*.jsonl")):
        found, skipped = read_journal(path)
        events.extend(found)
        torn += skipped
    return events, torn


def collect_grants(events: Iterable[Mapping[str, Any]]) -> dict[str, Grant]:
    """Each granted lock by id, with its latest known expiry and release start."""
    grants: dict[str, Grant] = {}
    for event in events:
        kind = event["e"]
        if kind == "grant":
            grants[event["id"]] = Grant(
                event["id"],
                event["r"],
                event["tag"],
                event["fence"],
                event["acq"],
                event["exp"],
                event["recv"],
            )
        elif kind == "extend" and event["id"] in grants:
            grants[event["id"]].exp = max(grants[event["id"]].exp, event["exp"])
        elif kind == "releasing" and event["id"] in grants:
            grant = grants[event["id"]]
            if grant.released_from is None:
                grant.released_from = event["t"]
    return grants


def check(
    events: Sequence[Mapping[str, Any]],
    counters: Mapping[str, Mapping[str, Any]],
    user_fields: Mapping[str, Mapping[str, Any]],
    dead_holders: Sequence[DeadHolder] = (),
    restarts: Sequence[int] = (),
    cuts: Sequence[Cut] = (),
    retries_reexecuted: bool = False,
    server_kills: Sequence[int] = (),
) -> Report:
    """Judge a run: ``counters`` and ``user_fields`` are keyed by resource (``doc:0``...).

    ``cuts`` are the replies the proxy dropped; ``retries_reexecuted`` says the server runs
    a write retried under an operation timeout again (SecantusDB; see the module docstring);
    ``server_kills`` are the times (epoch ms, the workers' clock) the server was killed.
    """
    report = Report()
    grants = collect_grants(events)
    by_resource: dict[str, list[Grant]] = {}
    for grant in grants.values():
        by_resource.setdefault(grant.resource, []).append(grant)
    report.counts["grants"] = len(grants)
    report.counts["grants named"] = sum(g.resource.startswith("name:") for g in grants.values())
    for resource, held in by_resource.items():
        _check_overlaps(report, resource, held)
        _check_fences(report, resource, held)
    for resource, counter in counters.items():
        _check_counter(report, resource, counter, grants, events)
        _check_user_fields(report, resource, counter, user_fields.get(resource, {}))
    report.counts["replies cut"] = len(cuts)
    for cut in cuts:
        report.counts[f"replies cut: {cut.name}"] += 1
    found = entries_found_before_a_cut(cuts) if retries_reexecuted else {}
    kills = server_kills if retries_reexecuted else ()
    _check_events(report, events, grants, found, kills)
    _check_dead_holders(report, dead_holders)
    for restart in restarts:
        if not any(g.acq > restart for g in grants.values()):
            report.flag("restart", f"no grant after the server restart at {restart}")
    report.counts["restarts survived"] = sum(
        any(g.acq > restart for g in grants.values()) for restart in restarts
    )
    return report


def _check_overlaps(report: Report, resource: str, held: list[Grant]) -> None:
    ordered = sorted(held, key=lambda g: g.start)
    for index, first in enumerate(ordered):
        for second in ordered[index + 1 :]:
            if second.start >= first.end:
                break  # every later grant starts later still
            if (first.tag, second.tag) in CONFLICTS:
                report.flag(
                    "conflict",
                    f"{resource}: {first.tag} {first.id[:8]} [{first.start}, {first.end}) and "
                    f"{second.tag} {second.id[:8]} [{second.start}, {second.end})",
                )


def _check_fences(report: Report, resource: str, held: list[Grant]) -> None:
    fences = Counter(g.fence for g in held)
    for fence, times in fences.items():
        if times > 1:
            report.flag("fence", f"{resource}: fence {fence} granted {times} times")
    # A grant is decided within [acq, recv]: a larger fence decided certainly before a
    # smaller one (its reply came back before the other's command had even started) is
    # out of order.
    latest_acq: Grant | None = None
    for grant in sorted(held, key=lambda g: g.fence):
        if latest_acq is not None and grant.recv < latest_acq.acq:
            report.flag(
                "fence",
                f"{resource}: fence {grant.fence} granted by {grant.recv}, before fence "
                f"{latest_acq.fence} was asked for at {latest_acq.acq}",
            )
        if latest_acq is None or grant.acq > latest_acq.acq:
            latest_acq = grant


def _check_counter(
    report: Report,
    resource: str,
    counter: Mapping[str, Any],
    grants: Mapping[str, Grant],
    events: Sequence[Mapping[str, Any]],
) -> None:
    named = resource.startswith("name:")
    log: list[Mapping[str, Any]] = list(counter.get("log", []))
    report.counts["writes applied"] += len(log)
    if counter.get("n", 0) != len(log):
        report.flag("counter", f"{resource}: n = {counter.get('n', 0)} for {len(log)} writes")
    write_ids = Counter(entry["s"] for entry in log)
    report.counts["writes applied twice"] += sum(times - 1 for times in write_ids.values())
    if not named:
        writers = {entry["s"] for entry in log if entry["k"] == "w"}
        if counter.get("rmw", 0) != len(writers):
            report.flag(
                "counter",
                f"{resource}: read-modify-write counter {counter.get('rmw', 0)} after "
                f"{len(writers)} writes under write locks (an update was lost)",
            )
    max_write = max_any = 0
    for entry in log:
        grant = grants.get(entry["l"])
        at = _ms(entry["at"])
        if grant is None or grant.resource != resource or grant.fence != entry["f"]:
            report.flag("unguarded", f"{resource}: write {entry['s']} by an unknown lock")
            continue
        inside = grant.acq <= at < grant.exp
        if named:
            report.counts["fenced_after_expiry"] += not inside
        elif not inside:
            report.flag(
                "unguarded",
                f"{resource}: write {entry['s']} applied at {at}, outside its lock's "
                f"[{grant.acq}, {grant.exp})",
            )
        # Locks that exclude each other write in grant order: a write-lock write comes
        # after every fence written so far, any write after every write-lock fence so far.
        floor = max_any if entry["k"] == "w" or named else max_write
        if entry["f"] < floor:
            report.flag(
                "fence", f"{resource}: write {entry['s']} with fence {entry['f']} after {floor}"
            )
        max_any = max(max_any, entry["f"])
        if entry["k"] == "w":
            max_write = max(max_write, entry["f"])
    applied = set(write_ids)
    resource_locks = {g.id for g in grants.values() if g.resource == resource}
    for event in events:
        if event["e"] == "write" and event.get("ok") and event["id"] in resource_locks:
            report.counts["writes acknowledged"] += 1
            if event["s"] not in applied:
                report.flag("lost_write", f"{resource}: acknowledged write {event['s']} missing")


def _check_user_fields(
    report: Report, resource: str, counter: Mapping[str, Any], expected: Mapping[str, Any]
) -> None:
    found = {k: v for k, v in counter.items() if k not in COUNTER_FIELDS and k != "_id"}
    if found != dict(expected):
        report.flag("user_fields", f"{resource}: {found!r} != {dict(expected)!r}")


def entries_found_before_a_cut(cuts: Iterable[Cut]) -> dict[str, list[int]]:
    """Lock id -> times of dropped replies to a ``findAndModify`` that found its entry.

    The reply shows the entry (docmultilock's projection returns the caller's own entry),
    or the command deleted a named lock's document, which its filter matches only while
    the entry carried in the command is there.
    """
    found: dict[str, list[int]] = {}
    for cut in cuts:
        value = cut.reply.get("value")
        if cut.name != "findAndModify" or value is None:
            continue
        carried = _lock_ids(cut.command)
        seen = carried if cut.command.get("remove") else carried & _lock_ids(value)
        for lock_id in seen:
            found.setdefault(lock_id, []).append(cut.at_ms)
    return found


def _lock_ids(value: Any) -> set[str]:
    """Every string in a BSON value, at any depth, that is a lock id."""
    if isinstance(value, str):
        return {value} if LOCK_ID.fullmatch(value) else set()
    if isinstance(value, Mapping):
        value = list(value.values())
    if isinstance(value, list):
        return set().union(*map(_lock_ids, value))
    return set()


def _check_events(
    report: Report,
    events: Sequence[Mapping[str, Any]],
    grants: Mapping[str, Grant],
    found_before_cut: Mapping[str, Sequence[int]],
    server_kills: Sequence[int] = (),
) -> None:
    for event in events:
        kind = event["e"]
        if kind == "error":
            report.counts[f"error {event['op']} {event['code']}"] += 1
            if event["op"] == "acquire" and event["code"] in REFUSALS:
                report.counts["conflicts (refused)"] += 1
            elif event["op"] == "acquire" and event["code"] == "AssertiveLock":
                report.counts["conflicts (waited)"] += 1
        elif kind == "undocumented":
            report.flag("undocumented", f"{event['op']}: {event['type']}: {event['msg']}")
        elif kind == "released":
            report.counts[f"release {RELEASE_OUTCOMES[event['outcome']]}"] += 1
            refused_live = event["outcome"] == "refused_live"
            if refused_live and _applied_before_a_cut(event["id"], grants, found_before_cut):
                report.counts["release refused after its applied reply was cut (server)"] += 1
            elif refused_live and _across_a_kill(event, grants, server_kills):
                report.counts["release refused across a server kill (server)"] += 1
            elif refused_live:
                report.flag("release", f"release of live lock {event['id'][:8]} refused")
        elif kind == "stale":
            report.counts["stalls past expiry"] += 1
        elif kind == "write" and event.get("skipped"):
            report.counts["writes skipped by guard check"] += 1


def _applied_before_a_cut(
    lock_id: str, grants: Mapping[str, Grant], found_before_cut: Mapping[str, Sequence[int]]
) -> bool:
    """True when a reply dropped after the lock's release began shows the release applied."""
    grant = grants.get(lock_id)
    if grant is None or grant.released_from is None:
        return False
    began = grant.released_from
    return any(at >= began for at in found_before_cut.get(lock_id, ()))


def _across_a_kill(
    released: Mapping[str, Any], grants: Mapping[str, Grant], server_kills: Sequence[int]
) -> bool:
    """True when the server was killed while this release was under way.

    The connection of an applied release dies with the server; pymongo retries the write
    once on the restarted server, which executes it again and finds the entry gone (on
    MongoDB the retry is answered from the write's durable record instead).
    """
    grant = grants.get(released["id"])
    ended = released.get("t")
    if grant is None or grant.released_from is None or ended is None:
        return False
    return any(grant.released_from <= kill <= ended for kill in server_kills)


def _check_dead_holders(report: Report, dead_holders: Sequence[DeadHolder]) -> None:
    report.counts["dead holders"] = len(dead_holders)
    for dead in dead_holders:
        bound = dead.killed_at + dead.lifetime_ms + DEAD_HOLDER_SLACK_MS
        if dead.freed_at is None:
            report.flag("dead_holder", f"{dead.resource}: lock {dead.lock_id[:8]} never freed")
        elif dead.last_live is not None and dead.last_live >= bound:
            report.flag(
                "dead_holder",
                f"{dead.resource}: lock {dead.lock_id[:8]} still counting "
                f"{dead.last_live - dead.killed_at} ms after its holder died "
                f"(lifetime {dead.lifetime_ms} ms)",
            )
        else:
            delay = dead.freed_at - dead.killed_at
            report.counts["dead holder freed, max ms"] = max(
                report.counts["dead holder freed, max ms"], delay
            )


def _ms(value: Any) -> int:
    return ms(value) if isinstance(value, datetime) else int(value)
