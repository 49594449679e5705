"""The synchronous lock managers: thin shells that run ``_core`` plans on a pymongo collection."""

from __future__ import annotations

import contextlib
import itertools
import logging
import secrets
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import timezone
from typing import Any, Protocol, TypeVar

from bson.errors import InvalidDocument
from pymongo.collection import Collection
from pymongo.errors import PyMongoError

from docmultilock._args import check_filter, check_lock, check_tag, document_target
from docmultilock._core import DEFAULT_MAX_HOLDERS, Command, LockCore
from docmultilock._driver import WriteConcernViews, deadline, execute, is_transient, translate
from docmultilock._hold import HeldLock, OnLost, Pacing, hold, plan_hold
from docmultilock._idempotence import ATTEMPTS, Ledger, Sent, retry_pause
from docmultilock._lock import Lock
from docmultilock._rules import READ_WRITE, WRITE_ONLY
from docmultilock.errors import AssertiveLock, InvalidArgument, LockError, LockNotFound
from docmultilock.options import (
    Duration,
    ErrorFactory,
    LockOptions,
    load_options,
    parse_duration,
    parse_lifetime_ms,
    parse_write_concern,
)

__all__ = ["MultiLock", "WriteLock"]

log = logging.getLogger("docmultilock")

T_co = TypeVar("T_co", covariant=True)


class _Plan(Protocol[T_co]):
    @property
    def command(self) -> Command: ...

    def read(self, reply: Mapping[str, Any] | None) -> T_co: ...


def new_lock_id() -> str:
    """128 random bits: a lock id can be neither guessed nor forged."""
    return secrets.token_hex(16)


