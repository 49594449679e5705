"""Per-tag limits (``lock_limits``): at most N granted entries of a tag at once, per key.

Run over MultiLock (a user's document) and NamedLocks (a name) in both flavours, with a
table whose ``export`` tag is limited: ``view`` shares with everything, ``export`` waits
for ``audit`` to drain (so an export can be pending), ``audit`` excludes itself.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest
from pymongo.collection import Collection

from docmultilock import (
    AssertiveLock,
    AsyncWriteLock,
    InvalidConfiguration,
    Lock,
    MultiLock,
    NamedLocks,
    TooManyHolders,
    WriteLock,
)
from docmultilock._flows import Clock
from tests.helpers import NO_SLEEP, Doc, Waiter, wait_until
from tests.subjects import Build

TABLE = {
    "view": {},
    "export": {"assertive": ["audit"]},
    "audit": {"cooperative": ["audit"]},
}
LIMITS = {"export": 2}


Manager = MultiLock | NamedLocks


class Keyed(NamedTuple):
    """A manager and the key (a filter, or a name) the test locks, and how to read it back."""

    locks: Any
    key: Any
    #: The whole stored document (the user's fields with the lock field, or the name's).
    document: Callable[[], Any]

    def stored(self) -> Any:
        """The lock field as stored."""
        return (self.document() or {}).get("lock")

    def take(self, tag: str, **kwargs: Any) -> Lock:
        return self.locks.acquire(self.key, tag=tag, **kwargs)  # type: ignore[no-any-return]

    def pending(self, tag: str) -> Lock:
        with pytest.raises(AssertiveLock) as caught:
            self.take(tag)
        return caught.value.lock


@pytest.fixture
def make(tagged_build: Build, collection: Collection[Doc]) -> Callable[..., Keyed]:
    """Build the manager under test, in the test's flavour, with the limited table."""

    def build(**options: Any) -> Keyed:
        options = {"lock_relationships": TABLE, "lock_limits": LIMITS, **options}
        subject = tagged_build(collection)
        place = subject.state(subject.key)
        return Keyed(subject.manager(**options), subject.key, lambda: collection.find_one(place))

    return build


@pytest.fixture
def limited(make: Callable[..., Keyed]) -> Keyed:
    return make()


# -- the server grants at most N ------------------------------------------------------------


def test_the_tags_limit_is_granted_and_one_more_is_refused_with_409(limited: Keyed) -> None:
    limited.take("export")
    limited.take("export")
    with pytest.raises(TooManyHolders) as caught:
        limited.take("export")
    err = caught.value
    assert (err.status_code, err.tag, err.limit, err.blocking_tags) == (409, "export", 2, ())
    assert "'export'" in str(err)
    assert "allows 2" in str(err)


def test_a_refusal_at_the_limit_records_nothing(limited: Keyed) -> None:
    limited.take("export")
    limited.take("export")
    before = limited.document()  # the user's fields too, for a MultiLock
    with pytest.raises(TooManyHolders):
        limited.take("export")
    assert limited.document() == before


def test_a_slot_frees_when_a_holder_releases(limited: Keyed) -> None:
    first = limited.take("export")
    limited.take("export")
    limited.locks.release(limited.key, first)
    limited.take("export")


def test_entries_of_other_tags_do_not_count(limited: Keyed) -> None:
    for _ in range(3):
        limited.take("view")
    limited.take("export")
    limited.take("export")
    limited.take("view")  # unlimited beside the limited tag at its limit


def test_a_conversion_to_the_limited_tag_takes_a_place_under_its_limit(limited: Keyed) -> None:
    # ``export`` stands in the way of nothing ``audit`` does not (``audit`` alone), so this
    # conversion would otherwise be granted at once as a downgrade: only the limit refuses.
    limited.take("export")
    limited.take("export")
    auditor = limited.take("audit")
    with pytest.raises(TooManyHolders) as caught:
        limited.locks.convert(limited.key, auditor, tag="export")
    assert (caught.value.tag, caught.value.limit) == ("export", 2)
    stored = [(h["id"], h["tag"]) for h in limited.stored()["holders"]]
    assert (auditor.id, "audit") in stored  # the audit lock is still held


def test_pending_entries_do_not_count(limited: Keyed) -> None:
    limited.take("audit")
    for _ in range(3):
        limited.pending("export")  # registered as pending, never refused by the limit


