"""Every lock operation of one manager, as a flow: checked arguments in, effects out.

:class:`LockOperations` is what a lock manager *is*, minus I/O: the core for its field,
table and home, the ledger of what it saw granted, and the flows of ``acquire``,
``release``, ``extend`` and ``ensure_indexes`` (plus ``guard``, which sends nothing). The
sync and async managers, and ``hold()``, are thin shells that run these flows with their
driver; a decision written here is written once for both flavours.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping
from typing import Any

from bson.codec_options import DEFAULT_CODEC_OPTIONS, CodecOptions
from pymongo.errors import PyMongoError

from docmultilock import _indexes
from docmultilock._args import check_lock, check_tag, document_target, tag_or_only
from docmultilock._core import AcquirePlan, Command, Home, LockCore, Verdicts
from docmultilock._events import Emitter, EventKind, LockListener
from docmultilock._failures import translate
from docmultilock._flows import (
    CLEANUP_LIMIT,
    Clock,
    Flow,
    MakeTtlIndex,
    Sent,
    ServerTime,
    aggregate,
    send,
)
from docmultilock._inspection import BreakPlan, InspectPlan, break_mode
from docmultilock._ledger import Ledger
from docmultilock._lock import Lock
from docmultilock._snapshot import HolderSnapshot, LockSnapshot
from docmultilock.errors import (
    AssertiveLock,
    CooperativeLock,
    DbError,
    InvalidArgument,
    LockError,
    LockNotFound,
)
from docmultilock.options import (
    Duration,
    LockOptions,
    parse_duration,
    parse_lifetime_ms,
    parse_write_concern,
)

__all__ = ["LockOperations", "new_lock_id"]

log = logging.getLogger("docmultilock")

#: The field of a named lock's document that holds its state.
NAMED_FIELD = "lock"


def new_lock_id() -> str:
    """128 random bits: a lock id can be neither guessed nor forged."""
    return secrets.token_hex(16)


class LockOperations:
    """The operations of one lock manager as flows, over one core, ledger and home.

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

    # -- arguments --------------------------------------------------------------------

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

    def _locate(self, key: object, lock: Lock) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(user_filter, target)``: the key's filter, pinned to the lock's own document."""
        user_filter = self.key_filter(key)
        return user_filter, document_target(user_filter, lock.document_id, self.codec_options)

    def mapped(self, err: LockError) -> BaseException:
        """What a public method raises for ``err``: ``error_factory(err)``, or ``err`` itself.

        The factory's exception gets ``err`` as its ``__cause__`` (``err`` itself, passed
        through, keeps its own).
        """
        factory = self.options.error_factory
        if factory is None:
            return err
        replacement = factory(err)
        if replacement is not err:  # passed through: it keeps its own cause
            replacement.__cause__ = err
        return replacement

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

    def lost_write(self, key: object, lock: Lock) -> LockNotFound:
        """The loss error for a guarded write of ``lock`` that matched nothing."""
        return self.core.lost(lock, self.key_filter(key), "write")

    # -- flows ------------------------------------------------------------------------

    def acquire(
        self,
        key: object,
        tag: object,
        lock: object,
        lock_timeout: Duration | None,
        timeout: Duration | None,
        w: int | str | None,
        clock: Clock,
        fair: bool = False,
    ) -> Flow[Lock]:
        """Acquire ``tag`` on ``key``, or continue the pending ``lock``; one command.

        With ``fair`` (``hold(fair=True)``), a refusal holds a place in line: a pending
        entry, raised as :class:`AssertiveLock` to be continued.
        """
        rules = self.options.rules
        user_filter = target = self.key_filter(key)
        if tag is not None and lock is not None:
            raise InvalidArgument(
                "give exactly one of tag= (a new lock) or lock= (continue a pending one)"
            )
        pending: Lock | None = None
        if lock is not None:
            pending = check_lock(lock, rules)
            name = pending.tag
            target = document_target(user_filter, pending.document_id, self.codec_options)
        else:
            name = tag_or_only(tag, rules)
        lock_id = new_lock_id() if pending is None else pending.id
        plan = self.core.acquire(
            target,
            user_filter=user_filter,
            tag=name,
            lock_id=lock_id,
            lifetime_ms=None if lock_timeout is None else self.lifetime_ms(name, lock_timeout),
            continuing=pending,
            fair=fair,
        )
        limit, concern = self.limit(timeout), self.concern(w)
        started = clock.monotonic()
        try:
            reply = yield from send(
                plan.command,
                doing="acquire",
                w=concern,
                limit=limit,
                clock=clock,
                on_retry=self.events.retrying(user_filter, name, started, clock.monotonic),
                settle=pending is None,  # what _withdraw may follow
            )
            granted = self._granted(plan, reply, started, clock)
            if self.core.home.on_demand:
                yield from self._index_once(limit)
        except BaseException as exc:
            # Cancelled or interrupted with the command out, or before the caller saw its
            # grant: it may be applied, under an id nobody will ever hold. A continued
            # lock's caller keeps its id (and hold() releases it); a new one is withdrawn.
            if pending is None and _interrupted(exc):
                yield from self._withdraw(target, user_filter, lock_id, limit, concern, clock)
            raise
        return granted

    def _granted(
        self, plan: AcquirePlan, reply: Mapping[str, Any] | None, started: float, clock: Clock
    ) -> Lock:
        """Read an acquisition's reply: the lock, recorded and told, or its error, told."""
        user_filter, name = plan.user_filter, plan.tag
        try:
            granted = plan.read(reply)
        except LockError as err:
            kind = _kind_of(err)
            if isinstance(err, AssertiveLock):
                self.ledger.saw(err.lock)
            if kind is None:
                log.debug("acquire %r on %r: %s", name, user_filter, err.code)
            else:
                self.events.emit(
                    kind,
                    user_filter,
                    tag=name,
                    lock=getattr(err, "lock", None) or plan.continuing,
                    outcome=err.code,
                    duration=clock.monotonic() - started,
                    error=err,
                )
            raise
        self.ledger.saw(granted)
        self.events.emit(
            "granted", user_filter, tag=name, lock=granted, duration=clock.monotonic() - started
        )
        return granted

    def _withdraw(
        self,
        target: dict[str, Any],
        user_filter: dict[str, Any],
        lock_id: str,
        limit: float | None,
        concern: int | str,
        clock: Clock,
    ) -> Flow[None]:
        """Remove entry ``lock_id``, if there, after its acquisition was interrupted.

        Best effort, never raising a LockError: the entry lapses with its lifetime anyway.
        An interrupted command still queued on the server can be applied after this (it
        cannot be waited for: the caller is going away), and its entry then holds until
        its lifetime runs out, as a crashed holder's does.
        """
        command = self.core.withdrawal(target, user_filter=user_filter, lock_id=lock_id)
        # Bounded even without an operation timeout: the caller is on its way out.
        limit = CLEANUP_LIMIT if limit is None else limit
        try:
            reply = yield from send(command, doing="release", w=concern, limit=limit, clock=clock)
        except LockError as err:
            log.warning("could not withdraw the interrupted acquisition %s: %s", lock_id, err)
            return
        if reply is None:
            log.debug("the interrupted acquisition %s left no entry", lock_id)
        else:
            log.debug("withdrew the entry of the interrupted acquisition %s", lock_id)

    def release(
        self,
        key: object,
        lock: object,
        timeout: Duration | None,
        w: int | str | None,
        clock: Clock,
    ) -> Flow[None]:
        """Release ``lock``; a release whose earlier reply was lost is judged by the ledger."""
        held = check_lock(lock, self.options.rules)
        user_filter, target = self._locate(key, held)
        limit, concern = self.limit(timeout), self.concern(w)
        ledger = self.ledger
        sent = Sent(unsure=ledger.was_unsure(held.id))
        started = clock.monotonic()
        retrying = self.events.retrying(user_filter, held.tag, started, clock.monotonic)

        def sending(command: Command) -> Flow[Mapping[str, Any] | None]:
            # Both commands of a release share its deadline and its record of lost replies.
            return send(
                command,
                doing="release",
                w=concern,
                limit=limit,
                clock=clock,
                sent=sent,
                on_retry=retrying,
            )

        try:
            deleting = self.core.release_by_delete(target, lock=held)
            deleted = False
            if deleting is not None:
                deleted = deleting.read((yield from sending(deleting.command)))
            if not deleted:
                plan = self.core.release(target, user_filter=user_filter, lock=held)
                plan.read((yield from sending(plan.command)))
        except DbError:
            ledger.release_unsure(held.id)
            raise
        except LockNotFound as err:
            # Our entry is gone. If an earlier attempt's reply was lost, that attempt may have
            # removed it: while the lock is unexpired by the server's clock nobody else can
            # (pruning takes only expired entries), so the release did happen. An operator's
            # break_lock may also have removed it meanwhile: reporting success is harmless
            # then, since the lock is gone either way.
            if not (sent.unsure and (yield from self._unexpired(held.id, limit))):
                ledger.forget(held.id)
                self._lost(user_filter, held, started, clock, err)
                raise
            log.debug("release of %s was applied by an attempt whose reply was lost", held.id)
        ledger.forget(held.id)
        self.events.emit(
            "released", user_filter, tag=held.tag, lock=held, duration=clock.monotonic() - started
        )

    def _lost(
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

    def _unexpired(self, lock_id: str, limit: float | None) -> Flow[bool]:
        """True while the server's clock is before the expiry this manager saw it stamp.

        One ``hello``; ``False`` at once for a lock this manager never saw granted (a lock
        a client sends back carries an ``expires_at`` nobody can vouch for).
        """
        expires_at = self.ledger.expiry(lock_id)
        if expires_at is None:
            return False
        try:
            now = yield ServerTime(limit)
        except PyMongoError as exc:
            self.ledger.release_unsure(lock_id)
            raise translate(exc, "release", None) from exc
        return bool(now < expires_at)

    def extend(
        self,
        key: object,
        lock: object,
        lock_timeout: Duration | None,
        timeout: Duration | None,
        w: int | str | None,
        clock: Clock,
    ) -> Flow[Lock]:
        """Push ``lock``'s expiry to server-now plus its lifetime (or ``lock_timeout``)."""
        held = check_lock(lock, self.options.rules, granted=True)
        user_filter, target = self._locate(key, held)
        plan = self.core.extend(
            target,
            user_filter=user_filter,
            lock=held,
            lifetime_ms=None if lock_timeout is None else self.lifetime_ms(held.tag, lock_timeout),
        )
        started = clock.monotonic()
        reply = yield from send(
            plan.command,
            doing="extend",
            w=self.concern(w),
            limit=self.limit(timeout),
            clock=clock,
            on_retry=self.events.retrying(user_filter, held.tag, started, clock.monotonic),
        )
        try:
            extended = plan.read(reply)
        except LockNotFound as err:
            self._lost(user_filter, held, started, clock, err)
            raise
        self.ledger.saw(extended)
        self.events.emit(
            "extended",
            user_filter,
            tag=held.tag,
            lock=extended,
            duration=clock.monotonic() - started,
        )
        return extended

    def guard(self, key: object, lock: object) -> dict[str, Any]:
        """A filter matching ``lock``'s document only while it is held (nothing is sent)."""
        held = check_lock(lock, self.options.rules, granted=True)
        _, target = self._locate(key, held)
        return self.core.guard(target, held)

    def inspect(self, key: object, timeout: Duration | None, clock: Clock) -> Flow[LockSnapshot]:
        """Read ``key``'s lock field with the server's time; one read-only command."""
        user_filter = self.key_filter(key)
        plan = InspectPlan.make(self.core, user_filter)
        snapshot, _ = yield from self._read(plan, timeout, clock)
        return snapshot

    def locked(
        self, key: object, tag: object, timeout: Duration | None, clock: Clock
    ) -> Flow[bool]:
        """True when a granted, unexpired entry (of ``tag``: a declared one) holds ``key``."""
        wanted = None if tag is None else check_tag(tag, self.options.rules)
        snapshot = yield from self.inspect(key, timeout, clock)
        return snapshot.locked(wanted)

    def preview_break(
        self,
        key: object,
        lock_id: object,
        all_expired: bool,
        everyone: bool,
        timeout: Duration | None,
        clock: Clock,
    ) -> Flow[tuple[LockSnapshot, tuple[HolderSnapshot, ...]]]:
        """``key``'s snapshot and what ``break_lock`` would remove now; nothing is written.

        The server decides what would go with the break's own condition, at its own time.
        """
        mode = break_mode(lock_id, all_expired, everyone)
        plan = InspectPlan.make(
            self.core,
            self.key_filter(key),
            breaking=(mode, lock_id if isinstance(lock_id, str) else None),
        )
        return (yield from self._read(plan, timeout, clock))

    def _read(
        self, plan: InspectPlan, timeout: Duration | None, clock: Clock
    ) -> Flow[tuple[LockSnapshot, tuple[HolderSnapshot, ...]]]:
        replies = yield from aggregate(
            plan.pipeline,
            doing="inspect",
            filter=plan.user_filter,
            limit=self.limit(timeout),
            clock=clock,
        )
        snapshot, doomed = plan.read_preview(replies)
        log.debug(
            "inspected %r: fence %d, %d entries",
            snapshot.document_id,
            snapshot.fence,
            len(snapshot.holders),
        )
        return snapshot, doomed

    def break_lock(
        self,
        key: object,
        lock_id: object,
        all_expired: bool,
        everyone: bool,
        timeout: Duration | None,
        w: int | str | None,
        clock: Clock,
    ) -> Flow[tuple[HolderSnapshot, ...]]:
        """Remove entries from ``key``'s lock field, keeping its fence; one command."""
        mode = break_mode(lock_id, all_expired, everyone)
        user_filter = self.key_filter(key)
        plan = BreakPlan.make(
            self.core,
            user_filter,
            mode=mode,
            lock_id=lock_id if isinstance(lock_id, str) else None,
            token=new_lock_id(),
        )
        started = clock.monotonic()
        reply = yield from send(
            plan.command,
            doing="break",
            w=self.concern(w),
            limit=self.limit(timeout),
            clock=clock,
            on_retry=self.events.retrying(user_filter, None, started, clock.monotonic),
        )
        removed = plan.read(reply)
        self.events.emit(
            "broken",
            user_filter,
            tag=None,
            duration=clock.monotonic() - started,
            removed=removed,
        )
        return removed

    def ensure_indexes(self, timeout: Duration | None) -> Flow[None]:
        """Create the TTL index of a named-lock collection now (idempotent)."""
        try:
            yield MakeTtlIndex(NAMED_FIELD, _indexes.TTL_INDEX, self.limit(timeout))
        except PyMongoError as exc:
            raise translate(exc, "ensure_indexes", None) from exc
        _indexes.TTL_INDEXES.created(*self._where)

    def _index_once(self, limit: float | None) -> Flow[None]:
        """Make sure of the TTL index after a grant (the collection exists by then)."""
        if not _indexes.TTL_INDEXES.due(*self._where):
            return
        try:
            yield from self.ensure_indexes(limit)
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


def _interrupted(exc: BaseException) -> bool:
    """True for a cancellation or an interrupt (not an error, nor a flow being closed)."""
    return not isinstance(exc, (Exception, GeneratorExit))


def _kind_of(err: LockError) -> EventKind | None:
    """The event an acquisition's error reports: pending, lost or refused (else none)."""
    if isinstance(err, AssertiveLock):
        return "pending"
    if isinstance(err, LockNotFound):
        return "lost"
    return "refused" if isinstance(err, CooperativeLock) else None


def describe(options: LockOptions, full_name: str, cls: str) -> str:
    """A manager's ``repr``: its class, collection, field and tags."""
    return f"{cls}({full_name!r}, field={options.field!r}, tags={sorted(options.rules.tags)!r})"
