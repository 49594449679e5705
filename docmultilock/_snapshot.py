"""What ``inspect()`` and ``break_lock()`` hand back: the lock field as the server saw it.

Immutable values, built from one reply that carries both the stored entries and the
server's clock at the moment it read them, so "expired" and "seconds left" are judged by
the server's time, never the caller's::

    snapshot = locks.inspect({"_id": 1})
    for holder in snapshot.holders:
        print(holder.id, holder.tag, holder.seconds_left, holder.expired)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any

from bson import json_util

from docmultilock._lock import CANONICAL_JSON, as_utc

__all__ = ["HolderSnapshot", "LockSnapshot", "holders_at"]

#: The date shown for a date a malformed entry lacks.
_NO_DATE = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True, slots=True)
class HolderSnapshot:
    """One entry of a lock field, judged at the server time of the snapshot.

    :ivar id: the entry's lock id.
    :ivar tag: its tag.
    :ivar pending: true while an assertive lock waits for other tags to drain.
    :ivar fence: the fence it was granted with (0 while pending).
    :ivar acquired_at: when the server granted (or registered) it; UTC.
    :ivar expires_at: when it stops holding unless extended, by the server's clock; UTC.
    :ivar seconds_left: ``expires_at`` minus the server's time; zero or less once expired.
    :ivar expired: past its expiry but not pruned yet (the next write on the field drops it).
    :ivar malformed: the stored entry lacks a date or fence docmultilock writes (it was
        edited by hand); its missing dates show as 1970-01-01. The server counts an entry
        without an expiry date as expired, so it is ``expired`` too and the next write
        drops it.
    """

    id: str
    tag: str
    pending: bool
    fence: int
    acquired_at: datetime
    expires_at: datetime
    seconds_left: float
    expired: bool
    malformed: bool = False

    @property
    def holds(self) -> bool:
        """True for a granted, unexpired entry: one that excludes what its tag excludes."""
        return not self.pending and not self.expired

    def as_json(self) -> dict[str, Any]:
        """JSON-safe data (dates in ISO 8601), for tools such as the command line."""
        return {
            **asdict(self),  # every field, in their order; the dates and seconds replaced in place
            "acquired_at": self.acquired_at.isoformat(),
            "expires_at": self.expires_at.isoformat(),
            "seconds_left": round(self.seconds_left, 3),
        }


@dataclass(frozen=True, slots=True)
class LockSnapshot:
    """A lock field as the server saw it at ``server_time``: read-only, nothing was written.

    :ivar document_id: the ``_id`` of the document (the name, for named locks).
    :ivar fence: the last fence granted on it (0 when never granted, or, for a name, when
        its document is gone: the next grant still outranks every earlier one).
    :ivar server_time: the server's clock when it read the field; UTC.
    :ivar holders: every stored entry, expired ones (not yet pruned) included.
    :ivar exists: false for a name whose lock document does not exist (nobody holds it).
    """

    document_id: Any
    fence: int
    server_time: datetime
    holders: tuple[HolderSnapshot, ...]
    exists: bool = True

    @property
    def live(self) -> tuple[HolderSnapshot, ...]:
        """The unexpired entries, granted or pending."""
        return tuple(holder for holder in self.holders if not holder.expired)

    def locked(self, tag: str | None = None) -> bool:
        """True when a granted, unexpired entry (of ``tag``, if given) holds the lock."""
        return any(holder.holds and tag in (None, holder.tag) for holder in self.holders)

    def as_json(self) -> dict[str, Any]:
        """JSON-safe data; ``document_id`` as canonical Extended JSON (a UUID as subtype 4)."""
        return {
            "document_id": json.loads(
                json_util.dumps(self.document_id, json_options=CANONICAL_JSON)
            ),
            "fence": self.fence,
            "server_time": self.server_time.isoformat(),
            "exists": self.exists,
            "holders": [holder.as_json() for holder in self.holders],
        }


def _date(value: object) -> datetime | None:
    return as_utc(value) if isinstance(value, datetime) else None


def holders_at(entries: object, now: datetime) -> tuple[HolderSnapshot, ...]:
    """Snapshots of stored ``entries`` (a list of entry documents) at server time ``now``.

    Never raises on what it reads (it also reads the reply of a break, after the write): an
    entry that is not a document is skipped, one without its dates or fence is marked
    ``malformed``, judged as the server judges it (expired without an expiry date).
    """
    if not isinstance(entries, list):
        return ()
    now = as_utc(now)
    made = []
    for entry in entries:
        if not isinstance(entry, Mapping):
            continue
        expires, acquired = _date(entry.get("expires")), _date(entry.get("acquired"))
        fence = entry.get("fence", 0)
        fence_ok = isinstance(fence, int) and not isinstance(fence, bool)
        left = 0.0 if expires is None else (expires - now).total_seconds()
        made.append(
            HolderSnapshot(
                id=str(entry.get("id")),
                tag=str(entry.get("tag")),
                pending=bool(entry.get("pending")),
                fence=fence if fence_ok else 0,
                acquired_at=acquired or _NO_DATE,
                expires_at=expires or _NO_DATE,
                seconds_left=left,
                expired=left <= 0,
                malformed=expires is None or acquired is None or not fence_ok,
            )
        )
    return tuple(made)
