"""What every flow of one lock manager works with: its core, ledger, events and arguments.

:class:`Operating` holds one manager's pure state (the core for its field, table and home,
the ledger of what it saw granted, the listener's emitter) and the parsing of per-call
arguments, and the one path every command goes out by (:meth:`Operating.send_for`). The
read-side flows (``_read_flows``) build on it, and ``_lock_flows.LockOperations`` on
those: what a lock manager *is*, minus I/O.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any, TypeVar

from bson.codec_options import DEFAULT_CODEC_OPTIONS, CodecOptions
from pymongo.errors import PyMongoError

from docmultilock import _indexes
from docmultilock._args import (
    check_conversion,
    check_lock,
    check_tag,
    document_target,
    tag_or_only,
)
from docmultilock._calls import (
    Acquisition,
    AnyCall,
    Continued,
    Conversion,
    Held,
    Read,
    new_continued,
    new_fresh,
    new_held,
)
from docmultilock._command import Command, Home, Verdicts
from docmultilock._core import LockCore
from docmultilock._events import Emitter, LockListener
from docmultilock._failures import translate
from docmultilock._flows import CLEANUP_LIMIT, Clock, Flow, MakeTtlIndex, Sent, send
from docmultilock._inspection import break_mode
from docmultilock._ledger import Ledger
from docmultilock._lock import Lock
from docmultilock._typing import Unpack
from docmultilock.errors import InvalidArgument, LockError, LockNotFound
from docmultilock.options import (
    CallOptions,
    Duration,
    LockOptions,
    NewLockOptions,
    parse_duration,
    parse_lifetime_ms,
    parse_write_concern,
)

__all__ = ["NAMED_FIELD", "Operating", "describe", "new_lock_id"]

log = logging.getLogger("docmultilock")

Op = TypeVar("Op", bound="Operating")

#: The field of a named lock's document that holds its state.
NAMED_FIELD = "lock"


def new_lock_id() -> str:
    """128 random bits: a lock id can be neither guessed nor forged.

    From the operating system's generator, as ``secrets.token_hex(16)`` draws them, without
    its three Python-level calls (one id per acquisition).
    """
    return os.urandom(16).hex()


class Operating:
    """One manager's state and argument parsing, shared by all its flows.

    :param where: identifies the collection for the process-wide TTL-index record: the
        client object (held weakly) and the collection's full name.
    :param codec_options: the collection's, with which a filter's ``_id`` is compared to a
        lock's document (a ``uuid.UUID`` is encoded by its representation).
    :param listener: told of every decision (``_events``); its errors are only logged.
    """

    def __init__(
        self,
        options: LockOptions,
        *,
        home: Home,
        verdicts: Verdicts,
        where: tuple[object, str],
        codec_options: CodecOptions[Any] = DEFAULT_CODEC_OPTIONS,
        listener: LockListener | None = None,
    ) -> None:
        self.options = options
        self.codec_options = codec_options
        self.events = Emitter(listener)
        self.core = LockCore(
            options.field,
            options.rules,
            home=home,
            verdicts=verdicts,
            max_holders=options.max_holders,
            namespace=where[1],
        )
        self.ledger = Ledger()
        self._where = where

    @classmethod
    def on(
        cls: type[Op],
        collection: Any,
        options: LockOptions,
        *,
        home: Home,
        verdicts: Verdicts,
        listener: LockListener | None,
    ) -> Op:
        """The operations of a manager keeping its state in ``collection`` (either flavour's).

        The collection gives the TTL-index record its key (its client and full name) and
        the codec options ids are compared with.
        """
        return cls(
            options,
            home=home,
            verdicts=verdicts,
            where=(collection.database.client, collection.full_name),
            codec_options=collection.codec_options,
            listener=listener,
        )

    def key_filter(self, key: object) -> dict[str, Any]:
        """The filter of ``key``'s state document; refused before anything is sent."""
        return self.core.home.key_filter(key)

    def lifetime_ms(self, tag: str, lock_timeout: Duration | None) -> int:
        """The lifetime a new ``tag`` lock is taken with, in ms."""
        if lock_timeout is None:
            return self.options.rules.lifetime_ms[tag]
        return parse_lifetime_ms(lock_timeout, "lock_timeout")

    def limit(self, timeout: Duration | None) -> float | None:
        """The operation timeout in force: the call's, else the manager's."""
        return self.options.timeout if timeout is None else parse_duration(timeout, "timeout")

    def concern(self, w: int | str | None) -> int | str:
        """The write concern in force: the call's, else the manager's."""
        return self.options.w if w is None else parse_write_concern(w)

    # -- parsing each public call once --------------------------------------------------

    def acquiring(
        self, key: object, *, lock: object = None, **options: Unpack[NewLockOptions]
    ) -> Acquisition:
        """The call of an acquisition: a new ``tag`` lock, or the pending ``lock`` continued."""
        user_filter = self.core.home.key_filter(key)
        tag = options.get("tag")
        if tag is not None and lock is not None:
            raise InvalidArgument(
                "give exactly one of tag= (a new lock) or lock= (continue a pending one)"
            )
        if lock is None:
            name = tag_or_only(tag, self.options.rules)
            return new_fresh((key, user_filter, name, *self._bounds(name, options)))
        pending = check_lock(lock, self.options.rules)
        return new_continued((key, user_filter, pending, *self._bounds(pending.tag, options)))

    def holding(
        self, key: object, lock: object, *, granted: bool, **options: Unpack[CallOptions]
    ) -> Held:
        """The call of a release (``granted=False``) or an extension (``granted=True``)."""
        held = check_lock(lock, self.options.rules, granted=granted)
        user_filter = self.core.home.key_filter(key)
        return new_held((key, user_filter, held, *self._bounds(held.tag, options)))

    def converting(
        self,
        key: object,
        lock: object,
        *,
        tag: object,
        wait: Duration | None = None,
        **options: Unpack[CallOptions],
    ) -> tuple[Conversion, float | None]:
        """The call of a conversion, and how long to wait for a pending upgrade (or ``None``)."""
        held, wanted = check_conversion(lock, tag, self.options.rules)
        call = Conversion(key, self.key_filter(key), held, wanted, *self._bounds(wanted, options))
        return call, None if wait is None else parse_duration(wait, "wait")

    def _bounds(
        self, lived: str, options: CallOptions
    ) -> tuple[int | None, float | None, int | str]:
        """A write's lifetime (of tag ``lived``, if overridden), limit and write concern."""
        # Spelled out rather than through ``limit``/``concern``: two calls less per command.
        lock_timeout, timeout, w = (
            options.get("lock_timeout"),
            options.get("timeout"),
            options.get("w"),
        )
        return (
            None if lock_timeout is None else self.lifetime_ms(lived, lock_timeout),
            self.options.timeout if timeout is None else parse_duration(timeout, "timeout"),
            self.options.w if w is None else parse_write_concern(w),
        )

    def reading(self, key: object, *, tag: object = None, timeout: Duration | None = None) -> Read:
        """The call of a read (``inspect``, ``locked``): ``tag``, when given, is declared."""
        wanted = None if tag is None else check_tag(tag, self.options.rules)
        return Read(key, self.key_filter(key), wanted, self.limit(timeout), self.options.w)

    def breaking(
        self,
        key: object,
        *,
        lock_id: object = None,
        all_expired: bool = False,
        everyone: bool = False,
        timeout: Duration | None = None,
        w: int | str | None = None,
    ) -> tuple[Read, str, str | None]:
        """The call of a break (or its preview), its mode, and the entry it names."""
        mode = break_mode(lock_id, all_expired, everyone)
        call = Read(key, self.key_filter(key), None, self.limit(timeout), self.concern(w))
        return call, mode, lock_id if isinstance(lock_id, str) else None

    def target(self, call: Continued | Held | Conversion) -> dict[str, Any]:
        """The filter a command on ``call``'s lock sends: the key's, pinned to its document."""
        return document_target(call.user_filter, call.lock.document_id, self.codec_options)

    def send_for(
        self,
        call: AnyCall,
        command: Command,
        *,
        doing: str,
        tag: str | None,
        started: float,
        clock: Clock,
        sent: Sent | None = None,
        settle: bool = False,
        cleanup: bool = False,
    ) -> Flow[Mapping[str, Any] | None]:
        """Send ``command`` within ``call``'s limit and concern: every command's one path.

        The listener hears of retries, unless ``cleanup`` (a withdrawal on the way out,
        bounded by ``CLEANUP_LIMIT`` even without an operation timeout). ``sent`` and
        ``settle`` are :func:`~docmultilock._flows.send`'s.
        """
        limit = call.limit
        on_retry = None
        if cleanup:
            if limit is None:
                limit = CLEANUP_LIMIT
        elif self.events.listener is not None:  # else the retry loop logs each retry itself
            on_retry = self.events.retrying(call.user_filter, tag, started, clock.monotonic)
        # Not a generator itself: ``send``'s own flow is returned, one frame less per yield.
        return send(
            command,
            doing=doing,
            w=call.concern,
            limit=limit,
            clock=clock,
            sent=sent,
            on_retry=on_retry,
            settle=settle,
        )

    @staticmethod
    def applied(result: object) -> bool:
        """True when a guarded write's ``result`` shows it matched the document.

        An ``UpdateResult`` by its ``matched_count``, a ``DeleteResult`` by its
        ``deleted_count``, a ``find_one_and_*`` answer by not being ``None``.
        """
        if result is None:
            return False
        for counted in ("matched_count", "deleted_count"):
            count = getattr(result, counted, None)
            if count is not None:
                return bool(count)
        return True

    def lost_write(self, key: object, lock: Lock, member: str = "") -> LockNotFound:
        """The loss error for a guarded write of ``lock`` that matched nothing."""
        return self.core.judge.lost(lock, self.key_filter(key), "write", member)

    def guard(self, key: object, lock: object) -> dict[str, Any]:
        """A filter matching ``lock``'s document only while it is held (nothing is sent)."""
        held = check_lock(lock, self.options.rules, granted=True)
        user_filter = self.key_filter(key)
        target = document_target(user_filter, held.document_id, self.codec_options)
        return self.core.guard(target, held)

    def report_lost(
        self, user_filter: dict[str, Any], lock: Lock, started: float, clock: Clock, err: LockError
    ) -> None:
        """Report ``lock`` as lost (the flow is re-raising ``err``)."""
        duration = clock.monotonic() - started
        self.events.emit(
            "lost",
            user_filter,
            tag=lock.tag,
            lock=lock,
            outcome=err.code,
            duration=duration,
            error=err,
        )

    def ensure_indexes(self, *, limit: float | None) -> Flow[None]:
        """Create the TTL index of a named-lock collection now (idempotent)."""
        try:
            yield MakeTtlIndex(NAMED_FIELD, _indexes.TTL_INDEX, limit)
        except PyMongoError as exc:
            raise translate(exc, "ensure_indexes", None) from exc
        _indexes.TTL_INDEXES.created(*self._where)

    def index_once(self, limit: float | None) -> Flow[None]:
        """Make sure of the TTL index after a grant (the collection exists by then)."""
        if not _indexes.TTL_INDEXES.due(*self._where):
            return
        try:
            yield from self.ensure_indexes(limit=limit)
        except LockError as err:
            # The lock is already held: failing the acquire would leak it. An acquire tries
            # again after INDEX_RETRY_SECONDS; ensure_indexes() reports the error.
            retry = _indexes.INDEX_RETRY_SECONDS
            first = _indexes.TTL_INDEXES.failed(*self._where, retry)
            log.log(
                logging.WARNING if first else logging.DEBUG,
                "could not create the TTL index on %s (trying again in %.0f s; create it at "
                "deployment with NamedLocks.ensure_indexes()): %s",
                self._where[1],
                retry,
                err,
            )


def describe(options: LockOptions, full_name: str, cls: str) -> str:
    """A manager's ``repr``: its class, collection, field and tags."""
    return f"{cls}({full_name!r}, field={options.field!r}, tags={sorted(options.rules.tags)!r})"
