"""Holding locks for the async managers: ``hold()``, ``hold_all``, and sets across calls.

``hold()`` holds one lock for a block, ``hold_all`` a set; ``acquire_all`` and
``release_all`` take and give back a set across requests.

Every lock manager has them (a mixin of :class:`~docmultilock.AsyncLockManager`): each
method parses its calls once; ``_holding``'s and ``_lockset``'s flows decide the waiting,
the order and the all or nothing; this shell only runs them.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Concatenate, Literal, ParamSpec, TypeVar, overload

from docmultilock._async.driver import AsyncRunner
from docmultilock._async.held import AsyncHeldLock, AsyncHold, AsyncHoldAll
from docmultilock._flavour import async_decorates
from docmultilock._holding import plan_hold, split_hold, wait_flow
from docmultilock._lock import Lock
from docmultilock._lock_flows import acquire
from docmultilock._lockset import (
    at_each,
    canonical,
    key_sequence,
    plan_set,
    release_all_flow,
    take_all_flow,
)
from docmultilock._parsing import Parser
from docmultilock._parts import Parts
from docmultilock._typing import Unpack
from docmultilock.errors import InvalidArgument
from docmultilock.options import AcquireOptions, Duration, HoldOptions, WaitOptions

__all__ = ["AsyncHolds"]

P = ParamSpec("P")
T = TypeVar("T")


class AsyncHolds:
    """Holding a lock for a block, or several all or nothing in one canonical order."""

    _parts: Parts
    _parse: Parser
    _run: AsyncRunner

    async def _acquire(self, key: Any, options: AcquireOptions) -> Lock:
        """``acquire()``: one attempt, or with ``wait=``, ``hold()``'s waiting flow."""
        if options:
            acquiring, waiting = split_hold(options, "acquire", AcquireOptions)
        else:  # a plain acquire(key): nothing to check or split
            acquiring, waiting = {}, {}
        call = self._parse.acquiring(key, **acquiring)
        parts = self._parts
        if waiting:
            spec = plan_hold(parts.rules, call, waiting)
            if spec.wait is not None:
                lock, _ = await self._run(wait_flow(parts, spec, self._run.clock))
                return self._run.handed_out(parts, call, lock)
        # One attempt, as ever: an assertive refusal's pending entry is the caller's to continue.
        lock = await self._run(acquire(parts, call, clock=self._run.clock))
        return self._run.handed_out(parts, call, lock)

    def hold(self, key: Any, **options: Unpack[HoldOptions]) -> AsyncHold:
        """Hold a lock on ``key`` for the span of an ``async with`` block; release it after.

        ::

            async with locks.hold({"_id": 1}, tag="write", wait=5.0, keepalive=True) as held:
                held.require(await orders.update_one(held.guard(), {"$set": {"paid": True}}))

        :param tag: the lock's tag; may be left out when the manager declares only one.
        :param wait: seconds to go on trying while refused, with exponential backoff and
            full jitter between ``backoff=(min, max)`` seconds; ``None`` tries once. A
            pending assertive lock is continued meanwhile, and released if the wait fails.
        :param wake: ``"changes"`` (the default): between attempts, wait on a change stream
            of the refusing document and retry as soon as the lock may be free; the
            backoff, at a slower cadence (its max times 1 to 4), stays as a safety net.
            Where change streams are unavailable it polls, as ``"poll"`` always does.
        :param fair: hold a place in line while waiting, so that waiters on one document
            are granted in the order they arrived (see :doc:`/howto/hold`).
        :param keepalive: extend the lock every ``extend_every`` seconds (a third of its
            lifetime by default) from the process's keep-alive.
        :param on_lost: called as ``on_lost(lock, error)`` once, when the lock is found lost;
            from the keep-alive, so keep it short. Its exceptions are logged.
        :raises LockTimeout: ``wait`` ran out; nothing is left on the document.
        :raises LockConflict: refused, without ``wait`` (as ``acquire`` raises).
        :raises LockNotFound: after a block that ended normally, when the lock was lost
            meanwhile (or the error that made the keep-alive fail): the block was not
            protected throughout. An exception from the block itself is never replaced.
        :raises InvalidArgument: before anything is written.

        The options are :class:`~docmultilock.options.HoldOptions`: an acquisition's
        (``tag``, ``lock_timeout``, ``timeout``, ``w``) and the ones above.
        """
        acquiring, holding = split_hold(options, "hold")
        spec = plan_hold(self._parts.rules, self._parse.acquiring(key, **acquiring), holding)
        return AsyncHold(self._parts, self._run, spec)

    @overload
    def holding(
        self, key: Any, *, pass_held: Literal[False] = False, **options: Unpack[HoldOptions]
    ) -> Callable[[Callable[P, Awaitable[T]]], Callable[P, Awaitable[T]]]: ...

    @overload
    def holding(
        self, key: Any, *, pass_held: Literal[True], **options: Unpack[HoldOptions]
    ) -> Callable[
        [Callable[Concatenate[AsyncHeldLock, P], Awaitable[T]]], Callable[P, Awaitable[T]]
    ]: ...

    def holding(self, key: Any, *, pass_held: bool = False, **options: Any) -> Any:
        """Decorate an async function so that each call runs holding a lock: one at a time.

        Each call enters :meth:`hold` with ``options`` (:class:`~docmultilock.options.HoldOptions`)
        and runs the function inside the block: refused (or out of ``wait``), the call
        raises as :meth:`hold` does and the function does not run. ``key`` is a name or a
        filter, or a function of the call's arguments that returns one::

            @jobs.holding("nightly-report", wait=60.0, keepalive=True)
            async def nightly_report() -> None: ...

            @locks.holding(lambda order_id: {"_id": order_id}, tag="write")
            async def pay(order_id: int) -> None: ...

        With ``pass_held=True`` the function gets the held lock first (for
        ``held.guard()``, ``held.lock.fence``, ``held.lost``), and its callers do not pass
        it. (:meth:`locked` answers whether a key is locked now; this is the decorator.)

        :raises TypeError: a keyword :meth:`hold` does not take, or a function of the other
            flavour than the manager's (the error names the manager to use).
        :raises InvalidArgument: a bad option, or a bad ``key`` that is not a function,
            before anything is written (a key function's key, at each call).
        """
        split_hold(options, "holding")  # a keyword hold() does not take: TypeError now
        if not callable(key):
            self.hold(key, **options)  # parsed now: a bad key or option is refused here
        manager = type(self).__name__

        def decorate(function: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
            async_decorates(function, manager)

            @functools.wraps(function)
            async def holding_lock(*args: Any, **kwargs: Any) -> T:
                target = key(*args, **kwargs) if callable(key) else key
                async with self.hold(target, **options) as held:
                    if pass_held:
                        return await function(held, *args, **kwargs)
                    return await function(*args, **kwargs)

            return holding_lock

        return decorate

    def hold_all(self, keys: Sequence[Any], **options: Unpack[HoldOptions]) -> AsyncHoldAll:
        """Hold a ``tag`` lock on every key for the span of an ``async with`` block.

        The locks are taken in one canonical order (by ``_id``, in MongoDB's comparison
        order; names in code point order), whatever order ``keys`` has, so two holders of
        overlapping sets never deadlock. All or nothing: a refusal, or ``wait`` running
        out, releases every lock taken so far and raises that key's own error. While it
        waits for a key, the locks already taken are kept and extended as they fall due.
        The exit releases every lock, in reverse order, also on an exception::

            async with accounts.hold_all([{"_id": "A"}, {"_id": "B"}], wait=5.0) as held:
                held.require(await db.accounts.update_one(held.guard({"_id": "A"}), debit))
                held.require(await db.accounts.update_one(held.guard({"_id": "B"}), credit))

        The arguments are :meth:`hold`'s, for every lock of the set (``wait`` is the whole
        set's; ``on_lost`` is called once per lost lock).

        :param keys: filters that each select one document by ``_id`` equality, or names.
        :raises InvalidArgument: ``keys`` is empty, names one document twice, or has a
            filter that does not select by ``_id`` equality (before anything is written).
        :raises LockConflict: a key refused, without ``wait`` (its error names it).
        :raises LockTimeout: ``wait`` ran out (nothing of the set is left held).
        """
        acquiring, holding = split_hold(options, "hold_all")
        locks = plan_set(self._parse, keys, acquiring=acquiring, holding=holding)
        return AsyncHoldAll(self._parts, self._run, locks)

    async def acquire_all(self, keys: Sequence[Any], **options: Unpack[WaitOptions]) -> list[Lock]:
        """Acquire a ``tag`` lock on every key, all or nothing; the locks in the keys' order.

        For a set held across requests (each lock goes to a client through
        :class:`~docmultilock.LockSchema`); :meth:`release_all` gives them back. Taken in
        :meth:`hold_all`'s canonical order; a refusal releases what was taken and raises
        that key's error (an assertive refusal's pending entry withdrawn). The options are
        an acquisition's and how to wait (:class:`~docmultilock.options.WaitOptions`), for
        every lock: by default it tries once; ``wait=`` waits as :meth:`hold_all` does, the
        locks already taken kept and extended meanwhile::

            locks = await accounts.acquire_all([{"_id": "A"}, {"_id": "B"}], wait=5.0)

        :raises InvalidArgument: as :meth:`hold_all`.
        :raises LockConflict: a key refused, without ``wait`` (its error names it).
        :raises LockTimeout: ``wait`` ran out (nothing of the set is left held).
        """
        acquiring, waiting = split_hold(options, "acquire_all", WaitOptions)
        locks = plan_set(self._parse, keys, acquiring=acquiring, holding=waiting)
        taken = await self._run(take_all_flow(self._parts, locks, self._run.clock))
        return locks.in_callers_order([holding.lock for holding in taken])

    async def release_all(
        self,
        keys: Sequence[Any],
        locks: Sequence[Lock],
        *,
        timeout: Duration | None = None,
        w: int | str | None = None,
    ) -> None:
        """Release each lock of ``locks`` on its key (the two in the same order), all of them.

        Every release is tried, in the reverse of the canonical order, whatever the others
        answer; then the first error, in the order of ``keys``, is raised (the loss error
        when a lock was already gone).

        :raises InvalidArgument: ``keys`` and ``locks`` differ in length, or as
            :meth:`hold_all` (before anything is written).
        """
        keys = key_sequence(keys)
        if isinstance(locks, Lock) or not isinstance(locks, Sequence) or len(locks) != len(keys):
            raise InvalidArgument(
                f"locks must be a sequence of one Lock per key ({len(keys)}), in the keys' order"
            )
        given = iter(locks)
        calls = at_each(
            keys,
            lambda key: self._parse.holding(key, next(given), granted=False, timeout=timeout, w=w),
        )
        _, order = canonical(calls, self._parse.codec_options)
        await self._run(release_all_flow(self._parts, calls, order=order, clock=self._run.clock))
