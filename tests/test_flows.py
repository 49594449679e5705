"""The multi-command decisions, without a server: each flow is fed scripted replies and errors.

A :class:`Script` plays the server and the clock for one flow: every effect the flow yields
is recorded and answered with the next scripted answer (a reply, or an exception thrown in
at the ``yield``); a ``Sleep`` moves the fake clock instead. What a flow sends and decides is
therefore specified here command by command, for both flavours at once.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from pymongo.errors import AutoReconnect, DuplicateKeyError, OperationFailure

from docmultilock import (
    AssertiveLock,
    DbError,
    InvalidArgument,
    LockAlreadyTaken,
    LockNotFound,
    LockTimeout,
    LockWasReacquired,
    ResourceNotFound,
)
from docmultilock import _lock_flows as operations
from docmultilock import _read_flows as read_flows
from docmultilock._command import DOCUMENTS, EXCLUSIVE, NAMES, SHARED
from docmultilock._flows import (
    CLEANUP_LIMIT,
    Clock,
    Effect,
    Flow,
    Reread,
    Send,
    ServerTime,
    Sleep,
    WaitChange,
    Watch,
    send,
)
from docmultilock._held_lock import Holding
from docmultilock._holding import (
    SAFETY_NET,
    convert_flow,
    plan_hold,
    release_flow,
    wait_flow,
)
from docmultilock._inspection import BreakPlan, InspectPlan
from docmultilock._lock import Lock
from docmultilock._parts import Parts
from docmultilock._rules import READ_WRITE, WRITE_ONLY
from docmultilock._schema import load_options

Doc = dict[str, Any]
NOW = datetime(2026, 11, 25, 12, 0, tzinfo=timezone.utc)
DOC = {"_id": 1}


@dataclass
class Script:
    """The server and the clock of one flow run: scripted answers, recorded effects."""

    answers: list[Any]
    now: float = 100.0
    effects: list[Effect] = field(default_factory=list)
    draws: list[tuple[float, float]] = field(default_factory=list)

    @property
    def clock(self) -> Clock:
        return Clock(lambda: self.now, self._never, self._anever, self._uniform)

    def run(self, flow: Flow[Any]) -> Any:
        """Drive ``flow`` as a driver does; its return value, or its exception."""
        result: Any = None
        error: BaseException | None = None
        while True:
            try:
                effect = flow.send(result) if error is None else flow.throw(error)
            except StopIteration as done:
                return done.value
            self.effects.append(effect)
            result, error = None, None
            if isinstance(effect, Sleep):
                self.now += effect.seconds
                continue
            answer = self.answers.pop(0)
            if isinstance(answer, BaseException):
                error = answer
            elif callable(answer):
                result = answer(effect)
            else:
                result = answer

    def sent(self) -> list[str]:
        """The effects, as short names (``send``, ``sleep 0.05``, ``reread``, ``time``)."""
        names = []
        for effect in self.effects:
            if isinstance(effect, Sleep):
                names.append(f"sleep {effect.seconds:g}")
            elif isinstance(effect, Send):
                names.append("delete" if effect.command.delete else "send")
            elif isinstance(effect, Reread):
                names.append("reread")
            elif isinstance(effect, ServerTime):
                names.append("time")
            else:
                names.append(type(effect).__name__)
        return names

    def _uniform(self, low: float, high: float) -> float:
        self.draws.append((low, high))
        return high

    def _never(self, seconds: float) -> None:
        raise AssertionError("a flow sleeps by yielding Sleep, never by the clock")

    async def _anever(self, seconds: float) -> None:
        raise AssertionError("a flow sleeps by yielding Sleep, never by the clock")


LOCK_ID = "a" * 32


@pytest.fixture(autouse=True)
def known_lock_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """New locks get ``LOCK_ID``, so scripted replies can name them."""
    monkeypatch.setattr(operations, "new_lock_id", lambda: LOCK_ID)


def _acquire(ops: Parts, key: Any, *, clock: Clock, **arguments: Any) -> Any:
    """The acquire flow of ``ops`` for ``key``, its call parsed as a manager parses it."""
    return operations.acquire(ops, ops.parse.acquiring(key, **arguments), clock=clock)


def _inspect(ops: Parts, key: Any, *, clock: Clock) -> Any:
    """The inspect flow of ``ops`` for ``key``, its call parsed as a manager parses it."""
    return read_flows.inspect(ops.core, ops.parse.reading(key), clock=clock)


def entry(tag: str = "write", *, pending: bool = False, lock_id: str = LOCK_ID) -> Doc:
    return {
        "id": lock_id,
        "tag": tag,
        "acquired": NOW,
        "expires": NOW + timedelta(seconds=10),
        "fence": 7,
        "pending": pending,
    }


def reply(*mine: Doc, tags: tuple[str, ...] = (), doc_id: Any = 1) -> Doc:
    """A projected reply: our entry (if any) and the live tags beside it."""
    return {"i": doc_id, "ours": True, "mine": list(mine), "tags": list(tags)}


class _Client:
    """Stands for the client a manager's TTL-index record is kept for (held weakly)."""


