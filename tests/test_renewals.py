"""The keep-alive's decisions (``_schedule.Schedule``), with scripted times and no server."""

from __future__ import annotations

import math

import pytest

from docmultilock._schedule import MIN_EXTEND_TIMEOUT, Idle, Lose, Schedule, Start, Wait

# Times are seconds on the keep-alive's clock. A lock kept with estimate 10 and lead 6 is
# surely held until 10 and due for renewal at 4: the default cadence of a 6 s lifetime.


def kept(*jobs: tuple[str, float, float], slots: int = 8) -> Schedule[str]:
    schedule: Schedule[str] = Schedule(slots)
    for job, estimate, lead in jobs:
        schedule.add(job, estimate, lead)
    return schedule


def test_nothing_kept_is_idle() -> None:
    assert kept().next(0.0) == Idle()


def test_a_renewal_waits_until_it_is_due() -> None:
    assert kept(("a", 10.0, 6.0)).next(0.0) == Wait(4.0)


def test_a_due_renewal_starts_within_what_is_left_of_its_estimate() -> None:
    assert kept(("a", 10.0, 6.0)).next(4.0) == Start("a", limit=6.0, late=0.0)


def test_a_late_renewal_gets_less_time_and_its_lateness_is_recorded() -> None:
    schedule = kept(("a", 10.0, 6.0))
    assert schedule.next(7.5) == Start("a", limit=2.5, late=3.5)
    assert schedule.stats.worst_late == 3.5


def test_an_extension_about_to_pass_its_estimate_still_gets_the_minimum_time() -> None:
    decision = kept(("a", 10.0, 6.0)).next(9.99)
    assert isinstance(decision, Start)
    assert decision.limit == MIN_EXTEND_TIMEOUT


def test_a_renewal_moves_the_estimate_and_the_next_due_time() -> None:
    schedule = kept(("a", 10.0, 6.0))
    schedule.next(4.0)
    schedule.finished("a", 16.0, 4.2)
    assert schedule.next(4.2) == Wait(10.0)
    assert schedule.next(10.0) == Start("a", limit=6.0, late=0.0)
    assert schedule.stats.least_left == pytest.approx(5.8)


def test_the_lock_is_lost_at_its_estimate_while_its_extension_is_in_flight() -> None:
    schedule = kept(("a", 10.0, 6.0))
    schedule.next(4.0)
    assert schedule.next(9.9) == Wait(10.0)
    assert schedule.next(10.0) == Lose("a")
    assert not schedule.kept("a")
    assert schedule.running("a")


def test_an_extension_that_ended_unanswered_is_due_again_at_once_on_the_old_estimate() -> None:
    schedule = kept(("a", 10.0, 6.0))
    schedule.next(4.0)
    schedule.unanswered("a")
    assert not schedule.running("a")
    assert schedule.next(4.5) == Start("a", limit=5.5, late=0.5)
    schedule.unanswered("a")
    assert schedule.next(10.0) == Lose("a")


def test_an_unanswered_extension_of_a_removed_job_leaves_nothing() -> None:
    schedule = kept(("a", 10.0, 6.0))
    schedule.next(4.0)
    schedule.remove("a")
    schedule.unanswered("a")
    assert schedule.next(4.5) == Idle()


def test_a_lost_lock_is_not_renewed_when_its_stalled_extension_returns() -> None:
    schedule = kept(("a", 10.0, 6.0))
    schedule.next(4.0)
    schedule.next(10.0)
    schedule.finished("a", 20.0, 10.5)
    assert schedule.next(10.5) == Idle()
    assert schedule.stats.lost == 1


def test_the_lock_is_lost_at_its_estimate_while_it_waits_for_a_slot() -> None:
    schedule = kept(("stuck", 100.0, 99.0), ("a", 10.0, 6.0), slots=1)
    assert schedule.next(1.0) == Start("stuck", limit=99.0, late=0.0)
    assert schedule.next(4.0) == Wait(10.0)  # "a" is due, but the one slot is taken
    assert schedule.next(10.0) == Lose("a")


