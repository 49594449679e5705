"""The lock algorithm's commands, without I/O: what to send for each operation, and what came back.

Invariants every builder here keeps:

* **One command per operation.** Acquire, release and extend are each a single
  ``findAndModify`` whose update pipeline (``_pipeline``) decides and writes atomically on
  the server, and whose projection returns just enough to tell every outcome apart (a
  missing document is a ``None`` reply; a refusal is a reply without our entry; a lock
  field docmultilock does not own fails the command, ``_pipeline.foreign_field``). No
  read-then-write.
* **The reply is read in the pipeline's order**, so client and server can never disagree
  about an outcome.

Where the lock state lives is a value (:class:`Home`): the user's own document, or a lock
document of its own per name; which errors a refusal raises is another (:class:`Verdicts`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from bson import encode
from bson.raw_bson import RawBSONDocument

from docmultilock._args import check_filter, check_name
from docmultilock._expr import SERVER_NOW, Expr, contains, each, literal
from docmultilock._images import DOCUMENT_ID, HEAD, entries, is_image
from docmultilock._lock import Lock, as_utc
from docmultilock._pipeline import (
    FENCES_PER_MS,
    LAYOUT,
    acquire_body,
    capped,
    extend_body,
    lone,
    ours,
    release_body,
    update_stages,
)
from docmultilock._rules import TagRules
from docmultilock.errors import (
    AssertiveLock,
    CooperativeLock,
    DbError,
    IncompatibleLockField,
    LockAlreadyTaken,
    LockNotFound,
    LockWasReacquired,
    ResourceNotFound,
    TooManyHolders,
)

__all__ = [
    "DEFAULT_MAX_HOLDERS",
    "DOCUMENTS",
    "EXCLUSIVE",
    "NAMES",
    "SHARED",
    "SIMPLE_COLLATION",
    "AcquirePlan",
    "Command",
    "Home",
    "LockCore",
    "Verdicts",
]

#: Live entries one lock field takes at most, unless a manager says otherwise: about
#: 150 KB of entries, far from MongoDB's 16 MiB document limit.
DEFAULT_MAX_HOLDERS = 1000

Filter = Mapping[str, Any]

#: The collation every command on a lock field is sent with: binary comparison of strings.
#: A collection's default collation applies to any operation that names none, its query
#: and its expressions alike (MongoDB manual, "Collation": "If no collation is specified
#: for the operation, the operation uses the collection's default collation"), so under a
#: case-insensitive one the tags ``read`` and ``READ``, or the ids ``"a"`` and ``"A"``,
#: would compare equal. The same collation makes a filter select byte for byte.
SIMPLE_COLLATION: dict[str, str] = {"locale": "simple"}


class Command(NamedTuple):
    """One ``findAndModify``: a driver sends it and hands the reply to the plan's ``read``.

    This and the plans below are built for every command: named tuples, immutable and about
    three times cheaper to make than frozen dataclasses (which set each field through
    ``object.__setattr__``).
    """

    filter: dict[str, Any]
    update: list[dict[str, Any]]
    projection: dict[str, Any]
    return_after: bool
    #: Create the document when missing (named locks: the lock document exists on demand).
    upsert: bool = False
    #: Delete the matched document instead of updating it (``update`` is then empty).
    delete: bool = False
    #: The caller's filter, when ``filter`` adds to it (the lock's ``_id``).
    user_filter: Filter | None = None

    @property
    def named(self) -> Filter:
        """The filter an error names: the caller's."""
        return self.filter if self.user_filter is None else self.user_filter


@dataclass(frozen=True, slots=True)
class Home:
    """Where a lock's state lives, and everything that follows from that.

    :ivar noun: what a key names, in messages (``"document"``, ``"name"``).
    :ivar key_filter: checks a caller's key and returns the filter of the state's document.
    :ivar on_demand: the state's document is created by the first acquire (an upsert) and
        deleted when nobody holds it, so a missing document means a lost lock, never
        :class:`~docmultilock.ResourceNotFound`; fences then come from the server's clock so
        that they survive the deletion (``_pipeline.next_fence``).
    """

    noun: str
    key_filter: Callable[[object], dict[str, Any]]
    on_demand: bool