CLIENT = _Client()


def _options(table: Any) -> Any:
    return load_options(
        lock_relationships=table,
        lock_timeouts={},
        lock_timeout=10.0,
        timeout=5.0,
        w="majority",
        field="lock",
        error_factory=None,
    )


def write_ops() -> Parts:
    options = _options(WRITE_ONLY)
    return Parts.make(options, home=DOCUMENTS, verdicts=EXCLUSIVE, where=(CLIENT, "db.t"))


def rw_ops() -> Parts:
    options = _options(READ_WRITE)
    return Parts.make(options, home=DOCUMENTS, verdicts=SHARED, where=(CLIENT, "db.t"))


def named_ops() -> Parts:
    options = _options(WRITE_ONLY)
    # A client of its own: the first grant then makes sure of the TTL index, once.
    return Parts.make(options, home=NAMES, verdicts=EXCLUSIVE, where=(_Client(), "db.n"))


def granted() -> Lock:
    return Lock(LOCK_ID, "write", 1, NOW, NOW + timedelta(seconds=10), 7, False)


def cut() -> AutoReconnect:
    return AutoReconnect("connection closed")


# -- send: the one place a command goes out ---------------------------------------------


def _send(ops: Parts, script: Script, **kwargs: Any) -> Flow[Any]:
    plan = ops.core.acquire(
        DOC, user_filter=DOC, tag="write", lock_id=LOCK_ID, lifetime_ms=None, continuing=None
    )
    return send(plan.command, doing="acquire", w=1, limit=5.0, clock=script.clock, **kwargs)


def test_a_transient_failure_is_retried_after_a_growing_pause() -> None:
    script = Script([cut(), cut(), reply(entry())])
    assert script.run(_send(write_ops(), script)) == reply(entry())
    assert script.sent() == ["send", "sleep 0.05", "send", "sleep 0.1", "send"]


def test_a_failure_that_is_not_transient_is_raised_at_once() -> None:
    script = Script([OperationFailure("bad", code=2)])
    with pytest.raises(DbError):
        script.run(_send(write_ops(), script))
    assert script.sent() == ["send"]


def test_retrying_stops_before_the_operation_timeout() -> None:
    script = Script([cut()] * 20)
    with pytest.raises(DbError):
        script.run(_send(write_ops(), script))
    pauses = [e.seconds for e in script.effects if isinstance(e, Sleep)]
    assert sum(pauses) < 5.0


def test_each_send_carries_what_is_left_of_the_operation_timeout() -> None:
    script = Script([cut(), reply(entry())])
    script.run(_send(write_ops(), script))
    first, second = (e for e in script.effects if isinstance(e, Send))
    assert first.timeout == pytest.approx(5.0)
    assert second.timeout == pytest.approx(5.0 - 0.05)