def test_a_success_after_the_estimate_counts_if_it_came_before_the_loss_was_told() -> None:
    schedule = kept(("a", 10.0, 6.0))
    schedule.next(4.0)
    schedule.finished("a", 13.0, 10.25)  # the server found it live: it was held throughout
    assert schedule.next(10.25) == Start("a", limit=2.75, late=3.25)
    assert schedule.stats.least_left == -0.25


def test_a_stalled_extension_holds_one_slot_and_the_others_go_on() -> None:
    schedule = kept(("stuck", 9.0, 6.0), ("b", 3.0, 2.0), slots=2)
    assert schedule.next(1.0) == Start("b", limit=2.0, late=0.0)
    schedule.finished("b", 4.0, 1.1)
    assert schedule.next(3.0) == Start("b", limit=1.0, late=1.0)  # earlier estimate first
    assert schedule.next(3.0) == Start("stuck", limit=6.0, late=0.0)
    for now in (3.1, 4.1, 5.1, 6.1, 7.1):  # "stuck" never returns; "b" goes on
        schedule.finished("b", now + 3.0, now)
        assert schedule.next(now + 1.0) == Start("b", limit=2.0, late=0.0)
    assert schedule.next(9.0) == Lose("stuck")


def test_a_loss_is_told_before_any_renewal_starts() -> None:
    schedule = kept(("a", 10.0, 6.0), ("b", 5.0, 4.0))
    assert schedule.next(6.0) == Lose("b")
    assert schedule.next(6.0) == Start("a", limit=4.0, late=2.0)


def test_due_renewals_start_earliest_estimate_first() -> None:
    schedule = kept(("roomy", 20.0, 15.0), ("urgent", 12.0, 6.0), slots=1)
    assert schedule.next(7.0) == Start("urgent", limit=5.0, late=1.0)
    schedule.finished("urgent", 19.0, 7.25)
    assert schedule.next(7.25) == Start("roomy", limit=12.75, late=2.25)


def test_no_more_than_slots_extensions_run_at_once() -> None:
    schedule = kept(*((f"l{i}", 10.0, 6.0) for i in range(5)), slots=3)
    started = [schedule.next(4.0) for _ in range(3)]
    assert all(isinstance(d, Start) for d in started)
    assert schedule.next(4.0) == Wait(10.0)
    schedule.finished("l0", 16.0, 4.1)
    assert isinstance(schedule.next(4.1), Start)


def test_a_renewal_that_finds_the_lock_lost_drops_it() -> None:
    schedule = kept(("a", 10.0, 6.0))
    schedule.next(4.0)
    schedule.finished("a", None, 4.1)
    assert len(schedule) == 0
    assert schedule.stats.lost == 1
    assert schedule.next(4.1) == Idle()


def test_a_job_removed_in_flight_runs_out_and_is_neither_renewed_nor_lost() -> None:
    schedule = kept(("a", 10.0, 6.0))
    schedule.next(4.0)
    schedule.remove("a")
    assert schedule.running("a")
    assert schedule.next(4.0) == Wait(None)  # nothing kept, one extension to wait for
    schedule.finished("a", 16.0, 4.1)
    assert schedule.next(20.0) == Idle()
    assert schedule.stats.lost == 0


def test_a_removed_job_is_forgotten_before_it_is_due() -> None:
    schedule = kept(("a", 10.0, 6.0))
    schedule.remove("a")
    assert schedule.next(11.0) == Idle()


def test_a_job_cannot_be_kept_twice() -> None:
    with pytest.raises(ValueError, match="already"):
        kept(("a", 10.0, 6.0), ("a", 12.0, 6.0))


def test_at_least_one_slot() -> None:
    with pytest.raises(ValueError, match="slots"):
        Schedule[str](0)


def test_statistics_start_afresh_when_read() -> None:
    schedule = kept(("a", 10.0, 6.0))
    schedule.next(5.0)
    schedule.finished("a", 16.0, 5.5)
    stats = schedule.reset_stats()
    assert (stats.started, stats.lost, stats.worst_late, stats.least_left) == (1, 0, 1.0, 4.5)
    assert schedule.stats.started == 0
    assert schedule.stats.least_left == math.inf