#: The state lives in the user's own document, found by the caller's filter.
DOCUMENTS = Home("document", check_filter, on_demand=False)
#: The state lives in a lock document of its own, ``{_id: name}``.
NAMES = Home("name", lambda key: {"_id": check_name(key)}, on_demand=True)


@dataclass(frozen=True, slots=True)
class Verdicts:
    """Which errors a refusal and a loss raise, and whether the table is exclusive."""

    refused: type[CooperativeLock]
    lost: type[LockNotFound]
    exclusive: bool


#: WriteLock's (and default NamedLocks') errors: one holder at a time.
EXCLUSIVE = Verdicts(LockAlreadyTaken, LockWasReacquired, exclusive=True)
#: MultiLock's errors, for a table of tags.
SHARED = Verdicts(CooperativeLock, LockNotFound, exclusive=False)


def encoded(expression: Mapping[str, Any]) -> RawBSONDocument:
    """``expression`` encoded to BSON once; pymongo copies its bytes into every command."""
    return RawBSONDocument(encode(expression))


class _Reply(NamedTuple):
    """What the projection returned: the document, our entry, the stored tags it listed."""

    document_id: Any
    mine: Mapping[str, Any] | None
    tags: frozenset[str]


class LockCore:
    """The lock algorithm for one lock field, tag table and home; builds commands, reads replies.

    Pure: it never talks to the server. ``home`` says where the state lives (the user's
    documents, or a lock document per name); ``verdicts`` which errors a refusal and a loss
    raise.
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
        #: The collection's full name (``db.collection``), for the errors that name it.
        self.namespace = namespace
        self.rules = rules
        self.home = home
        self.verdicts = verdicts
        self.max_holders = max_holders
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
        # Tags whose fresh acquire meets only entries of their own tag (``_pipeline.lone``):
        # its reply need not list the tags in the way.
        self._lone = frozenset(tag for tag in rules.tags if lone(rules, tag))
        self._release = encoded(release_body(field, clock=clock))
        self._extend = encoded(extend_body(field, clock=clock))
        # A foreign field may hold anything; only ever iterate over an actual array.
        holders = {"$cond": [{"$isArray": f"${field}.holders"}, f"${field}.holders", []]}
        self._holders = holders
        self._ours = encoded(ours(field))
        self._head = {
            **HEAD,
            "ours": self._ours,
            "t": {"$type": f"${field}"},
            "v": f"${field}.v",
        }
        # Acquire, release and extend reply only about a field that is ours (their pipeline
        # fails the command otherwise), whose holders are an array or missing (then the
        # server answers null): their projections read the stored holders as they are.
        stored = self._stored = f"${field}.holders"
        tags = {"$setUnion": [each(stored, "tag")]}
        self._acquire_tags = encoded(tags)
        # A table with a tag that shares (MultiLock's ``read``) may hold many entries: its
        # replies find ours by its index among the ids (``$indexOfArray``, a native loop on
        # the embedded server, where ``$filter`` evaluates a comparison per entry), and list
        # the tags only when ours is not granted, the only time the reader needs them (the
        # set is sorted on the server). ``$$i`` is our index, bound per call.
        self._shared = any(tag not in rules.cooperative[tag] for tag in rules.tags)
        self._ids = encoded(each(stored, "id"))
        entry = {"$cond": [{"$gte": ["$$i", 0]}, {"$arrayElemAt": [stored, "$$i"]}, None]}
        untagged = {"e": "$$e"}
        tagged = {**untagged, "t": {"$cond": [{"$eq": ["$$e.pending", False]}, None, tags]}}
        self._found = {
            with_tags: encoded({"$let": {"vars": {"e": entry}, "in": found}})
            for with_tags, found in ((False, untagged), (True, tagged))
        }

    # -- building -------------------------------------------------------------------

    @staticmethod
    def _is_mine(lock_id: str) -> Expr:
        return {"$eq": ["$$this.id", literal(lock_id)]}

    @property
    def holders(self) -> Expr:
        """The stored entries as an array (empty for a missing or foreign field)."""
        return self._holders

    def projection(self, **extra: Any) -> dict[str, Any]:
        """The projection :meth:`read_checked` checks, plus the ``extra`` fields one reads.

        :meth:`read_checked` reads the document's id, whether the field is ours, and what it
        holds otherwise: the projection of the commands that read a field without failing
        on a foreign one (``inspect``, ``break_lock``). Like every projection here it leaves
        ``_id`` out, so that a stored image is told from it (``_images``).
        """
        return {**self._head, **extra}

    def _projection(self, lock_id: str, *, with_tags: bool) -> dict[str, Any]:
        """What acquire, release and extend read: ``_id``, our entry, and (acquire) the tags."""
        if self._shared:
            index = {"$indexOfArray": [self._ids, literal(lock_id)]}
            return {**HEAD, "r": {"$let": {"vars": {"i": index}, "in": self._found[with_tags]}}}
        mine = {"$filter": {"input": self._stored, "cond": self._is_mine(lock_id)}}
        if with_tags:
            return {**HEAD, "mine": mine, "tags": self._acquire_tags}
        return {**HEAD, "mine": mine}

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
        entry that holds a place in line (``_pipeline.acquire_body``).
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
            body = self._fair_body(tag)
        # Only a fresh lone tag's reply goes without the tags in the way: all are its own.
        listed = continuing is not None or fair or tag not in self._lone
        command = Command(
            filter=dict(target),
            update=update_stages(self.field, body, bindings),
            projection=self._projection(lock_id, with_tags=listed),
            return_after=True,
            # A pending lock is continued only on its existing document.
            upsert=self.home.on_demand and continuing is None,
            user_filter=user_filter,
        )
        return AcquirePlan(self, command, user_filter, tag, lock_id, continuing, fair, listed)

    def _fair_body(self, tag: str) -> Any:
        """The fair acquire pipeline body of ``tag``, built and encoded on first use."""
        body = self._fair.get(tag)
        if body is None:
            body = self._fair[tag] = encoded(
                acquire_body(
                    self.field,
                    self.rules,
                    tag,
                    clock=self.home.on_demand,
                    max_holders=self.max_holders,
                    fresh=False,
                    fair=True,
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
        ours_or_expired = {
            "$or": [self._is_mine(lock.id), {"$lte": ["$$this.expires", SERVER_NOW]}]
        }
        deletable = {
            "$and": [
                self._ours,
                contains(each(self._holders, "id"), literal(lock.id)),
                {"$allElementsTrue": [{"$map": {"input": self._holders, "in": ours_or_expired}}]},
                {
                    "$lt": [
                        f"${self.field}.fence",
                        {"$multiply": [{"$toLong": SERVER_NOW}, FENCES_PER_MS]},
                    ]
                },
            ]
        }
        command = Command(
            filter={**target, "$expr": deletable},
            update=[],
            projection={"_id": 1},
            return_after=False,
            delete=True,
        )
        return DeletePlan(command)

    def release(self, target: Filter, *, user_filter: Filter, lock: Lock) -> ReleasePlan:
        """Plan the removal of ``lock``'s entry (pruning expired ones on the way)."""
        command = self.removal(target, user_filter=user_filter, lock_id=lock.id)
        return ReleasePlan(self, command, user_filter, lock)

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

    def removal(self, target: Filter, *, user_filter: Filter, lock_id: str) -> Command:
        """The command that removes entry ``lock_id``, if there (pruning expired ones)."""
        return Command(
            filter=dict(target),
            update=update_stages(self.field, self._release, {"id": literal(lock_id)}),
            projection=self._projection(lock_id, with_tags=False),
            return_after=False,  # the entry's presence *before* the write tells the outcome
            user_filter=user_filter,
        )

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
        }
        command = Command(
            filter=dict(target),
            update=update_stages(self.field, self._extend, bindings),
            projection=self._projection(lock.id, with_tags=False),
            return_after=True,
            user_filter=user_filter,
        )
        return ExtendPlan(self, command, user_filter, lock)

    def guard(self, target: Filter, lock: Lock) -> dict[str, Any]:
        """A filter matching the document only while ``lock`` is granted and unexpired.

        The stored entry must carry ``lock``'s tag: a reader's lock edited to say ``write``
        guards nothing.
        """
        held = {
            "$anyElementTrue": [
                {
                    "$map": {
                        "input": self._holders,
                        "in": {
                            "$and": [
                                self._is_mine(lock.id),
                                {"$eq": ["$$this.tag", literal(lock.tag)]},
                                {"$eq": ["$$this.pending", False]},
                                {"$gt": ["$$this.expires", SERVER_NOW]},
                            ]
                        },
                    }
                }
            ]
        }
        if "$expr" in target:
            return {"$and": [dict(target), {"$expr": held}]}
        return {**target, "$expr": held}

    # -- reading --------------------------------------------------------------------

    def read_reply(
        self,
        reply: Mapping[str, Any] | None,
        user_filter: Filter,
        lock: Lock | None,
        doing: str,
        lock_id: str | None = None,
    ) -> _Reply:
        """Read a reply to acquire, release or extend of entry ``lock_id``; ``None``: no match.

        Their pipelines fail the command on a field that is not ours, so a reply is always
        about one that is. A named lock's document is missing only once nobody holds the
        name, so for ``lock`` that is a loss, never :class:`ResourceNotFound`. A stored
        image (what MongoDB answers a retried command, ``_images``) is read from the lock
        field itself, as the projection would have been computed from it.
        """
        if reply is None:
            self.absent(user_filter, lock, doing)
            raise self.not_found(user_filter)  # a name nobody holds, where one was needed
        if is_image(reply):
            return self._from_image(reply, lock_id)
        found = reply.get("r")
        if found is not None:  # our entry found by its index (a table that shares)
            return _Reply(reply[DOCUMENT_ID], found.get("e"), frozenset(found.get("t") or ()))
        mine = reply.get("mine")
        return _Reply(
            reply[DOCUMENT_ID], mine[0] if mine else None, frozenset(reply.get("tags") or ())
        )

    def _from_image(self, image: Mapping[str, Any], lock_id: str | None) -> _Reply:
        """What the projection would have said of ``image``: our entry, and the stored tags.

        An image answers only a command that was applied, and the lock commands are applied
        only to a field that is ours (a foreign one fails them), so the entries are ours to
        read. The tags are listed whether or not the reader needs them.
        """
        stored = entries(image, self.field)
        mine = None
        if lock_id is not None:
            mine = next((entry for entry in stored if entry.get("id") == lock_id), None)
        tags = frozenset(entry["tag"] for entry in stored if isinstance(entry.get("tag"), str))
        return _Reply(image["_id"], mine, tags)

    def read_checked(
        self, reply: Mapping[str, Any] | None, user_filter: Filter, doing: str
    ) -> _Reply:
        """Read a reply whose projection is :meth:`projection`'s, checked against the layout.

        For the commands that read a field without failing on a foreign one (``inspect``,
        ``break_lock``). ``None`` means no document matched. A stored image answers only a
        ``break_lock`` that wrote, and it writes only a field that is ours (``break_body``
        leaves any other exactly as it was, and an update that changes nothing is not
        answered from the oplog, ``_images``), so an image needs no layout check.
        """
        if reply is not None and not is_image(reply) and not reply.get("ours"):
            raise IncompatibleLockField(
                f"field {self.field!r} of document {reply.get(DOCUMENT_ID)!r} holds data "
                f"docmultilock does not own (type {reply.get('t')!r}, version "
                f"{reply.get('v')!r}; docmultilock writes {LAYOUT}); nothing was written",
                filter=user_filter,
            )
        return self.read_reply(reply, user_filter, None, doing)

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

    core: LockCore
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
        core = self.core
        if reply is None and core.home.on_demand and self.continuing is None:
            # Only after an upsert that lost a race (see ``_driver.upsert_reply``) and a
            # document deleted again before it could be read: a grant or a pending entry of
            # ours would have kept it, so the holder we met released meanwhile.
            raise core.verdicts.refused(
                f"cannot lock {self.tag!r} on name {self.user_filter.get('_id')!r}: another "
                "holder had it (and has released it since; try again)",
                filter=self.user_filter,
                blocking_tags=(),
            )
        # A retried acquisition answered with the post-image (``_images``) was applied: the
        # image holds our entry if it was granted or recorded pending, and the tags in the
        # way otherwise, exactly as the projection would have.
        state = core.read_reply(reply, self.user_filter, self.continuing, "continue", self.lock_id)
        tags = state.tags if self.listed else frozenset((self.tag,))
        if state.mine is not None and state.mine.get("tag") != self.tag:
            # Only a continued lock can meet its id under another tag: one a client edited.
            raise core.lost(self.continuing or _unreachable(), self.user_filter, "continue")
        if state.mine is not None:
            lock = core.to_lock(state.mine, state.document_id)
            if not lock.pending:
                return lock
            drains = core.rules.assertive[self.tag]
            if self.fair:  # in line: behind every tag in the way, cooperative ones too
                drains = drains | core.rules.cooperative[self.tag]
            waiting = tuple(sorted(tags & drains))
            raise AssertiveLock(
                f"lock {lock.id} ({self.tag!r}) is pending on {core.home.noun} "
                f"{state.document_id!r} until these tags drain: {', '.join(waiting)}; call "
                "acquire(filter, lock=...) again to keep waiting",
                filter=self.user_filter,
                lock=lock,
                blocking_tags=waiting,
            )
        blocking = tuple(sorted(tags & core.rules.cooperative[self.tag]))
        if blocking:
            raise core.verdicts.refused(
                f"cannot lock {self.tag!r} on {core.home.noun} {state.document_id!r}: held or "
                f"pending by {', '.join(blocking)}",
                filter=self.user_filter,
                blocking_tags=blocking,
                document_id=state.document_id,
            )
        if self.continuing is not None:
            raise core.lost(self.continuing, self.user_filter, "continue")
        if capped(core.rules, self.tag):
            raise TooManyHolders(
                f"cannot lock {self.tag!r} on {core.home.noun} {state.document_id!r}: it already "
                f"has {core.max_holders} holders and pending locks, the most it takes",
                filter=self.user_filter,
                limit=core.max_holders,
            )
        raise DbError(  # pragma: no cover - the pipeline always records a fresh acquisition
            f"the server answered an acquisition on {core.home.noun} {state.document_id!r} without "
            "recording it or naming a conflict",
            filter=self.user_filter,
        )