def test_a_first_upsert_that_met_a_duplicate_key_is_sent_once_more() -> None:
    ops = named_ops()
    script = Script([DuplicateKeyError("E11000"), reply(entry(), doc_id="job"), None])
    lock = script.run(operations.acquire(ops, ops.parse.acquiring("job"), clock=script.clock))
    assert lock.id == LOCK_ID
    assert script.sent() == ["send", "send", "MakeTtlIndex"]


def test_a_second_duplicate_key_is_an_error() -> None:
    ops = named_ops()
    script = Script([DuplicateKeyError("E11000"), DuplicateKeyError("E11000")])
    with pytest.raises(DbError):
        script.run(operations.acquire(ops, ops.parse.acquiring("job"), clock=script.clock))


def test_an_upsert_answered_with_nothing_reads_the_document_again() -> None:
    ops = named_ops()
    script = Script([None, reply(entry(), doc_id="job"), None])
    lock = script.run(operations.acquire(ops, ops.parse.acquiring("job"), clock=script.clock))
    assert lock.id == LOCK_ID
    assert script.sent() == ["send", "reread", "MakeTtlIndex"]


# -- acquire ------------------------------------------------------------------------------


def test_a_grant_is_recorded_in_the_ledger_with_its_server_stamped_expiry() -> None:
    ops = write_ops()
    script = Script([reply(entry())])
    lock = script.run(
        operations.acquire(ops, ops.parse.acquiring(DOC, tag="write"), clock=script.clock)
    )
    assert ops.ledger.expiry(lock.id) == NOW + timedelta(seconds=10)


def test_a_batch_renewal_moves_the_ledgers_expiry_on_by_the_time_since_the_stamp_was_read() -> None:
    ops = write_ops()
    script = Script([reply(entry())])
    lock = script.run(
        operations.acquire(ops, ops.parse.acquiring(DOC, tag="write"), clock=script.clock)
    )
    seen = script.clock.monotonic()
    ops.ledger.renewed(lock.id, sent=seen + 7.0, life=10.0)
    assert ops.ledger.expiry(lock.id) == NOW + timedelta(seconds=17)
    ops.ledger.renewed(lock.id, sent=seen + 3.0, life=10.0)  # an older batch, answered late
    assert ops.ledger.expiry(lock.id) == NOW + timedelta(seconds=17)


def test_a_batch_sent_before_the_stamp_was_read_moves_nothing() -> None:
    ops = write_ops()
    script = Script([reply(entry())])
    lock = script.run(
        operations.acquire(ops, ops.parse.acquiring(DOC, tag="write"), clock=script.clock)
    )
    ops.ledger.renewed(lock.id, sent=script.clock.monotonic() - 1.0, life=10.0)
    assert ops.ledger.expiry(lock.id) == NOW + timedelta(seconds=10)


def test_a_refusal_names_the_blocking_tags() -> None:
    script = Script([reply(tags=("write",))])
    with pytest.raises(LockAlreadyTaken) as exc:
        script.run(_acquire(write_ops(), DOC, tag="write", clock=script.clock))
    assert exc.value.blocking_tags == ("write",)


# -- release: the lost-reply fallback ------------------------------------------------------


def _held(ops: Parts) -> Lock:
    script = Script([reply(entry())])
    lock: Lock = script.run(
        operations.acquire(ops, ops.parse.acquiring(DOC, tag="write"), clock=script.clock)
    )
    return lock


@pytest.mark.parametrize(
    ("server_time", "released"),
    [(NOW + timedelta(seconds=1), True), (NOW + timedelta(seconds=11), False)],
    ids=["before-expiry", "after-expiry"],
)
def test_a_release_whose_reply_was_lost_is_judged_by_the_recorded_expiry(
    server_time: datetime, released: bool
) -> None:
    ops = write_ops()
    lock = _held(ops)
    # The first attempt removed the entry but its reply was cut; the retry finds it gone.
    script = Script([cut(), reply(), server_time])
    flow = operations.release(ops, ops.parse.holding(DOC, lock, granted=False), clock=script.clock)
    if released:
        script.run(flow)
    else:
        with pytest.raises(LockWasReacquired):
            script.run(flow)
    assert script.sent() == ["send", "sleep 0.05", "send", "time"]


