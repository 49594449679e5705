"""The tooling's hook into a lock manager: the core that builds its commands.

The bench (``_bench/_shape``) counts the size of the commands each manager sends without a
server, by asking the manager's :class:`~docmultilock._core.LockCore` to build them. It asks
here and nowhere else: this is the one place that knows where a manager keeps its core, so
the managers may rearrange their insides without the tooling following them::

    core = lock_core(WriteLock(collection))
    plan = core.acquire(key, user_filter=key, tag="write", lock_id=lock_id, lifetime_ms=None)

Not public API: a supported hook for the package's own tools (``docmultilock bench``).
"""

from __future__ import annotations

from docmultilock._async.managers import AsyncLockManager
from docmultilock._core import LockCore
from docmultilock._sync.managers import LockManager

__all__ = ["lock_core"]


def lock_core(manager: LockManager | AsyncLockManager) -> LockCore:
    """The core whose commands ``manager`` sends: sync or async, documents or names."""
    return manager._ops.core
