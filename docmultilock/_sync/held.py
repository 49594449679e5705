# Generated from docmultilock/_async/held.py by tools/unasync.py: do not edit.
# Edit the async source and run `python tools/unasync.py`.
"""What a sync ``hold()`` block holds: a held lock, or a set; waited for, kept alive, released.

The decisions are ``_holding``'s flows, and a held lock's state is its ``Holding``
(``_held_lock``: the renewals, the loss and whom it tells); this shell runs the flows with
the sync driver, registers the lock with the keep-alive (``_async/keepalive``), and
gives the holder its ``lost`` event.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, TypeVar

from docmultilock._batch_renewal import renew_together
from docmultilock._batch_rules import AGAIN, Batching, Outcome
from docmultilock._flavour import SyncOnly
from docmultilock._held_lock import Holding, HoldSpec
from docmultilock._holding import convert_flow, release_flow, renew_flow, wait_flow
from docmultilock._lock import Lock
from docmultilock._lockset import LockSet, take_all_flow
from docmultilock._parsing import applied
from docmultilock._parts import Parts
from docmultilock._sync.driver import Runner
from docmultilock._sync.keepalive import Extender, Job
from docmultilock._wording import held_upgrade_pending
from docmultilock.errors import (
    AssertiveLock,
    InvalidArgument,
    LockError,
    LockNotFound,
)
from docmultilock.options import Duration

__all__ = ["HeldLock", "HeldLocks", "Hold", "HoldAll"]

T = TypeVar("T")
#: What entering a hold yields: one held lock, or a held set.
H = TypeVar("H")

#: How a hold's block gives back what it holds: ``release(quiet)`` (see ``_release``).
Release = Callable[[bool], None]

log = logging.getLogger("docmultilock")


class HeldLock:
    """A lock held for the span of a ``with manager.hold(...)`` block.

    :ivar lost: an event set once the lock is known or feared lost (expired, taken over,
        or not extended in time).
    :ivar error: the :class:`~docmultilock.LockError` that told, once ``lost`` is set.
    """

    def __init__(
        self,
        parts: Parts,
        runner: Runner,
        holding: Holding,
        job: Job,
        *,
        in_set: threading.Event | None = None,
    ) -> None:
        self._parts = parts
        self._parse = parts.parse
        self._run = runner
        self._holding = holding
        self._job = job
        # Its own, so that a set's other locks go on being renewed; ``in_set``, the set's, too.
        self.lost = threading.Event()
        holding.tell_loss_to(self.lost.set, *(() if in_set is None else (in_set.set,)))
        _keep_alive(holding, job)

    def __repr__(self) -> str:
        state = "lost" if self._holding.error is not None else "held"
        lock = self.lock
        return (
            f"<{type(self).__name__} {lock.tag!r} {lock.id} on {self._holding.spec.key!r}: {state}>"
        )

    @property
    def lock(self) -> Lock:
        """The current :class:`~docmultilock.Lock`: a new value after each renewal.

        Its ``expires_at`` follows every renewal: the server's stamp after a lone one, a
        lower bound of it after a keep-alive renewal in a batch (whose reply has counts,
        not entries).
        """
        return self._holding.lock

    @property
    def error(self) -> LockError | None:
        """Why the lock is lost, once ``lost`` is set; else ``None``."""
        return self._holding.error

    def guard(self) -> dict[str, Any]:
        """A filter matching the locked document only while this lock is held.

        ::

            orders.update_one(held.guard(), {"$set": {"status": "paid"}})
        """
        return self._parse.guard(self._holding.spec.key, self.lock)

    def require(self, result: T) -> T:
        """Return ``result`` of a guarded write; raise the lock's loss if it matched nothing.

        ``result`` is what pymongo answered: an ``UpdateResult`` or ``DeleteResult`` (its
        ``matched_count``/``deleted_count`` must not be 0), or the document of a
        ``find_one_and_*`` (not ``None``). A write through :meth:`guard` that matched nothing
        means the lock was lost before it landed: ``lost`` is set and the loss error
        (mapped through ``error_factory``) raised::

            held.require(orders.update_one(held.guard(), {"$set": {"paid": True}}))
        """
        if applied(result):
            return result
        spec = self._holding.spec
        error = self._parse.lost_write(spec.key, self.lock, spec.member)
        self._holding.lose(error)
        raise self._run.mapped(error)

    def convert(self, tag: str, *, wait: Duration | None = None) -> Lock:
        """Convert this held lock to ``tag`` (an upgrade or a downgrade), and go on holding it.

        As the manager's ``convert()`` decides, with the hold's lifetime, backoff, timeout and
        write concern; then :meth:`guard`, the keep-alive and the exit act on the converted lock.
        Beside other readers an upgrade raises :class:`~docmultilock.AssertiveLock`, this lock
        still held and kept alive; call ``convert`` again to continue it before it lapses, or
        give ``wait`` seconds (run out, :class:`~docmultilock.LockTimeout`, the lock kept)::

            with locks.hold({"_id": 1}, tag="read", keepalive=True) as held:
                held.convert("write", wait=5)  # other readers drain first
                held.require(orders.update_one(held.guard(), change))

        Converting ``held.lock`` through the manager instead would leave this hold renewing
        a lock that no longer exists, and report it lost.

        :raises LockNotFound: the lock was lost (``lost`` is set).
        """
        holding = self._holding
        call, waiting = self._parse.converting(holding.spec.key, holding.lock, tag=tag, wait=wait)
        flow = convert_flow(self._parts, holding, call, wait=waiting, clock=self._run.clock)
        # No renewal of the old lock may race the conversion: it would find it gone.
        if holding.spec.keepalive:
            Extender.current().remove(self._job)
        try:
            lock, sent = self._run.unmapped(flow)
        except LockNotFound as err:
            self._holding.lose(err)
            raise self._run.mapped(err)  # noqa: B904 - mapped() sets __cause__ itself
        except AssertiveLock as err:
            pending = held_upgrade_pending(err, self.lock.tag, tag)
            raise self._run.mapped(pending)  # noqa: B904 - mapped() sets __cause__ itself
        except LockError as err:
            raise self._run.mapped(err)  # noqa: B904 - mapped() sets __cause__ itself
        else:
            return holding.renewed(sent, read=self._run.clock.monotonic(), lock=lock)
        finally:
            if self._holding.error is None:
                _keep_alive(holding, self._job)


def _keep_alive(holding: Holding, job: Job) -> None:
    """Have the keep-alive extend ``holding``'s lock from now on, if its hold asked for it."""
    if holding.spec.keepalive:
        Extender.current().add(job, holding.expires)