def test_a_pending_acquisition_whose_grant_would_exceed_the_limit_is_refused_and_withdrawn(
    limited: Keyed,
) -> None:
    audit = limited.take("audit")
    first, second, third = (limited.pending("export") for _ in range(3))
    limited.locks.release(limited.key, audit)
    limited.locks.acquire(limited.key, lock=first)
    limited.locks.acquire(limited.key, lock=second)
    with pytest.raises(TooManyHolders) as caught:
        limited.locks.acquire(limited.key, lock=third)
    assert caught.value.tag == "export"
    ids = [entry["id"] for entry in limited.stored()["holders"]]
    assert third.id not in ids  # withdrawn: it no longer holds anyone back


# -- waiting for a slot ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tag", "options"),
    [("export", {}), ("view", {"max_holders": 2})],
    ids=["lock_limits", "max_holders"],
)
def test_hold_waits_for_a_slot_and_is_woken_by_a_release(
    make: Callable[..., Keyed], open_streams: Callable[[], int], tag: str, options: Doc
) -> None:
    full = make(**options)  # two granted: the limit of ``export``, or every place
    first = full.take(tag)
    full.take(tag)
    waiting = _with_clock(full.locks, NO_SLEEP)
    waiter = Waiter(waiting, full.key, tag=tag, wait=60.0, backoff=(20.0, 20.0))
    wait_until(lambda: open_streams() == 1)
    time.sleep(0.3)  # refused, then waiting on its stream
    assert waiter.granted is None
    full.locks.release(full.key, first)
    waiter.join()  # woken: its backoff sleep would have failed the test
    assert waiter.lock.tag == tag


@pytest.mark.parametrize("how", [{"wake": "poll"}, {"fair": True}], ids=["poll", "fair"])
def test_hold_polling_or_in_a_fair_line_waits_for_a_slot(limited: Keyed, how: Doc) -> None:
    first = limited.take("export")
    limited.take("export")
    waiter = Waiter(limited.locks, limited.key, tag="export", wait=60.0, backoff=(0.05, 0.1), **how)
    time.sleep(0.3)
    assert waiter.granted is None
    limited.locks.release(limited.key, first)
    waiter.join()
    assert waiter.lock.tag == "export"


def _with_clock(locks: Any, clock: Clock) -> Any:
    """``locks`` with the flows' clock replaced (the backoff sleep, here)."""
    locks._clock = clock
    return locks


# -- configuration -------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -1, True, False, 2.0, "3", None, 100_001])
def test_a_limit_must_be_a_positive_int(make: Callable[..., Keyed], bad: Any) -> None:
    with pytest.raises(InvalidConfiguration) as caught:
        make(lock_limits={"export": bad})
    assert "lock_limits" in caught.value.problems


def test_a_limit_must_name_a_declared_tag(make: Callable[..., Keyed]) -> None:
    with pytest.raises(InvalidConfiguration, match="'exprt'") as caught:
        make(lock_limits={"exprt": 2})
    assert "lock_limits" in caught.value.problems


def test_every_problem_with_the_limits_is_named_at_once(make: Callable[..., Keyed]) -> None:
    with pytest.raises(InvalidConfiguration) as caught:
        make(lock_limits={"export": 0, "exprt": 2}, lock_timeout=-1)
    assert set(caught.value.problems) == {"lock_limits", "lock_timeout"}
    text = str(caught.value)
    assert "'exprt'" in text
    assert "must be a whole number from 1 to 100000, not 0" in text


def test_the_limits_are_kept_in_the_options(limited: Keyed) -> None:
    assert limited.locks.options.limits == {"export": 2}


@pytest.mark.parametrize("cls", [WriteLock, AsyncWriteLock])
def test_write_lock_takes_no_limits(cls: Any, collection: Collection[Doc]) -> None:
    with pytest.raises(TypeError, match="lock_limits"):
        cls(collection, lock_limits={"write": 1})


# -- the error -----------------------------------------------------------------------------


def test_the_error_carries_the_tag_and_limit_in_its_dict_and_pickles(limited: Keyed) -> None:
    limited.take("export")
    limited.take("export")
    with pytest.raises(TooManyHolders) as caught:
        limited.take("export")
    data = caught.value.to_dict()
    assert (data["tag"], data["limit"]) == ("export", 2)
    copy = pickle.loads(pickle.dumps(caught.value))
    assert (copy.tag, copy.limit, str(copy)) == ("export", 2, str(caught.value))
