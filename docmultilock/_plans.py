"""Each lock command's plan: its command, and the reading of its reply into a Lock or an error.

A plan is what ``_core`` returns for one operation: the :class:`~docmultilock._command.Command`
a driver sends, and ``read``, which turns the reply (``None``, projected, or a stored image,
``_reply``) into the outcome. The reading mirrors the pipeline's order of decisions
(``_pipeline``), so client and server never disagree about an outcome. ``_judge.Judge``
holds what every reading needs: the reply's shape, the tag table, and the errors of this
manager's home and verdicts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, NamedTuple, cast

from docmultilock._command import Command, Filter
from docmultilock._judge import Judge
from docmultilock._lock import Lock
from docmultilock.errors import DbError, TooManyHolders

__all__ = [
    "AcquirePlan",
    "ConvertPlan",
    "DeletePlan",
    "ExtendPlan",
    "ReleasePlan",
    "new_acquire_plan",
    "new_extend_plan",
    "new_release_plan",
]


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
            # In a fair line: behind every tag in the way, cooperative ones too.
            waiting = tuple(sorted(tags & judge.rules.drains(self.tag, fair=self.fair)))
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
        if judge.rules.capped(self.tag):
            raise TooManyHolders(
                f"cannot lock {self.tag!r} on {judge.home.noun} {state.document_id!r}: it already "
                f"has {judge.max_holders} holders and pending locks, the most max_holders allows",
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
        # A spent value's command left the field as it was (``_pipeline.spent``).
        self.judge.spent(self.lock, state.mine, self.user_filter, doing)
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
    continued. The reading mirrors the pipeline: the new tag granted by this call; else our
    granted entry gone (a loss) or under another fence (a spent value); else our pending
    entry of ``tag`` (waiting); else refused.
    """

    judge: Judge
    command: Command
    user_filter: Filter
    tag: str
    continuing: Lock
    #: This call's id, which the entry it grants records (``_converting``).
    call: str

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
            # Converted by this call (or by its applied first attempt: the entry records the
            # call): a grant, so a fence above the given lock's. Another call's grant spent
            # the value given; an entry of the new tag that was there already (a lock whose
            # tag the client edited) was not converted by anything.
            lock = judge.to_lock(new, found.document_id)
            if lock.fence > given.fence and (given.pending or new.get("call") == self.call):
                return lock
            judge.spent(given, new, self.user_filter, "convert")
            raise judge.lost(given, self.user_filter, "convert")
        held = [e for e in found.mine if e.get("pending") is False]
        if not given.pending:
            if held:
                judge.spent(given, held[0], self.user_filter, "convert")
            held = [e for e in held if e.get("tag") == given.tag]
        if not held:
            raise judge.lost(given, self.user_filter, "convert")
        if new is not None:
            lock = judge.to_lock(new, found.document_id)
            waiting = tuple(sorted(found.tags & judge.rules.drains(self.tag, fair=False)))
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
        if blocking or not judge.rules.capped(self.tag):
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
            "locks, the most max_holders allows",
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


# Plans made by ``tuple.__new__`` itself, every field given in order, as
# ``_command.new_command`` makes commands: one per operation, on the hot path.
#: ``new_acquire_plan((judge, command, user_filter, tag, lock_id, continuing, fair, listed))``
new_acquire_plan = cast(
    Callable[[tuple[Any, ...]], AcquirePlan], partial(tuple.__new__, AcquirePlan)
)
#: ``new_release_plan((judge, command, user_filter, lock))``
new_release_plan = cast(
    Callable[[tuple[Any, ...]], ReleasePlan], partial(tuple.__new__, ReleasePlan)
)
#: ``new_extend_plan((judge, command, user_filter, lock))``
new_extend_plan = cast(Callable[[tuple[Any, ...]], ExtendPlan], partial(tuple.__new__, ExtendPlan))
