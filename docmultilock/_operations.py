"""Every operation of one lock manager, as a flow: checked arguments in, effects out.

:class:`LockOperations` is what a lock manager *is*, minus I/O: the lock flows
(``_lock_flows``: acquire, release, extend) and the read-side flows (``_read_flows``:
inspect, locked, preview_break, break_lock) over one manager's state (``_operating``). The
sync and async managers, and ``hold()``, are thin shells that run these flows with their
driver; a decision written there is written once for both flavours.
"""

from __future__ import annotations

from docmultilock._lock_flows import LockFlows
from docmultilock._read_flows import ReadFlows

__all__ = ["LockOperations"]


class LockOperations(LockFlows, ReadFlows):
    """The operations of one lock manager as flows, over one core, ledger and home."""
