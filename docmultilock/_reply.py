"""The reply's shape: what each lock command's projection returns, and how a reply is read.

Two kinds of reply reach the readers, and both lead to the same decision:

* **Projected**, as sent: our entry (``mine``, or ``r`` for a table that shares) and the
  stored tags, computed by the server from the document the command left (or found).
* **A stored image.** A ``findAndModify`` that pymongo retries after a dropped connection or
  a fail-over (same ``lsid`` and ``txnNumber``) and whose first attempt was applied is not
  run again on a MongoDB replica set: the server answers from its oplog, and the ``value``
  it sends is the **full stored pre- or post-image** of the document, without the
  command's projection (``parseOplogEntryForFindAndModify`` in mongodb/mongo
  ``src/mongo/db/query/write_ops/write_ops_retryability.cpp``, formerly
  ``src/mongo/db/ops/``: ``result.setValue(extractPreOrPostImage(...))`` for an update or
  delete, ``oplogEntry.getObject()`` for an upsert's insert). An update that changed
  nothing writes no oplog entry, so its retry runs again and is answered as projected.

Every projection here leaves ``_id`` out and carries the document's id as
:data:`DOCUMENT_ID` instead, while every stored document has an ``_id``: a reply with an
``_id`` is an image, whatever top-level names the user's documents hold. An image is read
from the lock field itself, which is exactly what the projection would have been computed
from.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, NamedTuple, cast

from docmultilock._acquiring import granted_of
from docmultilock._command import encoded
from docmultilock._expr import Expr, each, literal
from docmultilock._layout import is_entry, ours
from docmultilock._rules import TagRules

__all__ = [
    "DOCUMENT_ID",
    "HEAD",
    "Conversion",
    "Reply",
    "ReplyShape",
    "document_id",
    "entries",
    "is_image",
    "lock_state",
]

#: The projected key that carries the document's ``_id`` (``_id`` itself is left out).
DOCUMENT_ID = "i"

#: The projection's head: no ``_id``, the id under :data:`DOCUMENT_ID`.
HEAD: dict[str, Any] = {"_id": 0, DOCUMENT_ID: "$_id"}


def is_image(reply: Mapping[str, Any]) -> bool:
    """True when ``reply`` is a stored document (a retried command's answer), not projected."""
    return "_id" in reply


def document_id(reply: Mapping[str, Any]) -> Any:
    """The id of the document a reply (projected, or an image) is about."""
    return reply["_id"] if is_image(reply) else reply[DOCUMENT_ID]


def lock_state(image: Mapping[str, Any], field: str) -> Any:
    """The lock field of an image as stored (``None`` when missing)."""
    return image.get(field)


def entries(image: Mapping[str, Any], field: str) -> Sequence[Mapping[str, Any]]:
    """The stored entries of an image's lock field (none for a missing or foreign field)."""
    state = lock_state(image, field)
    holders = state.get("holders") if isinstance(state, Mapping) else None
    if not isinstance(holders, list):
        return ()
    return [entry for entry in holders if isinstance(entry, Mapping)]


class Reply(NamedTuple):
    """What a reply says: the document, our entry, the stored tags it listed."""

    document_id: Any
    mine: Mapping[str, Any] | None
    tags: frozenset[str]
    #: How many granted entries of the acquired tag are stored, when its limit asked.
    granted: int | None = None


class Conversion(NamedTuple):
    """What a conversion's reply says: the document, every entry of ours, the others' tags."""

    document_id: Any
    mine: list[Mapping[str, Any]]
    tags: frozenset[str]
    #: How many granted entries of the new tag are stored, when its limit asked.
    granted: int | None = None


#: A :class:`Reply` made by ``tuple.__new__`` itself, as ``_command.new_command`` makes
#: commands: the projected reply of every acquire, release and extend is read into one.
_new_reply = cast(Callable[[tuple[Any, ...]], Reply], partial(tuple.__new__, Reply))


class ReplyShape:
    """The projections of one lock field and tag table, and the reading of their replies.

    Pure, and built once per manager: the projected expressions are encoded to BSON once.
    """

    def __init__(self, field: str, rules: TagRules) -> None:
        self.field = field
        # A foreign field may hold anything; only ever iterate over an actual array.
        self.holders: Expr = {"$cond": [{"$isArray": f"${field}.holders"}, f"${field}.holders", []]}
        self.ours = encoded(ours(field))
        self._head = {**HEAD, "ours": self.ours, "t": {"$type": f"${field}"}, "v": f"${field}.v"}
        # Acquire, release and extend reply only about a field that is ours (their pipeline
        # fails the command otherwise), whose holders are an array or missing (then the
        # server answers null): their projections read the stored holders as they are.
        stored = self._stored = f"${field}.holders"
        tags = {"$setUnion": [each(stored, "tag")]}
        self._tags = encoded(tags)
        # A table with a tag that shares (MultiLock's ``read``) may hold many entries: its
        # replies find ours by its index among the ids (``$indexOfArray``, a native loop on
        # the embedded server, where ``$filter`` evaluates a comparison per entry), and list
        # the tags only when ours is not granted, the only time the reader needs them (the
        # set is sorted on the server). ``$$i`` is our index, bound per call.
        self._shared = rules.shared
        self._ids = encoded(each(stored, "id"))
        entry = {"$cond": [{"$gte": ["$$i", 0]}, {"$arrayElemAt": [stored, "$$i"]}, None]}
        untagged = {"e": "$$e"}
        tagged = {**untagged, "t": {"$cond": [{"$eq": ["$$e.pending", False]}, None, tags]}}
        self._found = {
            with_tags: encoded({"$let": {"vars": {"e": entry}, "in": found}})
            for with_tags, found in ((False, untagged), (True, tagged))
        }
        # A tag with a limit (``lock_limits``): an acquisition's reply also counts its granted
        # entries, so that a refusal at the limit is told from the others in the same reply.
        self._granted = {tag: encoded(granted_of(self.holders, tag)) for tag in rules.limited}

    # -- projections ------------------------------------------------------------------

    def checked(self, **extra: Any) -> dict[str, Any]:
        """The projection that reads a field without failing on a foreign one, plus ``extra``.

        The document's id, whether the field is ours (``ours``, with its type ``t`` and
        version ``v`` for the refusal), and the ``extra`` fields: what ``inspect`` and
        ``break_lock`` read.
        """
        return {**self._head, **extra}

    def of_entry(
        self, lock_id: str, *, with_tags: bool, counted: str | None = None
    ) -> dict[str, Any]:
        """What acquire, release and extend read: the id, entry ``lock_id``, maybe the tags.

        With ``counted`` (an acquired tag), also the number of its granted entries, when
        the tag has a limit.
        """
        head = HEAD
        if counted is not None and counted in self._granted:
            head = {**HEAD, "g": self._granted[counted]}
        if self._shared:
            index = {"$indexOfArray": [self._ids, literal(lock_id)]}
            return {**head, "r": {"$let": {"vars": {"i": index}, "in": self._found[with_tags]}}}
        mine = {"$filter": {"input": self._stored, "cond": is_entry(lock_id)}}
        if with_tags:
            return {**head, "mine": mine, "tags": self._tags}
        return {**head, "mine": mine}

    def of_conversion(self, lock_id: str, tag: str) -> dict[str, Any]:
        """What a conversion to ``tag`` reads: every entry of ``lock_id``, the others' tags.

        Every entry: a granted one and a pending upgrade share an id (``_converting``).
        When ``tag`` has a limit, also the number of its granted entries, as an
        acquisition's reply has it.
        """
        others = {"$filter": {"input": self._stored, "cond": {"$not": [is_entry(lock_id)]}}}
        head = HEAD if tag not in self._granted else {**HEAD, "g": self._granted[tag]}
        return {
            **head,
            "mine": {"$filter": {"input": self._stored, "cond": is_entry(lock_id)}},
            "tags": {"$setUnion": [each(others, "tag")]},
        }

    # -- reading ----------------------------------------------------------------------

    def read_conversion(self, reply: Mapping[str, Any], lock_id: str, tag: str) -> Conversion:
        """What a reply of :meth:`of_conversion`'s projection, or a stored image, says."""
        if is_image(reply):
            stored = entries(reply, self.field)
            mine = [entry for entry in stored if entry.get("id") == lock_id]
            tags = frozenset(
                e["tag"] for e in stored if e.get("id") != lock_id and isinstance(e.get("tag"), str)
            )
            granted = None
            if tag in self._granted:  # a write prunes what expired: the stored ones are live
                granted = sum(
                    1 for e in stored if e.get("tag") == tag and e.get("pending") is False
                )
            return Conversion(reply["_id"], mine, tags, granted)
        return Conversion(
            reply[DOCUMENT_ID],
            list(reply.get("mine") or ()),
            frozenset(reply.get("tags") or ()),
            reply.get("g"),
        )

    def read(
        self, reply: Mapping[str, Any], lock_id: str | None, counted: str | None = None
    ) -> Reply:
        """What a reply to acquire, release or extend of entry ``lock_id`` says.

        A stored image is read from the lock field itself, as the projection would have
        been computed from it. An image answers only a command that was applied, and these
        commands are applied only to a field that is ours (a foreign one fails them), so
        its entries are ours to read. The tags are listed whether or not a reader needs
        them, and the granted entries of ``counted`` counted when its limit asked.
        """
        if is_image(reply):
            stored = entries(reply, self.field)
            mine = None
            if lock_id is not None:
                mine = next((entry for entry in stored if entry.get("id") == lock_id), None)
            tags = frozenset(e["tag"] for e in stored if isinstance(e.get("tag"), str))
            granted = None
            if counted is not None and counted in self._granted:
                granted = _granted_in(stored, counted)
            return Reply(reply["_id"], mine, tags, granted)
        found = reply.get("r")
        if found is not None:  # our entry found by its index (a table that shares)
            tags = frozenset(found.get("t") or ())
            return _new_reply((reply[DOCUMENT_ID], found.get("e"), tags, reply.get("g")))
        mine_list = reply.get("mine")
        return _new_reply(
            (
                reply[DOCUMENT_ID],
                mine_list[0] if mine_list else None,
                frozenset(reply.get("tags") or ()),
                reply.get("g"),
            )
        )

    @staticmethod
    def foreign(reply: Mapping[str, Any]) -> bool:
        """True when a :meth:`checked` reply says the field is not ours.

        A stored image answers only a ``break_lock`` that wrote, and it writes only a field
        that is ours (``break_body`` leaves any other exactly as it was, and an update that
        changes nothing is not answered from the oplog), so an image is never foreign.
        """
        return not is_image(reply) and not reply.get("ours")


def _granted_in(stored: Sequence[Mapping[str, Any]], tag: str) -> int:
    """The granted entries of ``tag`` in a stored image (a write prunes what expired)."""
    return sum(1 for e in stored if e.get("tag") == tag and e.get("pending") is False)