class _LockManager:
    """What every lock manager shares: the raw operations, hold, and running a command."""

    #: Where ``hold(wait=...)`` reads time, sleeps and draws jitter (tests replace it).
    _pacing: Pacing = Pacing()

    def __init__(
        self,
        collection: Collection[Any],
        options: LockOptions,
        *,
        exclusive: bool,
        named: bool = False,
    ) -> None:
        if not isinstance(collection, Collection):
            raise InvalidArgument(
                f"collection must be a pymongo Collection, not {type(collection).__name__}"
            )
        self.collection = collection
        self.options = options
        self._core = LockCore(
            options.field,
            options.rules,
            exclusive=exclusive,
            named=named,
            max_holders=options.max_holders,
        )
        self._views = WriteConcernViews(collection)
        self._ledger = Ledger()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.collection.full_name!r}, field={self.options.field!r}, "
            f"tags={sorted(self.options.rules.tags)!r})"
        )

    def _run(
        self,
        plan: _Plan[T_co],
        doing: str,
        timeout: Duration | None,
        w: int | str | None,
        sent: Sent | None = None,
    ) -> T_co:
        """Send the plan's one command and read its reply; the only place pymongo errors leave.

        A transient failure (a cut connection, a fail-over) is retried with the same command
        until ``timeout``: every command is idempotent by lock id, so a retry of one that
        was applied finds its own work done (``sent`` records that a reply was lost).
        """
        limit = self.options.timeout if timeout is None else parse_duration(timeout, "timeout")
        concern = self.options.w if w is None else parse_write_concern(w)
        command = plan.command
        give_up = None if limit is None else time.monotonic() + limit
        try:
            for attempt in itertools.count():
                try:
                    left = None if give_up is None else max(give_up - time.monotonic(), 0.001)
                    with deadline(left):
                        reply = execute(self._views(concern), command)
                    break
                except PyMongoError as exc:
                    if sent is not None:
                        sent.unsure = True
                    pause = retry_pause(attempt)
                    if (
                        not is_transient(exc)
                        or attempt + 1 >= ATTEMPTS
                        or (give_up is not None and time.monotonic() + pause >= give_up)
                    ):
                        raise translate(exc, doing, command.filter) from exc
                    log.debug("%s on %s: retrying after %r", doing, self.collection.full_name, exc)
                    time.sleep(pause)
                except (InvalidDocument, OverflowError, UnicodeEncodeError) as exc:
                    # Encoding fails before anything is sent: the caller's filter holds a value
                    # BSON cannot carry (an int beyond 64 bits, an arbitrary object, a lone
                    # surrogate in a string).
                    raise InvalidArgument(f"filter cannot be sent to MongoDB: {exc}") from exc
            return plan.read(reply)
        except LockError as err:
            log.debug("%s on %s: %s", doing, self.collection.full_name, err.code)
            raise

    @contextlib.contextmanager
    def _mapped_errors(self) -> Iterator[None]:
        """Raise ``error_factory(err)`` in place of each LockError leaving a public method."""
        try:
            yield
        except LockError as err:
            factory = self.options.error_factory
            if factory is None:
                raise
            raise factory(err) from err

    def _lifetime(self, tag: str, lock_timeout: Duration | None) -> int:
        """The lifetime a new ``tag`` lock is taken with, in ms."""
        if lock_timeout is None:
            return self.options.rules.lifetime_ms[tag]
        return parse_lifetime_ms(lock_timeout, "lock_timeout")

    @staticmethod
    def _lifetime_given(lock_timeout: Duration | None) -> int | None:
        """The call's own lifetime in ms, or ``None`` to keep the lock's stored one."""
        return None if lock_timeout is None else parse_lifetime_ms(lock_timeout, "lock_timeout")

    def _check_key(self, key: object) -> dict[str, Any]:
        """The filter for ``key`` (here the caller's filter), refused if bad before anything."""
        return check_filter(key)

    def _locate(self, key: object, lock: Lock | None) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(user_filter, target)`` for ``key``; with ``lock``, pinned to the lock's document."""
        user_filter = self._check_key(key)
        if lock is None:
            return user_filter, user_filter
        return user_filter, document_target(user_filter, lock.document_id)

    # The operations below raise LockErrors as they are; the public methods map them
    # through ``error_factory`` (``hold()`` needs the originals to decide what to do).

    def _acquire(
        self,
        key: object,
        tag: object,
        lock: object,
        lock_timeout: Duration | None,
        timeout: Duration | None,
        w: int | str | None,
    ) -> Lock:
        rules = self.options.rules
        user_filter = target = self._check_key(key)
        if (tag is None) == (lock is None):
            raise InvalidArgument(
                "give exactly one of tag= (a new lock) or lock= (continue a pending one)"
            )
        pending: Lock | None
        if lock is not None:
            pending = check_lock(lock, rules)
            name = pending.tag
            target = document_target(user_filter, pending.document_id)
        else:
            pending, name = None, check_tag(tag, rules)
        plan = self._core.acquire(
            target,
            user_filter=user_filter,
            tag=name,
            lock_id=new_lock_id(),
            lifetime_ms=self._lifetime_given(lock_timeout),
            continuing=pending,
        )
        try:
            granted = self._run(plan, "acquire", timeout, w)
        except AssertiveLock as err:
            self._ledger.saw(err.lock)
            raise
        self._ledger.saw(granted)
        log.debug("acquired %s %s on %r", granted.tag, granted.id, granted.document_id)
        return granted

    def _release(
        self, key: object, lock: object, timeout: Duration | None, w: int | str | None
    ) -> None:
        held = check_lock(lock, self.options.rules)
        user_filter, target = self._locate(key, held)
        ledger = self._ledger
        sent = Sent(unsure=ledger.was_unsure(held.id))
        try:
            with ledger.on_db_error(held.id):
                deleting = self._core.release_by_delete(target, lock=held)
                if deleting is None or not self._run(deleting, "release", timeout, w, sent):
                    plan = self._core.release(target, user_filter=user_filter, lock=held)
                    self._run(plan, "release", timeout, w, sent)
        except LockNotFound:
            # Our entry is gone. If an earlier attempt's reply was lost, that attempt may have
            # removed it: while the lock is unexpired by the server's clock nobody else can
            # (pruning takes only expired entries), so the release did happen.
            with ledger.on_db_error(held.id):
                if not sent.unsure or not self._unexpired(held.id):
                    ledger.forget(held.id)
                    raise
            log.debug("release of %s was applied by an attempt whose reply was lost", held.id)
        ledger.forget(held.id)

    def _unexpired(self, lock_id: str) -> bool:
        """True while the server's clock is before the expiry this manager saw it stamp.

        One ``hello``; ``False`` at once for a lock this manager never saw granted.
        """
        expires_at = self._ledger.expiry(lock_id)
        if expires_at is None:
            return False
        try:
            with deadline(self.options.timeout):
                now = self.collection.database.client.admin.command("hello")["localTime"]
        except PyMongoError as exc:
            raise translate(exc, "release", None) from exc
        if now.tzinfo is None:
            now = now.replace(tzinfo=timezone.utc)
        return bool(now < expires_at)

    def _extend(
        self,
        key: object,
        lock: object,
        lock_timeout: Duration | None,
        timeout: Duration | None,
        w: int | str | None,
    ) -> Lock:
        held = check_lock(lock, self.options.rules, granted=True)
        user_filter, target = self._locate(key, held)
        plan = self._core.extend(
            target,
            user_filter=user_filter,
            lock=held,
            lifetime_ms=self._lifetime_given(lock_timeout),
        )
        extended = self._run(plan, "extend", timeout, w)
        self._ledger.saw(extended)
        return extended

    def _guard(self, key: object, lock: object) -> dict[str, Any]:
        held = check_lock(lock, self.options.rules, granted=True)
        _, target = self._locate(key, held)
        return self._core.guard(target, held)

    def hold(
        self,
        key: Mapping[str, Any] | str,
        *,
        tag: str | None = None,
        wait: Duration | None = None,
        backoff: tuple[float, float] = (0.01, 0.8),
        keepalive: bool = False,
        extend_every: Duration | None = None,
        on_lost: OnLost | None = None,
        lock_timeout: Duration | None = None,
        timeout: Duration | None = None,
        w: int | str | None = None,
    ) -> contextlib.AbstractContextManager[HeldLock]:
        """Hold a lock on ``key`` for the span of a ``with`` block; release it on the way out.

        ::

            with locks.hold({"_id": 1}, tag="write", wait=5.0, keepalive=True) as held:
                orders.update_one(held.guard(), {"$set": {"status": "paid"}})

        :param tag: the lock's tag; may be left out when the manager declares only one.
        :param wait: seconds to go on trying while refused, with exponential backoff and
            full jitter between ``backoff=(min, max)`` seconds; ``None`` tries once. A
            pending assertive lock is continued meanwhile, and released if the wait fails.
        :param keepalive: extend the lock every ``extend_every`` seconds (a third of its
            lifetime by default) from the process's one keep-alive thread.
        :param on_lost: called as ``on_lost(lock, error)`` once, when the lock is found lost;
            from the keep-alive thread, so keep it short. Its exceptions are logged.
        :raises LockTimeout: ``wait`` ran out; nothing is left on the document.
        :raises LockConflict: refused, without ``wait`` (as :meth:`acquire` raises).
        :raises LockNotFound: after a block that ended normally, when the lock was lost
            meanwhile (or the error that made the keep-alive fail): the block was not
            protected throughout. An exception from the block itself is never replaced.
        :raises InvalidArgument: before anything is written.
        """
        spec = plan_hold(
            self,
            key,
            tag=tag,
            wait=wait,
            backoff=backoff,
            keepalive=keepalive,
            extend_every=extend_every,
            on_lost=on_lost,
            lock_timeout=lock_timeout,
            timeout=timeout,
            w=w,
        )
        return hold(self, spec, self._pacing)


