"""Which waiters a change wakes: the change stream's pipeline and the decision per event.

No I/O here; ``_wakeup`` runs the streams (a thread per collection for the sync managers,
a task per collection and event loop for the async ones) and asks :class:`Interests`
whom each event wakes.

One stream per lock collection (and lock field) per process serves every waiter there. The
server filters it to the documents being waited for and projects each event down to the
lock entries' ids, pending flags and tags (looked up after the write), so an event is a few
bytes. A waiter is woken when an event shows a place may have opened:

* the document was deleted (a named lock's last release), or no entry is left that keeps
  the waiter out (:class:`Blockers`: a granted entry of a tag its own refuses or waits
  for, a pending one of a tag that refuses it), and no limit keeps it out (as many granted
  entries of its tag as ``lock_limits`` allows, or ``max_holders`` entries in all for a
  waiter without an entry of its own): a release, or a refused attempt that
  pruned an expired holder (a lone tag's refusal records nothing, so it wakes nobody); a
  reader refused by a pending writer is woken when the writer gives up, though other
  readers still hold;
* a waiter with a pending entry (an assertive lock waiting for tags to drain) is woken
  by every such change, as its entry may be granted now; in a fair line
  (``hold(fair=True)``), a waiter is woken once no entry ahead of its own is in its way;
* of a process's other waiters for a tag that excludes itself, only the one waiting
  longest is woken (per such tag), as one release lets one of them in; if it leaves
  before it could try, the wake passes to the next of its tag;
* a waiter that starts watching a document the stream already follows, while the last
  change seen there left it free, is woken at once: the release may have come between
  its refused attempt and its watch, and no later event would tell it.

A grant that keeps a waiter out does not wake it, nor does a change that leaves the
entries' ids, pending flags and tags as the last one did (a renewal, a pending entry
continued): a waiter woken by its own renewal would retry at once, again and again.
Whatever this misses (an entry that expired unnoticed, an event lost with a broken
stream) the waiter's slower backoff finds, so a wake is an optimisation, never the only
way to the lock.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from bson.codec_options import DEFAULT_CODEC_OPTIONS, CodecOptions

from docmultilock._bson_identity import stored_key
from docmultilock._rules import TagRules

__all__ = ["ANY_GRANTED", "MAX_AWAIT_MS", "Blockers", "Interest", "Interests", "stream_pipeline"]

#: How long the server holds a getMore open on an idle stream; a new waiter's document
#: joins the server-side filter within about this long.
MAX_AWAIT_MS = 100

_arrivals = itertools.count()


class Blockers(NamedTuple):
    """Which stored entries keep a waiter out, besides its own.

    A granted entry of a ``granted`` tag (``None``: any granted entry), or a pending one of
    a ``pending`` tag. For a waiter of tag ``t`` (:meth:`of_tag`): granted entries of the
    tags ``t`` is cooperative or assertive with (they refuse it, or it waits for them to
    drain), and pending ones of the tags it is cooperative with (they refuse it too).
    Limits keep it out by number: ``limit`` granted entries of ``t`` (its ``lock_limits``),
    or ``most`` entries in all (``max_holders``, which a waiter with a pending entry,
    already counted, is never refused by).
    """

    granted: frozenset[str] | None = None
    pending: frozenset[str] = frozenset()
    #: ``(tag, n)``: ``n`` granted entries of ``tag`` keep the waiter out.
    limit: tuple[str, int] | None = None
    #: This many entries keep a waiter without an entry of its own out.
    most: int | None = None

    @staticmethod
    def of_tag(rules: TagRules, tag: str, max_holders: int | None = None) -> Blockers:
        """What keeps a waiter of ``tag`` out, as the table says (``TagRules.in_the_way``).

        ``max_holders`` is the manager's, when the server's cap can refuse ``tag``
        (``TagRules.capped``).
        """
        granted, pending = rules.in_the_way(tag)
        limit = rules.limit(tag)
        return Blockers(granted, pending, None if limit is None else (tag, limit), max_holders)


#: Any granted entry keeps the waiter out (what a waiter that says no more is told).
ANY_GRANTED = Blockers()


class Interest:
    """One waiter's watch of one document; ``woken`` until the waiter takes the wake."""

    def __init__(
        self,
        document_id: Any,
        exclusive: bool,
        notify: Callable[[], None],
        blockers: Blockers = ANY_GRANTED,
        entry: str | None = None,
        fair: bool = False,
        codec_options: CodecOptions[Any] = DEFAULT_CODEC_OPTIONS,
    ) -> None:
        self.document_id = document_id
        self.key = stored_key(document_id, codec_options)
        self.exclusive = exclusive
        self.blockers = blockers
        self.entry = entry  # our pending entry's id
        self.fair = fair  # the entry holds a place in a fair line
        self.woken = False
        self.arrival = next(_arrivals)
        self._notify = notify

    def wake(self) -> None:
        self.woken = True
        self._notify()

    def take(self) -> bool:
        """Whether a wake came since the last call; clears it."""
        woken, self.woken = self.woken, False
        return woken


def stream_pipeline(field: str, ids: list[Any]) -> list[dict[str, Any]]:
    """The change stream's pipeline: writes to ``ids``, projected to the lock's entries.

    Inserts too: a named lock's document is created again by the acquire after a deletion.
    """
    holders = f"fullDocument.{field}.holders"
    return [
        {
            "$match": {
                "operationType": {"$in": ["insert", "update", "replace", "delete"]},
                "documentKey._id": {"$in": ids},
            }
        },
        {
            "$project": {
                "operationType": 1,
                "documentKey": 1,
                f"{holders}.id": 1,
                f"{holders}.pending": 1,
                f"{holders}.tag": 1,
            }
        },
    ]


