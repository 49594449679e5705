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
from typing import Any, Generic, TypeVar

from docmultilock._batches import AGAIN, Batching, Outcome

__all__ = ["AsyncJob", "AsyncTogether", "Job", "Together", "dropped"]

log = logging.getLogger("docmultilock")

#: What renewing holders together gives: each one's outcome (``_batches``), and whether a
#: read was needed to tell them.
Renewed = tuple[Sequence[Outcome], bool]
#: Renew these holders (of one group) by one command within the given seconds.
Together = Callable[[Sequence[Any], float], Renewed]
AsyncTogether = Callable[[Sequence[Any], float], Awaitable[Renewed]]

E = TypeVar("E")  # what an extension returns: the new estimate, or an awaitable of it
R = TypeVar("R")  # what renewing together returns: Renewed, or an awaitable of it
J = TypeVar("J", bound="_Job[Any, Any]")


def _nobody() -> Any:
    return None


@dataclass(frozen=True, eq=False)  # identity: each held lock registers its own job
class _Job(Generic[E, R]):
    """One held lock's part in the keep-alive, in either flavour."""

    #: Extend once within the given seconds; the new expiry estimate, or ``None`` when the
    #: lock is lost (the job has told its holder).
    extend: Callable[[float], E]
    #: Tell the holder its lock is lost: its estimate passed without a renewal.
    lose: Callable[[], None]
    #: Renew this many seconds before the estimate.
    lead: float
    #: How the job may share a batch (``None``: always renewed alone).
    batching: Batching | None = None
    #: Renews holders of the job's group together (with ``batching``).
    together: Callable[[Sequence[Any], float], R] | None = None
    #: The holder ``together`` is given (``None`` once it was garbage-collected).
    holder: Callable[[], Any] = _nobody
    #: What the job keeps alive, for the log.
    name: str = ""

    @classmethod
    def weakly(
        cls: type[J],
        extend: Callable[[float], E],
        lose: Callable[[], None],
        *,
        holding: object,
        lead: float,
        name: str,
        batching: Batching | None = None,
        together: Callable[[Sequence[Any], float], R] | None = None,
    ) -> J:
        """A job that holds its holder (the owner of the bound methods) weakly.

        ``holding`` is what ``together`` renews: the held lock's state, also held weakly.

        A ``hold()`` dropped without its exit (never left, then garbage-collected) is no
        longer renewed: its next renewal finds it gone, logs a warning naming ``name``,
        and ends the job, so its lock expires within its lifetime and the keep-alive stops
        once nothing else is kept. Strong references would renew it for ever.
        """
        extending, losing = weakref.WeakMethod(extend), weakref.WeakMethod(lose)
        return cls(
            cls._extend_weakly(extending, name),
            _lose_weakly(losing),
            lead,
            batching,
            together,
            weakref.ref(holding),
            name,
        )

    @classmethod
    def _extend_weakly(
        cls, extending: weakref.WeakMethod[Callable[[float], E]], name: str
    ) -> Callable[[float], E]:
        """``extend`` through its weak reference: ``None`` (and a warning) once it is gone."""
        raise NotImplementedError


class Job(_Job[float | None, Renewed]):
    """One held lock's part in the keep-alive."""

    @classmethod
    def _extend_weakly(
        cls, extending: weakref.WeakMethod[Callable[[float], float | None]], name: str
    ) -> Callable[[float], float | None]:
        def extend_weakly(limit: float) -> float | None:
            method = extending()
            if method is None:
                dropped(name)
                return None
            return method(limit)

        return extend_weakly


class AsyncJob(_Job[Awaitable[float | None], Awaitable[Renewed]]):
    """One held lock's part in an event loop's keep-alive (see :class:`Job`)."""

    @classmethod
    def _extend_weakly(
        cls, extending: weakref.WeakMethod[Callable[[float], Awaitable[float | None]]], name: str
    ) -> Callable[[float], Awaitable[float | None]]:
        async def extend_weakly(limit: float) -> float | None:
            method = extending()
            if method is None:
                dropped(name)
                return None
            return await method(limit)

        return extend_weakly


def _lose_weakly(losing: weakref.WeakMethod[Callable[[], None]]) -> Callable[[], None]:
    def lose_weakly() -> None:
        method = losing()
        if method is not None:
            method()

    return lose_weakly


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
