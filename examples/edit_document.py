"""Edit an invoice under a lock with MultiLock.hold(): read it, change it, write it guarded.

Run it as a script. It uses the MongoDB named by DOCMULTILOCK_MONGODB_URI, or starts an
embedded test server (the ``embedded`` extra) when that variable is unset. From a clone of
the repository::

    pip install -e '.[embedded]'
    python examples/edit_document.py
"""

from __future__ import annotations

import uuid
from typing import Any

from pymongo import MongoClient
from pymongo.collection import Collection

from docmultilock import CooperativeLock, Lock, LockError, LockNotFound, LockTimeout, MultiLock
from docmultilock.testing import mongodb_uri

INVOICE = {"_id": "INV-1"}  # the filter naming the invoice every step below locks


def add_line(locks: MultiLock, invoices: Collection[dict[str, Any]]) -> None:
    # The write lock for the span of the block: wait up to 5 s if someone has it, and keep
    # it alive from the background while the block runs (however long the edit takes).
    with locks.hold(INVOICE, tag="write", wait=5.0, keepalive=True) as held:
        invoice = invoices.find_one(INVOICE, {"lock": 0})
        assert invoice is not None
        print(
            f"editing {invoice['_id']}: {len(invoice['lines'])} line(s), total {invoice['total']}"
        )

        lines = [*invoice["lines"], {"sku": "support", "qty": 2, "price": 40}]
        total = sum(line["qty"] * line["price"] for line in lines)
        # held.guard() matches the invoice only while our lock holds: if it was lost (an
        # admin broke it, or it expired while this process was paused), nothing is written.
        result = invoices.update_one(held.guard(), {"$set": {"lines": lines, "total": total}})
        print(f"guarded write: matched {result.matched_count}")

        # Meanwhile, a second editor waits a little, then gives up: LockTimeout (HTTP 409).
        try:
            with locks.hold(INVOICE, tag="write", wait=0.3):
                pass
        except LockTimeout as err:
            print(f"second editor gave up: {err.code} (HTTP {err.status_code})")

        # And a reader is refused at once (no wait=): readers never see a half-done edit.
        try:
            with locks.hold(INVOICE, tag="read"):
                pass
        except CooperativeLock as err:
            print(f"reader refused during the edit: {err.code}")
    print("edit done, lock released")


def read(locks: MultiLock, invoices: Collection[dict[str, Any]]) -> None:
    # Readers share the invoice; the lock only keeps writers out while they read.
    with locks.hold(INVOICE, tag="read"):
        print(f"reader sees: {invoices.find_one(INVOICE, {'lock': 0})}")


def lose_the_lock(locks: MultiLock, invoices: Collection[dict[str, Any]]) -> None:
    lost: list[str] = []

    def on_lost(lock: Lock, error: LockError) -> None:
        # Called once, from the keep-alive thread: a place to stop work or raise an alarm.
        lost.append(error.code)

    try:
        with locks.hold(
            INVOICE, tag="write", keepalive=True, lock_timeout=1.0, on_lost=on_lost
        ) as held:
            # An administrator breaks the lock in the middle of the edit: break_lock() removes
            # just this entry and keeps the fence (never $unset the field: that resets it).
            removed = locks.break_lock(INVOICE, lock_id=held.lock.id)
            print(f"an operator broke {len(removed)} lock(s): {[h.tag for h in removed]}")
            held.lost.wait(10.0)  # the next keep-alive finds out (within lock_timeout / 3)
            result = invoices.update_one(held.guard(), {"$set": {"status": "void"}})
            print(f"guarded write after the loss: matched {result.matched_count}")
    except LockNotFound as err:
        # The block ended normally, but it was not protected throughout: hold() says so.
        print(f"hold() raised after the block: {err.code}")
    print(f"on_lost was called with: {lost}")


def main() -> None:
    with mongodb_uri() as uri:
        client: MongoClient[dict[str, Any]] = MongoClient(uri)
        # A fresh collection per run, so runs never see each other's documents.
        invoices = client["docmultilock_examples"][f"invoices_{uuid.uuid4().hex[:8]}"]
        try:
            line = {"sku": "a", "qty": 1, "price": 10}
            invoices.insert_one({**INVOICE, "status": "draft", "lines": [line], "total": 10})
            locks = MultiLock(invoices, lock_timeouts={"read": 5.0, "write": 30.0})
            add_line(locks, invoices)
            read(locks, invoices)
            lose_the_lock(locks, invoices)
            final = invoices.find_one(INVOICE, {"lock": 0})
            assert final is not None
            print(f"invoice now: status={final['status']} total={final['total']}")
        finally:
            invoices.drop()
            client.close()


if __name__ == "__main__":
    main()
