"""Multi-command decisions as I/O-free flows: generators that yield effects and get results.

A flow yields an *effect* (send this command, read a document again, read the server's
time, sleep, make sure of an index) and is resumed with the effect's result, or has the
exception the I/O raised thrown in at the ``yield``. One small driver per flavour runs a
flow (``_async/driver.py``, and the sync one generated from it); the flavours differ only
by ``await``. Everything a flow decides is therefore tested without a server, by scripting
the results and errors (``tests/test_flows.py``).

Time and jitter come from one injected :class:`Clock`; sleeping is an effect, performed by
the driver with the clock's sleep of its flavour.

The flow every command goes through is :func:`send` (a read, :func:`aggregate`; a batch,
:func:`send_many`), and each is the one transient-retry loop (``_retried``) with its
deadline, the duplicate-key retry of a first upsert, and the re-read after an upsert that
answered nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

from bson.errors import InvalidDocument
from pymongo.errors import DuplicateKeyError, PyMongoError

from docmultilock._changes import ANY_GRANTED, Blockers
from docmultilock._clock import SYSTEM_CLOCK, Clock
from docmultilock._command import Command, ManyCommand
from docmultilock._failures import is_transient, translate
from docmultilock.errors import InvalidArgument

__all__ = [
    "ATTEMPTS",
    "SYSTEM_CLOCK",
    "Aggregate",
    "Clock",
    "Effect",
    "Flow",
    "MakeTtlIndex",
    "Reread",
    "Send",
    "SendMany",
    "Sent",
    "ServerTime",
    "Sleep",
    "Unwatch",
    "WaitChange",
    "Watch",
    "aggregate",
    "retry_pause",
    "send",
    "send_many",
]

log = logging.getLogger("docmultilock")

T = TypeVar("T")

#: Transient failures are retried this many times at most, pausing 50 ms, 100 ms, ... 1 s.
ATTEMPTS = 6
_RETRY_PAUSE = 0.05
_RETRY_PAUSE_MAX = 1.0

#: Seconds each step of a cleanup after a cancellation may take where no operation timeout
#: bounds it: the wait for the command that was out, then the withdrawal that follows.
CLEANUP_LIMIT = 10.0


# The effects a retry loop yields are named tuples, made by ``tuple.__new__`` (``_retried``):
# a frozen dataclass's ``__init__`` costs a call and a ``__setattr__`` per field, per command.


class Send(NamedTuple):
    """Send ``command`` with write concern ``w`` within ``timeout`` seconds; get its reply.

    With ``settle``, a cancellation that comes while it is out is let into the flow only
    once it has ended (``_settle``): a flow that cleans up after it (a withdrawal) must
    reach the server after it.
    """

    command: Command
    w: int | str
    settle: bool
    timeout: float | None


class Reread(NamedTuple):
    """Read the document matching ``filter`` (projected); get it, or ``None``."""

    filter: dict[str, Any]
    projection: dict[str, Any]
    timeout: float | None


@dataclass(frozen=True, slots=True)
class ServerTime:
    """Read the server's clock (``hello``'s ``localTime``); get an aware UTC datetime."""

    timeout: float | None


@dataclass(frozen=True, slots=True)
class Sleep:
    """Pause ``seconds``, with the clock's sleep of the driver's flavour."""

    seconds: float


@dataclass(frozen=True, slots=True)
class MakeTtlIndex:
    """Create the lock collection (if missing), then its TTL index on ``field``.expires."""

    field: str
    name: str
    timeout: float | None


class Aggregate(NamedTuple):
    """Run a read-only aggregation ``pipeline``; get the list of its documents."""

    pipeline: list[dict[str, Any]]
    timeout: float | None


class SendMany(NamedTuple):
    """Send ``command`` (an ``update_many``) with write concern ``w`` within ``timeout``.

    Gets the number of documents it modified.
    """

    command: ManyCommand
    w: int | str
    timeout: float | None


@dataclass(frozen=True, slots=True)
class Watch:
    """Watch document ``document_id`` for changes to the lock ``field``; get a watch or None.

    ``None`` means no change stream here (or none any more): poll with :class:`Sleep`.
    ``exclusive`` says that one woken waiter of this process is enough per release;
    ``blockers``, which entries keep the waiter out (``_changes.Blockers``); ``entry``, our
    pending entry's id if we have one yet (as in :class:`WaitChange`); ``fair``, that the
    waiter holds a place in a fair line.
    """

    document_id: Any
    field: str
    exclusive: bool
    blockers: Blockers = ANY_GRANTED
    entry: str | None = None
    fair: bool = False


@dataclass(frozen=True, slots=True)
class WaitChange:
    """Sleep up to ``seconds`` unless a change to the watched document comes first.

    Gets ``True`` (woken by a change, or one may have been missed), ``False`` (the time ran
    out), or ``None`` (change streams turned out unavailable: nothing was waited, poll).
    ``entry`` is our pending entry's id, if we have one now: a change that may let it in
    wakes us.
    """

    watch: Any
    seconds: float
    entry: str | None = None


@dataclass(frozen=True, slots=True)
class Unwatch:
    """Stop watching (the stream closes with the process's last watch of its collection)."""

    watch: Any


Effect = (
    Send
    | SendMany
    | Reread
    | ServerTime
    | Sleep
    | MakeTtlIndex
    | Aggregate
    | Watch
    | WaitChange
    | Unwatch
)

#: A flow: yields effects, is sent their results, returns ``T``.
Flow = Generator[Effect, Any, T]


def retry_pause(attempt: int) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (from 0)."""
    return float(min(_RETRY_PAUSE * 2**attempt, _RETRY_PAUSE_MAX))


@dataclass
class Sent:
    """What one operation learned while sending: whether a reply may have been lost."""

    unsure: bool = False


def send(
    command: Command,
    *,
    doing: str,
    w: int | str,
    limit: float | None,
    clock: Clock,
    sent: Sent | None = None,
    on_retry: Callable[[PyMongoError], object] | None = None,
    settle: bool = False,
) -> Flow[Mapping[str, Any] | None]:
    """Send one command and return its reply; the only place pymongo errors leave a flow.

    A transient failure (a cut connection, a fail-over) is retried with the same command
    until ``limit`` seconds have passed: every command is idempotent by lock id, so a retry
    of one that was applied finds its own work done (``sent`` records that a reply may have
    been lost). ``on_retry`` is told of each failure about to be retried. ``settle``: see
    :class:`Send`. The flow is :func:`_retried`'s, which every flow that sends runs.
    """
    return _retried(
        Send,
        (command, w, settle),
        doing=doing,
        limit=limit,
        clock=clock,
        on_retry=on_retry,
        sent=sent,
        command=command,
    )


#: What encoding raises before anything is sent: the caller's filter holds a value BSON
#: cannot carry (an int beyond 64 bits, an arbitrary object; a ``ValueError`` for a lone
#: surrogate in a string, or a ``uuid.UUID`` on a client without a ``uuidRepresentation``).
UNENCODABLE = (InvalidDocument, OverflowError, ValueError)


def unencodable(exc: Exception) -> InvalidArgument:
    """The error for a filter that encoding refused (raise it ``from exc``)."""
    return InvalidArgument(f"filter cannot be sent to MongoDB: {exc}")


def _retry_or_raise(
    exc: PyMongoError,
    attempt: int,
    give_up: float | None,
    clock: Clock,
    doing: str,
    filter: Mapping[str, Any] | None,  # noqa: A002
    on_retry: Callable[[PyMongoError], object] | None,
) -> float:
    """The pause before retrying ``exc`` (failed attempt ``attempt``, from 0), once told.

    Raises the translated error instead when ``exc`` is not transient, the attempts are
    used up, or the pause would pass the deadline ``give_up``. The retry decision of the
    one loop every flow that sends runs (``_retried``).
    """
    pause = retry_pause(attempt)
    if (
        not is_transient(exc)
        or attempt + 1 >= ATTEMPTS
        or (give_up is not None and clock.monotonic() + pause >= give_up)
    ):
        raise translate(exc, doing, filter) from exc
    if on_retry is None:
        # Nobody listens: the retry is still logged, as its event would be (``_events``).
        shown = "-" if filter is None else dict(filter)
        log.debug("retry %s on %r: %s (retrying after %r)", doing, shown, type(exc).__name__, exc)
    else:
        on_retry(exc)  # logs it too
    return pause


def aggregate(
    pipeline: list[dict[str, Any]],
    *,
    doing: str,
    filter: Mapping[str, Any],  # noqa: A002
    limit: float | None,
    clock: Clock,
    on_retry: Callable[[PyMongoError], object] | None = None,
) -> Flow[list[Mapping[str, Any]]]:
    """Run one read-only aggregation and return its documents, as :func:`send` sends.

    The same retry of transient failures within ``limit`` (a read is safe to repeat) and
    the same translation of errors: pymongo's into docmultilock's, an unencodable
    ``filter`` into :class:`~docmultilock.InvalidArgument`.
    """
    documents: list[Mapping[str, Any]] = yield from _retried(
        Aggregate,
        (pipeline,),
        doing=doing,
        filter=filter,
        limit=limit,
        clock=clock,
        on_retry=on_retry,
    )
    return documents


def send_many(
    command: ManyCommand,
    *,
    doing: str,
    w: int | str,
    limit: float | None,
    clock: Clock,
) -> Flow[int]:
    """Send one ``update_many`` and return how many documents it modified.

    Retried on transient failures within ``limit`` as :func:`aggregate` is: a batch's
    renewal is idempotent (a second one renews the same entries again).
    """
    modified: int = yield from _retried(
        SendMany,
        (command, w),
        doing=doing,
        filter=command.filter,
        limit=limit,
        clock=clock,
        on_retry=None,
    )
    return modified


def _retried(
    make: type[Send | Aggregate | SendMany],
    args: tuple[Any, ...],
    *,
    doing: str,
    limit: float | None,
    clock: Clock,
    on_retry: Callable[[PyMongoError], object] | None,
    sent: Sent | None = None,
    command: Command | None = None,
    filter: Mapping[str, Any] | None = None,  # noqa: A002
) -> Flow[Any]:
    """Yield ``make(*args, time left)`` until it succeeds: the one transient-retry loop.

    Each transient failure marks ``sent`` unsure and is retried after a pause
    (:func:`_retry_or_raise`) within ``limit``. An error names ``filter``, or the
    ``command``'s (a ``findAndModify``); for a command that may create its document (an
    upsert), also the duplicate-key retry of a first upsert and the re-read after an upsert
    that answered nothing.
    """
    give_up, left = None, limit
    if limit is not None:
        give_up = clock.monotonic() + limit
        left = max(limit, 0.001)  # what the first attempt has left: one clock read less
    duplicate_retried = False
    attempt = 0
    while True:
        try:
            result = yield tuple.__new__(make, args + (left,))  # noqa: RUF005 - no list built
            if result is None and command is not None and command.upsert:
                # SecantusDB workaround (docs/server.md): an upsert that lost the race to
                # create the document is applied to the winner's document, yet answered
                # with None. MongoDB never answers None to an upsert returning the new
                # image, so this read happens on that server only. None is neither
                # "granted" nor "nothing written": the document itself tells.
                result = yield Reread(command.filter, command.projection, left)
            return result
        except DuplicateKeyError as exc:
            # Two first acquirers of a name both tried to insert its document. MongoDB
            # retries such an _id upsert itself (4.2+), but not in every topology: once
            # more is enough, as the document now exists and the command becomes an update
            # that decides as usual (the loser meets the winner's entry: a plain conflict).
            if command is None or not command.upsert or duplicate_retried:
                raise translate(exc, doing, _named(command, filter)) from exc
            duplicate_retried = True
        except PyMongoError as exc:
            if sent is not None:
                sent.unsure = True
            named = _named(command, filter)
            pause = _retry_or_raise(exc, attempt, give_up, clock, doing, named, on_retry)
            attempt += 1
            yield Sleep(pause)
        except UNENCODABLE as exc:
            raise unencodable(exc) from exc
        if give_up is not None:
            left = max(give_up - clock.monotonic(), 0.001)


def _named(command: Command | None, given: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The filter an error names: the command's (the caller's), or the one ``given``."""
    return given if command is None else command.named
