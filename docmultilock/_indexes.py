"""Which named-lock collections this process has given their TTL index, per client.

Acquire makes sure of the index lazily, once per process and collection, right after its
first success (the collection exists by then). A deployment may refuse the application's
user ``createIndexes``: then a failure is remembered, retried only after
``INDEX_RETRY_SECONDS``, and warned about once, so acquires neither pay for nor log a
refused attempt each time.
"""

from __future__ import annotations

import threading
import weakref

from docmultilock._clock import SYSTEM_CLOCK, Clock

__all__ = ["INDEX_RETRY_SECONDS", "TTL_INDEX", "TtlIndexes"]

#: The TTL index that removes lock documents nobody holds any more.
TTL_INDEX = "docmultilock_expires"

#: After a failed TTL-index creation, acquires try again only this many seconds later.
INDEX_RETRY_SECONDS = 600.0


class TtlIndexes:
    """Per client (held weakly), the collections indexed, and those whose creation failed."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        self._done: weakref.WeakKeyDictionary[object, set[str]] = weakref.WeakKeyDictionary()
        self._retry_at: weakref.WeakKeyDictionary[object, dict[str, float]] = (
            weakref.WeakKeyDictionary()
        )
        self._guard = threading.Lock()

    def due(self, client: object, name: str) -> bool:
        """True when an acquire should make sure of ``name``'s index now."""
        with self._guard:
            if name in self._done.get(client, ()):
                return False
            retry_at = self._retry_at.get(client, {}).get(name)
            return retry_at is None or self._clock.monotonic() >= retry_at

    def created(self, client: object, name: str) -> None:
        """Record that ``name`` has its index."""
        with self._guard:
            self._done.setdefault(client, set()).add(name)
            self._retry_at.get(client, {}).pop(name, None)

    def failed(self, client: object, name: str, retry_after: float) -> bool:
        """Record a failure; True for the first one (the one worth a warning)."""
        with self._guard:
            retries = self._retry_at.setdefault(client, {})
            first = name not in retries
            retries[name] = self._clock.monotonic() + retry_after
            return first


#: The process's record.
TTL_INDEXES = TtlIndexes()