def _job(parts: Parts, runner: Runner, holding: Holding) -> Job:
    """What ``holding`` registers with the keep-alive (which holds the holding weakly)."""
    # A hold dropped without its exit stops being renewed. Renewed alone, or in batches
    # with the other holds of its manager under the same write concern, one lock per
    # document in each batch: by that group's runner.
    spec = holding.spec
    group = _Group(parts, runner, spec.call.concern)
    return Job.weakly(
        holding,
        group,
        lead=spec.lifetime - spec.every,
        name=f"lock {holding.lock.id} ({holding.lock.tag!r}) on {spec.key!r}",
        batching=Batching(group, repr(holding.lock.document_id)),
    )


def _held(
    parts: Parts, runner: Runner, holding: Holding, in_set: threading.Event | None = None
) -> tuple[HeldLock, Release]:
    """The held lock of ``holding``, kept alive if its hold asked, and how to release it."""
    job = _job(parts, runner, holding)
    held = HeldLock(parts, runner, holding, job, in_set=in_set)
    return held, partial(_release, parts, runner, holding, job)


def _release(parts: Parts, runner: Runner, holding: Holding, job: Job, quiet: bool) -> None:
    """Stop the keep-alive, then release; raise the loss unless ``quiet``."""
    if holding.spec.keepalive:
        Extender.current().remove(job)
    lost = runner.unmapped(release_flow(parts, holding, quiet=quiet, clock=runner.clock))
    if lost is not None:
        holding.lose(lost)
    if not quiet and holding.error is not None:
        raise holding.error


@dataclass(frozen=True)
class _Group:
    """The holds renewed together: one manager's, under one write concern, by its runner."""

    parts: Parts
    run: Runner
    concern: Any

    def extend(self, holding: Holding, limit: float) -> float | None:
        """One keep-alive extension within ``limit`` s; the new estimate, or None if lost."""
        try:
            error = self.run.unmapped(
                renew_flow(self.parts, holding, limit=limit, clock=self.run.clock)
            )
        except Exception as exc:  # not a LockError: a bug; the lock can no longer be trusted
            log.exception("keep-alive of lock %s failed", holding.lock.id)
            error = LockError(f"keep-alive failed: {type(exc).__name__}: {exc}")
            error.__cause__ = exc
        if error is not None:
            holding.lose(error)
        return None if holding.error is not None else holding.expires

    def renew(self, holdings: Sequence[Holding], limit: float) -> tuple[list[Outcome], bool]:
        """Renew ``holdings`` (one per document) by one command; record each loss."""
        try:
            results, read = self.run.unmapped(
                renew_together(self.parts, holdings, limit=limit, clock=self.run.clock)
            )
        except Exception:  # the flow turns errors into outcomes: a bug, nothing is known
            log.exception("keep-alive batch of %d locks failed", len(holdings))
            return [AGAIN] * len(holdings), False
        told: list[Outcome] = []
        for holding, result in zip(holdings, results, strict=True):
            if isinstance(result, LockError):
                holding.lose(result)
                result = None
            told.append(None if holding.error is not None else result)
        return told, read