def test_a_lost_reply_of_a_lock_this_manager_never_granted_is_a_loss() -> None:
    ops = write_ops()
    # A lock sent back by a client, with an expiry nobody here can vouch for.
    forged = Lock(LOCK_ID, "write", 1, NOW, NOW + timedelta(days=3650), 7, False)
    script = Script([cut(), reply()])
    with pytest.raises(LockWasReacquired):
        script.run(
            operations.release(
                ops, ops.parse.holding(DOC, forged, granted=False), clock=script.clock
            )
        )
    assert "time" not in script.sent()


def test_a_release_that_finds_its_entry_gone_without_a_lost_reply_is_a_loss() -> None:
    ops = write_ops()
    lock = _held(ops)
    script = Script([reply()])
    with pytest.raises(LockWasReacquired):
        script.run(
            operations.release(ops, ops.parse.holding(DOC, lock, granted=False), clock=script.clock)
        )
    assert script.sent() == ["send"]


def test_a_named_release_deletes_first_and_falls_back_to_an_update() -> None:
    ops = named_ops()
    script = Script([reply(entry(), doc_id="job"), None])
    lock: Lock = script.run(operations.acquire(ops, ops.parse.acquiring("job"), clock=script.clock))
    script = Script([None, reply(entry(), doc_id="job")])  # not deleted (shared): updated
    script.run(
        operations.release(ops, ops.parse.holding("job", lock, granted=False), clock=script.clock)
    )
    assert script.sent() == ["delete", "send"]


# -- hold(): waiting --------------------------------------------------------------------


def _spec(ops: Parts, **kwargs: Any) -> Any:
    arguments: dict[str, Any] = {
        "tag": "write",
        "wait": None,
        "backoff": (0.1, 0.4),
        "keepalive": False,
        "extend_every": None,
        "on_lost": None,
        "lock_timeout": None,
        "timeout": None,
        "w": None,
        "wake": "poll",
        **kwargs,
    }
    call = ops.parse.acquiring(
        DOC,
        **{name: arguments.pop(name) for name in ("tag", "lock_timeout", "timeout", "w")},
    )
    return plan_hold(ops.rules, call, arguments)


def test_wait_sleeps_within_full_jitter_between_refusals() -> None:
    ops = write_ops()
    script = Script([reply(tags=("write",))] * 3 + [reply(entry())])
    lock, _ = script.run(wait_flow(ops, _spec(ops, wait=5.0), script.clock))
    assert lock.id == LOCK_ID
    assert script.sent() == ["send", "sleep 0.2", "send", "sleep 0.4", "send", "sleep 0.4", "send"]
    assert script.draws == [(0.1, 0.2), (0.1, 0.4), (0.1, 0.4)]


def test_wait_gives_up_at_its_deadline_with_the_last_refusal() -> None:
    ops = write_ops()
    script = Script([reply(tags=("write",))] * 10)
    with pytest.raises(LockTimeout) as exc:
        script.run(wait_flow(ops, _spec(ops, wait=0.5), script.clock))
    assert isinstance(exc.value.__cause__, LockAlreadyTaken)
    assert exc.value.attempts == 3  # at 0, 0.2 and 0.5 seconds (the last sleep is cut)
    assert exc.value.waited == pytest.approx(0.5)


def test_a_pending_entry_is_continued_by_its_id_not_registered_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fresh = iter(["b" * 32, "c" * 32])
    monkeypatch.setattr(operations, "new_lock_id", lambda: next(fresh))
    ops = rw_ops()
    pending = entry(pending=True, lock_id="b" * 32)
    script = Script([reply(pending, tags=("read",)), reply({**pending, "pending": False})])
    lock, _ = script.run(wait_flow(ops, _spec(ops, wait=5.0), script.clock))
    assert (lock.id, lock.pending) == ("b" * 32, False)
    second = [e.command for e in script.effects if isinstance(e, Send)][1]
    assert "b" * 32 in str(second.update)
    assert "c" * 32 not in str(second.update)