#: What a change left on a document, as far as waking goes: its entries' ids, pending flags
#: and tags in order, ``None`` when it is gone or holds none.
_Seen = tuple[tuple[Any, Any, Any], ...] | None


def _entries(change: Mapping[str, Any], field: str) -> list[Mapping[str, Any]] | None:
    """The document's entries after the change; ``None`` if it is gone or holds none."""
    value: Any = change.get("fullDocument")
    for part in field.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    holders = value.get("holders") if isinstance(value, Mapping) else None
    if change.get("operationType") == "delete" or not isinstance(holders, list):
        return None
    return [h for h in holders if isinstance(h, Mapping)]


class Interests:
    """The waiters one stream serves, in arrival order, and whom an event wakes."""

    def __init__(
        self, field: str, codec_options: CodecOptions[Any] = DEFAULT_CODEC_OPTIONS
    ) -> None:
        self.field = field
        self.codec_options = codec_options  # the collection's, as its interests were made
        self._all: list[Interest] = []
        # Per watched document (by key), what the last change seen left there.
        self._seen: dict[bytes, _Seen] = {}

    def __bool__(self) -> bool:
        return bool(self._all)

    def add(self, interest: Interest) -> None:
        self._all.append(interest)
        self._judge_again(interest)

    def update(self, interest: Interest, entry: str | None) -> None:
        """Record ``interest``'s pending entry now; wake it if that lets it in."""
        if interest.entry != entry:
            interest.entry = entry
            self._judge_again(interest)

    def _judge_again(self, interest: Interest) -> None:
        # By the last change seen: a release may have come before this waiter watched it.
        if interest.key in self._seen and not _keeps_out(self._seen[interest.key], interest):
            interest.wake()

    def remove(self, interest: Interest) -> None:
        """Forget ``interest``; a wake it did not take passes to the next in line."""
        if interest not in self._all:
            return
        self._all.remove(interest)
        others = self._of(interest.key)
        if not others:
            self._seen.pop(interest.key, None)
        if interest.woken and interest.exclusive:
            seen = self._seen.get(interest.key)
            for other in others:
                if (
                    other.exclusive
                    and other.entry is None
                    and other.blockers == interest.blockers
                    and not _keeps_out(seen, other)
                ):
                    other.wake()
                    break

    def ids(self) -> list[Any]:
        """The documents waited for, each once, in a stable order."""
        ids: dict[bytes, Any] = {}
        for interest in self._all:
            ids.setdefault(interest.key, interest.document_id)
        return list(ids.values())

    def wake_all(self, ids: list[Any] | None = None) -> None:
        """Wake every waiter (of ``ids``): an event may have been missed."""
        keys = None if ids is None else {stored_key(i, self.codec_options) for i in ids}
        for interest in self._all:
            if keys is None or interest.key in keys:
                interest.wake()
                self._seen.pop(interest.key, None)  # what was seen may be out of date

    def dispatch(self, change: Mapping[str, Any]) -> None:
        """Wake whom ``change`` concerns (see the module's rules)."""
        document = change.get("documentKey")
        if not isinstance(document, Mapping) or "_id" not in document:
            return
        key = stored_key(document["_id"], self.codec_options)
        waiting = self._of(key)
        if not waiting:
            return
        entries = _entries(change, self.field)
        seen: _Seen = None
        if entries is not None:
            seen = tuple((h.get("id"), h.get("pending"), h.get("tag")) for h in entries)
        if key in self._seen and self._seen[key] == seen:
            return  # only expiries changed (a renewal): nothing opened
        self._seen[key] = seen
        woken_for: set[Blockers] = set()  # the tags (by what keeps them out) given a wake
        for interest in waiting:
            if _keeps_out(seen, interest):
                continue
            if interest.exclusive and interest.entry is None:
                if interest.blockers in woken_for:
                    continue  # one release lets one of a tag that excludes itself in
                woken_for.add(interest.blockers)
            interest.wake()

    def _of(self, key: bytes) -> list[Interest]:
        return [i for i in self._all if i.key == key]


def _keeps_out(seen: _Seen, interest: Interest) -> bool:
    """True when an entry ``seen`` keeps ``interest`` out (:class:`Blockers`).

    In a fair line the pending entries are the line itself: those ahead of ours are in
    the way as granted ones are (when of a tag ours refuses or waits for), those behind
    never are, as the server decides (``_acquiring``).
    """
    entries = seen or ()
    granted_tags, pending_tags, limit, most = interest.blockers
    if _full(entries, interest, limit, most):
        return True
    in_line = interest.fair and any(entry[0] == interest.entry for entry in entries)
    ahead = True
    for entry_id, pending, tag in entries:
        if entry_id == interest.entry:
            ahead = False
            continue
        in_the_way = granted_tags is None or tag in granted_tags
        if pending is False:
            if in_the_way:
                return True
        elif in_line:
            if ahead and in_the_way:
                return True
        elif not interest.fair and tag in pending_tags:
            return True
    return False


def _full(
    entries: tuple[tuple[Any, Any, Any], ...],
    interest: Interest,
    limit: tuple[str, int] | None,
    most: int | None,
) -> bool:
    """True when a limit keeps ``interest`` out, as the server counts (``_acquiring``).

    Its tag's granted entries against its limit; every entry against ``max_holders``,
    unless the waiter's own pending entry is among them (the server continues one that is
    already counted).
    """
    if most is not None and interest.entry is None and len(entries) >= most:
        return True
    if limit is None:
        return False
    tag, n = limit
    return sum(1 for _, pending, of in entries if of == tag and pending is False) >= n