class _Block(SyncOnly, Generic[H]):
    """What ``hold()`` and ``hold_all()`` share: entered once, left by releasing.

    ``take`` takes what the block holds and keeps it alive, and says how to release it;
    ``call`` names the call that made the block, for the error that a second entry raises.
    """

    def __init__(self, runner: Runner, call: str, take: Callable[[], tuple[H, Release]]) -> None:
        self._run = runner
        self._call = call
        self._take = take
        self._release: Release | None = None

    def __enter__(self) -> H:
        if self._release is not None:
            raise RuntimeError(f"this {self._call} was entered already; call {self._call} again")
        held, self._release = self._take()
        return held

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        release = self._release
        assert release is not None, "__exit__ without __enter__"
        try:
            # The body's own exception wins: the release then only logs what it finds.
            release(exc_type is not None)
        except LockError as err:
            raise self._run.mapped(err)  # noqa: B904 - mapped() sets __cause__ itself


class Hold(_Block[HeldLock]):
    """What ``hold()`` returns: enter it with ``with`` to hold the lock."""

    def __init__(self, parts: Parts, runner: Runner, spec: HoldSpec) -> None:
        super().__init__(runner, "hold()", partial(_hold, parts, runner, spec))


def _hold(parts: Parts, runner: Runner, spec: HoldSpec) -> tuple[HeldLock, Release]:
    """Wait for the lock of ``spec`` and keep it alive."""
    lock, sent = runner(wait_flow(parts, spec, runner.clock))
    return _held(parts, runner, Holding(spec, lock, sent, read=runner.clock.monotonic()))


class HeldLocks:
    """The locks of a set held for the span of a ``with manager.hold_all(...)`` block.

    :ivar lost: an event set once any lock of the set is known or feared lost.
    :ivar members: each lock's :class:`HeldLock` (its own ``lost``), in the caller's order.
    """

    def __init__(
        self, parts: Parts, locks: LockSet, members: list[HeldLock], lost: threading.Event
    ) -> None:
        self._parse = parts.parse
        self._set = locks
        self.members = members
        self.lost = lost
        self._guarded = 0 if len(members) == 1 else -1  # where the last guard() pointed

    def __repr__(self) -> str:
        state = "lost" if self.lost.is_set() else "held"
        return f"<{type(self).__name__} of {len(self.members)} locks: {state}>"

    @property
    def locks(self) -> list[Lock]:
        """The current :class:`~docmultilock.Lock` of each key, in the caller's order."""
        return [member.lock for member in self.members]

    @property
    def errors(self) -> list[LockError]:
        """Why each lost lock is lost, in the caller's order (empty while all are held)."""
        return [member.error for member in self.members if member.error is not None]

    def guard(self, key: Any) -> dict[str, Any]:
        """A filter matching ``key``'s document only while the set's lock on it is held.

        ::

            accounts.update_one(held.guard({"_id": "A"}), {"$inc": {"balance": -10}})

        :raises InvalidArgument: ``key`` is not one of the set's.
        """
        self._guarded = place = self._set.place_of(self._parse, key)
        return self.members[place].guard()

    def require(self, result: T, key: Any = None) -> T:
        """Return ``result`` of a guarded write; raise that key's loss if it matched nothing.

        As :meth:`HeldLock.require` does for the lock of ``key``: by default the key of
        the last :meth:`guard` call, as in the usual one-liner (pass ``key`` where tasks
        share the set)::

            held.require(accounts.update_one(held.guard(a), {"$inc": {"n": 1}}))

        :raises InvalidArgument: no ``key``, and :meth:`guard` was never called.
        """
        place = self._guarded if key is None else self._set.place_of(self._parse, key)
        if place < 0:
            raise InvalidArgument("require() needs key=: guard() of this set was never called")
        return self.members[place].require(result)


def _release_all(releases: Sequence[Release], places: Sequence[int], quiet: bool) -> None:
    """Release every lock of a set, whatever the others answer; the first loss unless ``quiet``.

    ``releases`` are in the caller's order of keys, ``places`` the order they were taken
    in: they go in its reverse; the loss raised is the first in the caller's order.
    """
    errors: dict[int, LockError] = {}
    for place in reversed(places):
        try:
            releases[place](quiet)
        except LockError as err:
            errors[place] = err
    if errors:
        raise errors[min(errors)]


class HoldAll(_Block[HeldLocks]):
    """What ``hold_all()`` returns: enter it with ``with`` to hold every lock of a set."""

    def __init__(self, parts: Parts, runner: Runner, locks: LockSet) -> None:
        super().__init__(runner, "hold_all()", partial(_hold_all, parts, runner, locks))


def _hold_all(parts: Parts, runner: Runner, locks: LockSet) -> tuple[HeldLocks, Release]:
    """Take every lock of ``locks`` and keep each alive."""
    taken = runner(take_all_flow(parts, locks, runner.clock))
    lost = threading.Event()
    held = [_held(parts, runner, holding, lost) for holding in taken]
    members = locks.in_callers_order([member for member, _ in held])
    releases = locks.in_callers_order([release for _, release in held])
    held_set = HeldLocks(parts, locks, members, lost)
    return held_set, partial(_release_all, releases, locks.places)
