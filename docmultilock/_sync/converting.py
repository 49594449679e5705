# Generated from docmultilock/_async/converting.py by tools/unasync.py: do not edit.
# Edit the async source and run `python tools/unasync.py`.
"""``convert()``, shared by every sync lock manager: a thin shell over the conversion flow.

The decision is the server's (``_converting``); the flow (``_lock_flows.convert``) sends one
command per attempt. Here only the arguments are parsed and the flow run.
"""

from __future__ import annotations

from typing import Any

from docmultilock._backoff import check_backoff
from docmultilock._lock import Lock
from docmultilock._lock_flows import convert
from docmultilock._parsing import Parser
from docmultilock._parts import Parts
from docmultilock._sync.driver import Runner
from docmultilock.options import Duration

__all__ = ["Converting"]


class Converting:
    """The ``convert()`` of a lock manager (``_parts``, ``_parse`` and ``_run``: the manager's)."""

    _parts: Parts
    _parse: Parser
    _run: Runner

    def convert(
        self,
        key: Any,
        lock: Lock,
        *,
        tag: str,
        wait: Duration | None = None,
        backoff: tuple[float, float] = (0.01, 0.8),
        lock_timeout: Duration | None = None,
        timeout: Duration | None = None,
        w: int | str | None = None,
    ) -> Lock:
        """Convert the held ``lock`` on ``key`` (a filter, or a name) to ``tag``; one command.

        The lock keeps its id; the returned :class:`~docmultilock.Lock` has the new tag and
        a greater fence (a conversion is a grant). The old ``lock`` value is spent: its
        ``guard()`` matches nothing, and ``extend()``, ``release()`` and ``convert()`` with
        it write nothing and raise :class:`~docmultilock.LockConverted`; use the new one.

        * A **downgrade** (``write`` to ``read`` with the default table; any tag that
          refuses or waits for nothing the old one did not, the same tag included) is
          granted at once while the lock is held.
        * An **upgrade** (``read`` to ``write``) is decided as an acquisition of ``tag``
          would be, not counting this lock. Beside other readers it is registered as
          pending (:class:`~docmultilock.AssertiveLock`, new readers refused) while the
          read lock stays held (its ``guard()`` still matches); continue it with
          ``convert(key, err.lock, tag=tag)``, or give ``wait`` seconds: then it is
          continued with jittered backoff between ``backoff=(min, max)`` seconds, and when
          the wait runs out the pending upgrade is withdrawn, the read lock kept, and
          :class:`~docmultilock.LockTimeout` raised. A refusal is never waited on: when a
          second reader's upgrade meets the first's pending one, the second is refused at
          once (and keeps its read lock), so two upgrading readers never deadlock.

        ``lock_timeout`` gives the lifetime from now on (a downgrade otherwise keeps the
        lock's own, an upgrade takes ``tag``'s).

        :raises InvalidArgument: an undeclared ``tag``, or a pending upgrade continued
            to another tag; nothing is written.
        :raises LockNotFound: ``lock`` is no longer held, or expired (nothing is converted).
        :raises LockConverted: ``lock`` is spent: a conversion made another value of it
            (nothing is written).
        :raises CooperativeLock: the upgrade is refused; ``lock`` is still held.
        :raises AssertiveLock: the upgrade is pending (without ``wait``).
        :raises TooManyHolders: the upgrade would take an entry beyond ``max_holders``.
        :raises LockTimeout: ``wait`` ran out; ``lock`` is still held.
        """
        call, waiting = self._parse.converting(
            key, lock, tag=tag, wait=wait, lock_timeout=lock_timeout, timeout=timeout, w=w
        )
        delays = check_backoff(backoff).bounds
        flow = convert(self._parts, call, clock=self._run.clock, wait=waiting, delays=delays)
        lock, _ = self._run(flow)
        return self._run.handed_out(self._parts, call, lock)