@pytest.mark.parametrize(
    "interruption",
    [asyncio.CancelledError(), KeyboardInterrupt()],
    ids=["task-cancelled", "keyboard-interrupt"],
)
def test_an_interrupted_wait_releases_its_pending_entry_then_reraises(
    interruption: BaseException,
) -> None:
    ops = rw_ops()
    released: list[Send] = []

    def release_answer(effect: Effect) -> Doc:
        assert isinstance(effect, Send)
        released.append(effect)
        return reply(entry(pending=True))

    script = Script([reply(entry(pending=True), tags=("read",)), release_answer])
    flow = wait_flow(ops, _spec(ops, wait=5.0), script.clock)
    assert isinstance(next(flow), Send)
    sleep = flow.send(reply(entry(pending=True), tags=("read",)))
    assert isinstance(sleep, Sleep)
    # The interruption arrives while the flow sleeps (where a task is cancelled).
    release = flow.throw(interruption)
    assert isinstance(release, Send)
    with pytest.raises(type(interruption)):
        flow.send(release_answer(release))
    assert len(released) == 1


INTERRUPTIONS = pytest.mark.parametrize(
    "interruption",
    [asyncio.CancelledError(), KeyboardInterrupt()],
    ids=["task-cancelled", "keyboard-interrupt"],
)


def _next_after(flow: Flow[Any], interruption: BaseException) -> Effect:
    """The effect ``flow`` yields once ``interruption`` is thrown in (a failure, not a
    KeyboardInterrupt that would stop pytest itself, when it yields none)."""
    try:
        return flow.throw(interruption)
    except type(interruption):
        pytest.fail(f"{type(interruption).__name__} went through with nothing sent")


def _removes(effect: Effect, lock_id: str, key: Doc = DOC) -> bool:
    """True when ``effect`` sends the removal of entry ``lock_id`` from the document of
    ``key`` that holds it (and from no other)."""
    if not isinstance(effect, Send):
        return False
    bindings = effect.command.update[0]["$set"]["lock"]["$let"]["vars"]
    return (
        bindings["id"] == {"$literal": lock_id}
        and not effect.command.return_after
        and effect.command.filter == {"$and": [key, {"lock.holders.id": lock_id}]}
    )


@INTERRUPTIONS
def test_an_acquisition_interrupted_in_flight_withdraws_its_entry_then_reraises(
    interruption: BaseException,
) -> None:
    flow = _acquire(rw_ops(), DOC, tag="write", clock=Script([]).clock)
    command = next(flow)
    assert isinstance(command, Send)
    assert command.settle  # a cancellation waits for it: the withdrawal comes after it
    assert _removes(_next_after(flow, interruption), LOCK_ID)
    with pytest.raises(type(interruption)):
        flow.send(reply(entry()))


@INTERRUPTIONS
def test_an_acquisition_interrupted_between_retries_withdraws_its_entry(
    interruption: BaseException,
) -> None:
    flow = _acquire(write_ops(), DOC, clock=Script([]).clock)
    next(flow)
    assert isinstance(flow.throw(cut()), Sleep)  # the reply was lost: the command may be in
    assert _removes(_next_after(flow, interruption), LOCK_ID)
    with pytest.raises(type(interruption)):
        flow.send(reply())


def test_a_withdrawal_that_fails_still_reraises_the_interruption() -> None:
    flow = _acquire(write_ops(), DOC, clock=Script([]).clock)
    next(flow)
    assert _removes(_next_after(flow, asyncio.CancelledError()), LOCK_ID)
    with pytest.raises(asyncio.CancelledError):
        flow.throw(OperationFailure("bad value", code=2))


