"""The clean-up after a refusal as a flow, without a server: scripted replies, a fake clock.

What ``_cleanup.give_back_all`` decides: a failed release is retried, pausing as ``send``
does, until the lock's expiry estimate; what is still held then is raised as
``LocksLeftBehind`` from the refusal; a cancellation is not held up.
"""

from __future__ import annotations

import asyncio

import pytest
from pymongo.errors import OperationFailure

from docmultilock import CooperativeLock, DbError, LocksLeftBehind
from docmultilock import _lock_flows as operations
from docmultilock._cleanup import Taken, give_back_all
from docmultilock._flows import Send, Sleep
from docmultilock._lock import Lock
from docmultilock._parts import Parts
from tests.test_flows import DOC, Script, entry, reply, write_ops

#: The refusal a clean-up follows.
REFUSED = CooperativeLock("refused", filter={"_id": 2})


def bad_value() -> OperationFailure:
    return OperationFailure("failing", code=2)  # not transient: send raises it at once


def taken(ops: Parts, script: Script, *, lifetime: float) -> Taken:
    """The lock on ``DOC``, granted now, with ``lifetime`` seconds of its estimate left."""
    call = ops.parse.acquiring(DOC, tag="write")
    lock: Lock = Script([reply(entry())]).run(operations.acquire(ops, call, clock=script.clock))
    return Taken(call, lock, script.now + lifetime)


def test_a_failed_release_is_retried_with_growing_pauses_until_it_succeeds() -> None:
    ops = write_ops()
    script = Script([bad_value(), bad_value(), reply(entry())])
    script.run(give_back_all(ops, [taken(ops, script, lifetime=10.0)], REFUSED, clock=script.clock))
    assert script.sent() == ["send", "sleep 0.05", "send", "sleep 0.1", "send"]


def test_a_release_failing_past_the_estimate_is_raised_as_left_behind() -> None:
    ops = write_ops()
    script = Script([bad_value()] * 20)
    given = taken(ops, script, lifetime=1.0)
    with pytest.raises(LocksLeftBehind) as left:
        script.run(give_back_all(ops, [given], REFUSED, clock=script.clock))
    assert left.value.__cause__ is REFUSED
    assert left.value.left_behind == ((DOC, given.lock),)
    assert isinstance(left.value.failure, DbError)
    assert script.now < given.until  # no pause past the estimate
    assert sum(isinstance(e, Sleep) for e in script.effects) == 4  # 0.05 + ... + 0.4 s


def test_each_attempt_is_bounded_by_the_time_left_of_the_estimate() -> None:
    ops = write_ops()
    script = Script([bad_value(), reply(entry())])
    script.run(give_back_all(ops, [taken(ops, script, lifetime=2.0)], REFUSED, clock=script.clock))
    first, second = (e for e in script.effects if isinstance(e, Send))
    assert first.timeout == pytest.approx(2.0)
    assert second.timeout == pytest.approx(1.95)  # 2 s less the pause of 50 ms


def test_a_cancellation_is_not_held_up_by_retries() -> None:
    ops = write_ops()
    script = Script([bad_value()])
    cancelled = asyncio.CancelledError()
    script.run(
        give_back_all(ops, [taken(ops, script, lifetime=10.0)], cancelled, clock=script.clock)
    )
    assert script.sent() == ["send"]


def test_the_locks_left_behind_by_a_wait_come_first() -> None:
    ops = write_ops()
    script = Script([bad_value()] * 20)
    given = taken(ops, script, lifetime=0.01)
    pending = Lock("b" * 32, "write", 2, given.lock.acquired_at, given.lock.expires_at, 0, True)
    earlier = LocksLeftBehind.after(REFUSED, [({"_id": 2}, pending)], DbError("down"))
    earlier.__cause__ = REFUSED
    with pytest.raises(LocksLeftBehind) as left:
        script.run(give_back_all(ops, [given], earlier, clock=script.clock))
    assert left.value.__cause__ is REFUSED
    assert left.value.left_behind == (({"_id": 2}, pending), (DOC, given.lock))