class ReleasePlan(NamedTuple):
    """A release: the reply is the state *before* the write."""

    core: LockCore
    command: Command
    user_filter: Filter
    lock: Lock

    def read(self, reply: Mapping[str, Any] | None) -> None:
        """Return quietly if our entry was there (live or expired); raise the loss otherwise."""
        # A retried release answered with the pre-image (``_images``) was applied: our entry
        # in it means the lock was ours when it was removed.
        state = self.core.read_reply(reply, self.user_filter, self.lock, "release", self.lock.id)
        if state.mine is None:
            raise self.core.lost(self.lock, self.user_filter, "release")


class ExtendPlan(NamedTuple):
    """An extension: the reply is the state after the write."""

    core: LockCore
    command: Command
    user_filter: Filter
    lock: Lock

    def read(self, reply: Mapping[str, Any] | None) -> Lock:
        """Return the lock with its new expiry, or raise the loss when it is not held."""
        # A retried extension answered with the post-image (``_images``) shows our entry
        # with the expiry the applied attempt gave it.
        state = self.core.read_reply(reply, self.user_filter, self.lock, "extend", self.lock.id)
        mine = state.mine
        if mine is None or mine.get("pending") or mine.get("tag") != self.lock.tag:
            raise self.core.lost(self.lock, self.user_filter, "extend")
        return self.core.to_lock(mine, state.document_id)


def _unreachable() -> Lock:  # pragma: no cover - a fresh lock id is never stored already
    raise DbError("the server answered a fresh acquisition with an entry of another tag")


class DeletePlan(NamedTuple):
    """Deleting a named lock's document as its release: the reply is the deleted document."""

    command: Command

    def read(self, reply: Mapping[str, Any] | None) -> bool:
        """True when the document was deleted (released); false to fall back to an update.

        A retried delete is answered with the deleted document's whole pre-image
        (``_images``): any document at all means it was deleted, and the delete's condition
        required our entry.
        """
        return reply is not None