def test_a_withdrawal_without_an_operation_timeout_is_bounded_all_the_same() -> None:
    options = load_options(
        lock_relationships=WRITE_ONLY,
        lock_timeouts={},
        lock_timeout=10.0,
        timeout=None,
        w="majority",
        field="lock",
        error_factory=None,
    )
    ops = Parts.make(options, home=DOCUMENTS, verdicts=EXCLUSIVE, where=(CLIENT, "db.t"))
    flow = operations.acquire(ops, ops.parse.acquiring(DOC), clock=Script([]).clock)
    command = next(flow)
    assert isinstance(command, Send)
    assert command.timeout is None
    withdrawal = _next_after(flow, asyncio.CancelledError())
    assert _removes(withdrawal, LOCK_ID)
    assert isinstance(withdrawal, Send)
    assert withdrawal.timeout == CLEANUP_LIMIT


def test_an_acquisition_that_fails_with_an_error_withdraws_nothing() -> None:
    flow = _acquire(write_ops(), DOC, clock=Script([]).clock)
    next(flow)
    with pytest.raises(DbError):
        flow.throw(OperationFailure("bad", code=2))


def test_a_continued_acquisition_interrupted_in_flight_leaves_its_entry_to_its_caller() -> None:
    pending = Lock(LOCK_ID, "write", 1, NOW, NOW + timedelta(seconds=10), 0, True)
    flow = _acquire(rw_ops(), DOC, lock=pending, clock=Script([]).clock)
    command = next(flow)
    assert isinstance(command, Send)
    assert not command.settle  # nothing follows it to be ordered after it
    with pytest.raises(asyncio.CancelledError):
        flow.throw(asyncio.CancelledError())


def test_a_name_granted_then_interrupted_while_its_index_is_made_is_withdrawn() -> None:
    flow = _acquire(named_ops(), "job", clock=Script([]).clock)
    next(flow)
    index = flow.send(reply(entry(), doc_id="job"))
    assert type(index).__name__ == "MakeTtlIndex"
    assert _removes(_next_after(flow, asyncio.CancelledError()), LOCK_ID, {"_id": "job"})
    with pytest.raises(asyncio.CancelledError):
        flow.send(reply(entry(), doc_id="job"))


def test_with_wake_a_refused_waiter_watches_its_document_and_retries_when_woken() -> None:
    ops = write_ops()
    script = Script([reply(tags=("write",)), "watch", True, reply(entry()), None])
    lock, _ = script.run(wait_flow(ops, _spec(ops, wait=5.0, wake="changes"), script.clock))
    assert lock.id == LOCK_ID
    assert script.sent() == ["send", "Watch", "WaitChange", "send", "Unwatch"]
    watch = script.effects[1]
    assert isinstance(watch, Watch)
    assert (watch.document_id, watch.field, watch.exclusive) == (1, "lock", True)
    waited = script.effects[2]
    assert isinstance(waited, WaitChange)
    assert waited.seconds == 0.4 * SAFETY_NET  # the safety net: slower than the backoff


def test_a_waiter_with_a_pending_entry_waits_for_changes_under_its_id() -> None:
    # The stream then wakes it whenever its entry may be granted (``_changes``).
    ops = rw_ops()
    pending = reply(entry(pending=True), tags=("read",))
    script = Script([pending, "watch", True, reply(entry()), None])
    script.run(wait_flow(ops, _spec(ops, tag="write", wait=5.0, wake="changes"), script.clock))
    watch, waited = script.effects[1:3]
    assert isinstance(watch, Watch)
    assert isinstance(waited, WaitChange)
    assert (watch.entry, waited.entry, watch.fair) == (LOCK_ID, LOCK_ID, False)


def test_without_a_change_stream_the_waiter_polls() -> None:
    ops = write_ops()
    script = Script([reply(tags=("write",)), None, reply(tags=("write",)), reply(entry())])
    script.run(wait_flow(ops, _spec(ops, wait=5.0, wake="changes"), script.clock))
    assert script.sent() == ["send", "Watch", "sleep 0.2", "send", "sleep 0.4", "send"]