class _DocumentLocks(_LockManager):
    """The public release, extend and guard of the managers that lock the user's documents."""

    def release(
        self,
        filter: Mapping[str, Any],  # noqa: A002
        lock: Lock,
        *,
        timeout: Duration | None = None,
        w: int | str | None = None,
    ) -> None:
        """Release ``lock`` on the document it was taken on.

        An expired lock that nobody displaced is removed quietly.

        :raises LockNotFound: the lock is gone (:class:`LockWasReacquired` for a WriteLock).
        :raises ResourceNotFound: the document no longer matches ``filter``.
        """
        with self._mapped_errors():
            self._release(filter, lock, timeout, w)

    def extend(
        self,
        filter: Mapping[str, Any],  # noqa: A002
        lock: Lock,
        *,
        lock_timeout: Duration | None = None,
        timeout: Duration | None = None,
        w: int | str | None = None,
    ) -> Lock:
        """Push ``lock``'s expiry to the server's now plus its lifetime; return the new Lock.

        :raises LockNotFound: the lock expired or was displaced (:class:`LockWasReacquired`
            for a WriteLock); an expired lock cannot be revived.
        """
        with self._mapped_errors():
            return self._extend(filter, lock, lock_timeout, timeout, w)

    def guard(self, filter: Mapping[str, Any], lock: Lock) -> dict[str, Any]:  # noqa: A002
        """Return a filter that matches the document only while ``lock`` is still held.

        Use it for the writes the lock protects, so that a write cannot land after the lock
        expired or was taken over::

            collection.update_one(locks.guard({"_id": 1}, lock), {"$set": {"total": 10}})
        """
        return self._guard(filter, lock)


