"""The chaos checker can fail: a clean run passes, and each planted violation is reported."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.chaos.checker import DeadHolder, Report, check
from tests.chaos.resources import user_fields
from tests.proxy import Cut

Doc = dict[str, Any]

A, B, C = "a" * 32, "b" * 32, "c" * 32


def grant(lock_id: str, resource: str, tag: str, fence: int, acq: int, exp: int) -> Doc:
    doc: Any = int(resource.split(":")[1]) if resource.startswith("doc:") else resource[5:]
    return {
        "e": "grant",
        "w": "0.1",
        "id": lock_id,
        "r": resource,
        "doc": doc,
        "tag": tag,
        "fence": fence,
        "acq": acq,
        "exp": exp,
        "recv": acq + 2,
    }


def entry(write_id: str, lock_id: str, kind: str, fence: int, at: int) -> Doc:
    return {"s": write_id, "l": lock_id, "k": kind, "f": fence, "at": at}


def refused_live(lock_id: str, at: int | None = None) -> Doc:
    event: Doc = {"e": "released", "w": "0.1", "id": lock_id, "outcome": "refused_live"}
    if at is not None:
        event["t"] = at
    return event


def release_cut(lock_id: str, at: int, *, found: bool = True) -> Cut:
    """A dropped reply to a document-mode release of ``lock_id`` (shaped as the core's)."""
    command: Doc = {
        "findAndModify": "docs",
        "query": {"_id": 0},
        "update": [{"$set": {"lock": {"$let": {"vars": {"id": {"$literal": lock_id}}}}}}],
    }
    mine = [{"id": lock_id, "tag": "write", "pending": False}] if found else []
    return Cut(at, command, {"value": {"i": 0, "ours": True, "mine": mine}, "ok": 1.0})


@dataclass
class Run:
    """A small clean run: a reader then a writer on doc:0, one named job."""

    events: list[Doc] = field(
        default_factory=lambda: [
            grant(A, "doc:0", "read", 1, 1000, 2000),
            {"e": "write", "w": "0.1", "s": "a1", "id": A, "ok": True},
            {"e": "releasing", "w": "0.1", "id": A, "t": 1500},
            {"e": "released", "w": "0.1", "id": A, "outcome": "ok"},
            grant(B, "doc:0", "write", 2, 1600, 3100),
            {"e": "extend", "w": "0.1", "id": B, "exp": 3300},
            {"e": "write", "w": "0.1", "s": "b1", "id": B, "ok": True},
            {"e": "releasing", "w": "0.1", "id": B, "t": 2000},
            grant(C, "name:job-0", "write", 5_000_000, 1000, 2500),
            {"e": "write", "w": "0.1", "s": "c1", "id": C, "ok": True},
            {"e": "error", "w": "0.1", "op": "acquire", "code": "LockAlreadyTaken"},
        ]
    )
    counters: dict[str, Doc] = field(
        default_factory=lambda: {
            "doc:0": {
                "_id": 0,
                **user_fields("doc:0"),
                "n": 2,
                "rmw": 1,
                "log": [entry("a1", A, "r", 1, 1100), entry("b1", B, "w", 2, 1700)],
            },
            "name:job-0": {
                "_id": "job-0",
                **user_fields("name:job-0"),
                "n": 1,
                "fence": 5_000_000,
                "log": [entry("c1", C, "w", 5_000_000, 1100)],
            },
        }
    )
    dead: list[DeadHolder] = field(default_factory=list)
    restarts: list[int] = field(default_factory=lambda: [1200])
    cuts: list[Cut] = field(default_factory=list)
    retries_reexecuted: bool = True  # as on the embedded server
    kills: list[int] = field(default_factory=list)

    def check(self) -> Report:
        expected = {key: user_fields(key) for key in self.counters}
        return check(
            self.events,
            self.counters,
            expected,
            self.dead,
            self.restarts,
            self.cuts,
            self.retries_reexecuted,
            self.kills,
        )


def test_a_clean_run_has_no_violations() -> None:
    report = Run().check()
    assert report.violations == []
    assert report.counts["grants"] == 3
    assert report.counts["writes applied"] == report.counts["writes acknowledged"] == 3
    assert report.counts["restarts survived"] == 1


def reader_inside_a_write_lock(run: Run) -> None:
    run.events.append(grant("d" * 32, "doc:0", "read", 3, 1800, 2800))


def reused_fence(run: Run) -> None:
    run.events.append(grant("d" * 32, "doc:0", "read", 2, 3400, 4400))


def fence_granted_out_of_order(run: Run) -> None:
    run.events.append(grant("d" * 32, "name:job-0", "write", 4_000_000, 3000, 4000))


def write_after_expiry(run: Run) -> None:
    run.counters["doc:0"]["log"][0]["at"] = 2000


def write_by_an_unknown_lock(run: Run) -> None:
    counter = run.counters["doc:0"]
    counter["log"].append(entry("x1", "e" * 32, "r", 9, 1800))
    counter["n"] += 1


def lost_update(run: Run) -> None:
    run.counters["doc:0"]["rmw"] = 0


def counter_out_of_step(run: Run) -> None:
    run.counters["name:job-0"]["n"] = 2


def fenced_writes_going_backwards(run: Run) -> None:
    counter = run.counters["doc:0"]
    counter["log"].append(entry("a2", A, "r", 1, 1750))
    counter["n"] += 1


def acknowledged_write_missing(run: Run) -> None:
    run.events.append({"e": "write", "w": "0.1", "s": "a9", "id": A, "ok": True})


def user_field_changed(run: Run) -> None:
    run.counters["name:job-0"]["title"] = "changed"


def user_field_added(run: Run) -> None:
    run.counters["doc:0"]["extra"] = 1


def dead_holder_counting_too_long(run: Run) -> None:
    run.dead.append(DeadHolder("doc:0", B, 1500, 1700, 1700 + 2600, 1700 + 2700))


def dead_holder_never_freed(run: Run) -> None:
    run.dead.append(DeadHolder("doc:0", B, 1500, 1700, 1800, None))


def undocumented_error(run: Run) -> None:
    run.events.append(
        {"e": "undocumented", "w": "0.1", "op": "release", "type": "KeyError", "msg": "x"}
    )


def release_refused_while_live(run: Run) -> None:
    run.events.append(refused_live(B))


def release_refused_after_a_cut_on_a_server_that_answers_retries(run: Run) -> None:
    run.events.append(refused_live(B))
    run.cuts.append(release_cut(B, 2050))
    run.retries_reexecuted = False


def release_refused_after_a_cut_reply_without_its_entry(run: Run) -> None:
    run.events.append(refused_live(B))
    run.cuts.append(release_cut(B, 2050, found=False))


def release_refused_after_a_cut_before_it_began(run: Run) -> None:
    run.events.append(refused_live(B))
    run.cuts.append(release_cut(B, 1900))  # an extension's reply, say


def release_refused_after_a_cut_of_another_lock(run: Run) -> None:
    run.events.append(refused_live(B))
    run.cuts.append(release_cut(A, 2050))


def restart_not_survived(run: Run) -> None:
    run.restarts.append(9000)


PLANTED: list[tuple[Callable[[Run], None], str]] = [
    (reader_inside_a_write_lock, "conflict"),
    (reused_fence, "fence"),
    (fence_granted_out_of_order, "fence"),
    (write_after_expiry, "unguarded"),
    (write_by_an_unknown_lock, "unguarded"),
    (lost_update, "counter"),
    (counter_out_of_step, "counter"),
    (fenced_writes_going_backwards, "fence"),
    (acknowledged_write_missing, "lost_write"),
    (user_field_changed, "user_fields"),
    (user_field_added, "user_fields"),
    (dead_holder_counting_too_long, "dead_holder"),
    (dead_holder_never_freed, "dead_holder"),
    (undocumented_error, "undocumented"),
    (release_refused_while_live, "release"),
    (release_refused_after_a_cut_on_a_server_that_answers_retries, "release"),
    (release_refused_after_a_cut_reply_without_its_entry, "release"),
    (release_refused_after_a_cut_before_it_began, "release"),
    (release_refused_after_a_cut_of_another_lock, "release"),
    (restart_not_survived, "restart"),
]


@pytest.mark.parametrize(("plant", "kind"), PLANTED, ids=[p.__name__ for p, _ in PLANTED])
def test_a_planted_violation_is_reported(plant: Callable[[Run], None], kind: str) -> None:
    run = copy.deepcopy(Run())
    plant(run)
    kinds = [violation.kind for violation in run.check().violations]
    assert kinds == [kind]


def test_a_grant_at_the_millisecond_another_ended_is_no_overlap() -> None:
    run = Run()
    run.events.append(grant("d" * 32, "doc:0", "write", 3, 2000 - 2, 3000))
    assert run.check().violations == []


def test_a_grant_stamped_before_a_release_yet_answered_after_it_is_no_overlap() -> None:
    # $$NOW is bound when a command starts: a grant decided after B's release may carry an
    # earlier stamp; only its reply time proves it was decided after.
    run = Run()
    late = grant("d" * 32, "doc:0", "write", 3, 1990, 3000)
    late["recv"] = 2005
    run.events.append(late)
    assert run.check().violations == []


def test_a_lock_killed_without_release_counts_until_its_expiry() -> None:
    run = Run()
    run.events.append(grant("d" * 32, "name:job-0", "write", 6_000_000, 2400, 3900))
    assert [v.kind for v in run.check().violations] == ["conflict"]


def test_a_release_refused_after_its_applied_reply_was_cut_is_counted_not_flagged() -> None:
    # The embedded server ran pymongo's retry of the release again (docs/server.md).
    run = Run()
    run.events.append(refused_live(B))
    run.cuts.append(release_cut(B, 2050))
    report = run.check()
    assert report.violations == []
    assert report.counts["release refused after its applied reply was cut (server)"] == 1


def test_a_named_release_refused_after_its_applied_delete_was_cut_is_counted_not_flagged() -> None:
    run = Run()
    run.events += [{"e": "releasing", "w": "0.1", "id": C, "t": 2100}, refused_live(C)]
    delete = {"findAndModify": "locks", "query": {"$expr": {"$in": [{"$literal": C}]}}}
    run.cuts.append(Cut(2120, {**delete, "remove": True}, {"value": {"_id": "job-0"}}))
    report = run.check()
    assert report.violations == []
    assert report.counts["release refused after its applied reply was cut (server)"] == 1


def test_cut_replies_are_counted_by_command() -> None:
    run = Run()
    run.cuts += [release_cut(A, 1400), Cut(1500, {"update": "docs"}, {"n": 1, "ok": 1.0})]
    report = run.check()
    assert report.counts["replies cut"] == 2
    assert report.counts["replies cut: findAndModify"] == 1
    assert report.counts["replies cut: update"] == 1


def test_a_release_refused_across_a_server_kill_is_counted_not_flagged() -> None:
    # B's release began at 2000; the server was killed at 2050 and pymongo's retry of the
    # applied release ran again on the restarted server (docs/server.md).
    run = Run()
    run.events.append(refused_live(B, at=2900))
    run.kills.append(2050)
    report = run.check()
    assert report.violations == []
    assert report.counts["release refused across a server kill (server)"] == 1


@pytest.mark.parametrize("kill", [1900, 3000], ids=["before-the-release", "after-it"])
def test_a_kill_outside_the_release_excuses_nothing(kill: int) -> None:
    run = Run()
    run.events.append(refused_live(B, at=2900))
    run.kills.append(kill)
    assert [v.kind for v in run.check().violations] == ["release"]


def test_on_mongodb_a_release_refused_across_a_kill_is_a_violation() -> None:
    run = Run()
    run.events.append(refused_live(B, at=2900))
    run.kills.append(2050)
    run.retries_reexecuted = False
    assert [v.kind for v in run.check().violations] == ["release"]
