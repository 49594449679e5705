"""Every lock decision as an event: a DEBUG log line, and a call to an optional listener.

A manager given ``listener=`` calls one of its methods after each decision, with a
:class:`LockEvent`. The same decisions are logged at DEBUG on the ``docmultilock`` logger
(nothing at INFO or above on the hot path). A listener's exception is logged (WARNING,
with its traceback) and never breaks the lock operation. Listeners subclass
:class:`LockListener` and override the methods they need, as plain (``def``) methods, for
the async managers too: a coroutine a method returns is closed unrun, with one warning::

    class Count(LockListener):
        def __init__(self) -> None:
            self.grants = 0

        def on_granted(self, event: LockEvent) -> None:
            self.grants += 1

    locks = MultiLock(db.orders, listener=Count())
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args

from docmultilock._lock import Lock

if TYPE_CHECKING:
    from docmultilock._snapshot import HolderSnapshot

__all__ = ["KINDS", "Emitter", "EventKind", "LockEvent", "LockListener"]

log = logging.getLogger("docmultilock")

#: What an event may report, each with its listener method ``on_<kind>``.
EventKind = Literal[
    "granted", "refused", "pending", "extended", "released", "lost", "retry", "broken"
]
KINDS: tuple[EventKind, ...] = get_args(EventKind)


@dataclass(frozen=True, slots=True)
class LockEvent:
    """One decision of a lock operation.

    :ivar kind: ``"granted"``, ``"refused"``, ``"pending"``, ``"extended"``,
        ``"released"``, ``"lost"``, ``"retry"`` or ``"broken"``.
    :ivar filter: the caller's filter (``{"_id": name}`` for a named lock).
    :ivar tag: the lock's tag (``None`` where the caller gave none yet, as on a retry).
    :ivar lock: the lock concerned (granted, pending, extended, released or lost), if any.
    :ivar outcome: ``kind`` for a success; the error's ``code`` for a refusal or a loss
        (``"CooperativeLock"``, ``"LockWasReacquired"``, ...); the pymongo error's class
        name for a retry.
    :ivar duration: seconds the operation's commands took up to this decision, retries and
        their pauses included.
    :ivar error: the docmultilock or pymongo error behind a refusal, loss or retry.
    :ivar removed: for ``"broken"``, the entries ``break_lock`` removed (maybe none).
    """

    kind: EventKind
    filter: Mapping[str, Any]
    tag: str | None
    lock: Lock | None
    outcome: str
    duration: float
    error: BaseException | None = None
    removed: tuple[HolderSnapshot, ...] = ()


class LockListener:
    """A manager's ``listener=``: subclass it and override the methods you need.

    Every method does nothing here, so a listener states only what it handles. Methods are
    plain functions, also for the async managers (an ``async def`` one would never run).

    Each method is called from the thread or task that ran the operation (the keep-alive's,
    for extensions from ``hold(keepalive=True)``): keep it short and never block.
    """

    def on_granted(self, event: LockEvent) -> None:
        """A lock was granted (``event.lock``)."""
        return

    def on_refused(self, event: LockEvent) -> None:
        """An acquisition was refused (``event.error`` names the blocking tags)."""
        return

    def on_pending(self, event: LockEvent) -> None:
        """An assertive lock was registered (or continued) as pending."""
        return

    def on_extended(self, event: LockEvent) -> None:
        """A lock's expiry was pushed (``event.lock`` is the extended lock)."""
        return

    def on_released(self, event: LockEvent) -> None:
        """A lock was released."""
        return

    def on_lost(self, event: LockEvent) -> None:
        """A release, extension or continuation found the lock gone."""
        return

    def on_retry(self, event: LockEvent) -> None:
        """A command failed transiently and is being sent again."""
        return

    def on_broken(self, event: LockEvent) -> None:
        """``break_lock`` ran (``event.removed`` lists what it removed)."""
        return


class Emitter:
    """Logs each decision at DEBUG and hands it to the listener, shielding the operation."""

    def __init__(self, listener: LockListener | None) -> None:
        self.listener = listener
        self._warned_async = False

    def retrying(
        self,
        filter: Mapping[str, Any],  # noqa: A002
        tag: str | None,
        started: float,
        now: Callable[[], float],
    ) -> Callable[[BaseException], None]:
        """The ``on_retry`` of ``_flows.send``: each retried failure becomes an event."""

        def retry(exc: BaseException) -> None:
            duration = now() - started
            outcome = type(exc).__name__
            self.emit("retry", filter, tag=tag, outcome=outcome, duration=duration, error=exc)

        return retry

    def emit(
        self,
        kind: EventKind,
        filter: Mapping[str, Any],  # noqa: A002
        *,
        tag: str | None,
        lock: Lock | None = None,
        outcome: str | None = None,
        duration: float,
        error: BaseException | None = None,
        removed: tuple[HolderSnapshot, ...] = (),
    ) -> None:
        """Report one decision; never raises."""
        outcome = kind if outcome is None else outcome
        if log.isEnabledFor(logging.DEBUG):
            blocking = getattr(error, "blocking_tags", None)
            log.debug(
                "%s %s %s on %r: %s%s in %.1f ms",
                kind,
                tag,
                lock.id if lock is not None else "-",
                dict(filter),
                outcome,
                f" (blocking: {', '.join(blocking)})" if blocking else "",
                duration * 1000,
            )
        if self.listener is None:
            return
        method = getattr(self.listener, f"on_{kind}", None)
        if method is None:
            return
        event = LockEvent(kind, filter, tag, lock, outcome, duration, error, removed)
        try:
            result = method(event)
        except Exception:
            log.warning("listener %r raised on %s; ignored", self.listener, kind, exc_info=True)
            return
        if inspect.iscoroutine(result):
            # Awaiting it here would block or reorder the lock operation; close it so it
            # never warns "never awaited", and say so once.
            result.close()
            if not self._warned_async:
                self._warned_async = True
                log.warning(
                    "listener %r: on_%s is a coroutine function; listener methods must be "
                    "plain functions, so it was not run (nor will any be)",
                    self.listener,
                    kind,
                )
