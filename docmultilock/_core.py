"""The lock algorithm's commands, without I/O: what to send for each operation.

Invariants every builder here keeps:

* **One command per operation.** Acquire, release and extend are each a single
  ``findAndModify`` whose update pipeline (``_pipeline``) decides and writes atomically on
  the server, and whose projection (``_reply``) returns just enough to tell every outcome
  apart (a missing document is a ``None`` reply; a refusal is a reply without our entry; a
  lock field docmultilock does not own fails the command, ``_layout.foreign_field``). No
  read-then-write.
* **The reply is read in the pipeline's order** (``_plans``), so client and server can
  never disagree about an outcome.

Where the lock state lives is a value (:class:`~docmultilock._command.Home`): the user's own
document, or a lock document of its own per name; which errors a refusal raises is another
(:class:`~docmultilock._command.Verdicts`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from docmultilock._acquiring import acquire_body
from docmultilock._batch_rules import Renewal
from docmultilock._command import (
    DEFAULT_MAX_HOLDERS,
    DOCUMENTS,
    SHARED,
    Command,
    Filter,
    Home,
    ManyCommand,
    Verdicts,
    encoded,
    new_command,
)
from docmultilock._converting import regrant_body, upgrade_body, withdrawal_body
from docmultilock._expr import SERVER_NOW, Expr, contains, literal
from docmultilock._judge import Judge
from docmultilock._layout import update_stages
from docmultilock._lock import Lock
from docmultilock._pipeline import (
    deletable_by,
    extend_body,
    held_by,
    release_body,
    renew_each_body,
)
from docmultilock._plans import (
    AcquirePlan,
    ConvertPlan,
    DeletePlan,
    ExtendPlan,
    ReleasePlan,
    new_acquire_plan,
    new_extend_plan,
    new_release_plan,
)
from docmultilock._reply import ReplyShape
from docmultilock._rules import TagRules

__all__ = ["LockCore"]


class LockCore:
    """The lock algorithm for one lock field, tag table and home: builds each command's plan.

    Pure: it never talks to the server. ``home`` says where the state lives (the user's
    documents, or a lock document per name); ``verdicts`` which errors a refusal and a loss
    raise. ``shape`` is the replies' shape (``_reply``), ``judge`` what a reply means
    (``_plans``).
    """

    def __init__(
        self,
        field: str,
        rules: TagRules,
        *,
        home: Home = DOCUMENTS,
        verdicts: Verdicts = SHARED,
        max_holders: int = DEFAULT_MAX_HOLDERS,
        namespace: str = "",
    ) -> None:
        self.field = field
        self.rules = rules
        self.home = home
        self.max_holders = max_holders
        self.shape = ReplyShape(field, rules)
        self.judge = Judge(
            self.shape,
            rules,
            home=home,
            verdicts=verdicts,
            max_holders=max_holders,
            namespace=namespace,
        )
        # Only a lone exclusive holder can take its on-demand document with it.
        self._delete_on_release = home.on_demand and verdicts.exclusive
        clock = home.on_demand
        # The pipeline bodies depend only on the field and the table: each is encoded to
        # BSON once (pymongo copies the bytes), and only the small ``$let`` bindings (id,
        # lifetime, ...) are encoded per call.
        self._acquire = {
            tag: tuple(
                encoded(
                    acquire_body(
                        field, rules, tag, clock=clock, max_holders=max_holders, fresh=fresh
                    )
                )
                for fresh in (True, False)
            )
            for tag in rules.tags
        }
        self._fair: dict[str, Any] = {}  # fair bodies, encoded on first use
        # Tags whose fresh acquire meets only entries of their own tag (``TagRules.lone``):
        # its reply need not list the tags in the way.
        self._lone = frozenset(tag for tag in rules.tags if rules.lone(tag))
        self._release = encoded(release_body(field, clock=clock))
        self._regrant = encoded(regrant_body(field, clock=clock))
        self._withdraw_upgrade = encoded(withdrawal_body(field, clock=clock))
        self._upgrade: dict[str, Any] = {}  # upgrade bodies, encoded on first use
        self._extend = encoded(extend_body(field, clock=clock))
        self._renew_each = encoded(renew_each_body(field, clock=clock))

    def acquire(
        self,
        target: Filter,
        *,
        user_filter: Filter,
        tag: str,
        lock_id: str,
        lifetime_ms: int | None,
        continuing: Lock | None = None,
        fair: bool = False,
    ) -> AcquirePlan:
        """Plan an acquisition of ``tag`` under a new ``lock_id``, or go on with ``continuing``.

        ``lifetime_ms`` of ``None`` means the tag's default for a new lock, and the lifetime
        it was taken with for a continued one. With ``fair``, a refusal records a pending
        entry that holds a place in line (``_acquiring.acquire_body``).
        """
        fresh, continued = self._acquire[tag]
        bindings: dict[str, Any]
        if continuing is None:
            ttl = self.rules.lifetime_ms[tag] if lifetime_ms is None else lifetime_ms
            bindings = {"id": literal(lock_id), "tag": literal(tag), "ttl": ttl}
            body = fresh
        else:
            lock_id = continuing.id
            bindings = {
                "id": literal(lock_id),
                "tag": literal(tag),
                "ttl": lifetime_ms,
                "dttl": self.rules.lifetime_ms[tag],
                "create": False,
            }
            body = continued
        if fair:
            # One fair body serves both: a newcomer (``$$create``) takes a place in line.
            default = self.rules.lifetime_ms[tag]
            bindings = {**bindings, "dttl": default, "create": continuing is None}
            body = self._lazy_body(self._fair, tag, acquire_body, fresh=False, fair=True)
        # Only a fresh lone tag's reply goes without the tags in the way: all are its own.
        listed = continuing is not None or fair or tag not in self._lone
        update = update_stages(self.field, body, bindings)
        projection = self.shape.of_entry(lock_id, with_tags=listed, counted=tag)
        upsert = self.home.on_demand and continuing is None  # a pending lock's document is there
        # Fields in order: filter, update, projection, return_after, upsert, delete, user_filter.
        command = new_command((dict(target), update, projection, True, upsert, False, user_filter))
        plan = (self.judge, command, user_filter, tag, lock_id, continuing, fair, listed)
        return new_acquire_plan(plan)

    def _lazy_body(
        self, cache: dict[str, Any], tag: str, build: Callable[..., Expr], **options: bool
    ) -> Any:
        """``build``'s pipeline body for ``tag``, built and encoded on first use into ``cache``.

        For the bodies not every manager needs (fair acquisitions, upgrades); ``options``
        go to ``build`` after the field, table, tag, clock and holder limit.
        """
        body = cache.get(tag)
        if body is None:
            body = cache[tag] = encoded(
                build(
                    self.field,
                    self.rules,
                    tag,
                    clock=self.home.on_demand,
                    max_holders=self.max_holders,
                    **options,
                )
            )
        return body

    def release_by_delete(self, target: Filter, *, lock: Lock) -> DeletePlan | None:
        """Plan deleting an exclusive named lock's document (``None`` for other managers).

        The document is deleted only while its field is ours (``OURS``: a foreign one is never
        deleted, and the fallback below reports it), ``lock`` is its one live entry and the
        server's clock has passed its fence (``_pipeline``'s clock fences). When that does
        not match (the lock is gone, or it is released within the millisecond of a grant),
        the release flow falls back to the ordinary :meth:`release`, which empties the
        document for the TTL index.
        """
        if not self._delete_on_release:
            return None
        deletable = deletable_by(
            self.field, self.shape.ours, self.shape.holders, lock.id, _given(lock)
        )
        command = Command(
            filter={**target, "$expr": deletable},
            update=[],
            projection={"_id": 1},
            return_after=False,
            delete=True,
        )
        return DeletePlan(command)

    def release(self, target: Filter, *, user_filter: Filter, lock: Lock) -> ReleasePlan:
        """Plan the removal of ``lock``'s entry (pruning expired ones on the way).

        A spent value (a lock converted since, ``_pipeline.spent``) removes nothing.
        """
        command = self.removal(target, user_filter=user_filter, lock_id=lock.id, given=_given(lock))
        return new_release_plan((self.judge, command, user_filter, lock))

    def withdrawal(self, target: Filter, *, user_filter: Filter, lock_id: str) -> Command:
        """The removal of entry ``lock_id`` from the document of ``target`` that holds it.

        For an acquisition interrupted before its reply: matching only a document that
        holds the entry, it never writes where the acquisition did not (another document
        the filter matches, one it never reached); no reply means nothing was there.
        """
        holds = {f"{self.field}.holders.id": lock_id}
        return self.removal(
            {"$and": [dict(target), holds]}, user_filter=user_filter, lock_id=lock_id
        )

    def removal(
        self, target: Filter, *, user_filter: Filter, lock_id: str, given: int | None = None
    ) -> Command:
        """The command that removes entry ``lock_id``, if there (pruning expired ones).

        ``given``: the fence of the value released (``None``: any entry of the id goes).
        """
        bindings = {"id": literal(lock_id), "given": given}
        update = update_stages(self.field, self._release, bindings)
        projection = self.shape.of_entry(lock_id, with_tags=False)
        # Not return_after: the entry's presence *before* the write tells the outcome.
        return new_command((dict(target), update, projection, False, False, False, user_filter))

    def extend(
        self, target: Filter, *, user_filter: Filter, lock: Lock, lifetime_ms: int | None
    ) -> ExtendPlan:
        """Plan pushing ``lock``'s expiry to server-now plus ``lifetime_ms``.

        ``None`` renews by the lifetime the lock was taken (or last extended) with.
        """
        bindings = {
            "id": literal(lock.id),
            "tag": literal(lock.tag),
            "ttl": lifetime_ms,
            "dttl": self.rules.lifetime_ms[lock.tag],
            "given": _given(lock),
        }
        update = update_stages(self.field, self._extend, bindings)
        projection = self.shape.of_entry(lock.id, with_tags=False)
        command = new_command((dict(target), update, projection, True, False, False, user_filter))
        return new_extend_plan((self.judge, command, user_filter, lock))

    def convert(
        self,
        target: Filter,
        *,
        user_filter: Filter,
        lock: Lock,
        tag: str,
        lifetime_ms: int | None,
        call: str,
    ) -> ConvertPlan:
        """Plan converting ``lock`` to ``tag``, or continuing its pending upgrade (``_converting``).

        A downgrade renews by the lifetime the lock was taken with (or ``lifetime_ms``); an
        upgrade's pending entry and grant take ``lifetime_ms``, else ``tag``'s default.
        ``call`` is this call's own id, recorded in the entry it grants: its reply, or a
        retry's, tells the grant it made from a conversion made before (a spent ``lock``).
        """
        default = self.rules.lifetime_ms[tag]
        common = {"id": literal(lock.id), "given": _given(lock), "call": literal(call)}
        body: Any
        if not lock.pending and self.rules.is_downgrade(lock.tag, tag):
            body = self._regrant
            bindings: dict[str, Any] = {"tag": literal(lock.tag), "to": literal(tag)}
            bindings.update(ttl=lifetime_ms, dttl=default)
        else:
            body = self._lazy_body(self._upgrade, tag, upgrade_body)
            ttl = default if lifetime_ms is None else lifetime_ms
            held = None if lock.pending else literal(lock.tag)
            bindings = {"tag": literal(tag), "from": held, "ttl": ttl, "dttl": default}
            bindings["create"] = True
        command = Command(
            filter=dict(target),
            update=update_stages(self.field, body, {**bindings, **common}),
            projection=self.shape.of_conversion(lock.id, tag),
            return_after=True,
            user_filter=user_filter,
        )
        return ConvertPlan(self.judge, command, user_filter, tag, lock, call)

    def upgrade_withdrawal(self, target: Filter, *, user_filter: Filter, pending: Lock) -> Command:
        """The removal of the pending upgrade ``pending`` alone: the granted entry stays."""
        bindings = {"id": literal(pending.id), "tag": literal(pending.tag)}
        return Command(
            filter=dict(target),
            update=update_stages(self.field, self._withdraw_upgrade, bindings),
            projection=self.shape.of_entry(pending.id, with_tags=False),
            return_after=False,
            user_filter=user_filter,
        )

    def renew_each(self, renewals: list[Renewal]) -> ManyCommand:
        """The keep-alive's batch: renew each lock of ``renewals`` on its own document.

        One lock per document (``_batch_rules``); each by the lifetime stored with it.
        """
        docs = [renewal.document_id for renewal in renewals]
        want = [
            {"id": renewal.lock_id, "tag": renewal.tag, "dttl": renewal.default_ms}
            for renewal in renewals
        ]
        bindings = {"docs": literal(docs), "want": literal(want), "ttl": None}
        return ManyCommand(
            filter={"_id": {"$in": docs}},
            update=update_stages(self.field, self._renew_each, bindings),
        )

    def batch_read(self, renewals: list[Renewal]) -> list[dict[str, Any]]:
        """The read after a batch that renewed fewer documents than it named.

        Per document of the batch: its ``_id`` (``i``), whether its field is ours, and the
        ids of its live, granted entries, by the server's clock (an aggregation: ``$$NOW``
        is not defined in a ``find`` projection on the embedded server, docs/server.md).
        """
        batch_ids = literal([renewal.lock_id for renewal in renewals])
        live = {
            "$filter": {
                "input": self.shape.holders,
                "cond": {
                    "$and": [
                        contains(batch_ids, "$$this.id"),
                        {"$gt": ["$$this.expires", SERVER_NOW]},
                        {"$eq": ["$$this.pending", False]},
                    ]
                },
            }
        }
        ids = {"$map": {"input": live, "in": "$$this.id"}}
        docs = [renewal.document_id for renewal in renewals]
        project = {"_id": 0, "i": "$_id", "ours": self.shape.ours, "live": ids}
        return [{"$match": {"_id": {"$in": docs}}}, {"$project": project}]

    def guard(self, target: Filter, lock: Lock) -> dict[str, Any]:
        """A filter matching the document only while ``lock`` is granted and unexpired.

        The stored entry must carry ``lock``'s tag and fence: a reader's lock edited to say
        ``write`` guards nothing, nor does a value spent by a conversion.
        """
        held = held_by(self.shape.holders, lock.id, lock.tag, lock.fence)
        if "$expr" in target:
            return {"$and": [dict(target), {"$expr": held}]}
        return {**target, "$expr": held}


def _given(lock: Lock) -> int | None:
    """The fence a command on ``lock`` expects of its granted entry (``None``: a pending value).

    A conversion grows the fence under the same id: the value it was given is then spent
    (``_pipeline.spent``). A pending value is never spent by a grant under its id: it
    continues, releases or withdraws whatever entry of the id there is.
    """
    return None if lock.pending else lock.fence
