"""A wait that ran out, and a pending upgrade inside ``hold()``, give no stale advice.

By the time a wait gives up, its pending entry is gone (or reported left behind): the
timeout states what was in the way, never the refusal's "call again to keep waiting".
Inside a ``hold()`` block, a pending upgrade advises ``held.convert``, not the manager's
``convert``.
"""

from __future__ import annotations

from typing import Any

import pytest

from docmultilock import AssertiveLock, LockTimeout, MultiLock
from tests.test_hold import FakePacing

Doc = dict[str, Any]

#: The advice of a pending entry still there, stale once a wait gave up.
STALE = "again to keep waiting"


def test_a_conversion_that_timed_out_says_what_was_in_the_way_once(
    rw_lock: MultiLock, doc: Doc
) -> None:
    rw_lock.acquire(doc, tag="read")
    mine = rw_lock.acquire(doc, tag="read")
    FakePacing().install(rw_lock)
    with pytest.raises(LockTimeout) as exc:
        rw_lock.convert(doc, mine, tag="write", wait=1.0)
    message = str(exc.value)
    assert STALE not in message
    assert "is pending" not in message
    assert "these tags did not drain: read, and the 'read' lock is still held" in message
    assert message.count("is still held") == 1


def test_a_hold_that_timed_out_on_a_pending_entry_gives_no_advice_to_continue(
    rw_lock: MultiLock, doc: Doc
) -> None:
    rw_lock.acquire(doc, tag="read")
    FakePacing().install(rw_lock)
    with pytest.raises(LockTimeout) as exc, rw_lock.hold(doc, tag="write", wait=1.0, wake="poll"):
        pass
    message = str(exc.value)
    assert STALE not in message
    assert message.endswith("attempts: these tags did not drain: read")


def test_an_upgrade_pending_inside_a_hold_advises_held_convert(
    rw_lock: MultiLock, doc: Doc
) -> None:
    rw_lock.acquire(doc, tag="read")
    with rw_lock.hold(doc, tag="read") as held:
        with pytest.raises(AssertiveLock) as exc:
            held.convert("write")
        assert exc.value.lock.pending
        assert exc.value.blocking_tags == ("read",)
    message = str(exc.value)
    assert "call held.convert('write') again to keep waiting" in message
    assert "convert(key" not in message
