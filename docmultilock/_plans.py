"""Each lock command's plan: its command, and the reading of its reply into a Lock or an error.

A plan is what ``_core`` returns for one operation: the :class:`~docmultilock._command.Command`
a driver sends, and ``read``, which turns the reply (``None``, projected, or a stored image,
``_reply``) into the outcome. The reading mirrors the pipeline's order of decisions
(``_pipeline``), so client and server never disagree about an outcome. :class:`Judge` holds
what every reading needs: the reply's shape, the tag table, and the errors of this
manager's home and verdicts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass
from typing import Any, NamedTuple, NoReturn

from docmultilock._acquiring import capped
from docmultilock._command import Command, Filter, Home, Verdicts
from docmultilock._layout import LAYOUT
from docmultilock._lock import Lock, as_utc
from docmultilock._reply import DOCUMENT_ID, Reply, ReplyShape
from docmultilock._rules import TagRules
from docmultilock.errors import (
    AssertiveLock,
    DbError,
    IncompatibleLockField,
    LockNotFound,
    ResourceNotFound,
    TooManyHolders,
)

__all__ = ["AcquirePlan", "ConvertPlan", "DeletePlan", "ExtendPlan", "Judge", "ReleasePlan"]


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

    def lost(self, lock: Lock, user_filter: Filter, doing: str) -> LockNotFound:
        """The error for a lock that is no longer on its document."""
        return self.verdicts.lost(
            f"cannot {doing}: lock {lock.id} ({lock.tag!r}) is no longer held on {self.home.noun} "
            f"{lock.document_id!r}: it was already released (a second release of a lock "
            "raises this), or it expired, or an operator broke it, and another holder may "
            "have it now",
            filter=user_filter,
            lock=lock,
        )


class AcquirePlan(NamedTuple):
    """An acquisition: its command, and how to read the reply (mirrors the pipeline's order)."""

    judge: Judge
    command: Command
    user_filter: Filter
    tag: str
    #: The entry's id: a new one, or the continued lock's.
    lock_id: str
    continuing: Lock | None
    fair: bool = False
    #: Whether the reply lists the stored tags; when not, every entry is of ``tag``.
    listed: bool = True

    def read(self, reply: Mapping[str, Any] | None) -> Lock:
        """Return the granted lock, or raise the error that describes the outcome."""
        judge = self.judge
        if reply is None and judge.home.on_demand and self.continuing is None:
            # Only after an upsert that lost a race (see ``_driver.upsert_reply``) and a
            # document deleted again before it could be read: a grant or a pending entry of
            # ours would have kept it, so the holder we met released meanwhile.
            raise judge.verdicts.refused(
                f"cannot lock {self.tag!r} on name {self.user_filter.get('_id')!r}: another "
                "holder had it (and has released it since; try again)",
                filter=self.user_filter,
                blocking_tags=(),
            )
        # A retried acquisition answered with the post-image (``_reply``) was applied: the
        # image holds our entry if it was granted or recorded pending, and the tags in the
        # way otherwise, exactly as the projection would have.
        if reply is None:
            judge.missing(self.user_filter, self.continuing, "continue")
        state = judge.shape.read(reply, self.lock_id, self.tag)
        tags = state.tags if self.listed else frozenset((self.tag,))
        if state.mine is not None and state.mine.get("tag") != self.tag:
            # Only a continued lock can meet its id under another tag: one a client edited.
            raise judge.lost(self.continuing or _unreachable(), self.user_filter, "continue")
        if state.mine is not None:
            lock = judge.to_lock(state.mine, state.document_id)
            if not lock.pending:
                return lock
            drains = judge.rules.assertive[self.tag]
            if self.fair:  # in line: behind every tag in the way, cooperative ones too
                drains = drains | judge.rules.cooperative[self.tag]
            waiting = tuple(sorted(tags & drains))
            raise judge.pending(
                lock,
                self.user_filter,
                waiting,
                what=f"lock {lock.id} ({self.tag!r})",
                again="call acquire(filter, lock=...) again to keep waiting",
            )
        judge.check_limit(
            self.tag,
            state.granted,
            (self.user_filter, state.document_id),
            doing=f"cannot lock {self.tag!r}",
        )
        blocking = tuple(sorted(tags & judge.rules.cooperative[self.tag]))
        if blocking:
            raise judge.verdicts.refused(
                f"cannot lock {self.tag!r} on {judge.home.noun} {state.document_id!r}: held or "
                f"pending by {', '.join(blocking)}",
                filter=self.user_filter,
                blocking_tags=blocking,
                document_id=state.document_id,
            )
        if self.continuing is not None:
            raise judge.lost(self.continuing, self.user_filter, "continue")
        if capped(judge.rules, self.tag):
            raise TooManyHolders(
                f"cannot lock {self.tag!r} on {judge.home.noun} {state.document_id!r}: it already "
                f"has {judge.max_holders} holders and pending locks, the most it takes",
                filter=self.user_filter,
                limit=judge.max_holders,
                document_id=state.document_id,
            )
        raise DbError(  # pragma: no cover - the pipeline always records a fresh acquisition
            f"the server answered an acquisition on {judge.home.noun} {state.document_id!r} "
            "without recording it or naming a conflict",
            filter=self.user_filter,
        )


class _HeldPlan(NamedTuple):
    """A command on a held lock (its release or extension), and our entry in the reply."""

    judge: Judge
    command: Command
    user_filter: Filter
    lock: Lock

    def mine(self, reply: Mapping[str, Any] | None, doing: str) -> tuple[Mapping[str, Any], Any]:
        """Our entry in ``reply`` and the document's id; raise the loss when it is not there.

        A retried command answered with the stored image (``_reply``) was applied: our
        entry in it is what the applied attempt found or left.
        """
        if reply is None:
            self.judge.missing(self.user_filter, self.lock, doing)
        state = self.judge.shape.read(reply, self.lock.id)
        if state.mine is None:
            raise self.judge.lost(self.lock, self.user_filter, doing)
        return state.mine, state.document_id


class ReleasePlan(_HeldPlan):
    """A release: the reply is the state *before* the write."""

    def read(self, reply: Mapping[str, Any] | None) -> None:
        """Return quietly if our entry was there (live or expired); raise the loss otherwise."""
        # The pre-image holds our entry when the lock was ours as it was removed.
        self.mine(reply, "release")


class ExtendPlan(_HeldPlan):
    """An extension: the reply is the state after the write."""

    def read(self, reply: Mapping[str, Any] | None) -> Lock:
        """Return the lock with its new expiry, or raise the loss when it is not held."""
        # The post-image shows our entry with the expiry the extension gave it.
        mine, document_id = self.mine(reply, "extend")
        if mine.get("pending") or mine.get("tag") != self.lock.tag:
            raise self.judge.lost(self.lock, self.user_filter, "extend")
        return self.judge.to_lock(mine, document_id)


class ConvertPlan(NamedTuple):
    """A conversion of ``continuing`` to ``tag`` (``_converting``): the reply is the state after.

    ``continuing`` is the lock given: a granted one converted, or a pending upgrade
    continued. The reading mirrors the pipeline: the new tag granted; else our granted
    entry gone (a loss); else our pending entry of ``tag`` (waiting); else refused.
    """

    judge: Judge
    command: Command
    user_filter: Filter
    tag: str
    continuing: Lock

    def read(self, reply: Mapping[str, Any] | None) -> Lock:
        """Return the converted lock, or raise the error that describes the outcome."""
        judge, given = self.judge, self.continuing
        # A retried conversion answered with the post-image (``_reply``) was applied: the
        # image holds our entries as the projection would have.
        if reply is None:
            judge.missing(self.user_filter, given, "convert")
        found = judge.shape.read_conversion(reply, given.id, self.tag)
        new = next((e for e in found.mine if e.get("tag") == self.tag), None)
        if new is not None and new.get("pending") is False:
            # Converted by this call (or by its applied first attempt): a grant, so a fence
            # above the given lock's. An entry of the new tag that was there already (a
            # lock whose tag the client edited) was not converted by anything.
            lock = judge.to_lock(new, found.document_id)
            if lock.fence > given.fence:
                return lock
            raise judge.lost(given, self.user_filter, "convert")
        held = [e for e in found.mine if e.get("pending") is False]
        if not given.pending:
            held = [e for e in held if e.get("tag") == given.tag]
        if not held:
            raise judge.lost(given, self.user_filter, "convert")
        if new is not None:
            lock = judge.to_lock(new, found.document_id)
            waiting = tuple(sorted(found.tags & judge.rules.assertive[self.tag]))
            raise judge.pending(
                lock,
                self.user_filter,
                waiting,
                what=f"upgrade of lock {lock.id} to {self.tag!r}",
                again=f"the {held[0]['tag']!r} lock is still held; call convert(key, err.lock, "
                f"tag={self.tag!r}) again to keep waiting",
            )
        judge.check_limit(
            self.tag,
            found.granted,
            (self.user_filter, found.document_id),
            doing=f"cannot convert lock {given.id} to {self.tag!r}",
            kept=f"; the {held[0]['tag']!r} lock is still held",
        )
        blocking = tuple(sorted(found.tags & judge.rules.cooperative[self.tag]))
        if blocking or not capped(judge.rules, self.tag):
            raise judge.verdicts.refused(
                f"cannot convert lock {given.id} to {self.tag!r} on {judge.home.noun} "
                f"{found.document_id!r}: held or pending by {', '.join(blocking)}; the "
                f"{held[0]['tag']!r} lock is still held",
                filter=self.user_filter,
                blocking_tags=blocking,
                document_id=found.document_id,
            )
        raise TooManyHolders(
            f"cannot convert lock {given.id} to {self.tag!r} on {judge.home.noun} "
            f"{found.document_id!r}: it already has {judge.max_holders} holders and pending "
            "locks, the most it takes",
            filter=self.user_filter,
            limit=judge.max_holders,
        )


def _unreachable() -> Lock:  # pragma: no cover - a fresh lock id is never stored already
    raise DbError("the server answered a fresh acquisition with an entry of another tag")


class DeletePlan(NamedTuple):
    """Deleting a named lock's document as its release: the reply is the deleted document."""

    command: Command

    def read(self, reply: Mapping[str, Any] | None) -> bool:
        """True when the document was deleted (released); false to fall back to an update.

        A retried delete is answered with the deleted document's whole pre-image
        (``_reply``): any document at all means it was deleted, and the delete's condition
        required our entry.
        """
        return reply is not None
