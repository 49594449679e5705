"""Every lock decision as an event: a DEBUG log line, and a call to an optional listener.

A manager given ``listener=`` calls one of its methods after each decision, with a
:class:`LockEvent`. The same decisions are logged at DEBUG on the ``docmultilock`` logger
(nothing at INFO or above on the hot path). A listener's exception is logged (WARNING,
with its traceback) and never breaks the lock operation::

    class Count(LockListener):
        def __init__(self) -> None:
            self.grants = 0

        def on_granted(self, event: LockEvent) -> None:
            self.grants += 1

    locks = MultiLock(db.orders, listener=Count())
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from docmultilock._lock import Lock

__all__ = ["KINDS", "Emitter", "LockEvent", "LockListener"]

log = logging.getLogger("docmultilock")

#: What an event may report, each with its listener method ``on_<kind>``.
KINDS = ("granted", "refused", "pending", "extended", "released", "lost", "retry")


@dataclass(frozen=True, slots=True)
class LockEvent:
    """One decision of a lock operation.

    :ivar kind: ``"granted"``, ``"refused"``, ``"pending"``, ``"extended"``,
        ``"released"``, ``"lost"`` or ``"retry"``.
    :ivar filter: the caller's filter (``{"_id": name}`` for a named lock).
    :ivar tag: the lock's tag (``None`` where the caller gave none yet, as on a retry).
    :ivar lock: the lock concerned (granted, pending, extended, released or lost), if any.
    :ivar outcome: ``kind`` for a success; the error's ``code`` for a refusal or a loss
        (``"CooperativeLock"``, ``"LockWasReacquired"``, ...); the pymongo error's class
        name for a retry.
    :ivar duration: seconds the operation's commands took up to this decision, retries and
        their pauses included.
    :ivar error: the docmultilock or pymongo error behind a refusal, loss or retry.
    """

    kind: str
    filter: Mapping[str, Any]
    tag: str | None
    lock: Lock | None
    outcome: str
    duration: float
    error: BaseException | None = None


class LockListener(Protocol):
    """What a manager's ``listener=`` may implement; subclass it and override what you need.

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


class Emitter:
    """Logs each decision at DEBUG and hands it to the listener, shielding the operation."""

    def __init__(self, listener: LockListener | None) -> None:
        self.listener = listener

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
        kind: str,
        filter: Mapping[str, Any],  # noqa: A002
        *,
        tag: str | None,
        lock: Lock | None = None,
        outcome: str | None = None,
        duration: float,
        error: BaseException | None = None,
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
        event = LockEvent(kind, filter, tag, lock, outcome, duration, error)
        try:
            method(event)
        except Exception:
            log.warning("listener %r raised on %s; ignored", self.listener, kind, exc_info=True)
