"""Change streams that wake waiters, in two flavours: a thread, or a task per event loop.

``hold(wait=...)`` waits between attempts on a watch of the refusing document
(``_holding.wait_flow``'s ``Watch``/``WaitChange``/``Unwatch`` effects, performed by the
drivers through :class:`Watchers` and :class:`AsyncWatchers`). Whom an event wakes is
``_changes``' decision; the streams are only kept running:

* **One stream per collection per process** (per event loop for the async managers),
  opened with the first watch and closed once the last one is gone (within
  :data:`~docmultilock._changes.MAX_AWAIT_MS`). When the set of documents waited for
  changes, the stream is reopened with the new server-side filter from its resume token,
  so no event in between is lost; a document newly watched is woken once when the stream
  covers it, as a release may have come before.
* **Errors**: after an error the stream resumes from its resume token, and every waiter
  is woken, since an event may have been lost. When the stream cannot even be opened (a
  standalone server, a user without the ``changeStream`` privilege, a refused
  ``aggregate``), the collection is marked as having none, once per client, and logged
  at DEBUG; its waiters poll, and later ones poll from the start.

The loop is written once, in ``_async/wakeup.py`` (``_sync/wakeup.py`` is generated from
it by ``tools/unasync.py``); when to resume or give up is ``_resumption``'s decision. This
module is the door to both flavours.
"""

from __future__ import annotations

from docmultilock._async.wakeup import AsyncSubscription, AsyncWatchers
from docmultilock._sync.wakeup import Subscription, Watchers

__all__ = ["WATCHERS", "AsyncSubscription", "AsyncWatchers", "Subscription", "Watchers"]

#: The process's watchers (the sync managers'; a forked child's start afresh).
WATCHERS = Watchers.current()
