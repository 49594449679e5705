"""What a reply means for one manager: the errors its readers raise (:class:`Judge`).

Every plan's reading (``_plans``) ends in a lock or in one of these errors: a missing
document, a field docmultilock does not own, a tag at its limit, a pending lock, a lost
one, a spent one. They are worded here once, for this manager's home (a document, or a
name) and verdicts (which refusal and loss classes), from the reply's shape and the tag
table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass
from typing import Any, NoReturn

from docmultilock._command import Filter, Home, Verdicts
from docmultilock._layout import LAYOUT
from docmultilock._lock import Lock, as_utc
from docmultilock._reply import DOCUMENT_ID, Reply, ReplyShape
from docmultilock._rules import TagRules
from docmultilock._wording import loss_message
from docmultilock.errors import (
    AssertiveLock,
    IncompatibleLockField,
    LockConverted,
    LockNotFound,
    ResourceNotFound,
    TooManyHolders,
)

__all__ = ["Judge"]


@dataclass(frozen=True, eq=False)
class Judge:
    """What replies mean for one manager: its reply shape, tag table, home and verdicts."""

    shape: ReplyShape
    rules: TagRules
    _: KW_ONLY
    home: Home
    verdicts: Verdicts
    max_holders: int
    #: The collection's full name (``db.collection``), for the errors that name it.
    namespace: str = ""

    def missing(self, user_filter: Filter, lock: Lock | None, doing: str) -> NoReturn:
        """Raise what a reply of no document means to acquire, release or extend.

        Their pipelines fail the command on a field that is not ours, so any other reply is
        about one that is (read by ``shape.read``). A named lock's document is missing only
        once nobody holds the name, so for ``lock`` that is a loss, never
        :class:`ResourceNotFound`.
        """
        self.absent(user_filter, lock, doing)
        raise self.not_found(user_filter)  # a name nobody holds, where one was needed

    def read_checked(
        self, reply: Mapping[str, Any] | None, user_filter: Filter, doing: str
    ) -> Reply:
        """Read a reply of ``shape.checked``'s projection, checked against the layout.

        For the commands that read a field without failing on a foreign one (``inspect``,
        ``break_lock``). ``None`` means no document matched.
        """
        if reply is not None and self.shape.foreign(reply):
            raise IncompatibleLockField(
                f"field {self.shape.field!r} of document {reply.get(DOCUMENT_ID)!r} holds data "
                f"docmultilock does not own (type {reply.get('t')!r}, version "
                f"{reply.get('v')!r}; docmultilock writes {LAYOUT}); nothing was written",
                filter=user_filter,
            )
        if reply is None:
            self.missing(user_filter, None, doing)
        return self.shape.read(reply, None)

    def absent(self, user_filter: Filter, lock: Lock | None = None, doing: str = "") -> None:
        """Judge a reply of no document; return when it means nobody holds the key.

        A named lock's document exists only while someone holds the name, so its absence
        is an empty lock (and a loss of ``lock``, if one was held on it); a user's document
        that is missing is :class:`ResourceNotFound`.
        """
        if not self.home.on_demand:
            raise self.not_found(user_filter)
        if lock is not None:
            raise self.lost(lock, user_filter, doing)

    def not_found(self, user_filter: Filter) -> ResourceNotFound:
        """The error for a filter no document matches, naming the collection searched.

        The collection is named so that a typo in its name does not pass for a wrong
        ``_id``.
        """
        where = f" in {self.namespace}" if self.namespace else ""
        return ResourceNotFound(
            f"no document{where} matches the filter {dict(user_filter)!r}", filter=user_filter
        )

    def to_lock(self, entry: Mapping[str, Any], document_id: Any) -> Lock:
        """Turn our stored entry into a :class:`Lock`."""
        return Lock(
            id=entry["id"],
            tag=entry["tag"],
            document_id=document_id,
            acquired_at=as_utc(entry["acquired"]),
            expires_at=as_utc(entry["expires"]),
            fence=int(entry["fence"]),
            pending=bool(entry["pending"]),
        )

    def check_limit(
        self,
        tag: str,
        granted: int | None,
        where: tuple[Filter, Any],
        *,
        doing: str,
        kept: str = "",
    ) -> None:
        """Raise :class:`TooManyHolders` when ``granted`` entries of ``tag`` fill its limit.

        The decision's first refusal (``_acquiring._at_limit``); ``where`` is the caller's
        filter and the document's id, ``doing`` what was refused, ``kept`` what still holds.
        """
        limit = self.rules.limit(tag)
        if limit is None or granted is None or granted < limit:
            return
        user_filter, document_id = where
        raise TooManyHolders(
            f"{doing} on {self.home.noun} {document_id!r}: it already has {granted} granted "
            f"{tag!r} locks, and lock_limits allows {limit} at once{kept}",
            filter=user_filter,
            limit=limit,
            tag=tag,
            document_id=document_id,
        )

    def pending(
        self, lock: Lock, user_filter: Filter, waiting: tuple[str, ...], *, what: str, again: str
    ) -> AssertiveLock:
        """The error for ``lock``, recorded pending until the ``waiting`` tags drain.

        ``what`` names the operation that waits, ``again`` says how to keep waiting.
        """
        return AssertiveLock(
            f"{what} is pending on {self.home.noun} {lock.document_id!r} until these tags "
            f"drain: {', '.join(waiting)}; {again}",
            filter=user_filter,
            lock=lock,
            blocking_tags=waiting,
        )

    def spent(self, lock: Lock, entry: Mapping[str, Any], user_filter: Filter, doing: str) -> None:
        """Raise when ``entry``, the granted entry of ``lock``'s id, is not ``lock``'s own.

        Under a greater fence, a conversion (``_converting``) granted it: the value is
        spent, :class:`LockConverted`. Under a smaller one, the value's fence was edited:
        the loss. A pending value is never spent by a grant under its id.
        """
        fence = int(entry["fence"])
        if lock.pending or entry.get("pending") is not False or fence == lock.fence:
            return
        if fence < lock.fence:
            raise self.lost(lock, user_filter, doing)
        tag = entry["tag"]
        raise LockConverted(
            f"cannot {doing}: lock {lock.id} was converted to {tag!r} with fence {fence}, "
            f"and this value of it ({lock.tag!r}, fence {lock.fence}) is spent; use the Lock "
            f"that convert() returned ({tag!r}, fence {fence}). Nothing was written, and the "
            "lock is still held",
            filter=user_filter,
            lock=lock,
            tag=tag,
            fence=fence,
        )

    def lost(self, lock: Lock, user_filter: Filter, doing: str, member: str = "") -> LockNotFound:
        """The error for a lock that is no longer on its document, worded for ``doing``.

        ``doing`` is what found the loss (``_wording.LOSSES``); ``member`` names the lock's
        place in a set, when it is one of a set's.
        """
        return self.verdicts.lost(
            loss_message(lock, self.home.noun, doing, member), filter=user_filter, lock=lock
        )
