"""What a held lock registers with the keep-alive (``_keepalive``): its job, in each flavour.

A job says how to extend its lock alone, how to tell its holder the lock is lost, how long
before its estimate to renew, and, optionally, how it may be renewed in a batch with the
others of its group (``_batches``): its :class:`~docmultilock._batches.Batching` and
``together``, which renews a list of holders of one group by one command.
``weakly`` makes a job that holds its holder weakly (a hold dropped without its exit is no
longer renewed).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from docmultilock._batches import AGAIN, Batching, Outcome

__all__ = ["AsyncJob", "AsyncTogether", "Job", "Together", "dropped"]

log = logging.getLogger("docmultilock")

#: Renew these holders (of one group) by one command within the given seconds: each one's
#: outcome (``_batches``), and whether a read was needed to tell them.
Together = Callable[[Sequence[Any], float], tuple[Sequence[Outcome], bool]]
AsyncTogether = Callable[[Sequence[Any], float], Awaitable[tuple[Sequence[Outcome], bool]]]


def _nobody() -> Any:
    return None


@dataclass(frozen=True, eq=False)  # identity: each held lock registers its own job
class Job:
    """One held lock's part in the keep-alive."""

    #: Extend once within the given seconds; return the new expiry estimate, or ``None``
    #: when the lock is lost (the job has told its holder).
    extend: Callable[[float], float | None]
    #: Tell the holder its lock is lost: its estimate passed without a renewal.
    lose: Callable[[], None]
    #: Renew this many seconds before the estimate.
    lead: float
    #: How the job may share a batch (``None``: always renewed alone).
    batching: Batching | None = None
    #: Renews holders of the job's group together (with ``batching``).
    together: Together | None = None
    #: The holder ``together`` is given (``None`` once it was garbage-collected).
    holder: Callable[[], Any] = _nobody
    #: What the job keeps alive, for the log.
    name: str = ""

    @classmethod
    def weakly(
        cls,
        extend: Callable[[float], float | None],
        lose: Callable[[], None],
        *,
        lead: float,
        name: str,
        batching: Batching | None = None,
        together: Together | None = None,
    ) -> Job:
        """A job that holds its holder (the owner of the bound methods) weakly.

        A ``hold()`` dropped without its exit (never left, then garbage-collected) is no
        longer renewed: its next renewal finds it gone, logs a warning naming ``name``,
        and ends the job, so its lock expires within its lifetime and the keep-alive stops
        once nothing else is kept. Strong references would renew it for ever.
        """
        extending, losing = weakref.WeakMethod(extend), weakref.WeakMethod(lose)

        def extend_weakly(limit: float) -> float | None:
            method = extending()
            if method is None:
                dropped(name)
                return None
            return method(limit)

        return cls(
            extend_weakly, _lose_weakly(losing), lead, batching, together, _owner(extending), name
        )


@dataclass(frozen=True, eq=False)  # identity: each held lock registers its own job
class AsyncJob:
    """One held lock's part in an event loop's keep-alive (see :class:`Job`)."""

    #: Extend once within the given seconds; the new estimate, or ``None`` when lost.
    extend: Callable[[float], Awaitable[float | None]]
    #: Tell the holder its lock is lost: its estimate passed without a renewal.
    lose: Callable[[], None]
    #: Renew this many seconds before the estimate.
    lead: float
    #: How the job may share a batch (``None``: always renewed alone).
    batching: Batching | None = None
    #: Renews holders of the job's group together (with ``batching``).
    together: AsyncTogether | None = None
    #: The holder ``together`` is given (``None`` once it was garbage-collected).
    holder: Callable[[], Any] = _nobody
    #: What the job keeps alive, for the log.
    name: str = ""

    @classmethod
    def weakly(
        cls,
        extend: Callable[[float], Awaitable[float | None]],
        lose: Callable[[], None],
        *,
        lead: float,
        name: str,
        batching: Batching | None = None,
        together: AsyncTogether | None = None,
    ) -> AsyncJob:
        """A job that holds its holder weakly (see :meth:`Job.weakly`)."""
        extending, losing = weakref.WeakMethod(extend), weakref.WeakMethod(lose)

        async def extend_weakly(limit: float) -> float | None:
            method = extending()
            if method is None:
                dropped(name)
                return None
            return await method(limit)

        return cls(
            extend_weakly, _lose_weakly(losing), lead, batching, together, _owner(extending), name
        )


def _lose_weakly(losing: weakref.WeakMethod[Callable[[], None]]) -> Callable[[], None]:
    def lose_weakly() -> None:
        method = losing()
        if method is not None:
            method()

    return lose_weakly


def _owner(method: weakref.WeakMethod[Any]) -> Callable[[], Any]:
    """The object a weakly held bound method belongs to, while it lives."""

    def owner() -> Any:
        bound = method()
        return None if bound is None else bound.__self__

    return owner


def dropped(name: str) -> None:
    """Log that the hold of ``name`` was dropped without its exit; its renewals end."""
    log.warning(
        "the hold() of %s was garbage-collected without leaving its block: no longer "
        "renewed, it expires within its lifetime (leave a hold() with 'with' or "
        "'async with')",
        name,
    )


def members(
    jobs: Sequence[Any], kept: Callable[[Any], bool]
) -> tuple[list[Any], list[Any], dict[Any, Outcome], Any]:
    """What a runner needs to renew a batch: its jobs, their holders, the known outcomes.

    Also the group's ``together`` (``None``: nothing left to renew).

    Every job of the batch gets an outcome: one no longer ``kept`` (removed while the batch
    waited for a worker) :data:`~docmultilock._batches.AGAIN`, which the schedule forgets;
    one whose holder was garbage-collected is lost (logged, as :meth:`Job.weakly` does).
    """
    results: dict[Any, Outcome] = dict.fromkeys(jobs, AGAIN)
    renewed: list[Any] = []
    holders: list[Any] = []
    for job in jobs:
        if not kept(job):
            continue
        holder = job.holder()
        if holder is None:
            dropped(job.name)
            results[job] = None
        else:
            renewed.append(job)
            holders.append(holder)
    together = renewed[0].together if renewed else None
    return renewed, holders, results, together