def test_a_stream_lost_while_waiting_turns_the_wait_into_polling() -> None:
    ops = write_ops()
    answers = [reply(tags=("write",)), "watch", None, None, reply(entry())]
    script = Script(answers)
    script.run(wait_flow(ops, _spec(ops, wait=5.0, wake="changes"), script.clock))
    assert script.sent() == ["send", "Watch", "WaitChange", "Unwatch", "sleep 0.2", "send"]


def test_without_wait_a_pending_entry_is_released_and_the_refusal_raised() -> None:
    ops = rw_ops()
    script = Script([reply(entry(pending=True), tags=("read",)), reply(entry(pending=True))])
    with pytest.raises(AssertiveLock):
        script.run(wait_flow(ops, _spec(ops), script.clock))
    assert script.sent() == ["send", "send"]


def test_a_held_upgrade_waits_with_the_holds_backoff() -> None:
    ops = rw_ops()
    script = Script([reply(entry("read"))])
    read = script.run(
        operations.acquire(ops, ops.parse.acquiring(DOC, tag="read"), clock=script.clock)
    )
    holding = Holding(
        _spec(ops, tag="read", backoff=(0.1, 0.4)), read, sent=script.now, read=script.now
    )
    pending = reply(entry("read"), entry("write", pending=True), tags=("read",))
    upgraded = {**entry("write"), "fence": 8, "call": LOCK_ID}
    script = Script([pending, pending, reply(upgraded)], now=script.now)
    call, wait = ops.parse.converting(DOC, read, tag="write", wait=5.0)
    lock, _ = script.run(convert_flow(ops, holding, call, wait=wait, clock=script.clock))
    assert (lock.tag, lock.fence) == ("write", 8)
    assert script.draws == [(0.1, 0.2), (0.1, 0.4)]


# -- hold(): the expiry estimate and the release at the end ---------------------------------


@pytest.fixture
def holding() -> tuple[Parts, Holding]:
    ops = write_ops()
    lock = _held(ops)
    return ops, Holding(_spec(ops), lock, sent=100.0, read=100.0)


def test_the_expiry_estimate_counts_from_when_the_grant_was_sent(
    holding: tuple[Parts, Holding],
) -> None:
    _, held = holding
    assert held.expires == pytest.approx(110.0)


def test_a_release_before_the_estimate_is_one_command(
    holding: tuple[Parts, Holding],
) -> None:
    ops, held = holding
    script = Script([reply(entry())], now=105.0)
    assert script.run(release_flow(ops, held, quiet=False, clock=script.clock)) is None
    assert script.sent() == ["send"]


def test_past_the_estimate_the_release_first_asks_whether_the_lock_still_lives(
    holding: tuple[Parts, Holding],
) -> None:
    ops, held = holding
    # The extension finds the entry expired (not ours any more); the release prunes it.
    script = Script([reply(), reply()], now=111.0)
    lost = script.run(release_flow(ops, held, quiet=False, clock=script.clock))
    assert isinstance(lost, LockNotFound)
    assert script.sent() == ["send", "send"]


def test_a_failed_release_is_raised_unless_the_block_raised(
    holding: tuple[Parts, Holding],
) -> None:
    ops, held = holding
    failure = OperationFailure("bad", code=2)
    with pytest.raises(DbError):
        Script([failure]).run(release_flow(ops, held, quiet=False, clock=Script([]).clock))
    quiet = Script([failure])
    assert quiet.run(release_flow(ops, held, quiet=True, clock=quiet.clock)) is None


# -- inspect and break: the plans' readers, and the same sending as every command -------------


def _inspect_reply(*holders: Doc, fence: int = 7, doomed: list[Doc] | None = None) -> Doc:
    state = {"v": 1, "fence": fence, "holders": list(holders)}
    found: Doc = {"i": 1, "ours": True, "state": state}
    if doomed is not None:
        found["doomed"] = doomed
    return {"now": NOW, "doc": found}


