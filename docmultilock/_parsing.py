"""One manager's public calls parsed once, each into a call of its kind (``_calls``).

:class:`Parser` checks a call's arguments against the manager's options (its table, its
timeout and write concern) before anything is sent, and makes the frozen value the flows
take keyword-only: ``acquiring`` (a :class:`~docmultilock._calls.Fresh` or
:class:`~docmultilock._calls.Continued`), ``holding``, ``converting``, ``reading``,
``breaking``. The flows never parse again. A held lock's guard and the loss of a guarded
write are built here too: they parse the key and the lock, and send nothing.
"""

from __future__ import annotations

from typing import Any

from bson.codec_options import CodecOptions

from docmultilock._args import (
    check_conversion,
    check_lock,
    check_tag,
    document_target,
    tag_or_only,
)
from docmultilock._calls import (
    Acquisition,
    Conversion,
    Held,
    Read,
    new_continued,
    new_fresh,
    new_held,
)
from docmultilock._core import LockCore
from docmultilock._inspection import break_mode
from docmultilock._lock import Lock
from docmultilock._typing import Unpack
from docmultilock.errors import InvalidArgument, LockNotFound
from docmultilock.options import (
    CallOptions,
    Duration,
    LockOptions,
    NewLockOptions,
    parse_duration,
    parse_lifetime_ms,
    parse_write_concern,
)

__all__ = ["Parser", "applied"]


class Parser:
    """One manager's argument parsing: its options, and its core's home and guard.

    :param codec_options: the collection's, with which a filter's ``_id`` is compared to a
        lock's document.
    """

    __slots__ = ("_core", "_home", "codec_options", "options", "rules")

    def __init__(
        self, options: LockOptions, core: LockCore, codec_options: CodecOptions[Any]
    ) -> None:
        self.options = options
        self.rules = options.rules
        self.codec_options = codec_options
        self._core = core
        self._home = core.home

    def key_filter(self, key: object) -> dict[str, Any]:
        """The filter of ``key``'s state document; refused before anything is sent."""
        return self._home.key_filter(key)

    def lifetime_ms(self, tag: str, lock_timeout: Duration | None) -> int:
        """The lifetime a new ``tag`` lock is taken with, in ms."""
        if lock_timeout is None:
            return self.rules.lifetime_ms[tag]
        return parse_lifetime_ms(lock_timeout, "lock_timeout")

    def limit(self, timeout: Duration | None) -> float | None:
        """The operation timeout in force: the call's, else the manager's."""
        return self.options.timeout if timeout is None else parse_duration(timeout, "timeout")

    def concern(self, w: int | str | None) -> int | str:
        """The write concern in force: the call's, else the manager's."""
        return self.options.w if w is None else parse_write_concern(w)

    def acquiring(
        self, key: object, *, lock: object = None, **options: Unpack[NewLockOptions]
    ) -> Acquisition:
        """The call of an acquisition: a new ``tag`` lock, or the pending ``lock`` continued."""
        user_filter = self._home.key_filter(key)
        tag = options.get("tag")
        if tag is not None and lock is not None:
            raise InvalidArgument(
                "give exactly one of tag= (a new lock) or lock= (continue a pending one)"
            )
        if lock is None:
            name = tag_or_only(tag, self.rules)
            return new_fresh((key, user_filter, name, *self._bounds(name, options)))
        pending = check_lock(lock, self.rules)
        return new_continued((key, user_filter, pending, *self._bounds(pending.tag, options)))

    def holding(
        self, key: object, lock: object, *, granted: bool, **options: Unpack[CallOptions]
    ) -> Held:
        """The call of a release (``granted=False``) or an extension (``granted=True``)."""
        held = check_lock(lock, self.rules, granted=granted)
        user_filter = self._home.key_filter(key)
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
        held, wanted = check_conversion(lock, tag, self.rules)
        call = Conversion(key, self.key_filter(key), held, wanted, *self._bounds(wanted, options))
        return call, None if wait is None else parse_duration(wait, "wait")

    def _bounds(
        self, lived: str, options: CallOptions
    ) -> tuple[int | None, float | None, int | str]:
        """A write's lifetime (of tag ``lived``, if overridden), limit and write concern."""
        lock_timeout = options.get("lock_timeout")
        return (
            None if lock_timeout is None else self.lifetime_ms(lived, lock_timeout),
            self.limit(options.get("timeout")),
            self.concern(options.get("w")),
        )

    def reading(self, key: object, *, tag: object = None, timeout: Duration | None = None) -> Read:
        """The call of a read (``inspect``, ``locked``): ``tag``, when given, is declared."""
        wanted = None if tag is None else check_tag(tag, self.rules)
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

    def guard(self, key: object, lock: object) -> dict[str, Any]:
        """A filter matching ``lock``'s document only while it is held (nothing is sent)."""
        held = check_lock(lock, self.rules, granted=True)
        user_filter = self.key_filter(key)
        target = document_target(user_filter, held.document_id, self.codec_options)
        return self._core.guard(target, held)

    def lost_write(self, key: object, lock: Lock, member: str = "") -> LockNotFound:
        """The loss error for a guarded write of ``lock`` on ``key`` that matched nothing."""
        return self._core.judge.lost(lock, self.key_filter(key), "write", member)


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