class MultiLock(_DocumentLocks):
    """Locks with tags (``read``, ``write``, ...) embedded in the locked document itself.

    Tags relate through ``lock_relationships``: *cooperative* tags refuse each other,
    *assertive* tags register and wait for the other to drain. The default table is the
    readers-writer one (readers share; a writer excludes writers and waits for readers)::

        locks = MultiLock(db.orders, lock_timeouts={"read": 2.0, "write": 20.0})
        lock = locks.acquire({"_id": 1}, tag="read")
        locks.release({"_id": 1}, lock)

    A document takes at most ``max_holders`` live entries (held and pending) at once; one
    more is refused with :class:`~docmultilock.TooManyHolders`.

    :raises InvalidConfiguration: naming every problem with the options.
    """

    def __init__(
        self,
        collection: Collection[Any],
        *,
        lock_timeouts: Mapping[str, Duration] | None = None,
        lock_relationships: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
        lock_timeout: Duration = 10.0,
        timeout: Duration | None = 10.0,
        w: int | str = "majority",
        field: str = "lock",
        error_factory: ErrorFactory | None = None,
        max_holders: int = DEFAULT_MAX_HOLDERS,
    ) -> None:
        options = load_options(
            lock_timeouts=lock_timeouts if lock_timeouts is not None else {},
            lock_relationships=(
                lock_relationships if lock_relationships is not None else READ_WRITE
            ),
            lock_timeout=lock_timeout,
            timeout=timeout,
            w=w,
            field=field,
            error_factory=error_factory,
            max_holders=max_holders,
        )
        super().__init__(collection, options, exclusive=False)

    def acquire(
        self,
        filter: Mapping[str, Any],  # noqa: A002
        *,
        tag: str | None = None,
        lock: Lock | None = None,
        lock_timeout: Duration | None = None,
        timeout: Duration | None = None,
        w: int | str | None = None,
    ) -> Lock:
        """Acquire a ``tag`` lock on the document matching ``filter``, in one atomic command.

        Give ``lock=`` instead of ``tag=`` to go on waiting with a pending assertive lock.

        :raises CooperativeLock: a tag this one is cooperative with is held (nothing recorded).
        :raises AssertiveLock: registered as pending; call again with ``lock=err.lock``.
        :raises LockNotFound: the pending ``lock`` given is gone.
        :raises ResourceNotFound: no document matches ``filter``.
        """
        with self._mapped_errors():
            return self._acquire(filter, tag, lock, lock_timeout, timeout, w)


class WriteLock(_DocumentLocks):
    """An exclusive lock embedded in the locked document: a MultiLock with one tag, ``write``.

    ::

        locks = WriteLock(db.orders, lock_timeout=10.0)
        lock = locks.acquire({"_id": 1})      # LockAlreadyTaken (HTTP 409) when held
        locks.release({"_id": 1}, lock)

    :raises InvalidConfiguration: naming every problem with the options.
    """

    def __init__(
        self,
        collection: Collection[Any],
        *,
        lock_timeout: Duration = 10.0,
        timeout: Duration | None = 10.0,
        w: int | str = "majority",
        field: str = "lock",
        error_factory: ErrorFactory | None = None,
    ) -> None:
        options = load_options(
            lock_relationships=WRITE_ONLY,
            lock_timeout=lock_timeout,
            timeout=timeout,
            w=w,
            field=field,
            error_factory=error_factory,
        )
        super().__init__(collection, options, exclusive=True)

    def acquire(
        self,
        filter: Mapping[str, Any],  # noqa: A002
        *,
        lock_timeout: Duration | None = None,
        timeout: Duration | None = None,
        w: int | str | None = None,
    ) -> Lock:
        """Acquire the exclusive lock on the document matching ``filter``.

        :raises LockAlreadyTaken: another holder has it (nothing recorded).
        :raises ResourceNotFound: no document matches ``filter``.
        """
        with self._mapped_errors():
            return self._acquire(filter, "write", None, lock_timeout, timeout, w)