def test_inspect_retries_a_transient_failure_like_every_command() -> None:
    script = Script([cut(), [_inspect_reply(entry())]])
    snapshot = script.run(_inspect(rw_ops(), DOC, clock=script.clock))
    assert [holder.id for holder in snapshot.holders] == [LOCK_ID]
    assert script.sent() == ["Aggregate", "sleep 0.05", "Aggregate"]


def test_inspect_of_a_filter_bson_cannot_carry_is_an_invalid_argument() -> None:
    script = Script([OverflowError("MongoDB can only handle up to 8-byte ints")])
    with pytest.raises(InvalidArgument, match="cannot be sent"):
        script.run(_inspect(rw_ops(), DOC, clock=script.clock))


def test_inspect_reads_every_entry_at_the_servers_time() -> None:
    plan = InspectPlan.make(rw_ops().core, DOC)
    expired = {**entry(lock_id="b" * 32), "expires": NOW - timedelta(seconds=1)}
    snapshot = plan.read([_inspect_reply(entry(), expired)])
    assert (snapshot.document_id, snapshot.fence, snapshot.server_time) == (1, 7, NOW)
    assert [(h.id, h.expired, h.seconds_left) for h in snapshot.holders] == [
        (LOCK_ID, False, 10.0),
        ("b" * 32, True, -1.0),
    ]


def test_inspect_of_a_missing_document_or_name() -> None:
    with pytest.raises(ResourceNotFound):
        InspectPlan.make(rw_ops().core, DOC).read([{"now": NOW}])
    empty = InspectPlan.make(named_ops().core, {"_id": "job"}).read([{"now": NOW}])
    assert (empty.document_id, empty.exists, empty.holders) == ("job", False, ())


def test_a_preview_reads_what_the_server_picked() -> None:
    plan = InspectPlan.make(rw_ops().core, DOC, breaking=("all_expired", None))
    assert "doomed" in plan.pipeline[2]["$facet"]["doc"][0]["$project"]
    _, doomed = plan.read_preview([_inspect_reply(entry(), doomed=[entry()])])
    assert [h.id for h in doomed] == [LOCK_ID]


def _break_plan(token: str = "c" * 32) -> Any:
    return BreakPlan.make(rw_ops().core, DOC, mode="everyone", lock_id=None, token=token)


def _broken_reply(*removed: Doc) -> Doc:
    return {"i": 1, "ours": True, "broken": {"at": NOW, "removed": list(removed)}}


def test_a_retried_break_after_a_lost_reply_reports_what_the_first_attempt_removed() -> None:
    # The first attempt was applied but its reply was lost; the retry, with the same token,
    # removes nothing more and finds the first attempt's record: the projection keeps it.
    plan = _break_plan()
    record = plan.command.projection["broken"]["$cond"][0]["$eq"][1]
    assert record == {"$literal": "c" * 32}
    script = Script([cut(), _broken_reply(entry())])
    reply = script.run(send(plan.command, doing="break", w=1, limit=5.0, clock=script.clock))
    assert [h.id for h in plan.read(reply)] == [LOCK_ID]
    assert script.sent() == ["send", "sleep 0.05", "send"]


def test_a_stale_broken_record_is_not_reported() -> None:
    # Another break's record: the projection hands back None for it.
    assert _break_plan().read({"i": 1, "ours": True, "broken": None}) == ()


def test_a_break_record_without_its_time_is_read_as_nothing_removed() -> None:
    assert _break_plan().read({"i": 1, "ours": True, "broken": {"removed": [entry()]}}) == ()


def test_a_break_of_a_name_nobody_holds_removes_nothing() -> None:
    plan = BreakPlan.make(
        named_ops().core, {"_id": "job"}, mode="everyone", lock_id=None, token="c" * 32
    )
    assert plan.read(None) == ()
    with pytest.raises(ResourceNotFound):
        _break_plan().read(None)
