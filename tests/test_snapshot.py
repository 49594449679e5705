"""Reading stored entries into snapshots, without a server: judged at the server's time."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from docmultilock._lock import as_utc
from docmultilock._snapshot import holders_at

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=timezone.utc)
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def test_as_utc_makes_naive_utc_aware_and_converts_other_zones() -> None:
    paris = timezone(timedelta(hours=1))
    assert as_utc(datetime(2026, 1, 1, 12)) == datetime(2026, 1, 1, 12, tzinfo=timezone.utc)
    converted = as_utc(datetime(2026, 1, 1, 13, tzinfo=paris))
    assert converted.tzinfo is timezone.utc
    assert converted.hour == 12


def test_an_aware_non_utc_server_time_gives_utc_snapshots() -> None:
    paris = timezone(timedelta(hours=1))
    entry = {"id": "a", "tag": "w", "acquired": NOW, "expires": NOW + timedelta(seconds=5)}
    (holder,) = holders_at([entry], NOW.astimezone(paris))
    assert holder.expires_at.tzinfo is timezone.utc
    assert holder.seconds_left == 5.0


def test_an_entry_without_its_dates_is_marked_malformed_and_expired() -> None:
    (holder,) = holders_at([{"id": "a", "tag": "w", "fence": 3}], NOW)
    assert (holder.malformed, holder.expired, holder.fence) == (True, True, 3)
    assert holder.acquired_at == holder.expires_at == EPOCH


def test_an_entry_with_a_date_of_the_wrong_type_or_a_bad_fence_is_malformed() -> None:
    good = {"acquired": NOW, "expires": NOW + timedelta(seconds=5)}
    entries = [{**good, "expires": "tomorrow"}, {**good, "fence": "7"}, "not an entry", good]
    made = holders_at(entries, NOW)
    assert [(h.malformed, h.fence) for h in made] == [(True, 0), (True, 0), (False, 0)]
    assert made[1].expired is False
